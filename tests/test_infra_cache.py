"""The CI cache stays within its budget (tests/infra/images.py prune_cache, run at the end of a test session
that used it): stale tarballs go first, then what only a stand-in rebuild needs, then idle test-host engines;
what another run used in the last hour stays. No Docker needed (no image-building engine is involved)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.infra import images

REPO = Path(__file__).resolve().parent.parent


def _file(path, size: int, age_s: float = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    if age_s:
        old = time.time() - age_s
        os.utime(path, (old, old))


def test_prune_until_within_budget(tmp_path, monkeypatch):
    monkeypatch.setenv(images.SESSION_ENV, "this-session")
    monkeypatch.setattr(images, "CACHE", tmp_path)
    monkeypatch.setattr(images, "ENGINE_ROOT", tmp_path / "engine")
    monkeypatch.setattr(images, "_USED", set())
    monkeypatch.setattr(images, "_USED_IMAGES", set())
    _file(tmp_path / "tarballs" / "old.tar.zst", 300_000, age_s=7200)
    _file(tmp_path / "tarballs" / "other-run.tar.zst", 100_000)  # another run made it minutes ago
    _file(tmp_path / "wheelhouse" / "w1" / ".complete", 10)
    _file(tmp_path / "wheelhouse" / "w1" / "torch.whl", 200_000)
    images._USED.add(tmp_path / "wheelhouse" / "w1")
    _file(tmp_path / "playbook-hosts" / "h1" / "lock", 0)
    _file(tmp_path / "playbook-hosts" / "h1" / "data" / "layer", 200_000)
    images.note_session_use(tmp_path / "playbook-hosts" / "h1")  # this session's host: it may go
    _file(tmp_path / "debootstrap" / "bookworm.tar", 50_000)

    log = io.StringIO()
    left = images.prune_cache(budget=250_000, log=log)
    assert not (tmp_path / "tarballs" / "old.tar.zst").exists()
    assert (tmp_path / "tarballs" / "other-run.tar.zst").exists()
    assert not (tmp_path / "wheelhouse" / "w1").exists()
    assert not list((tmp_path / "playbook-hosts").glob("h1*"))  # nor its renamed-aside copy
    assert (tmp_path / "debootstrap" / "bookworm.tar").exists()
    assert left <= 250_000 and "within the 0 GB budget" in log.getvalue()


def test_nothing_goes_when_within_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "CACHE", tmp_path)
    monkeypatch.setattr(images, "_USED", set())
    monkeypatch.setattr(images, "_USED_IMAGES", set())
    _file(tmp_path / "playbook-hosts" / "h1" / "lock", 0)
    _file(tmp_path / "playbook-hosts" / "h1" / "data" / "layer", 1000)
    _file(tmp_path / "wheelhouse" / "w1" / ".complete", 10, age_s=60)
    images.prune_cache(budget=10**9, log=io.StringIO())
    assert (tmp_path / "playbook-hosts" / "h1" / "data" / "layer").exists()
    assert (tmp_path / "wheelhouse" / "w1" / ".complete").exists()


def test_an_image_another_process_used_within_the_hour_counts_as_recent(tmp_path, monkeypatch):
    # xdist workers and concurrent runs each keep their own _USED_IMAGES: the use stamp is what they share.
    monkeypatch.setattr(images, "CACHE", tmp_path)
    monkeypatch.setattr(images, "_USED_IMAGES", set())
    assert not images.used_recently("kdakit-ci/standin:abc")
    images.used_image("kdakit-ci/standin:abc")
    images._USED_IMAGES.clear()  # as another process sees it
    assert images.used_recently("kdakit-ci/standin:abc")
    assert not images.used_recently("kdakit-ci/standin:other")
    stamp = next((tmp_path / "image-uses").iterdir())
    old = time.time() - images.RECENT_S - 60
    os.utime(stamp, (old, old))
    assert not images.used_recently("kdakit-ci/standin:abc")


def test_a_host_engine_another_session_used_recently_stays(tmp_path, monkeypatch):
    monkeypatch.setenv(images.SESSION_ENV, "this-session")
    monkeypatch.setattr(images, "CACHE", tmp_path)
    monkeypatch.setattr(images, "_USED", {tmp_path / "x"})  # this session used the cache
    monkeypatch.setattr(images, "_USED_IMAGES", set())
    _file(tmp_path / "fault-hosts" / "h1" / "lock", 0)  # another session's, minutes ago
    _file(tmp_path / "fault-hosts" / "h1" / "data" / "layer", 1000)
    _file(tmp_path / "fault-hosts" / "h2" / "lock", 0, age_s=images.RECENT_S + 60)  # nobody's for an hour
    _file(tmp_path / "fault-hosts" / "h2" / "data" / "layer", 1000)
    images.prune_cache(budget=0, log=io.StringIO())
    assert (tmp_path / "fault-hosts" / "h1" / "data" / "layer").exists()
    assert not (tmp_path / "fault-hosts" / "h2").exists()
    assert not (tmp_path / "sessions" / "this-session").exists()  # the ledger goes with the session


def test_a_second_session_on_this_machine_removes_nothing_of_the_first(tmp_path):
    """A cheap test file run as its own pytest session, with a zero budget, while the "main" session holds
    a test host's engine, a wheelhouse and a tarball and keeps stamping its image uses."""
    main = dict(os.environ, KDAKIT_CI_CACHE=str(tmp_path), **{images.SESSION_ENV: "main-session"})
    held = [tmp_path / "fault-hosts" / "h1" / "lock", tmp_path / "fault-hosts" / "h1" / "data" / "layer",
            tmp_path / "wheelhouse" / "w1" / ".complete", tmp_path / "tarballs" / "t.tar.zst"]  # fmt: skip
    for path in held:
        _file(path, 1000)
    note = "from tests.infra import images; images.note_session_use(images.CACHE / 'fault-hosts' / 'h1')"
    subprocess.run([sys.executable, "-c", note], cwd=REPO, env=main, check=True)
    stamp = tmp_path / "image-uses" / "main-standin"
    stop = threading.Event()

    def main_suite_at_work():
        while not stop.is_set():
            _file(stamp, 10)
            stop.wait(0.2)

    worker = threading.Thread(target=main_suite_at_work)
    worker.start()
    try:
        env = {k: v for k, v in main.items() if k != images.SESSION_ENV}
        second = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
             "tests/test_stats.py"], cwd=REPO, capture_output=True, text=True, timeout=300,
            env=dict(env, KDAKIT_CI_CACHE_GB="0"),
        )  # fmt: skip
    finally:
        stop.set()
        worker.join()
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert [p for p in held if not p.exists()] == []
    assert (tmp_path / "sessions" / "main-session").is_dir()  # the main session's ledger too
