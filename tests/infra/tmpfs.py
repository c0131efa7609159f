"""A real tmpfs for a test's full or read-only destination (root only; CI runs as root)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted(mount: Path, options: str):
    """A tmpfs with mount `options` (size=64k, ro, ...) at the new folder `mount` for the block, unmounted
    after it; skips the test when not root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
