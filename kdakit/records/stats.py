"""Confidence intervals and verdicts for arm comparisons (helion vs triton), from repeated measurements.

Throughput ratios are compared on the log scale (a ratio and its inverse are symmetric there), with a
Student t interval: over paired log ratios when the arms were measured in pairs (the `rigorous` protocol's
interleaved visits, or an A/A pair), over the two arms' log values (Welch) when they were not (the `pr`
protocol's three runs per arm in one visit). The verdict is one of:

- "within ±B %" when the whole 95 % interval lies inside [1 - B %, 1 + B %],
- "different" when the interval excludes 1 (and is not inside the band),
- "inconclusive at n = k; about m repeats needed" otherwise, m being the repeats for which the interval's
  half-width, at the observed spread, would fit inside the band (or exclude 1, whichever is nearer).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats as scipy_stats

CONFIDENCE = 0.95
MAX_REPEATS = 1000  # beyond this the answer is "more than 1000"


@dataclass(frozen=True)
class RatioCI:
    n: int  # pairs (paired) or the smaller arm's count (unpaired)
    ratio: float  # exp(mean log ratio): the geometric-mean ratio
    low: float | None  # None: not enough data for an interval
    high: float | None
    sd_log: float | None  # standard deviation of the log ratios (paired) or pooled per-arm (unpaired)
    paired: bool
    df: float | None = None

    @property
    def half_width_pct(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high / self.low - 1) / 2 * 100  # half the interval's relative width


def _t(df: float) -> float:
    return float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def paired_ratio_ci(baseline: list[float], candidate: list[float]) -> RatioCI:
    """candidate/baseline over pairs (b_i, c_i): the t interval of the mean log ratio, exponentiated."""
    if len(baseline) != len(candidate):
        raise ValueError("paired samples must have the same length")
    logs = [math.log(c / b) for b, c in zip(baseline, candidate, strict=True) if b > 0 and c > 0]
    n = len(logs)
    if n == 0:
        raise ValueError("no positive pairs")
    mean = statistics.fmean(logs)
    if n < 2:
        return RatioCI(n, math.exp(mean), None, None, None, True)
    sd = statistics.stdev(logs)
    half = _t(n - 1) * sd / math.sqrt(n)
    return RatioCI(n, math.exp(mean), math.exp(mean - half), math.exp(mean + half), sd, True, n - 1)


def unpaired_ratio_ci(baseline: list[float], candidate: list[float]) -> RatioCI:
    """candidate/baseline from independent samples: Welch's t interval of the difference of mean logs."""
    a = [math.log(x) for x in baseline if x > 0]
    b = [math.log(x) for x in candidate if x > 0]
    if not a or not b:
        raise ValueError("no positive values")
    mean = statistics.fmean(b) - statistics.fmean(a)
    n = min(len(a), len(b))
    if len(a) < 2 or len(b) < 2:
        return RatioCI(n, math.exp(mean), None, None, None, False)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return RatioCI(n, math.exp(mean), math.exp(mean), math.exp(mean), 0.0, False, None)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = _t(df) * se
    pooled_sd = math.sqrt((statistics.variance(a) + statistics.variance(b)) / 2)
    return RatioCI(n, math.exp(mean), math.exp(mean - half), math.exp(mean + half), pooled_sd, False, df)


def repeats_needed(ci: RatioCI, band_pct: float) -> int | None:
    """Repeats for which, at the observed spread and ratio, the interval would settle the verdict."""
    if ci.sd_log is None or ci.sd_log == 0:
        return None
    mu = abs(math.log(ci.ratio))
    band = math.log(1 + band_pct / 100)
    # inside the band needs half-width < band - |mu|; excluding 1 needs half-width < |mu|
    target = max(band - mu, mu)
    if target <= 0:
        return None
    scale = ci.sd_log if ci.paired else ci.sd_log * math.sqrt(2)  # unpaired: both arms add variance
    for n in range(2, MAX_REPEATS + 1):
        if _t(n - 1) * scale / math.sqrt(n) < target:
            return n
    return MAX_REPEATS + 1


def verdict(ci: RatioCI, band_pct: float = 1.0) -> str:
    """'within ±B % (CI inside the band)', 'different (CI excludes 1)' or 'inconclusive at n = k; ...'."""
    if ci.low is None or ci.high is None:
        return f"inconclusive at n = {ci.n}; at least 2 repeats needed for an interval"
    lo, hi = 1 - band_pct / 100, 1 + band_pct / 100
    if lo <= ci.low and ci.high <= hi:
        return f"within ±{band_pct:g} % (CI inside the band)"
    if ci.low > 1 or ci.high < 1:
        return "different (CI excludes 1)"
    m = repeats_needed(ci, band_pct)
    if m is None:
        return f"inconclusive at n = {ci.n}"
    more = f"more than {MAX_REPEATS}" if m > MAX_REPEATS else f"about {m}"
    return f"inconclusive at n = {ci.n}; {more} repeats needed"


def fmt_ci(ci: RatioCI | None) -> str:
    """'1.0042 [0.9981, 1.0103]' (ratio and 95 % CI), or the ratio alone without an interval."""
    if ci is None:
        return "n/a"
    if ci.low is None:
        return f"{ci.ratio:.4f} (no CI, n = {ci.n})"
    return f"{ci.ratio:.4f} [{ci.low:.4f}, {ci.high:.4f}]"


def accuracy_difference(a: list[float], b: list[float], n_questions: int) -> dict:
    """b - a in accuracy points with a 95 % interval from the measured run-to-run noise, and a verdict.

    The noise is each arm's run-to-run variance (t interval, na + nb - 2 degrees of freedom). When the runs
    repeat exactly (common at temperature 0) or an arm has one run, that measures nothing, and the binomial
    variance of one run of n_questions stands in (said so in `noise`).
    """
    pa, pb = statistics.fmean(a), statistics.fmean(b)
    measured = None
    if len(a) > 1 and len(b) > 1:
        measured = ((len(a) - 1) * statistics.variance(a) + (len(b) - 1) * statistics.variance(b)) / (
            len(a) + len(b) - 2
        )
    if measured:
        noise, var, z = "run-to-run", measured, _t(len(a) + len(b) - 2)
    else:
        p = (pa + pb) / 2
        noise, var, z = (
            "binomial (runs identical or single)",
            max(p * (1 - p), 1 / n_questions) / n_questions,
            1.96,
        )
    half = z * math.sqrt(var * (1 / len(a) + 1 / len(b))) * 100
    diff = (pb - pa) * 100
    if abs(diff) > half:
        text = f"different: {diff:+.2f} pts, beyond the ±{half:.2f} pts noise"
    else:
        text = f"no difference beyond the noise: {diff:+.2f} pts within ±{half:.2f} pts"
    return {"difference_pts": diff, "half_width_pts": half, "noise": noise, "verdict": text}
