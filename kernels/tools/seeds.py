"""`kdakit kernels seeds`: the two seed PRs' kernel measurements in one bounded GPU call.

1. The CuTe-verify PR's per-layer verify table: `kdakit kernels bench --phases verify-layer` in a child
   process (bounded; a run cut short leaves its rows in kernels-bench.partial.json);
2. the small-token prefill PR's sweep: `kdakit kernels sweep` for every Helion arm (its workers are fresh
   processes, bounded by what is left of the budget).

Everything lands in RESULTS_DIR/RUN_ID/HOST/ (the bench's JSON and record, sweep.jsonl and sweep.json, the
workers' logs, seeds.txt with both tables), and both tables are printed last. Child processes import the
modules named in KDAKIT_PRELOAD first (a GPU host's stand-ins).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

TABLE_NAME = "seeds.txt"
BENCH_SHARE = 0.4  # of the budget: the per-layer verify table (the sweep takes the rest)


def child_command(args: list[str]) -> list[str]:
    """`kdakit ARGS` in a child of this interpreter (its -P kept), KDAKIT_PRELOAD imported first."""
    flags = ["-P"] if sys.flags.safe_path else []
    code = (
        "import importlib, os, sys\n"
        "for m in filter(None, os.environ.get('KDAKIT_PRELOAD', '').split(',')): importlib.import_module(m)\n"
        "from kdakit.cli import main\n"
        "sys.argv = ['kdakit', *sys.argv[1:]]\n"
        "sys.exit(main())\n"
    )
    return [sys.executable, *flags, "-c", code, *args]


def bench_args(results_dir: Path, run_id: str) -> list[str]:
    return [
        "kernels",
        "bench",
        "--phases",
        "verify-layer",
        "--results-dir",
        str(results_dir),
        "--run-id",
        run_id,
    ]


def _bench_result(out_dir: Path) -> dict | None:
    for name in ("kernels-bench.json", "kernels-bench.partial.json"):
        path = out_dir / name
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                return None
    return None


def run(
    results_dir: Path, run_id: str, budget_s: float, dry_run: bool = False, log: Callable[[str], None] = print
) -> int:
    from kdakit.kernels.tools import sweep, table

    out_dir = Path(results_dir) / run_id / socket.gethostname()
    bench_budget = BENCH_SHARE * budget_s
    command = child_command(bench_args(Path(results_dir), run_id))
    cfg = sweep.SweepConfig()
    planned = sweep.cases(cfg)
    if dry_run:
        log(
            f"1. per-layer verify, bounded by {bench_budget:.0f} s: "
            f"kdakit {' '.join(bench_args(Path(results_dir), run_id))}"
        )
        log(
            f"2. sweep of {', '.join(sweep.ARMS)}: {len(planned)} cases per arm in fresh processes, "
            f"bounded by the {budget_s - bench_budget:.0f} s left; rows to {out_dir / sweep.ROWS_NAME}"
        )
        return 0
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        bench_exit = subprocess.run(
            command, timeout=bench_budget, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        ).returncode
    except subprocess.TimeoutExpired:
        bench_exit = f"cut short after {bench_budget:.0f} s"
    log(f"per-layer verify: exit {bench_exit} ({time.time() - started:.0f} s)")
    left = max(30.0, budget_s - (time.time() - started))
    arms = list(sweep.ARMS)
    sweep_result = sweep.run(arms, cfg, out_dir, left, log=log, workers=sweep.default_workers(len(arms)))
    bench = _bench_result(out_dir)
    lines = table.verify_layer_table(bench) if bench else ["per-layer verify: no rows came back"]
    if bench and bench.get("kind") != "kdakit.kernels-bench":
        lines.append(f"(partial: the bench exited {bench_exit})")
    text = "\n".join([*lines, "", sweep.render(sweep_result)]) + "\n"
    (out_dir / TABLE_NAME).write_text(text)
    print(text, end="")
    failed = bench_exit != 0 or sweep.any_failure(sweep_result)
    return 1 if failed else 0
