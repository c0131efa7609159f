"""The sequential protocol's stopping rule: after each visit, go on or stop.

`decide(run_dir, protocol)` reads the serving records of one protocol in results/<run-id> (every host, both
A/B arms), pairs each point's visits by visit id, and judges every point and the ±band claim as the report
does (kdakit.records.stats: the confidence sequence of the paired log ratios, at 95 % per point and at the
claim's Bonferroni confidence for "does not hold"). It says stop when every point and the claim are
decisive (after at least min_visits), or when the protocol's budget (max_visits, max_hours) is spent.
The sequence holds at every visit at once, so stopping on it keeps its error rates (stats.stop_after is the
same rule, simulated by `python -m kdakit.report.calibrate`).

`python -m kdakit.records.sequential RUN_DIR --protocol NAME [--elapsed-s S]` prints the decision as one
JSON line. A fixed protocol (no `sequential` in its definition) stops after its `repeats` visits.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.records import results, stats


@dataclass(frozen=True)
class Decision:
    stop: bool  # True: every point and the claim are decisive, or the protocol's budget is spent
    visits: int  # complete paired visits judged so far
    reason: str  # one line for the user


def _visits(n: int) -> str:
    return f"{n} visit" if n == 1 else f"{n} visits"


def visit_id(record: dict, ordinal: int) -> int:
    """The visit a record belongs to: the one the orchestrator named (`visit`), else its repeat index in its
    folder, else its place among the arm's records (records from before either was kept)."""
    m = record["metrics"]
    return int(m.get("visit") or m.get("repeat_index") or ordinal)


def point_value(point: dict) -> float | None:
    """One visit's output tok/s at a point: the median over its runs (None unless the point succeeded)."""
    if point.get("status") != "ok":
        return None
    if point.get("median_output_throughput") is not None:
        return point["median_output_throughput"]
    values = [r["output_throughput"] for r in point.get("runs", []) if r.get("output_throughput") is not None]
    return results.median(values) if values else None


def _key(point: dict) -> tuple[int, int, int]:
    return (point["input_len"], point["output_len"], point["concurrency"])


def _serving_records(run_dir: Path, protocol: str) -> list[dict]:
    found = []
    for path in sorted(run_dir.rglob(f"*{results.RESULT_SUFFIX}")):
        if results.is_staged(path, run_dir):
            continue
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict) or (record.get("kind"), record.get("protocol")) != (
                "serving",
                protocol,
            ):
                continue  # only this protocol's records are validated: this runs after every visit
            found.append(results.validate(record, str(path)))
        except (results.ResultError, OSError, UnicodeDecodeError, ValueError):
            continue  # the report names unreadable records; here they are visits that did not happen
    return sorted(found, key=lambda r: r["created"])


@dataclass(frozen=True)
class HostState:
    """One host's A/B of the protocol after the visits so far."""

    host: str
    complete: int  # visits with a record of both arms
    undecided: int  # points not yet decisive
    points: int
    claim: str  # stats.HOLDS, DOES_NOT_HOLD or CANNOT_TELL


def judge_host(host: str, by_arm: dict[str, list[dict]], definition: dict) -> HostState | None:
    """Every point of the protocol and its claim, judged on the visits so far (the report's judgement)."""
    import numpy as np

    baseline, candidate = profiles.ab_arms()
    visits = {arm: {} for arm in (baseline, candidate)}  # arm -> visit id -> {point key: value}
    for arm in visits:
        for ordinal, record in enumerate(by_arm.get(arm, []), 1):
            points = {_key(p): point_value(p) for p in record["metrics"]["points"]}
            visits[arm].setdefault(visit_id(record, ordinal), {}).update(points)
    ids = sorted(set(visits[baseline]) | set(visits[candidate]))
    keys = sorted({_key(p) for p in definition.get("points", [])})
    if not ids or not keys:
        return None

    def logs(arm):
        return np.array([[math.log(v) if (v := visits[arm].get(i, {}).get(k)) else np.nan for i in ids]
                         for k in keys])  # fmt: skip

    band, horizon = float(definition["band_pct"]), definition.get("max_visits")
    sequential = bool(definition.get("sequential"))
    per_point = stats.judge_visits(logs(baseline), logs(candidate), band, visits_needed=False,
                                   sequential=sequential, horizon=horizon)  # fmt: skip
    family = stats.judge_visits(logs(baseline), logs(candidate), band, stats.family_confidence(len(keys)),
                                visits_needed=False, sequential=sequential, horizon=horizon)  # fmt: skip
    claim = str(stats.claim_kinds(per_point["kind"][None, :], family["kind"][None, :])[0])
    undecided = int(np.sum(~np.isin(per_point["kind"], stats.DECISIVE)))
    complete = len(set(visits[baseline]) & set(visits[candidate]))
    return HostState(host, complete, undecided, len(keys), claim)


def decide(run_dir: Path, protocol: str, *, elapsed_s: float | None = None) -> Decision:
    """Go on or stop, after the visits recorded so far in results/<run-id> (see the module's text)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a run folder (results/<run-id>)")
    records = _serving_records(run_dir, protocol)
    if not records:
        return Decision(False, 0, f"continue: no visit of protocol {protocol} recorded yet")
    definition = next((r["metrics"]["protocol_definition"] for r in reversed(records)
                       if r["metrics"].get("protocol_definition")), None)  # fmt: skip
    if definition is None:
        raise UsageError(f"{run_dir}: the records of protocol {protocol} keep no protocol definition")
    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in records:
        groups.setdefault((r["sku"], r["host"]), {}).setdefault(r["arm"], []).append(r)
    states = [
        s for s in (judge_host(host, by_arm, definition) for (_, host), by_arm in sorted(groups.items())) if s
    ]
    if not states:
        return Decision(False, 0, f"continue: no visit of protocol {protocol} recorded yet")
    visits = min(s.complete for s in states)
    undecided = sum(s.undecided for s in states)
    points = sum(s.points for s in states)
    band = f"±{float(definition['band_pct']):g} %"
    if not definition.get("sequential"):
        planned = int(definition.get("repeats") or 1)
        done = visits >= planned
        state = "fixed protocol done" if done else "continue"
        return Decision(done, visits, f"{state}: {visits} of {planned} planned visits")
    claims = sorted({s.claim for s in states})
    claim_text = " / ".join(claims)
    decisive = undecided == 0 and stats.CANNOT_TELL not in claims
    min_visits = int(definition.get("min_visits") or 1)
    max_visits = definition.get("max_visits")
    max_hours = definition.get("max_hours")
    left = f"{undecided} point{'s' if undecided != 1 else ''} undecided"
    if decisive and visits >= min_visits:
        return Decision(True, visits, f"decisive after {_visits(visits)}: the {band} claim {claim_text}")
    if max_visits is not None and visits >= max_visits:
        return Decision(True, visits, f"budget of {max_visits} visits spent: {left}; the {band} claim: "
                                      f"{claim_text}")  # fmt: skip
    if max_hours is not None and elapsed_s is not None and elapsed_s >= max_hours * 3600:
        return Decision(True, visits, f"budget of {max_hours:g} hours spent after {_visits(visits)}: {left}; "
                                      f"the {band} claim: {claim_text}")  # fmt: skip
    if decisive:
        return Decision(False, visits, f"continue: decisive, but fewer than the {min_visits} visits the "
                                       f"protocol asks for ({visits})")  # fmt: skip
    return Decision(False, visits, f"continue: {undecided} of {points} points undecided after "
                                   f"{_visits(visits)}; the {band} claim: {claim_text}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kdakit.records.sequential",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("run_dir", metavar="RUN_DIR", help="results/<run-id>")
    parser.add_argument(
        "--protocol", required=True, help="the serving protocol (kdakit/facts/protocols.toml)"
    )
    parser.add_argument("--elapsed-s", type=float, default=None, help="seconds since the first visit began")
    args = parser.parse_args(argv)
    try:
        decision = decide(Path(args.run_dir), args.protocol, elapsed_s=args.elapsed_s)
    except UsageError as exc:
        print(f"kdakit sequential: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(decision), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
