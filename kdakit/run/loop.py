"""A run from its id to its report: the visit loop every protocol shares, on a scheduler backend.

An A/B visits the arms in turn on the same hosts (triton, helion, triton, ...): every visit runs every arm,
GSM8K on the first visit only. A fixed protocol makes `repeats` visits; a sequential one
(`sequential = true` in kdakit/facts/protocols.toml) asks kdakit.records.sequential after each complete visit
whether its verdicts are settled, and stops when they are or its budget is spent. The backend runs one
arm's visit and records each step's outcome per host; then one roll-up table and the report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kdakit.facts.errors import UsageError
from kdakit.records import controller_files, provenance
from kdakit.records.paths import RunContext
from kdakit.records.visits import Plan, plan_of, visit_steps

__all__ = ["Backend", "Plan", "plan_of", "run_ab"]


class Backend(Protocol):
    def start(self, run: RunContext, arms: list[str], plan: Plan) -> bool: ...

    def visit(self, run: RunContext, steps: tuple[str, ...]) -> bool: ...

    def finish(self, run: RunContext) -> bool: ...


def _decide(run_dir: Path, protocol: str, elapsed_s: float):
    import importlib  # only sequential protocols need the rule (sys.modules' entry: what tests plant)

    sequential = importlib.import_module("kdakit.records.sequential")
    return sequential.decide(run_dir, protocol, elapsed_s=elapsed_s)


def _visits(run, arms, plan, backend, dry_run, say, elapsed) -> bool:
    all_ok, total = True, "" if plan.sequential else f" of {plan.visits}"
    for k in range(1, plan.visits + 1):
        for arm in arms:
            steps = visit_steps(k)
            say(f"== {run.sku} {arm} visit {k}{total} (run {run.run_id}): {' '.join(steps)}")
            all_ok &= backend.visit(run.but(arm=arm, visit=k), steps)
        if plan.sequential and not dry_run:
            decision = _decide(run.run_dir, plan.protocol, elapsed_s=elapsed())
            say(f"== {plan.protocol} after visit {k}: {decision.reason}")
            if decision.stop:
                break
        elif plan.sequential:
            say(f"== {plan.protocol}: sequential; DRY_RUN shows the first visit only")
            break
    return all_ok


def run_ab(
    run: RunContext,
    arms: list[str],
    plan: Plan,
    backend: Backend,
    *,
    dry_run: bool = False,
    report: Callable[[Path], int] | None = None,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """The A/B under one run id: LATEST, every visit, the roll-up, the report. 0 when every step was ok."""
    if len(set(arms)) != len(arms) or not arms:
        raise UsageError(f"ARMS must name distinct arms, got {' '.join(arms) or 'none'}")
    if not dry_run:
        controller_files.write_latest(run.results, run.run_id)
    start, all_ok = clock(), True
    try:
        if backend.start(run, arms, plan):
            all_ok &= _visits(run, arms, plan, backend, dry_run, say, lambda: clock() - start)
        else:
            all_ok = False
    finally:  # also when interrupted: a Slurm allocation is released, not left to its time limit
        all_ok &= backend.finish(run)
    if dry_run:
        return 0 if all_ok else 1
    say(f"== {run.sku} roll-up (run {run.run_id})")
    rows, rolled_ok = provenance.rollup(run.run_dir)
    if rows:
        say(provenance.table(("host", "arm", "step", "outcome", "cause"), rows))
        bad = sum(r[3] != "ok" for r in rows)
        say(
            f"rollout: all {len(rows)} steps ok"
            if rolled_ok
            else f"rollout: {bad} of {len(rows)} steps not ok"
        )
    else:
        say(f"rollout: no step outcomes recorded under {run.run_dir}")
    rc = 0 if all_ok and rolled_ok else 1
    if report is not None and report(run.run_dir) != 0:
        rc = 1
    return rc
