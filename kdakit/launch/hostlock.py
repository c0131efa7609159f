"""One run per host at a time: the lock file a step takes before it starts, stops or loads a server.

Standard library only: the playbooks run `take` and `release` on the host itself (ansible.builtin.script, as
the preflight), and `gone` on the controller. The lock (JSON, on the host) names its holder: run id, step,
controller, user, since, and the holding controller process (pid, its start time, the controller's boot id)
plus `refreshed`, the last step of that run that took it.

Whether a holder is gone is decided on facts the deciding controller can check:
- the same controller (hostname and boot id): the holding process (pid with the same start time) no longer
  runs; a boot id that changed (the controller rebooted) also means gone;
- another controller, whose processes cannot be seen from here: the lock was not refreshed for max_age_h.

Exit status of take: 0 taken (or already this run's), 3 held by another run (stdout: the holder's JSON).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

BUSY = 3


def now() -> str:
    # timezone.utc, not UTC: hosts may run Python 3.10
    return datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: UP017


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' when it does not run): a reused pid differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def busy_line(host: str, holder: dict) -> str:
    return (
        f"{host}: busy — run {holder.get('run_id')} step {holder.get('step')} by "
        f"{holder.get('user')}@{holder.get('controller')} since {holder.get('since')}"
    )


def holder_gone(holder: dict, here: dict, max_age_h: float, at: float | None = None) -> str:
    """Why the holder is gone ('' when it may still run). here: this controller's hostname and boot_id."""
    at = time.time() if at is None else at
    same_machine = holder.get("controller") == here["controller"]
    if same_machine and holder.get("boot_id") and holder.get("boot_id") != here["boot_id"]:
        return f"{holder.get('controller')} has rebooted since"
    if same_machine and holder.get("boot_id") == here["boot_id"]:
        pid = int(holder.get("pid") or 0)
        if not pid or process_start(pid) != str(holder.get("pid_start")):
            return f"its process {pid} on {holder.get('controller')} is gone"
        return ""
    try:
        refreshed = datetime.fromisoformat(holder.get("refreshed") or holder.get("since")).timestamp()
    except (TypeError, ValueError):
        return "its lock names no time"
    if at - refreshed > max_age_h * 3600:
        return f"not refreshed for {max_age_h:g} h (another controller: its process cannot be checked)"
    return ""


@contextmanager
def serialised(path: Path, suffix: str = ".flock"):
    """Whoever works on `path` (two lock takers on one host; two builders of one test cache entry), one
    after the other: an exclusive flock on the file beside it named `path` + `suffix`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + suffix), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: treated as held by nobody known, hence taken over
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def take(path: Path, me: dict, replace: dict | None = None) -> tuple[int, dict | None]:
    """(0, None) when taken; (0, the run's own lock as it was) when this run already held it (refreshed);
    (BUSY, holder) when another run holds it (and is not the replace'd holder)."""
    with serialised(path):
        held = _read(path)
        ours = held is not None and held.get("run_id") == me["run_id"]
        stale = held is not None and replace is not None and held == replace
        if held and not ours and not stale:
            return BUSY, held
        record = dict(me, refreshed=now())
        record["since"] = held.get("since", me["since"]) if ours else me["since"]
        _write(path, record)
        return 0, (held if ours else None)


def release(path: Path, run_id: str) -> bool:
    """Remove the lock when this run holds it; False (and nothing done) when another run does."""
    with serialised(path):
        held = _read(path)
        if held and held.get("run_id") != run_id:
            return False
        path.unlink(missing_ok=True)
        return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hostlock.py", description="the per-host run lock")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("take", help="on the host: take the lock (exit 3 and the holder when busy)")
    t.add_argument("--path", required=True)
    t.add_argument(
        "--me", required=True, help="JSON: run_id, step, controller, user, pid, pid_start, boot_id"
    )
    t.add_argument("--replace", help="JSON of a holder found gone: taken over only if it still holds")
    r = sub.add_parser("release", help="on the host: remove the lock if this run holds it")
    r.add_argument("--path", required=True)
    r.add_argument("--run-id", required=True)
    g = sub.add_parser("gone", help="on the controller: exit 0 and why when the holder (JSON) is gone")
    g.add_argument("--holder", required=True)
    g.add_argument("--host", required=True)
    g.add_argument("--controller", required=True)
    g.add_argument("--max-age-h", type=float, default=12.0)
    me = sub.add_parser("me", help="on the controller: this process's identity fields (JSON)")
    me.add_argument("--pid", type=int, required=True)
    args = p.parse_args(argv)
    if args.cmd == "take":
        me_record = dict(json.loads(args.me), since=now())
        code, held = take(Path(args.path), me_record, json.loads(args.replace) if args.replace else None)
        if code == 0:
            print("held" if held is not None else "taken")  # Ansible's changed: a lock newly taken
        elif held is not None:
            print(json.dumps(held))
        return code
    if args.cmd == "release":
        existed = Path(args.path).exists()
        if not release(Path(args.path), args.run_id):
            return BUSY
        print("released" if existed else "none")  # Ansible's changed: a lock was removed
        return 0
    if args.cmd == "me":
        print(json.dumps({"pid": args.pid, "pid_start": process_start(args.pid), "boot_id": boot_id()}))
        return 0
    holder = json.loads(args.holder)
    why = holder_gone(holder, {"controller": args.controller, "boot_id": boot_id()}, args.max_age_h)
    if why:
        print(
            f"{args.host}: taking over the lock of run {holder.get('run_id')} (step {holder.get('step')} by "
            f"{holder.get('user')}@{holder.get('controller')} since {holder.get('since')}): {why}"
        )
        return 0
    print(busy_line(args.host, holder))
    return 1


if __name__ == "__main__":
    sys.exit(main())
