"""Confidence intervals and verdicts for arm comparisons (helion vs triton), from repeated measurements.

Throughput ratios are compared on the log scale (a ratio and its inverse are symmetric there), with a
Student t interval. Serving points, their A/A control and the ±band claim are judged by one engine,
`judge_visits` (below): visits paired by visit id, a spread floor from the A/A, a minimum of paired visits,
and the verdicts "within ±B %", "different but inside ±B %", "outside ±B %" and "cannot tell at this noise:
N more visits would settle it"; `python -m kdakit.report.calibrate` measures its error rates by simulation.

`paired_ratio_ci`, `unpaired_ratio_ci` and `verdict` are the plain intervals and words the kernel
microbenchmark (kernels/tools/bench.py) reports per round:

- "within ±B %" when the whole 95 % interval lies inside [1 - B %, 1 + B %],
- "different" when the interval excludes 1 (and is not inside the band),
- "inconclusive at n = k; about m repeats needed" otherwise, m being the repeats for which the interval's
  half-width, at the observed spread, would fit inside the band (or exclude 1, whichever is nearer).
"""

from __future__ import annotations

import math
import statistics
import warnings
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


# ---- the serving verdict engine: paired visits, a spread floor, four verdicts a person can act on
#
# One engine judges every serving point, A/A control and claim, and the calibration simulation drives the
# same function (`judge_visits`) on thousands of synthetic experiments at once, so the error rates it
# reports are the report's own.

# No measured spread below this counts (log scale, about 0.2 %): repeats that agree to the last digit say
# nothing about the next server start, and must not give a zero-width interval.
SPREAD_FLOOR_LOG = 0.002
MIN_PAIRS = 3  # fewer paired visits never give a decisive verdict (two: one degree of freedom)
MAX_MORE_VISITS = 1000

WITHIN, INSIDE, OUTSIDE, CANNOT_TELL, NO_DATA = "within", "inside", "outside", "cannot tell", "no data"
KINDS = (WITHIN, INSIDE, OUTSIDE, CANNOT_TELL, NO_DATA)


@dataclass(frozen=True)
class Judgement:
    """One verdict: its kind (KINDS), the words, and the interval it was judged on (the effective one)."""

    kind: str
    text: str
    ci: RatioCI | None = None
    more_visits: int | None = None  # cannot tell: the visits per arm that would settle it
    floor_log: float | None = None  # the spread used, when the floor raised the measured one


def band_words(kind: str, band_pct: float, more: int | None = None, why: str = "") -> str:
    b = f"±{band_pct:g} %"
    if kind == WITHIN:
        return f"within {b}"
    if kind == INSIDE:
        return f"different but inside {b}"
    if kind == OUTSIDE:
        return f"outside {b}"
    if kind == NO_DATA:
        return "no data"
    if more is None:
        return "cannot tell at this noise" + (f" ({why})" if why else "")
    n = f"more than {MAX_MORE_VISITS}" if more > MAX_MORE_VISITS else str(more)
    visits = "visit" if more == 1 else "visits"
    return f"cannot tell at this noise: {n} more {visits} would settle it" + (f" ({why})" if why else "")


def _t_array(df, confidence: float = CONFIDENCE):
    import numpy as np

    df = np.asarray(df, dtype=float)
    out = np.full(df.shape, np.inf)
    ok = df >= 1
    out[ok] = scipy_stats.t.ppf(0.5 + confidence / 2, df[ok])
    return out


def _more_visits(n, mean_log, sd_log, band_log_lo, band_log_hi):
    """Per experiment: the extra paired visits at which, at this mean and spread, the interval would lie
    inside the band or wholly outside it (MAX_MORE_VISITS + 1: not within reach)."""
    import numpy as np

    inside = np.minimum(band_log_hi - mean_log, mean_log - band_log_lo)  # half-width that fits inside
    outside = np.maximum(mean_log - band_log_hi, band_log_lo - mean_log)  # half-width that stays outside
    target = np.maximum(inside, outside)
    candidates = np.arange(MIN_PAIRS, MAX_MORE_VISITS + MIN_PAIRS + 1, dtype=float)
    half = _t_array(candidates - 1)[None, :] * np.asarray(sd_log)[..., None] / np.sqrt(candidates)[None, :]
    fits = half < np.asarray(target)[..., None]
    first = np.where(fits.any(axis=-1), candidates[np.argmax(fits, axis=-1)], np.inf)
    more = np.maximum(first - np.asarray(n), 1)
    return np.where(np.isfinite(more), more, MAX_MORE_VISITS + 1).astype(int)


def judge_visits(log_baseline, log_candidate, band_pct: float = 1.0, aa_floor: bool = True,
                 confidence: float = CONFIDENCE, visits_needed: bool = True) -> dict:  # fmt: skip
    """Judge candidate/baseline from visits matched by identity, for one or many experiments at once.

    log_baseline, log_candidate: arrays (..., visits) of the log of each visit's value, NaN where a visit
    failed or is missing; column k of both is visit k. A pair counts only when both of its visits exist.
    The interval is Student t over the paired log ratios, with the spread raised to the A/A floor: the
    visit-to-visit spread of each arm on its own (successive fresh server starts of the same arm, pooled
    over both arms, times sqrt 2: the spread of a ratio of two such visits), and to SPREAD_FLOOR_LOG.
    Fewer than MIN_PAIRS pairs give "cannot tell" (visits_needed=False: without the visits that would
    settle it, which only the words need). aa_floor=False: no A/A floor (the A/A control itself,
    whose columns are not one arm each). Returns arrays: kind (str), ratio, low, high, n,
    sd_log (measured), floor_log (A/A), used_log, more (visits that would settle a "cannot tell").
    """
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: handled below
        return _judge_visits(np.asarray(log_baseline, float), np.asarray(log_candidate, float), band_pct,
                             aa_floor, confidence, visits_needed)  # fmt: skip


def _judge_visits(b, c, band_pct: float, aa_floor: bool, confidence: float, visits_needed: bool) -> dict:
    import numpy as np

    pair = c - b  # NaN where either visit is missing
    n = np.sum(~np.isnan(pair), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(np.where(n[..., None] > 0, pair, 0.0), axis=-1)
        mean = np.where(n > 0, mean, np.nan)
        sd = np.where(n > 1, np.nanstd(np.where(n[..., None] > 0, pair, 0.0), axis=-1, ddof=1), np.nan)
        # the A/A floor: each arm's own visit-to-visit variance, pooled, as the spread of a ratio
        ss, dof = 0.0, 0
        for arm in (b, c):
            k = np.sum(~np.isnan(arm), axis=-1)
            centred = arm - np.nanmean(np.where(k[..., None] > 0, arm, 0.0), axis=-1)[..., None]
            ss = ss + np.where(k > 1, np.nansum(centred**2, axis=-1), 0.0)
            dof = dof + np.maximum(k - 1, 0)
        floor = np.where(dof > 0, np.sqrt(2 * ss / np.maximum(dof, 1)), np.nan)
        if not aa_floor:
            floor = np.full(n.shape, np.nan)
    used = np.fmax(np.fmax(sd, floor), SPREAD_FLOOR_LOG)
    half = _t_array(np.maximum(n - 1, 0), confidence) * used / np.sqrt(np.maximum(n, 1))
    low, high = mean - half, mean + half
    band_lo, band_hi = math.log(1 - band_pct / 100), math.log(1 + band_pct / 100)
    decided = n >= MIN_PAIRS
    inside_band = decided & (low >= band_lo) & (high <= band_hi)
    excludes_one = (low > 0) | (high < 0)
    outside_band = decided & ((high < band_lo) | (low > band_hi))
    kind = np.full(n.shape, CANNOT_TELL, dtype=object)
    kind[inside_band & ~excludes_one] = WITHIN
    kind[inside_band & excludes_one] = INSIDE
    kind[outside_band] = OUTSIDE
    kind[n == 0] = NO_DATA
    spread_for_more = np.where(np.isnan(used), SPREAD_FLOOR_LOG, used)
    more = (
        _more_visits(np.maximum(n, 1), np.nan_to_num(mean), spread_for_more, band_lo, band_hi)
        if visits_needed
        else None
    )
    return {
        "kind": kind, "ratio": np.exp(mean), "low": np.exp(low), "high": np.exp(high), "n": n,
        "sd_log": sd, "floor_log": floor, "used_log": used, "more": more,
    }  # fmt: skip


def judge_pairs(
    baseline: list[float | None], candidate: list[float | None], band_pct: float = 1.0, what: str = "visits",
    aa_floor: bool = True, confidence: float = CONFIDENCE,
) -> Judgement:  # fmt: skip
    """One point: baseline[k] and candidate[k] are visit k's values (None: failed or missing)."""
    import numpy as np

    def logs(values):
        return np.array([math.log(v) if v is not None and v > 0 else np.nan for v in values])

    found = judge_visits(logs(baseline)[None, :], logs(candidate)[None, :], band_pct, aa_floor, confidence)
    one = {k: v[0] for k, v in found.items()}
    n = int(one["n"])
    if one["kind"] == NO_DATA:
        return Judgement(NO_DATA, "no data")
    sd = None if math.isnan(one["sd_log"]) else float(one["sd_log"])
    if n < 2:
        ci = RatioCI(n, float(one["ratio"]), None, None, sd, True)
        why = f"{n} paired of the {MIN_PAIRS} {what} needed"
        return Judgement(CANNOT_TELL, band_words(CANNOT_TELL, band_pct, None, why), ci)
    ci = RatioCI(n, float(one["ratio"]), float(one["low"]), float(one["high"]), sd, True, n - 1)
    used = float(one["used_log"])
    floor = used if sd is None or used > sd else None
    kind = str(one["kind"])
    more = int(one["more"]) if kind == CANNOT_TELL else None
    why = f"{n} paired of the {MIN_PAIRS} {what} needed" if n < MIN_PAIRS else ""
    return Judgement(kind, band_words(kind, band_pct, more, why), ci, more, floor)


def family_confidence(points: int) -> float:
    """The confidence at which each of a claim's points is judged "outside" for the claim (Bonferroni): a
    claim over k points then says "does not hold" for identical arms at most 5 % of the time, not k x 5 %.
    ("Holds" needs every point inside the band, which the points' own 95 % intervals already guard.)"""
    return 1 - (1 - CONFIDENCE) / max(points, 1)


HOLDS, DOES_NOT_HOLD = "holds", "does not hold"


def claim_kinds(point_kinds, family_kinds):
    """A ±band claim over points (last axis): does not hold where a point is outside the band at the family
    confidence, holds where every point is within it or different but inside it, else cannot tell."""
    import numpy as np

    point_kinds, family_kinds = np.asarray(point_kinds, dtype=object), np.asarray(family_kinds, dtype=object)
    out = np.full(point_kinds.shape[:-1], CANNOT_TELL, dtype=object)
    out[np.all((point_kinds == WITHIN) | (point_kinds == INSIDE), axis=-1)] = HOLDS
    out[np.any(family_kinds == OUTSIDE, axis=-1)] = DOES_NOT_HOLD
    return out


def judge_one_visit(
    baseline_runs: list[float], candidate_runs: list[float], band_pct: float = 1.0
) -> Judgement:
    """One visit per arm: its runs measure no visit-to-visit noise, so never a decisive verdict; the
    interval from the runs (Welch) is shown, and the visits that would settle it estimated from its spread
    (each visit at least as noisy as the runs)."""
    try:
        ci = unpaired_ratio_ci(baseline_runs, candidate_runs)
    except ValueError:
        return Judgement(NO_DATA, "no data")
    spread = max(ci.sd_log or 0.0, SPREAD_FLOOR_LOG) * math.sqrt(2)
    band_lo, band_hi = math.log(1 - band_pct / 100), math.log(1 + band_pct / 100)
    more = int(_more_visits(1, math.log(ci.ratio), spread, band_lo, band_hi).item())
    why = "one visit per arm"
    return Judgement(CANNOT_TELL, band_words(CANNOT_TELL, band_pct, more, why), ci, more)


def fmt_judged(j: Judgement | None) -> str:
    """'1.0042 [0.9981, 1.0103]': the ratio and the interval the verdict was judged on."""
    return fmt_ci(j.ci if j else None)
