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
from kdakit.facts import pins
from kdakit.records import paths
from kdakit.records.controller_files import write_json_atomic

REPO_ROOT = Path(__file__).resolve().parents[2]
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


def package_versions(dists: tuple[str, ...]) -> dict[str, str | None]:
    """Each distribution's installed version; None where it is not installed."""
    from importlib import metadata

    versions = {}
    for dist in dists:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def tool_versions() -> dict[str, str | None]:
    return package_versions(("lm-eval", "sglang", "torch", "triton", "helion"))


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


# The controller's record of each host's rollout: results/<run-id>/<host>/<arm>/provenance.json holds, beside
# the collect step's facts, every step's outcome and the run's first failure. Only this code writes it (the
# playbooks call `python -m kdakit.records.provenance`), always atomically, and a later step never upgrades
# a host.
PROVENANCE_FILE = paths.PROVENANCE_FILE
OUTCOMES = ("ok", "failed", "unreachable", "skipped")
# Steps that run whatever happened before (they gather evidence and clean up), and so never skip a host.
ALWAYS_RUN_STEPS = ("collect", "teardown")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_step(record: dict, step: str, outcome: str, cause: str = "") -> dict:
    """The record with this step's outcome added: the overall outcome only ever gets worse (ok -> failed or
    unreachable), and the first failure's step and cause are kept."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
    record = dict(record)
    steps = dict(record.get("steps") or {})
    steps[step] = {"outcome": outcome, "cause": cause}
    record["steps"] = steps
    if outcome in ("failed", "unreachable") and record.get("outcome") in (None, "ok"):
        record.update(outcome=outcome, step=step, cause=cause)
    record.setdefault("outcome", "ok")
    record.setdefault("step", step)
    record.setdefault("cause", "")
    return record


def earlier_failure(record: dict) -> str:
    """'' when the host may run its next step; otherwise the reason it is skipped."""
    if record.get("outcome") in ("failed", "unreachable"):
        return f"{record.get('step')} {record['outcome']}: {record.get('cause') or 'no cause recorded'}"
    return ""


def summary_line(host: str, step: str, outcome: str, cause: str) -> str:
    """h2: bench unreachable (cause) - the per-host line every step ends with."""
    return f"{host}: {step} {outcome}" + (f" ({cause})" if cause else "")


def record_each(
    results: Path | str, run_id: str, arm: str, step: str, hosts: list[dict]
) -> tuple[list[str], dict[str, OSError]]:
    """Merge each host's step outcome ({host, outcome, cause}) into its provenance.json; returns the summary
    lines and, per host whose record could not be written, why (each host's own file: one host's full disk
    is said for that host, and the others' records are still tried)."""
    lines, failed = [], {}
    for h in hosts:
        path = paths.provenance_path(results, run_id, h["host"], arm)
        record = _read_json(path)
        record.update(
            {k: v for k, v in (("run_id", run_id), ("host", h["host"]), ("arm", arm)) if k not in record}
        )
        try:
            write_json_atomic(path, record_step(record, step, h["outcome"], h.get("cause") or ""))
        except OSError as exc:
            failed[h["host"]] = exc
        lines.append(summary_line(h["host"], step, h["outcome"], h.get("cause") or ""))
    return lines, failed


def record_outcomes(results: Path | str, run_id: str, arm: str, step: str, hosts: list[dict]) -> list[str]:
    """record_each, raising the first host's write failure (WriteFailed: its file, the free space)."""
    lines, failed = record_each(results, run_id, arm, step, hosts)
    for exc in failed.values():
        raise exc
    return lines


def record_facts(results: Path | str, run_id: str, host: str, arm: str, facts: dict) -> Path:
    """Add the collect step's facts (image, image ID, git sha, ...) without touching outcomes."""
    path = paths.provenance_path(results, run_id, host, arm)
    record = _read_json(path)
    for key in ("outcome", "step", "cause", "steps"):
        facts.pop(key, None)
    record.update(facts)
    record.setdefault("outcome", "ok")
    record.setdefault("cause", "")
    return write_json_atomic(path, record)


def rollup(run_dir: Path | str) -> tuple[list[tuple[str, str, str, str, str]], bool]:
    """(host, arm, step, outcome, cause) for every recorded step of a run, and whether all were ok."""
    rows = []
    for path in sorted(Path(run_dir).glob(f"*/*/{PROVENANCE_FILE}")):
        record = _read_json(path)
        host, arm = path.parent.parent.name, path.parent.name
        for step, result in (record.get("steps") or {}).items():
            rows.append((host, arm, step, result.get("outcome", "?"), result.get("cause", "")))
    return rows, bool(rows) and all(r[3] == "ok" for r in rows)


def table(header: tuple[str, ...], rows: list[tuple[str, ...]], width: int = 100) -> str:
    """A plain text table; long cells are cut to keep one line per row."""
    cells = [tuple(str(c) for c in header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header) - 1)]
    out = []
    for r in cells:
        head = "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True))
        out.append(f"{head}  {r[-1][:width]}".rstrip())
    return "\n".join(out)


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(
        prog="python -m kdakit.records.provenance", description="the rollout's outcome records"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="merge one step's per-host outcomes (JSON list on stdin)")
    for a in ("--results", "--run-id", "--arm", "--step"):
        rec.add_argument(a, required=True)
    facts = sub.add_parser("facts", help="add collect facts (JSON object on stdin) to one host's record")
    for a in ("--results", "--run-id", "--arm", "--host"):
        facts.add_argument(a, required=True)
    roll = sub.add_parser("rollup", help="host x arm x step -> outcome, cause; exit 1 unless all ok")
    roll.add_argument("run_dir")
    args = p.parse_args(argv)
    try:
        if args.cmd == "record":
            lines, failed = record_each(args.results, args.run_id, args.arm, args.step, json.load(sys.stdin))
            print("\n".join(lines))
            for host, why in failed.items():  # "kdakit provenance: HOST: ": the summary picks each host's own
                print(f"kdakit provenance: {host}: {why}", file=sys.stderr)
            return 1 if failed else 0
        if args.cmd == "facts":
            record_facts(args.results, args.run_id, args.host, args.arm, json.load(sys.stdin))
            return 0
        rows, all_ok = rollup(args.run_dir)
        if not rows:
            print(f"rollout: no step outcomes recorded under {args.run_dir}")
            return 1
        print(table(("host", "arm", "step", "outcome", "cause"), rows))
        bad = sum(r[3] != "ok" for r in rows)
        verdict = f"all {len(rows)} steps ok" if all_ok else f"{bad} of {len(rows)} steps not ok"
        print(f"rollout: {verdict}")
        return 0 if all_ok else 1
    except OSError as exc:  # WriteFailed: "cannot write FILE: why (free space and where)"
        print(f"kdakit provenance: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(_main())
