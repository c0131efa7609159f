"""The serving verdict engine by simulation (shared drift, run noise, failed and missing visits): the
targets it is held to, and evals/README.md's tables as the calibration command prints them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kdakit.facts.protocols import load_protocols
from kdakit.records import stats
from kdakit.report import calibrate

README = Path(__file__).parents[1] / "evals" / "README.md"


@pytest.fixture(scope="module")
def rows():
    return calibrate.table()


@pytest.fixture(scope="module")
def follows():
    return calibrate.follow_ups()


def _row(rows, protocol, noise, drift, ratio):
    case = (protocol, noise, drift, ratio)
    (found,) = [r for r in rows if (r["protocol"], r["noise"], r["drift"], r["ratio"]) == case]
    return found


def test_identical_arms_hold_within_the_visits_the_sequential_protocol_chose(rows):
    """0.5 % per-arm visit noise and 1 % drift shared by the arms: "holds" in at least 80 % of runs."""
    protocol = load_protocols()["decisive"]
    r = _row(rows, "decisive", 0.005, 0.01, 1.0)
    assert protocol.sequential and r["visits"] == protocol.max_visits <= 20 and r["visits p90"] <= 20
    assert r["claim " + stats.HOLDS] >= 0.8, f"holds in {r['claim ' + stats.HOLDS]:.1%}"


def test_identical_arms_are_almost_never_called_different(rows):
    ones = [r for r in rows if r["ratio"] == 1.0]
    assert {(r["noise"], r["drift"]) for r in ones} >= {(0.01, 0.01), (0.02, 0.01), (0.01, 0.0), (0.02, 0.0)}
    assert {r["protocol"] for r in ones} >= {"pr", "rigorous", "decisive"}
    for r in ones:
        case = f"{r['protocol']} at {r['noise']:.1%} noise, {r['drift']:.0%} drift"
        wrong = r[stats.OUTSIDE] + r[stats.INSIDE]
        assert wrong <= 0.05, f"{case}: {wrong:.1%} of points called different"
        claim = r["claim " + stats.DOES_NOT_HOLD]
        assert claim <= 0.05, f"{case}: claim does not hold in {claim:.1%}"


def test_a_three_percent_difference_is_found_by_the_sequential_protocol(rows):
    for ratio in (0.97, 1.03):
        r = _row(rows, "decisive", 0.01, 0.01, ratio)
        assert r["claim " + stats.DOES_NOT_HOLD] >= 0.8 and r["claim " + stats.HOLDS] == 0


def test_more_visits_as_the_report_asks_settle_most_points(follows):
    """Points left at "cannot tell", continued by the visits the report asked for: at least 80 % settle."""
    assert {(f["protocol"], f["ratio"]) for f in follows} >= {("rigorous", 1.0), ("rigorous", 0.995),
                                                              ("decisive", 1.0)}  # fmt: skip
    for f in follows:
        if f["followed"] >= 20:  # too few points to say anything otherwise
            assert f["settled"] >= 0.8, f
            assert f["stated"] >= stats.SETTLE_PROBABILITY


def test_the_confidence_sequence_holds_at_every_visit_at_once():
    """The always-valid sequence of a sequential protocol, looked at after every one of 20 visits: the
    truth leaves it at most 5 % of the time (a t interval looked at so often: far more)."""
    rng = np.random.default_rng(7)
    pairs = 0.01 * rng.standard_normal((4000, 20))
    zero = np.zeros_like(pairs)
    sequence = stats.judge_visits(zero, pairs, visits_needed=False, sequential=True, horizon=20)
    ever_missed = np.any(sequence["prefix_code"] == stats.KINDS.index(stats.INSIDE), axis=-1)
    assert np.mean(ever_missed) <= 0.05
    t_each_visit = [stats.judge_visits(zero[:, :n], pairs[:, :n], visits_needed=False)["kind"] for n in
                    range(3, 21)]  # fmt: skip
    assert np.mean(np.any([k == stats.INSIDE for k in t_each_visit], axis=0)) > 0.1


def test_the_simulation_drives_the_reports_verdict_function():
    """One synthetic experiment through the simulation's call and the report's per-point call agree."""
    rng = np.random.default_rng(3)
    t, h = 0.01 * rng.standard_normal(5), np.log(1.05) + 0.01 * rng.standard_normal(5)
    t[2] = np.nan
    simulated = stats.judge_visits(t[None, :], h[None, :])
    judged = stats.judge_pairs([None if np.isnan(x) else float(np.exp(x)) for x in t], list(np.exp(h)))
    assert judged.kind == simulated["kind"][0] and judged.ci.n == simulated["n"][0] == 4
    assert judged.ci.low == pytest.approx(simulated["low"][0])


def test_the_readme_table_is_what_the_command_prints(rows, follows):
    assert calibrate.readme_section(README.read_text()) == calibrate.markdown(rows, follows), (
        "evals/README.md's calibration tables differ: paste `python -m kdakit.report.calibrate`'s output"
    )
