"""`python -m kdakit.report.calibrate`: the serving verdict engine's error rates and power, by simulation.

Thousands of synthetic A/B experiments per case go through the report's own verdict function
(kdakit.records.stats.judge_visits) at once, as arrays: a fixed protocol at its `repeats` visits, a
sequential one visit by visit under its own stopping rule (stats.stop_after, what
kdakit.records.sequential decides after each real visit), up to its max_visits. The model of one point's
value in one visit of one arm: the true value × exp(drift + visit noise + run noise), where the drift is
shared by both arms and every point of the visit (the machine between visits), the visit noise is each
arm's own (a fresh server start), and the run noise is each run's (the visit's value is the median of its
runs). Each point of a visit fails with FAIL_RATE, and a whole visit of an arm is missing with
MISSING_RATE. The first table gives, per protocol, noise, drift and true helion/triton ratio, how often
each verdict came out; the second follows "N more visits would settle it" where the report asked for it.
evals/README.md carries both as printed (tests/test_calibration.py checks that they match).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from kdakit.facts.protocols import load_protocols
from kdakit.records import stats

NOISE = (0.005, 0.01, 0.02, 0.05)  # per visit and arm (coefficient of variation)
DRIFT = (0.0, 0.01)  # per visit, shared by both arms and every point
RATIOS = (1.00, 0.995, 0.97, 1.03)
RUN_NOISE = 0.002  # per client run
FAIL_RATE = 0.05  # one point of one arm's visit fails
MISSING_RATE = 0.05  # one arm's whole visit is missing
EXPERIMENTS = 1000
SEED = 25
FOLLOW_CASES = (  # (noise, drift, true ratio) whose "cannot tell" points are followed up
    (0.005, 0.01, 1.00),
    (0.01, 0.01, 1.00),
    (0.02, 0.01, 1.00),
    (0.01, 0.01, 0.995),
    (0.01, 0.01, 0.97),
)
FOLLOW_EXPERIMENTS = 400
FOLLOW_MOST = 1000  # asked for more visits than this: counted, not simulated
README_START = "<!-- calibration table: python -m kdakit.report.calibrate -->"
README_END = "<!-- end of calibration table -->"


def visit_logs(shape, noise: float, drift: float, ratio: float, runs: int, rng):
    """(triton, helion) log values per (experiment, point, visit), NaN where failed or missing."""
    import numpy as np

    experiments, points, visits = shape
    shared = drift * rng.standard_normal((experiments, 1, visits))
    out = []
    for true in (0.0, math.log(ratio)):
        run = RUN_NOISE * rng.standard_normal((*shape, runs))
        median = run.mean(axis=-1) if runs <= 2 else np.median(run, axis=-1)  # two runs: the same
        value = true + shared + noise * rng.standard_normal(shape) + median
        value[rng.random(shape) < FAIL_RATE] = np.nan
        value[np.broadcast_to(rng.random((experiments, 1, visits)) < MISSING_RATE, shape)] = np.nan
        out.append(value)
    return out


def _at(codes, visit):
    """The codes (..., points, visits) after `visit` (1-based, per experiment)."""
    import numpy as np

    index = np.broadcast_to((visit - 1)[:, None, None], (*codes.shape[:-1], 1))
    return np.take_along_axis(codes, index, axis=-1)[..., 0]


def simulate(protocol, noise: float, drift: float, ratio: float, experiments: int, rng) -> dict:
    """Over `experiments` synthetic experiments of the protocol's points and visits: the share of each point
    verdict (KINDS) and of each claim verdict (the ±band claim over all the points), and the visits taken."""
    import numpy as np

    points, sequential = len(protocol.points), protocol.sequential
    visits = protocol.max_visits if sequential else protocol.repeats
    triton, helion = visit_logs((experiments, points, visits), noise, drift, ratio, protocol.runs, rng)
    judged = stats.judge_visits(triton, helion, protocol.band_pct, visits_needed=False, sequential=sequential,
                                horizon=protocol.max_visits)  # fmt: skip
    family = stats.judge_visits(triton, helion, protocol.band_pct, stats.family_confidence(points),
                                visits_needed=False, sequential=sequential,
                                horizon=protocol.max_visits)  # fmt: skip
    if sequential:
        stop = stats.stop_after(judged["prefix_code"], family["prefix_code"], protocol.min_visits, visits)
    else:
        stop = np.full(experiments, visits)
    codes, family_codes = _at(judged["prefix_code"], stop), _at(family["prefix_code"], stop)
    claims = stats.claim_kinds(stats.kind_names(codes), stats.kind_names(family_codes))
    found = {kind: float(np.mean(codes == k)) for k, kind in enumerate(stats.KINDS)}
    found["claim " + stats.HOLDS] = float(np.mean(claims == stats.HOLDS))
    found["claim " + stats.DOES_NOT_HOLD] = float(np.mean(claims == stats.DOES_NOT_HOLD))
    found["visits mean"], found["visits p90"] = float(np.mean(stop)), float(np.percentile(stop, 90))
    return found


def _claim_protocols(protocols: dict) -> dict:
    """The protocols that judge the helion/triton claim: another PR's serving A/B (published.toml's
    `serving_ab`, e.g. cutedsl-pr) is judged by the same engine but is no protocol of this claim."""
    from kdakit.report.model import load_published

    other = {t["protocol"] for t in load_published().get("serving_ab", [])}
    return {name: p for name, p in protocols.items() if name not in other}


def table(protocols: dict | None = None, experiments: int = EXPERIMENTS, seed: int = SEED) -> list[dict]:
    import numpy as np

    protocols = protocols if protocols is not None else _claim_protocols(load_protocols())
    rng = np.random.default_rng(seed)
    rows = []
    for name in sorted(protocols):
        protocol = protocols[name]
        for noise in NOISE:
            for drift in DRIFT:
                for ratio in RATIOS:
                    found = simulate(protocol, noise, drift, ratio, experiments, rng)
                    rows.append({"protocol": name, "sequential": protocol.sequential,
                                 "visits": protocol.repeats, "points": len(protocol.points), "noise": noise,
                                 "drift": drift, "ratio": ratio, "band_pct": protocol.band_pct,
                                 **found})  # fmt: skip
    return rows


def follow_up(protocol, noise: float, drift: float, ratio: float, experiments: int, rng) -> dict:
    """Points the protocol left at "cannot tell", continued by the visits the report said would settle
    them: how many it asked for, the probability it stated, and how many the extra visits settled."""
    import numpy as np

    sequential = protocol.sequential
    visits = protocol.max_visits if sequential else protocol.repeats
    shape = (experiments, 1, visits + FOLLOW_MOST)
    triton, helion = visit_logs(shape, noise, drift, ratio, protocol.runs, rng)
    horizon = protocol.max_visits
    first = stats.judge_visits(triton[..., :visits], helion[..., :visits], protocol.band_pct,
                               visits_needed=False, sequential=sequential, horizon=horizon)  # fmt: skip
    open_ = first["kind"][:, 0] == stats.CANNOT_TELL
    t, h = triton[open_], helion[open_]
    asked = stats.judge_visits(t[..., :visits], h[..., :visits], protocol.band_pct, sequential=sequential,
                               horizon=horizon)  # fmt: skip
    more, chance = asked["more"][:, 0], asked["settle"][:, 0]
    followed = more <= FOLLOW_MOST
    last = visits + int(np.max(more[followed], initial=0))
    t, h = t[..., :last], h[..., :last]
    keep = np.arange(last)[None, None, :] < (visits + np.where(followed, more, 0))[:, None, None]
    t, h = np.where(keep, t, np.nan), np.where(keep, h, np.nan)
    then = stats.judge_visits(t[followed], h[followed], protocol.band_pct, visits_needed=False,
                              sequential=sequential, horizon=horizon)["kind"][:, 0]  # fmt: skip
    return {"protocol": protocol.name, "noise": noise, "drift": drift, "ratio": ratio,
            "open": float(np.mean(open_)), "followed": int(np.sum(followed)),
            "beyond": int(np.sum(~followed)),
            "more median": float(np.median(more[followed])) if followed.any() else math.nan,
            "more p90": float(np.percentile(more[followed], 90)) if followed.any() else math.nan,
            "stated": float(np.mean(chance[followed])) if followed.any() else math.nan,
            "settled": float(np.mean(np.isin(then, stats.DECISIVE))) if followed.any() else math.nan,
            "wrong": float(np.mean(_wrong(then, ratio, protocol.band_pct))) if followed.any()
            else math.nan}  # fmt: skip


def _wrong(kinds, ratio: float, band_pct: float):
    """A verdict that the true ratio contradicts."""
    import numpy as np

    inside = abs(math.log(ratio)) < math.log(1 + band_pct / 100)
    wrong = [stats.OUTSIDE] if inside else [stats.WITHIN, stats.INSIDE]
    if ratio == 1.0:
        wrong.append(stats.INSIDE)
    return np.isin(kinds, wrong)


def follow_ups(protocols: dict | None = None, experiments: int = FOLLOW_EXPERIMENTS, seed: int = SEED):
    import numpy as np

    protocols = protocols if protocols is not None else _claim_protocols(load_protocols())
    rng = np.random.default_rng(seed + 1)
    names = [name for name in sorted(protocols) if protocols[name].repeats > 1]
    return [follow_up(protocols[name], *case, experiments, rng) for name in names for case in FOLLOW_CASES]


def _visits_cell(r: dict) -> str:
    if not r["sequential"]:
        return str(r["visits"])
    return f"≤ {r['visits']}: {r['visits mean']:.1f} (90 %: {r['visits p90']:.0f})"


def markdown(rows: list[dict], follows: list[dict], experiments: int = EXPERIMENTS) -> str:
    b = f"±{rows[0]['band_pct']:g} %" if rows else "±1 %"
    claim = ["claim " + stats.HOLDS, "claim " + stats.DOES_NOT_HOLD]
    lines = [
        f"{experiments} simulated experiments per row (seed {SEED}), each with the protocol's points "
        "(kdakit/facts/protocols.toml); noise: per visit and arm; drift: per visit, shared by both arms "
        f"and every point; run noise {RUN_NOISE:.1%} per client run (a visit's value: the median of its "
        f"runs); each point of a visit fails with probability {FAIL_RATE:.0%}, and each arm's whole visit "
        f"is missing with probability {MISSING_RATE:.0%}. Visits: a fixed protocol's, or a sequential one's "
        "budget, the mean it took under its stopping rule and the 90th percentile. Point verdicts: the share "
        "of points; claim: "
        f'"within {b}" over all the points of one experiment. Identical arms (ratio 1.00): a wrong verdict '
        'is "outside" or "different but inside" for a point, "does not hold" for the claim.',
        "",
        "| protocol | visits | noise | drift | true ratio | within | different but inside | outside "
        "| cannot tell | no data | claim holds | claim does not hold |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [f"{100 * r[k]:.1f} %" for k in (*stats.KINDS, *claim)]
        head = f"| {r['protocol']} | {_visits_cell(r)} | {100 * r['noise']:g} % | {100 * r['drift']:g} % "
        lines.append(head + f"| {r['ratio']:.3f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f'"N more visits would settle it", followed: {FOLLOW_EXPERIMENTS} points per row left at "cannot '
        "tell\" by the protocol's visits (a sequential one: its budget), continued by the N visits the "
        f"report asked for (at most {FOLLOW_MOST}; beyond: counted, not followed). Stated: the mean "
        "probability the report gave; settled: the share decisive after the N visits; wrong: "
        "decisive the wrong way.",
        "",
        "| protocol | noise | drift | true ratio | cannot tell | followed | asked beyond | N median | N 90 % "
        "| stated | settled | wrong |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in follows:
        lines.append(
            f"| {f['protocol']} | {100 * f['noise']:g} % | {100 * f['drift']:g} % | {f['ratio']:.3f} | "
            f"{100 * f['open']:.1f} % | {f['followed']} | {f['beyond']} | {f['more median']:.0f} | "
            f"{f['more p90']:.0f} | {100 * f['stated']:.1f} % | {100 * f['settled']:.1f} % | "
            f"{100 * f['wrong']:.1f} % |"
        )
    return "\n".join(lines) + "\n"


def readme_section(text: str) -> str:
    """The calibration tables as evals/README.md holds them (between its two markers)."""
    start, end = text.index(README_START) + len(README_START), text.index(README_END)
    return text[start:end].strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kdakit.report.calibrate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--experiments", type=int, default=EXPERIMENTS)
    parser.add_argument("--timing", action="store_true", help="add the time it took (stderr)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    print(markdown(table(experiments=args.experiments), follow_ups(), args.experiments), end="")
    if args.timing:
        print(f"({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
