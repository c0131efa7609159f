"""The facts the playbooks need, written once by the controller into a JSON file that every
ansible-playbook call gets with `-e @FILE`: the SKU registry, the minimum driver, the run's paths, and who
holds the hosts' run lock. The roles read `kdakit_facts`; nothing in them asks Python again.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

from kdakit.facts import pins, profiles
from kdakit.launch import hostlock
from kdakit.records import paths, provenance


def facts(results: Path | str, run_id: str, arm: str, *, lock_pid: int | None = None) -> dict:
    registry = {}
    for name in profiles.skus():
        entry = dataclasses.asdict(profiles.sku(name))
        del entry["flags"]
        registry[name] = entry
    pid = os.getpid() if lock_pid is None else lock_pid
    return {
        "skus": profiles.skus(),
        "registry": registry,
        "min_driver": int(pins.load()["cuda"]["min_driver"]),
        "paths": paths.ansible_templates(results, run_id, arm),
        "controller": {
            "hostname": socket.gethostname(),
            "user": getpass.getuser(),
            "git_sha": provenance.git_sha()[0] or "",
            "lock": {"pid": pid, "pid_start": hostlock.process_start(pid), "boot_id": hostlock.boot_id()},
        },
    }


def extra_vars(results: Path | str, run_id: str, arm: str, **more) -> dict:
    """Everything a step's ansible-playbook call gets from the controller."""
    out = {
        "kdakit_facts": facts(results, run_id, arm),
        "kdakit_run_id": run_id,
        "kdakit_arm": arm,
        "kdakit_results_dir": str(Path(results).resolve()),
    }
    out.update({f"kdakit_{k}": v for k, v in more.items() if v not in (None, "")})
    return out


def write(values: dict, folder: Path | str | None = None) -> Path:
    """The facts file (0600: it names the controller's user and process)."""
    fd, name = tempfile.mkstemp(prefix="kdakit-facts-", suffix=".json", dir=folder)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f, indent=1)
    return Path(name)


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m kdakit.run.facts", description="print the controller's facts file for a playbook"
    )
    p.add_argument("--results", default="results")
    p.add_argument("--run-id", default="manual")
    p.add_argument("--arm", default="helion")
    args = p.parse_args(argv)
    json.dump(extra_vars(args.results, args.run_id, args.arm), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
