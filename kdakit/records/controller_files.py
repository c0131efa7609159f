"""The controller's own files: records, provenance, results/LATEST, the report and collected host files.

Every write goes to a temporary name beside its target and is renamed into place, so a reader sees the old
file or the new one, never a part. A write that fails leaves the previous state and raises WriteFailed,
whose one line names the file and how much space is free on which mount. `preflight_space` refuses a run
whose expected results do not fit; `commit_collected` moves files fetched from a host into place only when
their size and checksum match the host's copy.

Command line (the playbooks and playbooks.mk call it): python -m kdakit.records.controller_files
latest|space|prepare|commit ...
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from kdakit.records import paths

# What one host's arm leaves on the controller when no earlier run says otherwise: raw outputs, server log,
# telemetry, diagnostics. An earlier, larger run under the same results folder raises it.
EXPECTED_MB_PER_HOST_ARM = 200


class WriteFailed(OSError):
    """A controller write that did not happen; str() is the one line the user sees."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"cannot write {path}: {reason} ({free_text(path)})")
        self.path = path


def _mount_of(path: Path) -> Path:
    path = existing_ancestor(path)
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def existing_ancestor(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(existing_ancestor(path)).free


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def free_text(path: Path) -> str:
    """'12.0 KiB free on /mnt/results' (where the file would land)."""
    try:
        return f"{human(free_bytes(path))} free on {_mount_of(path)}"
    except OSError:
        return "free space unknown"


def write_atomic(path: Path | str, data: bytes | str) -> Path:
    """Temp file beside path, fsync, rename over path. On failure: no temp file, no partial file, the old
    file intact, and WriteFailed naming path, the free space and its mount."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise WriteFailed(path, exc.strerror or str(exc)) from None
    except BaseException:
        _remove(tmp)
        raise
    return path


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only file system: nothing was written there either


def write_json_atomic(path: Path | str, data: object) -> Path:
    return write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_latest(results: Path | str, run_id: str) -> Path:
    return write_atomic(paths.latest_path(results), f"{run_id}\n")


def _tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def expected_bytes(results: Path | str, hosts: int, arms: int) -> int:
    """What the run will write: hosts x arms x the larger of the default and the largest host-arm folder of
    an earlier run under results."""
    per = EXPECTED_MB_PER_HOST_ARM * 1024 * 1024
    env = os.environ.get("KDAKIT_RESULTS_MB_PER_HOST_ARM")
    if env:
        per = int(float(env) * 1024 * 1024)  # a site that knows its runs' size (and the CI tests)
    else:
        root = Path(results)
        if root.is_dir():
            for arm_dir in root.glob("*/*/*"):
                if arm_dir.is_dir():
                    per = max(per, _tree_size(arm_dir))
    return per * max(hosts, 1) * max(arms, 1)


def preflight_space(results: Path | str, hosts: int, arms: int) -> str | None:
    """None when the run's expected results fit in the controller's free space; else the one line."""
    need = expected_bytes(results, hosts, arms)
    free = free_bytes(Path(results))
    if free >= need:
        return None
    return (
        f"controller: results {Path(results).absolute()} has {human(free)} free on"
        f" {_mount_of(Path(results))}, the run needs about {human(need)} ({hosts} host(s) x {arms} arm(s));"
        " free space there or pass RESULTS=<folder on a larger disk>"
    )


def _sha1(path: Path) -> str:
    digest = hashlib.sha1()  # what Ansible's find reports for the host's copy
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Collected diagnostics (server log, container settings) are readable by their owner only.
PRIVATE_DIRS = ("diag",)


def prepare_staging(staged: Path | str, host: str, host_dir: str) -> str | None:
    """Make the staging folder (0700) that fetched files land in; None, or the one line saying why the
    controller cannot write there and where the host's copies stay."""
    staged = Path(staged)
    try:
        staged.mkdir(mode=0o700, parents=True, exist_ok=True)
        probe = staged / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return (
            f"collect: cannot write {staged.parent}: {exc.strerror or exc}; the host's copies stay in"
            f" {host}:{host_dir}. Fix: make the results folder writable (or pass RESULTS=<another folder>)"
            " and run make collect again"
        )
    return None


def _private(relative: str) -> bool:
    return Path(relative).parts[0] in PRIVATE_DIRS


def commit_collected(staged: Path | str, dest: Path | str, manifest: list[dict]) -> list[str]:
    """Move each fetched file ({path: relative, size, checksum: sha1 of the host's copy}) from staged into
    dest when it is whole; a part (disk full while fetching) is removed, and the earlier copy in dest stays.
    Returns one line per file not committed; the staging folder is gone afterwards."""
    staged, dest = Path(staged), Path(dest)
    problems = []
    for entry in manifest:
        src = staged / entry["path"]
        try:
            size = src.stat().st_size
        except OSError:
            problems.append(f"{dest / entry['path']}: not fetched")
            continue
        if size != entry["size"] or (entry.get("checksum") and _sha1(src) != entry["checksum"]):
            problems.append(f"{dest / entry['path']}: fetched {size} of {entry['size']} bytes")
            src.unlink(missing_ok=True)
            continue
        target = dest / entry["path"]
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if _private(entry["path"]):
                for folder in (dest / Path(entry["path"]).parts[0], target.parent):
                    folder.chmod(0o700)
                src.chmod(0o600)
            os.replace(src, target)
        except OSError as exc:
            problems.append(f"{target}: {exc.strerror or exc}")
    shutil.rmtree(staged, ignore_errors=True)
    return problems


def _refused(line: str | None) -> int:
    """A check's exit status: 1 with its one line on stderr, 0 when it said nothing."""
    if line:
        print(line, file=sys.stderr)
        return 1
    return 0


def _main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m kdakit.records.controller_files", description=__doc__.split("\n")[0]
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    latest = sub.add_parser("latest", help="write RESULTS/LATEST (atomically)")
    latest.add_argument("--results", required=True)
    latest.add_argument("--run-id", required=True)
    space = sub.add_parser("space", help="refuse when the run's expected results do not fit")
    space.add_argument("--results", required=True)
    space.add_argument("--hosts", type=int, required=True)
    space.add_argument("--arms", type=int, default=1)
    prepare = sub.add_parser("prepare", help="make the staging folder; refuse in one line when it cannot")
    prepare.add_argument("--staged", required=True)
    prepare.add_argument("--host", required=True)
    prepare.add_argument("--host-dir", required=True)
    commit = sub.add_parser("commit", help="move whole fetched files into place (manifest JSON on stdin)")
    commit.add_argument("--staged", required=True)
    commit.add_argument("--dest", required=True)
    commit.add_argument("--host", required=True, help="for the message: where the intact copies stay")
    commit.add_argument("--host-dir", required=True)
    args = p.parse_args(argv)
    try:
        if args.cmd == "latest":
            write_latest(args.results, args.run_id)
            return 0
        if args.cmd == "space":
            return _refused(preflight_space(args.results, args.hosts, args.arms))
        if args.cmd == "prepare":
            return _refused(prepare_staging(args.staged, args.host, args.host_dir))
        problems = commit_collected(args.staged, args.dest, json.load(sys.stdin))
    except OSError as exc:
        print(f"kdakit: {exc}", file=sys.stderr)
        return 1
    if problems:
        print(
            f"collect: {len(problems)} file(s) not written ({free_text(Path(args.dest))}), the host's copies"
            f" stay in {args.host}:{args.host_dir}; first: {problems[0]}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
