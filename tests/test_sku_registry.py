"""The SKU registry (kdakit/facts/profiles/<sku>.toml) is the one place a SKU is declared: a fake SKU added
there alone is planned, preflighted, targeted by Make and reported on; nothing else spells the SKU set."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kdakit.facts import profiles
from kdakit.records import results
from kdakit.report import render as report_render
from kdakit.report import sections as report_sections
from tests.test_report import build_fixture_tree

REPO = Path(__file__).resolve().parent.parent
FAKE_SKU = """\
sku = "x100"
profile = "glm-5.3-flash"
gpu_model = "NVIDIA X100"
gpu_count = 2
configs = "x100"

[flags]
"--kv-cache-dtype" = "fp8_e4m3"
"""


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """The shipped profiles plus a fake SKU x100 (2 x NVIDIA X100), through KDAKIT_PROFILES_DIR."""
    folder = tmp_path / "profiles"
    shutil.copytree(REPO / "kdakit" / "facts" / "profiles", folder)
    (folder / "x100.toml").write_text(FAKE_SKU)
    monkeypatch.setattr(profiles, "PROFILES_DIR", folder)
    return dict(os.environ, **{profiles.PROFILES_ENV: str(folder)})


def _kdakit(*args, env):
    return subprocess.run([sys.executable, "-m", "kdakit", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=60)  # fmt: skip


def test_a_fake_sku_is_registered_and_planned(registry):
    assert _kdakit("skus", "names", env=registry).stdout.split() == ["b200", "h200", "x100"]
    shown = json.loads(_kdakit("skus", "show", "x100", env=registry).stdout)
    assert shown == {"name": "x100", "profile": "glm-5.3-flash", "gpu_model": "NVIDIA X100", "gpu_count": 2,
                     "configs": "x100", "gpu_capability": None, "default": False}  # fmt: skip
    plan = _kdakit("plan", "--sku", "x100", "--arm", "helion", env=registry)
    assert plan.returncode == 0, plan.stderr
    assert "--kv-cache-dtype fp8_e4m3" in plan.stdout and "CUDA_VISIBLE_DEVICES=0,1" in plan.stdout
    assert (
        profiles.sku_of_gpus(["NVIDIA X100", "NVIDIA X100"]) == "x100"
        and profiles.configs_of("x100") == "x100"
    )
    assert profiles.sku_of_gpus(["NVIDIA A100-SXM4-80GB"]) == "a100-sxm4-80gb"
    assert profiles.sku_of_gpus(["NVIDIA X100", "NVIDIA H200"]) == profiles.sku_of_gpus([]) == "unknown"


def test_unknown_skus_are_refused_in_one_line(registry):
    bad = _kdakit("plan", "--sku", "x200", "--arm", "helion", env=registry)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].endswith("unknown SKU 'x200'; known: b200, h200, x100")


def _make(*args, env, timeout=60):
    cmd = ["make", "--no-print-directory", "-o", ".venv/.setup-done", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=timeout)


def test_make_targets_follow_the_registry(registry):
    for target in ("deploy-x100", "ab-x100", "image"):
        dry = _make("-n", target, "SKU=x100", "RUN_ID=r", env=registry)
        assert dry.returncode == 0, dry.stderr
    assert "kdakit run step bench" in _make("-n", "bench", "RUN_ID=r", env=registry).stdout
    hosts = _kdakit("run", "step", "bench", "--print-hosts", env=registry)
    assert hosts.stdout.strip() == "b200:h200:x100", hosts.stderr
    refused = _make("-n", "deploy-x200", env=registry)
    assert refused.returncode != 0 and "no SKU 'x200': the SKUs are b200 h200 x100" in refused.stderr


def test_preflight_checks_a_fake_skus_hosts_against_its_registry_file(registry, tmp_path):
    if not (Path(sys.executable).parent / "ansible-playbook").exists():
        pytest.skip("ansible-playbook not installed (pip install -e '.[controller]')")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        "x100:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        '      ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
    )
    state = tmp_path / "gpus.json"
    state.write_text(json.dumps({"gpus": 2, "name": "NVIDIA X100"}))
    smi = REPO / "tests" / "fakes" / "nvidia_smi.py"
    proc = _make("preflight", "SKU=x100", f"INVENTORY={inventory}", f"EXTRA=-e kdakit_nvidia_smi={smi}",
                 env=dict(registry, FAKE_NVIDIA_SMI=str(state)))  # fmt: skip
    rows = {tuple(line.split()[:3]) for line in proc.stdout.splitlines()}
    assert ("localhost", "gpu-count", "ok") in rows, proc.stdout + proc.stderr
    assert ("localhost", "gpu-model", "ok") in rows, proc.stdout
    assert "expected NVIDIA X100" in proc.stdout and ("localhost", "driver", "ok") in rows


def test_the_report_reads_records_of_a_fake_sku(registry, tmp_path):
    root = build_fixture_tree(tmp_path / "results")
    for path in root.rglob("*.result.json"):
        record = results.read_result(path)
        record["sku"] = "x100"  # what the playbooks' kdakit_sku gives $KDAKIT_SKU
        results.write_result(path, record)
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    assert "X100" in md and "| 4096 / 1024 | 1 | 438.00 | 442.00 | +0.91% |" in md


# ---- nothing but the registry spells the SKU set

CODE_GLOBS = (
    "Makefile",
    "*/*.mk",
    "playbooks/*.yml",
    "playbooks/group_vars/*.yml",
    "playbooks/roles/*/*/*.yml",
)
PYTHON_DIRS = ("kdakit", "kernels", "bench", "evals", "slurm")


def sku_spellings(root: Path = REPO, names: list[str] | None = None) -> list[str]:
    """Every place outside the registry that names a registered SKU in code (comments and docs aside):
    Make and Ansible lines outside comments, and Python string constants that are a SKU name."""
    names = names or profiles.skus()
    word = re.compile(r"(?i)(?<![\w.-])(" + "|".join(map(re.escape, names)) + r")(?![\w])")
    found = []
    for pattern in CODE_GLOBS:
        for path in sorted(root.glob(pattern)):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
                if word.search(code):
                    found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    for folder in PYTHON_DIRS:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if node.value.lower() in names or re.search(r"(?i)\b(h|b)200:", node.value):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    return found


def test_no_file_but_the_registry_spells_a_sku():
    assert sku_spellings() == []


def planted(root: Path, path: str, text: str) -> Path:
    """A tree under `root` holding only `path` with `text` (a copy planted back)."""
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)
    return root


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("playbooks/playbooks.mk", "HOSTS ?= h200:b200\n"),
        ("playbooks/roles/common/defaults/main.yml", "kdakit_sku: h200\n"),
        ("kdakit/report/extra.py", 'DEFAULT = "h200"\n'),
        ("images/images.mk", '\t@case "$(SKU)" in h200|b200) ;; esac\n'),
    ],
)
def test_a_sku_spelled_back_is_caught(tmp_path, path, text):
    assert len(sku_spellings(planted(tmp_path, path, text), ["b200", "h200"])) == 1


# ---- the A/B pair is arms.toml's `ab`, not a copy in Make or the report


def ab_spellings(root: Path = REPO, pair: tuple[str, str] | None = None) -> list[str]:
    """Make lines (outside comments) that list the A/B arms, and report modules that spell the pair."""
    first, second = pair or profiles.ab_arms()
    listed = re.compile(rf"\b{re.escape(first)}[\s,]+{re.escape(second)}\b")
    found = []
    for path in sorted([root / "Makefile", *root.glob("*/*.mk")]):
        if path.exists():
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if not line.lstrip().startswith("#") and listed.search(
                    line.split(" ## ", 1)[0].split(" #", 1)[0]
                ):
                    found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    for path in sorted((root / "kdakit" / "report").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple | ast.List) and [getattr(e, "value", None) for e in node.elts] == [
                first,
                second,
            ]:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_make_and_the_report_take_the_ab_pair_from_arms_toml():
    assert ab_spellings() == []
    dry = _make("-n", "ab-h200", "RUN_ID=r", "PREFLIGHT_DONE=1", env=dict(os.environ))
    assert "kdakit run ab" in dry.stdout and "--arms" not in dry.stdout, (
        dry.stderr
    )  # kdakit run reads arms.toml
    assert (
        '--arms "helion triton"' in _make("-n", "ab-h200", "ARMS=helion triton", env=dict(os.environ)).stdout
    )


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("playbooks/playbooks.mk", "ARMS ?= triton helion\n"),
        ("kdakit/report/model.py", 'ARMS = ("triton", "helion")\n'),
    ],
)
def test_an_ab_pair_spelled_back_is_caught(tmp_path, path, text):
    assert len(ab_spellings(planted(tmp_path, path, text), ("triton", "helion"))) == 1
