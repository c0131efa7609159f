"""The serving verdict engine by simulation: false verdicts for identical arms, power for a real difference,
and evals/README.md's table as the calibration command prints it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kdakit.bench.serving import load_protocols

from kdakit.records import stats
from kdakit.report import calibrate

README = Path(__file__).parents[1] / "evals" / "README.md"


@pytest.fixture(scope="module")
def rows():
    return calibrate.table()


def test_identical_arms_are_almost_never_called_different(rows):
    ones = [r for r in rows if r["ratio"] == 1.0]
    assert {r["noise"] for r in ones} == set(calibrate.NOISE) and {r["protocol"] for r in ones} >= {
        "pr",
        "rigorous",
    }
    for r in ones:
        wrong = r[stats.OUTSIDE] + r[stats.INSIDE]
        assert wrong <= 0.05, f"{r['protocol']} at {r['noise']:.1%} noise: {wrong:.1%} called different"
        claim = r["claim " + stats.DOES_NOT_HOLD]
        assert claim <= 0.05, f"{r['protocol']} at {r['noise']:.1%} noise: claim does not hold in {claim:.1%}"


def test_a_five_percent_difference_at_one_percent_noise_is_found_with_the_rigorous_visits(rows):
    visits = load_protocols()["rigorous"].repeats
    for ratio in (0.95, 1.05):
        (r,) = [r for r in rows if (r["protocol"], r["noise"], r["ratio"]) == ("rigorous", 0.01, ratio)]
        assert r["visits"] == visits and r[stats.OUTSIDE] >= 0.8 and r["claim " + stats.DOES_NOT_HOLD] >= 0.9


def test_the_simulation_drives_the_reports_verdict_function():
    """One synthetic experiment through the simulation's call and the report's per-point call agree."""
    rng = np.random.default_rng(3)
    t, h = 0.01 * rng.standard_normal(5), np.log(1.05) + 0.01 * rng.standard_normal(5)
    t[2] = np.nan
    simulated = stats.judge_visits(t[None, :], h[None, :])
    judged = stats.judge_pairs([None if np.isnan(x) else float(np.exp(x)) for x in t], list(np.exp(h)))
    assert judged.kind == simulated["kind"][0] and judged.ci.n == simulated["n"][0] == 4
    assert judged.ci.low == pytest.approx(simulated["low"][0])


def test_the_readme_table_is_what_the_command_prints(rows):
    assert calibrate.readme_section(README.read_text()) == calibrate.markdown(rows), (
        "evals/README.md's calibration table differs: paste `python -m kdakit.report.calibrate`'s output"
    )
