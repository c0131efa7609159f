"""Confidence intervals and verdicts for arm comparisons (helion vs triton), from repeated measurements.

Throughput ratios are compared on the log scale (a ratio and its inverse are symmetric there). Serving
points, their A/A control and the ±band claim are judged by one engine, `judge_visits` (below): visits
paired by visit id, a Student t interval (fixed protocols) or an always-valid confidence sequence
(sequential ones) on the paired log ratios, a minimum of paired visits, and the verdicts "within ±B %",
"different but inside ±B %", "outside ±B %" and "cannot tell at this noise: N more visits would settle it
(probability P)"; `python -m kdakit.report.calibrate` measures its error rates by simulation.

`paired_ratio_ci`, `unpaired_ratio_ci` and `verdict` are the plain intervals and words the kernel
microbenchmark (kernels/tools/bench.py) reports per round:

- "within ±B %" when the whole 95 % interval lies inside [1 - B %, 1 + B %],
- "different" when the interval excludes 1 (and is not inside the band),
- "inconclusive at n = k; about m repeats needed" otherwise, m being the repeats for which the interval's
  half-width, at the observed spread, would fit inside the band (or exclude 1, whichever is nearer).
"""

from __future__ import annotations

import functools
import math
import statistics
import warnings
from dataclasses import dataclass

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


def _scipy_stats():
    # imported on first use: it takes about a second, and every `kdakit` command imports this module through
    # the report while few compute an interval (the playbooks' controller steps run kdakit many times)
    from scipy import stats

    return stats


def _t(df: float) -> float:
    return float(_scipy_stats().t.ppf(0.5 + CONFIDENCE / 2, df))


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


# ---- the serving verdict engine: paired visits, four verdicts a person can act on
#
# One engine judges every serving point, A/A control and claim, and the calibration simulation drives the
# same function (`judge_visits`) on thousands of synthetic experiments at once, so the error rates it
# reports are the report's own.
#
# The interval of a point is on the paired log ratios log(helion / triton) of the visits: both arms of one
# visit share whatever drifts between visits (the machine, its clocks, the other tenants), and the ratio
# cancels it. Nothing made of one arm's own visit-to-visit spread enters the interval, since that spread
# holds the very drift that pairing cancels. A fixed protocol (its visits planned ahead) gets a Student t
# interval; a sequential one, which decides after each visit whether to go on, gets an always-valid
# confidence sequence (`cs_factor`), so that stopping as soon as the answer is known keeps its error rates.

# No measured spread below this counts (log scale, about 0.2 %): paired visits that agree to the last digit
# say nothing about the next server start, and must not give a zero-width interval. It is a constant, not
# made of either arm's own spread, and the report states where it applied.
SPREAD_FLOOR_LOG = 0.002
MIN_PAIRS = 3  # fewer paired visits never give a decisive verdict (two: one degree of freedom)
MAX_MORE_VISITS = 1000
SETTLE_PROBABILITY = 0.8  # "N more visits would settle it": N is the fewest that settle it this often
# The confidence sequence's mixture: the standardised difference (mean / spread of the paired log ratios)
# weighted N(0, scale²); 0.5 keeps it narrowest from about 12 to 20 paired visits, where a ±1 % claim is
# decided.
CS_MIXTURE_SCALE = 0.5

WITHIN, INSIDE, OUTSIDE, CANNOT_TELL, NO_DATA = "within", "inside", "outside", "cannot tell", "no data"
KINDS = (WITHIN, INSIDE, OUTSIDE, CANNOT_TELL, NO_DATA)
DECISIVE = (WITHIN, INSIDE, OUTSIDE)  # the first three: a code <= KINDS.index(OUTSIDE) is decisive
FIXED, SEQUENTIAL = "Student t over the paired visits", "confidence sequence over the paired visits"


@dataclass(frozen=True)
class Judgement:
    """One verdict: its kind (KINDS), the words, and the interval it was judged on."""

    kind: str
    text: str
    ci: RatioCI | None = None
    more_visits: int | None = None  # cannot tell: the visits per arm that would settle it
    floor_log: float | None = None  # the spread used, when SPREAD_FLOOR_LOG raised the measured one
    settle_probability: float | None = None  # how often `more_visits` settle it (the power calculation)
    decided_at: int | None = None  # the visit (1, 2, ...) at which the verdict became decisive
    method: str = FIXED


def band_words(kind: str, band_pct: float, more: int | None = None, why: str = "",
               probability: float | None = None) -> str:  # fmt: skip
    b = f"±{band_pct:g} %"
    if kind == WITHIN:
        return f"within {b}"
    if kind == INSIDE:
        return f"different but inside {b}"
    if kind == OUTSIDE:
        return f"outside {b}"
    if kind == NO_DATA:
        return "no data"
    tail = f" ({why})" if why else ""
    if more is None:
        return "cannot tell at this noise" + tail
    chance = f"{100 * probability:.0f} %" if probability is not None else "?"
    if more > MAX_MORE_VISITS:
        return (f"cannot tell at this noise: more than {MAX_MORE_VISITS} more visits needed "
                f"({MAX_MORE_VISITS} settle it with probability {chance})" + tail)  # fmt: skip
    visits = "visit" if more == 1 else "visits"
    return f"cannot tell at this noise: {more} more {visits} would settle it (probability {chance})" + tail


def _t_array(df, confidence: float = CONFIDENCE):
    import numpy as np

    df = np.asarray(df, dtype=float)
    values, where = np.unique(df, return_inverse=True)  # few distinct degrees of freedom: one ppf each
    found = np.full(values.shape, np.inf)
    ok = values >= 1
    found[ok] = _scipy_stats().t.ppf(0.5 + confidence / 2, values[ok])
    return found[where].reshape(df.shape)


def cs_factor(n, confidence: float = CONFIDENCE, horizon: int | None = None, scale: float = CS_MIXTURE_SCALE):
    """The confidence sequence for the mean of normal observations with unknown variance (Lai's
    scale-invariant mixture likelihood ratio): after n observations, mean ± factor(n) × s holds the true
    mean at every n at once with probability at least `confidence` (s: the sample standard deviation).

    The ratio of the scale-invariant likelihoods (the data up to a common scale, the scale integrated out),
    the standardised mean weighted N(0, scale²) against it being m, is a nonnegative martingale when the
    true mean is m. With r = n (mean - m)² / Σ (x - m)², the ratio is
    (1 + n c²)^-½ (1 - n c² r / (1 + n c²))^-n/2, and m stays in the sequence while the ratio stays below a
    threshold: 1 / alpha for no horizon (Ville's inequality: it is ever crossed with probability at most
    alpha), or, for a protocol that stops after at most `horizon` observations, the threshold that the
    ratio crosses within them with probability alpha (cs_threshold: the ratio's law does not depend on the
    mean or the spread, so it is computed once by simulation); beyond the horizon, 1 / alpha again.
    inf: no interval yet."""
    import numpy as np

    n = np.asarray(n, dtype=float)
    log_threshold = -math.log(1 - confidence)  # Ville's, for ever
    if horizon is not None:  # within the horizon, the one for it; beyond, Ville's again
        log_threshold = np.where(n <= horizon, cs_threshold(horizon, confidence), log_threshold)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c2n = np.maximum(n, 1) * scale**2
        rho = (1 + c2n) / c2n * (1 - np.exp(-(2 * log_threshold + np.log1p(c2n)) / np.maximum(n, 1)))
        factor = np.sqrt((n - 1) / np.maximum(n, 1) * rho / np.maximum(1 - rho, 1e-300))
    return np.where((n >= 2) & (rho < 1), factor, np.inf)


CS_SIMULATED_PATHS = 200_000


@functools.lru_cache(maxsize=32)
def cs_threshold(horizon: int, confidence: float = CONFIDENCE, scale: float = CS_MIXTURE_SCALE) -> float:
    """The log threshold that the mixture ratio of cs_factor, at the true mean, crosses within `horizon`
    observations with probability 1 - confidence: its (1 - alpha) quantile of the running maximum over
    CS_SIMULATED_PATHS standard normal paths (fixed seed; at most log(1 / alpha), Ville's)."""
    import numpy as np

    rng = np.random.default_rng(20261202)
    n = np.arange(1, horizon + 1, dtype=float)
    c2n = n * scale**2
    peaks = []
    for _ in range(4):  # in chunks: bounded memory
        x = rng.standard_normal((CS_SIMULATED_PATHS // 4, horizon))
        total, squares = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
        r = total**2 / n / squares
        log_ratio = -0.5 * np.log1p(c2n) - n / 2 * np.log1p(-c2n * r / (1 + c2n))
        peaks.append(log_ratio.max(axis=1))
    quantile = float(np.quantile(np.concatenate(peaks), confidence))
    return min(quantile, -math.log(1 - confidence))


def _half_width_factor(n, confidence: float, sequential: bool, horizon: int | None = None):
    """The interval's half-width per unit of the paired spread after n pairs."""
    import numpy as np

    if sequential:
        return cs_factor(n, confidence, horizon)
    return _t_array(np.asarray(n) - 1, confidence) / np.sqrt(np.maximum(n, 1))


def _kind_codes(n, low, high, band_lo: float, band_hi: float):
    """The verdicts as their index in KINDS (int8): cheap to compare over many visits and experiments."""
    import numpy as np

    decided = n >= MIN_PAIRS
    inside_band = decided & (low >= band_lo) & (high <= band_hi)
    excludes_one = (low > 0) | (high < 0)
    outside_band = decided & ((high < band_lo) | (low > band_hi))
    code = np.full(np.shape(n), KINDS.index(CANNOT_TELL), dtype=np.int8)
    code[inside_band & ~excludes_one] = KINDS.index(WITHIN)
    code[inside_band & excludes_one] = KINDS.index(INSIDE)
    code[outside_band] = KINDS.index(OUTSIDE)
    code[n == 0] = KINDS.index(NO_DATA)
    return code


def kind_names(codes):
    """KINDS' names of verdict codes (judge_visits' prefix_code)."""
    import numpy as np

    return np.array(KINDS, dtype=object)[np.asarray(codes)]


def settle_chance(n, mean_log, sd_log, more, band_lo: float, band_hi: float, confidence: float = CONFIDENCE,
                  sequential: bool = False, horizon: int | None = None):  # fmt: skip
    """The probability that `more` further paired visits settle a point (its interval then inside the band
    or wholly outside it), by a power calculation on the paired spread: the true difference is not taken
    to be the observed one but weighted by what the visits so far say of it (normal, centred on the
    observed mean, with its standard error), and the true spread likewise (scaled chi-square with n - 1
    degrees of freedom, integrated at 12 quantiles). Arrays broadcast; `more` may carry an extra last axis."""
    import numpy as np

    n = np.asarray(n, dtype=float)[..., None, None]
    mean = np.asarray(mean_log, dtype=float)[..., None, None]
    sd = np.asarray(sd_log, dtype=float)[..., None, None]
    more = np.asarray(more, dtype=float)
    more = more[..., :, None] if more.ndim else more[None, None]
    q = (np.arange(12) + 0.5) / 12
    df = np.maximum(n - 1, 1)
    sigma = sd * np.sqrt(df / _scipy_stats().chi2.ppf(q, df))  # (..., 1, 12)
    total = n + more
    half = _half_width_factor(total, confidence, sequential, horizon) * sigma
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = sigma * np.sqrt(np.maximum(1 / n - 1 / total, 1e-300))  # the final mean, given the data
        cdf = _scipy_stats().norm.cdf
        inside = np.clip(cdf((band_hi - half - mean) / spread) - cdf((band_lo + half - mean) / spread), 0, 1)
        inside = np.where(band_hi - half > band_lo + half, inside, 0.0)
        outside = 1 - cdf((band_hi + half - mean) / spread) + cdf((band_lo - half - mean) / spread)
    return np.mean(np.nan_to_num(inside + outside), axis=-1)


_MORE_GRID = None


def _more_visits(n, mean_log, sd_log, band_lo, band_hi, confidence: float = CONFIDENCE,
                 sequential: bool = False, horizon: int | None = None):  # fmt: skip
    """Per point: the fewest further paired visits that settle it with SETTLE_PROBABILITY (settle_chance),
    and that probability; MAX_MORE_VISITS + 1 and the probability at MAX_MORE_VISITS when none within it."""
    import numpy as np

    global _MORE_GRID
    if _MORE_GRID is None:
        _MORE_GRID = np.unique(
            np.concatenate([np.arange(1, 41), np.geomspace(40, MAX_MORE_VISITS, 40).round()])
        )
    chance = settle_chance(n, mean_log, sd_log, _MORE_GRID, band_lo, band_hi, confidence, sequential, horizon)
    enough = chance >= SETTLE_PROBABILITY
    first = np.argmax(enough, axis=-1)
    found = enough.any(axis=-1)
    more = np.where(found, _MORE_GRID[first], MAX_MORE_VISITS + 1).astype(int)
    probability = np.where(found, np.take_along_axis(chance, first[..., None], -1)[..., 0], chance[..., -1])
    return more, probability


def judge_visits(log_baseline, log_candidate, band_pct: float = 1.0, confidence: float = CONFIDENCE,
                 visits_needed: bool = True, sequential: bool = False,
                 horizon: int | None = None) -> dict:  # fmt: skip
    """Judge candidate/baseline from visits matched by identity, for one or many experiments at once.

    log_baseline, log_candidate: arrays (..., visits) of the log of each visit's value, NaN where a visit
    failed or is missing; column k of both is visit k. A pair counts only when both of its visits exist.
    The interval is on the paired log ratios, their spread raised to SPREAD_FLOOR_LOG only: Student t
    (sequential=False: the visits were planned ahead) or the confidence sequence (cs_factor), intersected
    over the visits so far (sequential=True: the protocol stops when the answer is known, after at most
    `horizon` visits; visits beyond it, or no horizon: the open-ended sequence). Fewer than
    MIN_PAIRS pairs give "cannot tell". visits_needed=False: without the visits that would settle it
    (only the words need them). Returns arrays: kind (str), ratio, low, high, n, sd_log (measured),
    used_log, floored, more, settle (its probability), decided_at (the visit, 1-based, at which the verdict
    became decisive; 0: not decisive) and, after each visit so far, prefix_code (..., visits): the verdict
    as its index in KINDS.
    """
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: handled below
        return _judge_visits(np.asarray(log_baseline, float), np.asarray(log_candidate, float), band_pct,
                             confidence, visits_needed, sequential, horizon)  # fmt: skip


def _judge_visits(b, c, band_pct: float, confidence: float, visits_needed: bool, sequential: bool,
                  horizon: int | None) -> dict:  # fmt: skip
    import numpy as np

    if horizon is not None and b.shape[-1] > horizon:  # continued past its budget: the open-ended sequence
        horizon = None

    pair = c - b  # NaN where either visit is missing; the paired log ratio, drift shared by the arms gone
    ok = ~np.isnan(pair)
    x = np.where(ok, pair, 0.0)
    n = np.cumsum(ok, axis=-1)  # per visit so far: the pairs, their mean and spread
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.cumsum(x, axis=-1) / np.maximum(n, 1), np.nan)
        centred = np.where(ok, pair - mean[..., -1:], 0.0)  # stable sums of squares around the last mean
        shift = np.where(n > 0, mean - mean[..., -1:], 0.0)
        ss = np.maximum(np.cumsum(centred**2, axis=-1) - n * shift**2, 0.0)
        sd = np.where(n > 1, np.sqrt(ss / np.maximum(n - 1, 1)), np.nan)
    used = np.fmax(sd, SPREAD_FLOOR_LOG)
    half = _half_width_factor(n, confidence, sequential, horizon) * used
    half = np.where(np.isnan(half), np.inf, half)
    low, high = np.where(n > 0, mean - half, -np.inf), np.where(n > 0, mean + half, np.inf)
    if sequential:  # every interval so far holds the truth at once: keep their intersection
        low_all, high_all = np.maximum.accumulate(low, axis=-1), np.minimum.accumulate(high, axis=-1)
        empty = low_all > high_all  # only when the sequence has already missed: fall back to the last one
        low, high = np.where(empty, low, low_all), np.where(empty, high, high_all)
    band_lo, band_hi = math.log(1 - band_pct / 100), math.log(1 + band_pct / 100)
    prefix_code = _kind_codes(n, low, high, band_lo, band_hi)
    kind = kind_names(prefix_code[..., -1])
    decisive = prefix_code <= KINDS.index(OUTSIDE)  # within, inside or outside
    if sequential:
        decided_at = np.where(decisive.any(axis=-1), np.argmax(decisive, axis=-1) + 1, 0)
    else:  # a fixed protocol decides once, after its last visit
        decided_at = np.where(decisive[..., -1], pair.shape[-1], 0)
    n_last, mean_last, sd_last, used_last = n[..., -1], mean[..., -1], sd[..., -1], used[..., -1]
    more = settle = None
    if visits_needed:
        more, settle = _more_visits(np.maximum(n_last, 2), np.nan_to_num(mean_last), used_last, band_lo,
                                    band_hi, confidence, sequential, horizon)  # fmt: skip
    return {
        "kind": kind, "ratio": np.exp(mean_last), "low": np.exp(low[..., -1]), "high": np.exp(high[..., -1]),
        "n": n_last, "sd_log": sd_last, "used_log": used_last, "floored": ~(sd_last >= SPREAD_FLOOR_LOG),
        "more": more, "settle": settle, "decided_at": decided_at, "prefix_code": prefix_code,
    }  # fmt: skip


def judge_pairs(
    baseline: list[float | None], candidate: list[float | None], band_pct: float = 1.0, what: str = "visits",
    confidence: float = CONFIDENCE, sequential: bool = False, horizon: int | None = None,
    visits_needed: bool = True,
) -> Judgement:  # fmt: skip
    """One point: baseline[k] and candidate[k] are visit k's values (None: failed or missing);
    visits_needed=False: a "cannot tell" without the visits that would settle it (a control)."""
    import numpy as np

    def logs(values):
        return np.array([math.log(v) if v is not None and v > 0 else np.nan for v in values])

    found = judge_visits(logs(baseline)[None, :], logs(candidate)[None, :], band_pct, confidence,
                         visits_needed, sequential=sequential, horizon=horizon)  # fmt: skip
    one = {k: v[0] for k, v in found.items() if v is not None}
    n = int(one["n"])
    method = SEQUENTIAL if sequential else FIXED
    if one["kind"] == NO_DATA:
        return Judgement(NO_DATA, "no data", method=method)
    sd = None if math.isnan(one["sd_log"]) else float(one["sd_log"])
    if n < 2:
        ci = RatioCI(n, float(one["ratio"]), None, None, sd, True)
        why = f"{n} paired of the {MIN_PAIRS} {what} needed"
        return Judgement(CANNOT_TELL, band_words(CANNOT_TELL, band_pct, None, why), ci, method=method)
    low, high = float(one["low"]), float(one["high"])
    if math.isinf(high) or low == 0:  # a confidence sequence not yet narrower than everything
        low = high = None
    ci = RatioCI(n, float(one["ratio"]), low, high, sd, True, n - 1)
    floor = float(one["used_log"]) if one["floored"] else None
    kind = str(one["kind"])
    more = int(one["more"]) if kind == CANNOT_TELL and visits_needed else None
    chance = float(one["settle"]) if kind == CANNOT_TELL and visits_needed else None
    why = f"{n} paired of the {MIN_PAIRS} {what} needed" if n < MIN_PAIRS else ""
    decided = int(one["decided_at"]) or None
    return Judgement(kind, band_words(kind, band_pct, more, why, chance), ci, more, floor, chance, decided,
                     method)  # fmt: skip


def family_confidence(points: int) -> float:
    """The confidence at which each of a claim's points is judged "outside" for the claim (Bonferroni): a
    claim over k points then says "does not hold" for identical arms at most 5 % of the time, not k x 5 %.
    ("Holds" needs every point inside the band: it is wrong only if a point truly outside the band looks
    inside, which that point's own 95 % interval already guards, whatever the number of points.)"""
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


def stop_after(prefix_codes, prefix_family_codes, min_visits: int, max_visits: int):
    """The sequential protocol's stopping rule: the visit (1-based) after which it stops, per experiment.

    prefix_codes, prefix_family_codes: (..., points, visits) point verdicts after each visit (judge_visits'
    prefix_code, sequential=True) at 95 % and at the claim's family confidence. It stops after the first
    visit, from min_visits on, at which every point is decisive and so is the claim (claim_kinds), else
    after max_visits (or the last visit there is). The verdicts at that visit are the protocol's answer:
    its intervals hold at every visit at once, so stopping on them keeps their error rates."""
    import numpy as np

    codes, family = np.asarray(prefix_codes), np.asarray(prefix_family_codes)
    visits = codes.shape[-1]
    decisive = codes <= KINDS.index(OUTSIDE)
    holds = np.all(codes <= KINDS.index(INSIDE), axis=-2)
    does_not_hold = np.any(family == KINDS.index(OUTSIDE), axis=-2)
    done = np.all(decisive, axis=-2) & (holds | does_not_hold)
    done[..., : max(min_visits, 1) - 1] = False
    done[..., min(max_visits, visits) - 1 :] = True
    return np.argmax(done, axis=-1) + 1


def judge_one_visit(
    baseline_runs: list[float], candidate_runs: list[float], band_pct: float = 1.0
) -> Judgement:
    """One visit per arm: its runs measure no visit-to-visit noise, so never a decisive verdict; the
    interval from the runs (Welch) is shown, and no count of visits is guessed from the runs' spread."""
    try:
        ci = unpaired_ratio_ci(baseline_runs, candidate_runs)
    except ValueError:
        return Judgement(NO_DATA, "no data")
    why = "one visit per arm measures no visit-to-visit spread; a sequential protocol settles it"
    return Judgement(CANNOT_TELL, band_words(CANNOT_TELL, band_pct, None, why), ci)


def fmt_judged(j: Judgement | None) -> str:
    """'1.0042 [0.9981, 1.0103]': the ratio and the interval the verdict was judged on."""
    return fmt_ci(j.ci if j else None)
