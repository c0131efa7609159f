"""Records and provenance under a full or read-only destination: one line naming the path, no partial or
0-byte file left, and an earlier record intact. A real 64 KiB tmpfs (root; CI runs as root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdakit import provenance, results
from tests.test_results_schema import gsm8k_record

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _record() -> dict:
    return gsm8k_record()


def test_disk_full_is_one_line_with_the_path_and_leaves_nothing(small_disk):
    good = results.write_result(small_disk / "first.result.json", _record())
    before = good.read_text()
    with open(small_disk / "filler", "ab", buffering=0) as f:  # fill the disk to the last block
        try:
            while f.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    target = small_disk / "run" / "second.result.json"
    with pytest.raises(results.ResultError) as err:
        results.write_result(target, _record())
    assert str(err.value) == f"cannot write {target}: No space left on device"
    assert "\n" not in str(err.value)
    leftovers = sorted(p.name for p in small_disk.rglob("*") if p.is_file() and p.name != "filler")
    assert leftovers == ["first.result.json"]  # no .tmp-*, no 0-byte second record
    assert good.read_text() == before

    # provenance: the CLI says which file and keeps the old record
    run = small_disk / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "kdakit.provenance", "record", "--results", str(run), "--run-id", "r1",
         "--arm", "helion", "--step", "deploy"],
        input=json.dumps([{"host": "h1", "outcome": "ok", "cause": ""}]), capture_output=True, text=True,
        cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith(f"kdakit provenance: cannot write {run}")
    assert proc.stderr.strip().endswith("No space left on device")
    assert not [p for p in run.rglob("*") if p.is_file()] if run.exists() else True


def test_read_only_destination(small_disk):
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    target = small_disk / "x.result.json"
    with pytest.raises(results.ResultError, match=rf"^cannot write {target}: Read-only file system$"):
        results.write_result(target, _record())
    with pytest.raises(OSError):
        provenance.write_json_atomic(small_disk / "provenance.json", {"a": 1})
    assert list(small_disk.iterdir()) == []
