"""kdakit.records.stats against SciPy's own t tests, and the verdict boundaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from kdakit.records import stats

BASE = [1000.0, 1012.0, 995.0, 1003.0, 990.0]


def test_paired_interval_is_scipys_one_sample_t_on_the_log_ratios():
    candidate = [b * r for b, r in zip(BASE, [1.011, 1.004, 1.019, 1.008, 1.002], strict=True)]
    ci = stats.paired_ratio_ci(BASE, candidate)
    ref = sp.ttest_1samp(np.log(np.array(candidate) / np.array(BASE)), 0.0).confidence_interval(0.95)
    assert (ci.low, ci.high) == pytest.approx((math.exp(ref.low), math.exp(ref.high)))
    assert ci.n == 5 and ci.paired


def test_unpaired_interval_is_scipys_welch_t_on_the_logs():
    triton, helion = [438.0, 436.0, 440.0], [443.0, 441.0, 442.5]
    ci = stats.unpaired_ratio_ci(triton, helion)
    ref = sp.ttest_ind(np.log(helion), np.log(triton), equal_var=False).confidence_interval(0.95)
    assert (ci.low, ci.high) == pytest.approx((math.exp(ref.low), math.exp(ref.high)))
    assert not ci.paired


def test_verdict_boundaries_and_repeats_needed():
    inside = stats.RatioCI(5, 1.0, 0.991, 1.009, 0.005, True)
    assert stats.verdict(inside) == "within ±1 % (CI inside the band)"
    assert stats.verdict(stats.RatioCI(5, 1.02, 1.005, 1.035, 0.01, True)) == "different (CI excludes 1)"
    assert stats.verdict(stats.RatioCI(1, 1.02, None, None, None, True)).startswith("inconclusive at n = 1")
    wide = stats.RatioCI(5, 1.004, 0.985, 1.024, 0.0125, True)
    m = stats.repeats_needed(wide, 1.0)
    assert stats.verdict(wide) == f"inconclusive at n = 5; about {m} repeats needed"
    target = math.log(1.01) - math.log(1.004)  # the interval must fit inside the band around 1.004
    half = lambda n: sp.t.ppf(0.975, n - 1) * 0.0125 / math.sqrt(n)  # noqa: E731
    assert half(m) < target <= half(m - 1)


def test_the_stopping_rule_waits_for_every_point_and_the_claim_and_for_min_visits():
    w, o, c = (stats.KINDS.index(k) for k in (stats.WITHIN, stats.OUTSIDE, stats.CANNOT_TELL))
    # two points over five visits: the second is decisive from visit 3 on, the first from visit 4
    codes = np.array([[[c, c, c, w, w], [c, c, w, w, w]]])
    assert stats.stop_after(codes, codes, min_visits=3, max_visits=20).tolist() == [4]
    assert stats.stop_after(codes, codes, min_visits=5, max_visits=20).tolist() == [5]
    undecided = np.full((1, 2, 5), c)
    assert stats.stop_after(undecided, undecided, min_visits=3, max_visits=4).tolist() == [4]  # the budget
    # one point outside at the claim's confidence decides the claim, but the other point is still open
    family = np.array([[[c, o, o, o, o], [c, c, c, c, w]]])
    assert stats.stop_after(family, family, min_visits=1, max_visits=20).tolist() == [5]


def test_the_confidence_sequence_is_wider_than_t_and_its_horizon_narrows_it():
    n = np.arange(8, 21)  # scale 0.5: from 8 visits on the open-ended sequence is finite too
    t = stats._t_array(n - 1) / np.sqrt(n)
    open_ended, horizon = stats.cs_factor(n), stats.cs_factor(n, horizon=20)
    assert np.all(open_ended > horizon) and np.all(horizon > t)
    assert stats.cs_factor(np.array([21]), horizon=20)[0] == stats.cs_factor(np.array([21]))[0]
    assert stats.cs_factor(np.array([1]))[0] == np.inf


def test_more_visits_come_with_the_probability_they_settle_and_one_visit_guesses_none():
    judged = stats.judge_pairs([1000.0, 1010.0, 990.0, 1005.0], [1003.0, 1001.0, 1000.0, 1012.0])
    assert judged.kind == stats.CANNOT_TELL and judged.more_visits > 0
    assert judged.settle_probability >= stats.SETTLE_PROBABILITY
    assert judged.text.endswith(f"(probability {100 * judged.settle_probability:.0f} %)")
    one = stats.judge_one_visit([438.0, 436.0, 440.0], [441.0, 443.0, 442.0])
    assert one.kind == stats.CANNOT_TELL and one.more_visits is None and "one visit per arm" in one.text
