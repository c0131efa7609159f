"""What a test session leaves in the checkout: every new file or folder beyond the tools' own caches.
tests/conftest.py takes it before and after the session and fails the session on anything new: tests write
results/ and out/ folders under a temporary or cache folder."""

from __future__ import annotations

import os
import subprocess
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


def left_behind(before: set[str] | None, after: set[str] | None, repo: Path = REPO) -> list[str]:
    """The new paths that git ignores (results/, out/: git status would not show them) or that sit in a new
    top-level folder; a new file beside tracked sources is git status's to show (and may be a developer's
    edit during the session)."""
    if before is None or after is None:
        return []
    new = sorted(after - before)
    if not new:
        return []
    proc = subprocess.run(
        ["git", "check-ignore", "--stdin"], cwd=repo, input="\n".join(new), capture_output=True, text=True
    )
    ignored = set(proc.stdout.splitlines())
    tops = {entry.split("/")[0] for entry in before}
    return [p for p in new if p in ignored or p.split("/")[0] not in tops or p.split("/")[0] in ignored]
