"""`python -m kdakit.report.calibrate`: the serving verdict engine's error rates and power, by simulation.

Thousands of synthetic A/B experiments per case, at each serving protocol's visits (`repeats` in
bench/protocols.toml), go through the report's own verdict function (kdakit.records.stats.judge_visits)
at once, as arrays. The model: each visit's value is the true value times exp(noise * z), z standard normal,
independent per arm and visit (a fresh server start each time); a visit fails with FAIL_RATE (its pair is
dropped). The table gives, per protocol, noise and true helion/triton ratio, how often each verdict came out.
evals/README.md carries this table as printed (tests/test_calibration.py checks that it matches).
"""

from __future__ import annotations

import argparse
import sys
import time

from kdakit.records import stats

NOISE = (0.005, 0.01, 0.02, 0.05, 0.10, 0.30)  # per visit, per arm (coefficient of variation)
RATIOS = (1.00, 0.99, 0.95, 1.05)
FAIL_RATE = 0.10
EXPERIMENTS = 4000
SEED = 25
README_START = "<!-- calibration table: python -m kdakit.report.calibrate -->"
README_END = "<!-- end of calibration table -->"


def simulate(
    visits: int, points: int, noise: float, ratio: float, experiments: int, rng, band_pct: float
) -> dict:
    """Over `experiments` synthetic experiments of `points` points and `visits` visits per arm: the share of
    each point verdict (KINDS) and of each claim verdict (the ±band claim over all the points)."""
    import numpy as np

    shape = (experiments, points, visits)
    triton = noise * rng.standard_normal(shape)
    helion = np.log(ratio) + noise * rng.standard_normal(shape)
    triton[rng.random(shape) < FAIL_RATE] = np.nan
    helion[rng.random(shape) < FAIL_RATE] = np.nan
    kinds = stats.judge_visits(triton, helion, band_pct, visits_needed=False)["kind"]
    family = stats.judge_visits(triton, helion, band_pct, confidence=stats.family_confidence(points),
                                visits_needed=False)["kind"]  # fmt: skip
    claims = stats.claim_kinds(kinds, family)
    found = {kind: float(np.mean(kinds == kind)) for kind in stats.KINDS}
    found["claim " + stats.HOLDS] = float(np.mean(claims == stats.HOLDS))
    found["claim " + stats.DOES_NOT_HOLD] = float(np.mean(claims == stats.DOES_NOT_HOLD))
    return found


def table(protocols: dict | None = None, experiments: int = EXPERIMENTS, seed: int = SEED) -> list[dict]:
    import numpy as np

    from kdakit.bench.serving import load_protocols

    protocols = protocols if protocols is not None else load_protocols()
    rng = np.random.default_rng(seed)
    rows = []
    for name in sorted(protocols):
        protocol = protocols[name]
        for noise in NOISE:
            for ratio in RATIOS:
                found = simulate(protocol.repeats, len(protocol.points), noise, ratio, experiments, rng,
                                 protocol.band_pct)  # fmt: skip
                rows.append({"protocol": name, "visits": protocol.repeats, "points": len(protocol.points),
                             "noise": noise, "ratio": ratio,
                             "band_pct": protocol.band_pct, **found})  # fmt: skip
    return rows


def markdown(rows: list[dict], experiments: int = EXPERIMENTS) -> str:
    b = f"±{rows[0]['band_pct']:g} %" if rows else "±1 %"
    claim = ["claim " + stats.HOLDS, "claim " + stats.DOES_NOT_HOLD]
    lines = [
        f"{experiments} simulated experiments per row (seed {SEED}), each with the protocol's points and "
        f"visits per arm (bench/protocols.toml); each visit fails with probability {FAIL_RATE:.0%}; noise: "
        f'per visit and arm. Point verdicts: the share of points; claim: "within {b}" over all the points '
        'of one experiment. Identical arms (ratio 1.00): a wrong verdict is "outside" or "different but '
        'inside" for a point, "does not hold" for the claim.',
        "",
        "| protocol | visits | noise | true ratio | within | different but inside | outside | cannot tell "
        "| no data | claim holds | claim does not hold |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [f"{100 * r[k]:.1f} %" for k in (*stats.KINDS, *claim)]
        lines.append(f"| {r['protocol']} | {r['visits']} | {100 * r['noise']:g} % | {r['ratio']:.2f} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def readme_section(text: str) -> str:
    """The calibration table as evals/README.md holds it (between its two markers)."""
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
    print(markdown(table(experiments=args.experiments), args.experiments), end="")
    if args.timing:
        print(f"({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
