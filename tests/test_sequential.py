"""The sequential protocol's stopping rule (kdakit.records.sequential) on result trees written visit by
visit: go on while points are open, stop when every point and the claim are decisive or the budget is
spent, and the command's one JSON line."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kdakit.facts.errors import UsageError
from kdakit.facts.protocols import PROTOCOLS_FILE, load_protocols, protocol_definition
from kdakit.records import results, sequential

PROVENANCE = {"kdakit_version": "test", "git_sha": None, "image_id": None, "pins": {}, "gpus": [],
              "driver": None, "server_command": None}  # fmt: skip


def _visit(run: Path, visit: int, ratios: dict, rng: random.Random, noise: float, protocol="decisive",
           definition: dict | None = None, drift: float = 0.02) -> None:  # fmt: skip
    """Both arms of one visit: each point's helion/triton ratio, a drift shared by the arms of the visit."""
    p = load_protocols()[protocol]
    shared = 1 + rng.gauss(0, drift)
    for k, arm in enumerate(("triton", "helion")):
        points = []
        for point in p.points:
            key = (point.input_len, point.output_len, point.concurrency)
            value = (
                1000.0
                * shared
                * (ratios.get(key, 1.0) if arm == "helion" else 1.0)
                * (1 + rng.gauss(0, noise))
            )
            runs = [
                {
                    "index": 1,
                    "completed": 8,
                    "num_prompts": 8,
                    "output_throughput": value,
                    "total_throughput": value * 5,
                    "duration_s": 10.0,
                    "raw_file": "x/run1.jsonl",
                }
            ]
            points.append({"input_len": key[0], "output_len": key[1], "concurrency": key[2], "num_prompts": 8,
                           "status": "ok", "runs": runs, "median_output_throughput": value})  # fmt: skip
        metrics = {"dataset": "random-ids", "runs_per_point": 1, "visit": visit, "points": points,
                   "protocol_definition": definition or protocol_definition(p, PROTOCOLS_FILE)}  # fmt: skip
        record = results.new_record("serving", run_id="seq", host="h1", sku="H200", arm=arm,
                                    protocol=protocol, metrics=metrics, provenance=PROVENANCE)  # fmt: skip
        record["created"] = f"2026-12-01T{visit:02d}:{k:02d}:00+00:00"
        results.write_result(run / "h1" / arm / f"serving-{protocol}-{visit}.result.json", record)


def _run_until_stop(run: Path, ratios: dict, noise: float, seed: int = 1) -> list[sequential.Decision]:
    rng = random.Random(seed)
    decisions = []
    for visit in range(1, load_protocols()["decisive"].max_visits + 2):
        _visit(run, visit, ratios, rng, noise)
        decisions.append(sequential.decide(run, "decisive"))
        if decisions[-1].stop:
            return decisions
    raise AssertionError("never stopped")


def test_identical_arms_with_drift_stop_when_the_claim_holds(tmp_path):
    decisions = _run_until_stop(tmp_path / "seq", {}, noise=0.003)
    last = decisions[-1]
    assert last.stop and last.reason == f"decisive after {last.visits} visits: the ±1 % claim holds"
    assert 3 <= last.visits < 20 and not any(d.stop for d in decisions[:-1])
    first = "continue: 6 of 6 points undecided after 1 visit; the ±1 % claim: cannot tell"
    assert decisions[0].reason == first


def test_a_slower_point_stops_with_does_not_hold(tmp_path):
    decisions = _run_until_stop(tmp_path / "seq", {(4096, 1024, 48): 0.95}, noise=0.003)
    assert decisions[-1].reason.endswith("the ±1 % claim does not hold") and decisions[-1].visits < 20


def test_the_budget_stops_an_undecidable_run(tmp_path):
    decisions = _run_until_stop(tmp_path / "seq", {(4096, 1024, 1): 1.01}, noise=0.02)  # on the band's edge
    last = decisions[-1]
    assert last.stop and last.visits == 20
    assert last.reason.startswith("budget of 20 visits spent: ") and "undecided" in last.reason


def test_hours_spent_stop_and_no_record_yet_continues(tmp_path):
    run = tmp_path / "seq"
    run.mkdir()
    assert sequential.decide(run, "decisive") == sequential.Decision(
        False, 0, "continue: no visit of protocol decisive recorded yet"
    )
    _visit(run, 1, {}, random.Random(2), 0.01)
    assert not sequential.decide(run, "decisive", elapsed_s=47 * 3600).stop
    hours = sequential.decide(run, "decisive", elapsed_s=48 * 3600)
    assert hours.stop and hours.reason.startswith(
        "budget of 48 hours spent after 1 visit: 6 points undecided"
    )


def test_a_fixed_protocol_and_older_records_stop_after_their_visits(tmp_path):
    run = tmp_path / "seq"
    rng = random.Random(3)
    kept = protocol_definition(load_protocols()["rigorous"], PROTOCOLS_FILE)
    older = {
        k: v for k, v in kept.items() if k not in ("sequential", "min_visits", "max_visits", "max_hours")
    }
    for visit in range(1, 6):
        _visit(run, visit, {}, rng, 0.01, protocol="rigorous", definition=older)
        decision = sequential.decide(run, "rigorous")
        assert decision.stop == (visit == 5) and decision.visits == visit


def test_the_command_prints_one_json_line(tmp_path):
    run = tmp_path / "seq"
    _visit(run, 1, {}, random.Random(4), 0.01)
    argv = [sys.executable, "-m", "kdakit.records.sequential", str(run), "--protocol", "decisive"]
    out = subprocess.run([*argv, "--elapsed-s", "60"], capture_output=True, text=True, check=True)
    (line,) = out.stdout.splitlines()
    said = "continue: 6 of 6 points undecided after 1 visit; the ±1 % claim: cannot tell"
    assert json.loads(line) == {"stop": False, "visits": 1, "reason": said}
    with pytest.raises(UsageError, match="not a run folder"):
        sequential.decide(tmp_path / "nowhere", "decisive")
