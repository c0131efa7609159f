"""Provenance of a measurement: which code, image, pins, GPUs, driver and server command produced it.

Every field is best effort and recorded as null when unknown; nothing here may fail a run.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path

import kdakit
from kdakit import pins

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVER_COMMAND_FILE = "server-command.json"  # written by `kdakit serve` into the run's result folder


def _run(argv: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_sha() -> tuple[str | None, bool | None]:
    """(sha, dirty) of the kdakit checkout; inside the image, KDAKIT_IMAGE_REVISION baked at build time."""
    if (REPO_ROOT / ".git").exists() and shutil.which("git"):
        sha = _run(["git", "rev-parse", "HEAD"], REPO_ROOT)
        if sha and re.fullmatch(r"[0-9a-f]{40}", sha):
            status = _run(["git", "status", "--porcelain", "--untracked-files=no"], REPO_ROOT)
            return sha, (bool(status) if status is not None else None)
    # images.mk bakes `<sha>` or `<sha>-dirty` (built from a tree with uncommitted changes).
    baked = re.fullmatch(
        r"([0-9a-f]{7,40})(-dirty)?", os.environ.get("KDAKIT_IMAGE_REVISION", "").strip().lower()
    )
    return (baked.group(1), bool(baked.group(2))) if baked else (None, None)


def gpus_and_driver() -> tuple[list[str], str | None]:
    if not shutil.which("nvidia-smi"):
        return [], None
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if not out:
        return [], None
    names, drivers = [], set()
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if parts and parts[0]:
            names.append(parts[0])
        if len(parts) > 1 and parts[1]:
            drivers.add(parts[1])
    return names, (sorted(drivers)[0] if drivers else None)


def sku_from_gpus(gpus: list[str]) -> str:
    """'NVIDIA H200' -> 'H200'; 'unknown' when there is no GPU or the models differ."""
    skus = set()
    for name in gpus:
        match = re.search(r"\b([A-Z]{1,2}\d{2,3}[A-Z]?)\b", name.upper())
        skus.add(match.group(1) if match else name)
    return skus.pop() if len(skus) == 1 else "unknown"


def server_command(run_dir: Path | str | None) -> dict | None:
    """{argv, env} from server-command.json (run_dir: that file, or the folder holding it)."""
    if run_dir is None:
        return None
    path = Path(run_dir)
    if path.is_dir():
        path = path / SERVER_COMMAND_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    argv = data.get("argv") if isinstance(data, dict) else None
    if not isinstance(argv, list) or not argv:
        return None
    env = data.get("env") or {}
    return {"argv": [str(a) for a in argv], "env": {str(k): str(v) for k, v in env.items()}}


def tool_versions() -> dict[str, str | None]:
    from importlib import metadata

    versions = {}
    for dist in ("lm-eval", "sglang", "torch", "triton", "helion"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def gather(run_dir: Path | str | None = None) -> dict:
    sha, dirty = git_sha()
    gpus, driver = gpus_and_driver()
    return {
        "kdakit_version": kdakit.__version__,
        "git_sha": sha,
        "git_dirty": dirty,
        "image_id": os.environ.get("KDAKIT_IMAGE_ID") or None,
        "pins": pins.load(),
        "gpus": gpus,
        "driver": driver,
        "server_command": server_command(run_dir),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "tools": tool_versions(),
    }
