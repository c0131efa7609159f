"""What a test session leaves in the checkout: every new file or folder beyond the tools' own caches.
tests/conftest.py takes it before and after the session and fails the session on anything new: tests write
results/ and out/ folders under a temporary or cache folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The venv, pip's and make setup's caches, and the tools' own: not test output.
TOOL_CACHES = (".venv/", ".cache/", ".pytest_cache/", ".ruff_cache/")


def _tool_cache(path: str) -> bool:
    return path.startswith(TOOL_CACHES) or "__pycache__" in path or ".egg-info" in path


def state(repo: Path = REPO) -> set[str] | None:
    """Every file and folder of the checkout outside .git and the tool caches (git would list no empty
    folder, hence a walk); None outside a git checkout (an installed copy has no results folder to guard)."""
    if not (repo / ".git").exists():
        return None
    out = set()
    for folder, dirs, files in os.walk(repo):
        rel = Path(folder).relative_to(repo)
        dirs[:] = [d for d in dirs if d != ".git" and not _tool_cache(f"{rel / d}/".removeprefix("./"))]
        out |= {f"{(rel / name)}".removeprefix("./") for name in dirs + files}
    return out


def left_behind(before: set[str] | None, after: set[str] | None) -> list[str]:
    if before is None or after is None:
        return []
    return sorted(after - before)
