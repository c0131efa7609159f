"""The per-host run lock (kdakit/launch/hostlock.py): a second run is refused at once with one line naming the
holder; a holder that is gone (checked on facts: its process on this controller, or an expired refresh for
another controller) is taken over; only the holding run releases it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kdakit.launch import hostlock

SCRIPT = Path(hostlock.__file__)


def _me(run_id: str, pid: int | None = None, controller: str = "ctl-a", step: str = "deploy") -> dict:
    pid = pid or os.getpid()
    return {"run_id": run_id, "step": step, "controller": controller, "user": "ops", "pid": pid,
            "pid_start": hostlock.process_start(pid), "boot_id": hostlock.boot_id(),
            "since": "2026-01-01T10:00:00+00:00"}  # fmt: skip


def _take(path: Path, me: dict, replace: dict | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(SCRIPT), "take", "--path", str(path), "--me", json.dumps(me)]
    argv += ["--replace", json.dumps(replace)] if replace else []
    return subprocess.run(argv, capture_output=True, text=True)


def test_second_run_is_busy_and_the_same_run_may_take_it_again(tmp_path):
    lock = tmp_path / "state" / "lock.json"
    first = _take(lock, _me("run-1"))
    assert first.returncode == 0 and first.stdout.strip() == "taken"
    again = _take(lock, _me("run-1", step="bench"))  # the run's next step: no change for Ansible
    assert again.returncode == 0 and again.stdout.strip() == "held"
    other = _take(lock, _me("run-2"))
    assert other.returncode == hostlock.BUSY
    holder = json.loads(other.stdout)
    assert (holder["run_id"], holder["step"]) == ("run-1", "bench")
    assert hostlock.busy_line("h1", holder) == (
        f"h1: busy — run run-1 step bench by ops@ctl-a since {holder['since']}"
    )
    assert json.loads(lock.read_text())["run_id"] == "run-1"


def test_a_live_holder_on_this_controller_is_not_gone():
    here = {"controller": "ctl-a", "boot_id": hostlock.boot_id()}
    assert hostlock.holder_gone(_me("run-1"), here, max_age_h=12) == ""


def test_a_dead_holder_on_this_controller_is_gone(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    holder = _me("run-1", pid=dead.pid)
    holder["pid_start"] = "1"  # what it was when it ran (a reused pid would start at another time)
    here = {"controller": "ctl-a", "boot_id": hostlock.boot_id()}
    assert hostlock.holder_gone(holder, here, 12) == f"its process {dead.pid} on ctl-a is gone"
    assert (
        hostlock.holder_gone(dict(holder, boot_id="before-a-reboot"), here, 12) == "ctl-a has rebooted since"
    )


def test_another_controllers_holder_is_gone_only_after_max_age():
    holder = dict(_me("run-1", controller="ctl-b"), refreshed="2026-01-01T10:00:00+00:00")
    here = {"controller": "ctl-a", "boot_id": hostlock.boot_id()}
    t0 = 1767261600.0  # 2026-01-01T10:00:00Z
    assert hostlock.holder_gone(holder, here, 12, at=t0 + 11 * 3600) == ""
    assert "not refreshed for 12 h" in hostlock.holder_gone(holder, here, 12, at=t0 + 13 * 3600)


def test_take_over_only_the_holder_found_gone_and_release_only_ours(tmp_path):
    lock = tmp_path / "lock.json"
    assert _take(lock, _me("run-1")).returncode == 0
    stale = json.loads(lock.read_text())
    assert _take(lock, _me("run-2"), replace=dict(stale, step="other")).returncode == hostlock.BUSY
    assert _take(lock, _me("run-2"), replace=stale).returncode == 0
    assert json.loads(lock.read_text())["run_id"] == "run-2"
    assert not hostlock.release(lock, "run-1") and lock.exists()
    assert hostlock.release(lock, "run-2") and not lock.exists()


def test_release_says_whether_a_lock_was_removed(tmp_path):
    """Ansible reports a change only when a lock went: a second teardown finds none."""
    lock = tmp_path / "state" / "lock.json"
    assert _take(lock, _me("run-1")).stdout.strip() == "taken"

    def release() -> subprocess.CompletedProcess:
        argv = [sys.executable, str(SCRIPT), "release", "--path", str(lock), "--run-id", "run-1"]
        return subprocess.run(argv, capture_output=True, text=True)

    first, second = release(), release()
    assert (first.returncode, first.stdout.strip()) == (0, "released")
    assert (second.returncode, second.stdout.strip()) == (0, "none")
