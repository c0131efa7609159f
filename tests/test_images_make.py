"""images/ without Docker: the build arguments come from pins.toml, the in-build steps refuse what they must,
and the make targets reject bad input before touching an engine."""

from __future__ import annotations

import importlib.metadata as metadata
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kdakit.facts import pins

REPO = Path(__file__).resolve().parent.parent
STEPS = REPO / "images" / "build_steps.py"


def run(*cmd: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def make(*args: str) -> subprocess.CompletedProcess:
    return run("make", "--no-print-directory", "-f", "images/images.mk", f"PYTHON={sys.executable}", *args)


def test_build_args_are_the_pins():
    out = run(sys.executable, "images/pins_args.py", "build-args").stdout
    args = dict(a.split("=", 1) for a in shlex.split(out) if a != "--build-arg")
    p = pins.load()
    assert args["TORCH_VERSION"] == p["packages"]["torch"]
    assert args["TRITON_VERSION"] == p["packages"]["triton"]
    assert args["SGLANG_VERSION"] == p["packages"]["sglang"]
    assert args["HELION_VERSION"] == p["packages"]["helion"]
    assert args["LM_EVAL_VERSION"] == p["packages"]["lm-eval"]
    assert args["CUDA_VERSION"] == p["cuda"]["version"]
    assert f"torch={p['packages']['torch']}" in args["PINS"].split(",")
    assert run(sys.executable, "images/pins_args.py", "base").stdout.strip() == p["image"]["base"]


def test_make_image_passes_the_pins_and_refuses_an_unknown_sku():
    dry = make("-n", "image", "SKU=b200", "BASE_IMAGE=example/base:1")
    assert dry.returncode == 0, dry.stderr
    assert f"--build-arg TORCH_VERSION={pins.package('torch')}" in dry.stdout
    assert "--build-arg BASE_IMAGE=example/base:1 --build-arg SKU=b200" in dry.stdout
    bad = make("image", "SKU=a100", "DOCKER=false")
    assert (
        bad.returncode != 0
        and "SKU must be one of b200 h200 (kdakit/facts/profiles/), not 'a100'" in bad.stderr
    )


def test_load_and_push_refuse_missing_input(tmp_path):
    load = make("image-load", f"FILE={tmp_path / 'none.tar.zst'}", "DOCKER=false")
    assert load.returncode != 0 and "need " in load.stderr
    push = make("image-push", "DOCKER=false")
    assert push.returncode != 0 and "set REGISTRY=" in push.stderr


def test_check_base_accepts_the_installed_versions_and_names_a_mismatch():
    torch = metadata.version("torch")  # a local label such as +cu130 does not count
    ok = run(sys.executable, str(STEPS), "check-base", f"torch={torch.split('+')[0]}")
    assert ok.returncode == 0, ok.stderr
    bad = run(sys.executable, str(STEPS), "check-base", "torch=0.0.1", "no-such-package=1.0")
    assert bad.returncode == 1
    assert f"torch: the base image has {torch}, pins.toml wants 0.0.1" in bad.stderr
    assert "no-such-package: not installed in the base image" in bad.stderr


def test_gsm8k_step_checks_the_pinned_sums(tmp_path):
    sums = REPO / "images" / "gsm8k.sha256"
    src = REPO / "evals" / "data" / "gsm8k"
    if not src.is_dir():
        pytest.skip("evals/data/gsm8k not in this checkout")
    ok = run(sys.executable, str(STEPS), "gsm8k", str(src), str(tmp_path / "ok"), str(sums))
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "ok" / "test.jsonl").read_bytes() == (src / "test.jsonl").read_bytes()
    tampered = tmp_path / "tampered"
    shutil.copytree(src, tampered)
    with open(tampered / "test.jsonl", "a") as f:
        f.write("\n")
    bad = run(sys.executable, str(STEPS), "gsm8k", str(tampered), str(tmp_path / "bad"), str(sums))
    assert bad.returncode == 1 and "test.jsonl" in bad.stderr
