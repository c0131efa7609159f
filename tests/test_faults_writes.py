"""Records and provenance under a full or read-only destination: one line naming the path, no partial or
0-byte file left, and an earlier record intact. A real 64 KiB tmpfs (root; CI runs as root)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdakit.records import provenance, results
from tests.infra import tmpfs
from tests.test_results_schema import gsm8k_record

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs.mounted(tmp_path / "disk", "size=64k") as mount:
        yield mount


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
    assert str(err.value) == f"cannot write {target}: No space left on device (0 B free on {small_disk})"
    assert "\n" not in str(err.value)
    leftovers = sorted(p.name for p in small_disk.rglob("*") if p.is_file() and p.name != "filler")
    assert leftovers == ["first.result.json"]  # no .tmp-*, no 0-byte second record
    assert good.read_text() == before

    # provenance: the CLI says which file and keeps the old record
    run = small_disk / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "kdakit.records.provenance", "record", "--results", str(run), "--run-id", "r1",
         "--arm", "helion", "--step", "deploy"],
        input=json.dumps([{"host": "h1", "outcome": "ok", "cause": ""}]), capture_output=True, text=True,
        cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith(
        f"kdakit provenance: h1: cannot write {run}/r1/h1/helion/provenance.json"
    )
    assert proc.stderr.strip().endswith(f"No space left on device (0 B free on {small_disk})")
    assert not [p for p in run.rglob("*") if p.is_file()] if run.exists() else True


def test_read_only_destination(small_disk):
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    target = small_disk / "x.result.json"
    read_only = rf"^cannot write {target}: Read-only file system \(.+ free on {small_disk}\)$"
    with pytest.raises(results.ResultError, match=read_only):
        results.write_result(target, _record())
    with pytest.raises(OSError):
        provenance.write_json_atomic(small_disk / "provenance.json", {"a": 1})
    assert list(small_disk.iterdir()) == []


def _fill(disk: Path) -> None:
    with open(disk / "filler", "ab", buffering=0) as f:  # the disk to its last block
        try:
            while f.write(b"\0" * 4096):
                pass
        except OSError:
            pass


def test_latest_on_a_full_disk_keeps_the_old_run_id_and_says_where(small_disk):
    latest = small_disk / "LATEST"
    latest.write_text("run-1\n")
    _fill(small_disk)
    proc = subprocess.run(
        [sys.executable, "-m", "kdakit.records.controller_files", "latest", "--results", str(small_disk),
         "--run-id", "run-2-with-a-longer-name" * 4], capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"kdakit: cannot write {latest}: No space left on device (0 B free on {small_disk})"
    )
    assert latest.read_text() == "run-1\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["LATEST", "filler"]


def test_report_on_a_full_disk_keeps_the_old_report(small_disk, tmp_path):
    from kdakit import report

    tree = tmp_path / "results"
    results.write_result(tree / "r1" / "h1" / "helion" / "gsm8k.result.json", _record())
    (small_disk / "report.md").write_text("old\n")
    _fill(small_disk)
    full = rf"^cannot write {small_disk}/report\.md: No space left on device \(0 B free on {small_disk}\)$"
    with pytest.raises(OSError, match=full):
        report.write_report(tree, small_disk, plots=False)
    assert (small_disk / "report.md").read_text() == "old\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "report.md"]


def test_space_preflight_refuses_in_one_line(small_disk):
    proc = subprocess.run(
        [sys.executable, "-m", "kdakit.records.controller_files", "space",
         "--results", str(small_disk / "results"), "--hosts", "3", "--arms", "2"],
        capture_output=True, text=True, cwd=REPO,
        env=dict(os.environ, KDAKIT_RESULTS_MB_PER_HOST_ARM="1"),
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"controller: results {small_disk / 'results'} has ")
    assert f"free on {small_disk}, the run needs about 6.0 MiB (3 host(s) x 2 arm(s))" in proc.stderr
    assert not (small_disk / "results").exists()


def test_collect_commits_only_whole_files_and_keeps_the_earlier_copy(tmp_path):
    from kdakit.records import controller_files

    dest, staged = tmp_path / "dest", tmp_path / "dest" / ".collect-staged"
    (dest / "diag").mkdir(parents=True)
    (dest / "diag" / "server.log").write_text("earlier whole copy\n")
    host = {"a.result.json": b'{"x": 1}\n', "diag/server.log": b"line 1\nline 2\n"}
    manifest = [{"path": k, "size": len(v), "checksum": hashlib.sha1(v).hexdigest()} for k, v in host.items()]
    (staged / "diag").mkdir(parents=True)
    (staged / "a.result.json").write_bytes(host["a.result.json"])
    (staged / "diag" / "server.log").write_bytes(b"")  # the fetch ran out of space: a 0-byte part
    problems = controller_files.commit_collected(staged, dest, manifest)
    assert problems == [f"{dest}/diag/server.log: fetched 0 of 14 bytes"]
    assert (dest / "a.result.json").read_bytes() == host["a.result.json"]
    assert (dest / "diag" / "server.log").read_text() == "earlier whole copy\n"
    assert not staged.exists()


def test_a_part_left_in_the_staging_folder_is_no_record(tmp_path):
    from kdakit.report import model as report_model

    tree = tmp_path / "results"
    arm = tree / "r1" / "h1" / "helion"
    results.write_result(arm / "gsm8k.result.json", _record())
    (arm / ".collect-staged").mkdir()
    (arm / ".collect-staged" / "gsm8k-2.result.json").write_bytes(b"")  # an interrupted fetch's part
    collected = report_model.collect(tree)
    assert collected.skipped == [] and len(collected.records) == 1
    assert [p for p, _ in results.iter_results(tree)] == [arm / "gsm8k.result.json"]


def test_a_read_only_results_folder_stops_collect_in_one_line(small_disk):
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    staged = small_disk / "r1" / "h1" / "helion" / ".collect-staged"
    proc = subprocess.run(
        [sys.executable, "-m", "kdakit.records.controller_files", "prepare", "--staged", str(staged),
         "--host", "h1", "--host-dir", "/srv/kdakit/results/r1/helion"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == (
        f"collect: cannot write {staged.parent}: Read-only file system; the host's copies stay in"
        " h1:/srv/kdakit/results/r1/helion. Fix: make the results folder writable (or pass RESULTS=<another"
        " folder>) and run make collect again\n"
    )


def test_collected_diagnostics_are_private_and_the_staging_folder_too(tmp_path):
    from kdakit.records import controller_files

    dest = tmp_path / "dest"
    staged = dest / ".collect-staged"
    assert controller_files.prepare_staging(staged, "h1", "/host/run") is None
    assert staged.stat().st_mode & 0o777 == 0o700
    host = {"a.result.json": b"{}\n", "diag/kdakit-sglang.log": b"started\n"}
    for rel, data in host.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_bytes(data)
        (staged / rel).chmod(0o644)  # as Ansible's fetch leaves them
    manifest = [{"path": k, "size": len(v), "checksum": hashlib.sha1(v).hexdigest()} for k, v in host.items()]
    assert controller_files.commit_collected(staged, dest, manifest) == []
    assert (dest / "diag").stat().st_mode & 0o777 == 0o700
    assert (dest / "diag" / "kdakit-sglang.log").stat().st_mode & 0o777 == 0o600
    assert (dest / "a.result.json").stat().st_mode & 0o777 == 0o644  # records stay readable


def test_each_hosts_record_failure_names_that_hosts_file_and_the_others_are_written(small_disk, tmp_path):
    run = small_disk / "results"
    elsewhere = tmp_path / "roomy"
    (elsewhere / "helion").mkdir(parents=True)
    (run / "r1").mkdir(parents=True)
    (run / "r1" / "h2").symlink_to(elsewhere)  # h2's folder on a disk with room, h1's on the full one
    _fill(small_disk)
    outcomes = [{"host": h, "outcome": "ok", "cause": ""} for h in ("h1", "h2", "h3")]
    proc = subprocess.run(
        [sys.executable, "-m", "kdakit.records.provenance", "record", "--results", str(run), "--run-id", "r1",
         "--arm", "helion", "--step", "teardown"],
        input=json.dumps(outcomes), capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["h1: teardown ok", "h2: teardown ok", "h3: teardown ok"]
    assert proc.stderr.splitlines() == [
        f"kdakit provenance: {h}: cannot write {run}/r1/{h}/helion/provenance.json: No space left on device"
        f" (0 B free on {small_disk})"
        for h in ("h1", "h3")
    ]
    assert (
        json.loads((elsewhere / "helion" / "provenance.json").read_text())["steps"]["teardown"]["outcome"]
        == "ok"
    )
