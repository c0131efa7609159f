"""The kernels' layout: kernels/ holds what SGLang imports at run time, the tools are kdakit.kernels.tools,
measurements are data outside the package and outside the image."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_TIME = {
    "__init__.py",
    "decode.py",
    "verify.py",
    "prefill.py",
    "recurrent.py",
    "reference.py",
    "tuned.py",
    "shapes.py",
}


def test_kernels_holds_only_the_run_time_modules_and_tools_its_own_package():
    import kdakit.kernels

    assert {p.name for p in (ROOT / "kernels").glob("*.py")} == RUN_TIME
    assert set(kdakit.kernels.__all__) == {p.removesuffix(".py") for p in RUN_TIME - {"__init__.py"}} | {
        "integration"
    }
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {
        "kdakit." + str(p.parent.relative_to(ROOT)).replace("/", ".")
        for p in ROOT.glob("kernels/**/__init__.py")
    }
    assert packages <= set(setuptools["packages"])
    assert setuptools["package-dir"]["kdakit.kernels.tools"] == "kernels/tools"
    assert not (ROOT / "kernels" / "results").exists() and not (ROOT / "kernels" / "measurements").exists()


def test_the_integration_imports_without_torch():
    code = "import sys, kdakit.kernels.integration, kdakit.kernels.shapes; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _sent_to_docker(path: str, rules: list[str]) -> bool:
    """Whether the build context keeps `path` (Docker's rules: the last matching pattern wins, `!` keeps;
    a pattern matching a folder matches everything under it)."""
    kept = True
    for rule in rules:
        keep = rule.startswith("!")
        pattern = rule.removeprefix("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, pattern[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes)
        if hit:
            kept = keep
    return kept


def test_the_image_gets_the_kernels_and_tools_but_no_measurements():
    text = (ROOT / "images" / "Dockerfile.dockerignore").read_text()
    rules = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = files.split()
    measurements = [f for f in files if f.startswith("measurements/")]
    assert measurements and not any(_sent_to_docker(f, rules) for f in measurements)
    for f in (
        "kernels/decode.py",
        "kernels/shapes.toml",
        "kernels/tools/bench.py",
        "kernels/configs/README.md",
    ):
        assert _sent_to_docker(f, rules), f
    assert not _sent_to_docker("kernels/tools/__pycache__/bench.cpython-311.pyc", rules)
