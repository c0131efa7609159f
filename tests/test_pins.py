"""pins.toml is the one source of truth: `kdakit pins --check` must catch any file that disagrees."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kdakit.facts import pins

ROOT = Path(__file__).resolve().parent.parent


def test_pins_hold_the_mission_versions():
    p = pins.load()
    assert p["packages"]["torch"] == "2.14.1"
    assert p["packages"]["triton"] == "3.8.0"
    assert p["packages"]["helion"] == "1.4.0"
    assert p["packages"]["sglang"] == "0.5.23"
    assert p["packages"]["lm-eval"] == "0.4.13"
    assert p["cuda"]["version"] == "13.0" and p["cuda"]["torch_index"] == "cu130"
    assert p["cuda"]["min_driver"] == 580
    assert p["image"]["base"]


def test_package_copy_is_the_root_file():
    assert pins.PINS_FILE.resolve() == (ROOT / "pins.toml").resolve()


def test_repository_agrees_with_pins():
    assert [str(m) for m in pins.check(ROOT)] == []


@pytest.fixture
def planted(tmp_path):
    shutil.copy(ROOT / "pins.toml", tmp_path / "pins.toml")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "Dockerfile").write_text(
        "ARG BASE_IMAGE=lmsysorg/sglang:v0.5.23-cu130\nFROM ${BASE_IMAGE}\nARG TORCH_VERSION=2.13.0\n"
    )
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["helion==1.3.0", "triton==3.8.0"]\n')
    gv = tmp_path / "playbooks" / "group_vars"
    gv.mkdir(parents=True)
    (gv / "h200.yml").write_text("---\nkdakit_min_driver: 570\nkdakit_sglang_version: '0.5.23'\n")
    (tmp_path / "README.md").write_text(
        "| lm-eval | 0.4.9 |\nA note: the GPU had torch==2.11.0 (pins: ignore)\n"
    )
    return tmp_path


def test_check_names_file_and_line_of_each_planted_mismatch(planted):
    found = {(m.path, m.line, m.pin, m.found) for m in pins.check(planted)}
    assert found == {
        ("images/Dockerfile", 3, "packages.torch", "2.13.0"),
        ("pyproject.toml", 2, "packages.helion", "1.3.0"),
        ("playbooks/group_vars/h200.yml", 2, "cuda.min_driver", "570"),
        ("README.md", 1, "packages.lm-eval", "0.4.9"),
    }


def test_cli_check_fails_on_mismatch_and_passes_when_fixed(planted):
    cmd = [sys.executable, "-m", "kdakit", "pins", "--check", "--root", str(planted)]
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode == 1
    assert "images/Dockerfile:3: packages.torch is '2.13.0' here but '2.14.1'" in bad.stdout
    for path, old, new in [
        ("images/Dockerfile", "2.13.0", "2.14.1"),
        ("pyproject.toml", "1.3.0", "1.4.0"),
        ("playbooks/group_vars/h200.yml", "570", "580"),
        ("README.md", "0.4.9", "0.4.13"),
    ]:
        f = planted / path
        f.write_text(f.read_text().replace(old, new))
    good = subprocess.run(cmd, capture_output=True, text=True)
    assert good.returncode == 0, good.stdout
    assert "every stated version agrees" in good.stdout


def test_wrong_base_image_is_caught(planted):
    f = planted / "images" / "Dockerfile"
    f.write_text(f.read_text().replace("v0.5.23-cu130", "v0.5.22-cu130"))
    assert ("images/Dockerfile", 1, "image.base") in {(m.path, m.line, m.pin) for m in pins.check(planted)}


def test_pins_prints_every_pin(capsys):
    from kdakit.cli import main

    assert main(["pins"]) == 0
    out = capsys.readouterr().out
    assert "packages.torch" in out and "2.14.1" in out and "cuda.min_driver" in out


def _parses_pins(text: str) -> bool:
    """Whether a file's text reads pins.toml itself: its name in a file that imports a TOML parser, or on
    one line with a file lookup, a regex or a text tool (Ansible, Make and shell readers of its own)."""
    if "pins.toml" in text and any(w in text for w in ("import tomllib", "import toml", "tomli")):
        return True
    readers = ("tomllib", "lookup(", "regex", "re.search", "grep ", "sed ", "awk ", "open(")
    return any("pins.toml" in line and any(w in line for w in readers) for line in text.splitlines())


def test_kdakit_pins_is_the_only_reader_of_pins_toml():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    code = [
        f
        for f in files.split()
        if f.endswith((".py", ".mk", "Makefile", ".sh", ".yml", ".yaml", ".j2"))
        and not f.startswith("tests/")
    ]
    readers = [f for f in code if _parses_pins((ROOT / f).read_text())]
    assert readers == ["kdakit/facts/pins.py"]
    assert _parses_pins(
        """pin = $(shell python3 -c 'import tomllib;print(tomllib.load(open("pins.toml","rb")))')"""
    )
    planted = (
        "kdakit_min_driver: \"{{ lookup('file', '../pins.toml') | regex_search('min_driver = (\\d+)') }}\""
    )
    assert _parses_pins(planted)  # the preflight role's former reader, a regex over the file


def test_the_reader_runs_as_a_script_without_kdakit_for_make_and_images():
    script = subprocess.run(
        [sys.executable, "-I", str(ROOT / "kdakit" / "facts" / "pins.py"), "packages", "sglang"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert script.stdout.strip() == pins.package("sglang")
    made = subprocess.run(
        ["make", "-s", "-f", "-", "show"], cwd=ROOT, capture_output=True, text=True, check=True,
        input="include Makefile\nshow:\n\t@echo $(SGLANG_VERSION)\n",
    )  # fmt: skip
    assert made.stdout.strip().splitlines()[-1] == pins.package("sglang")
