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
