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


def simulate(visits: int, noise: float, ratio: float, experiments: int, rng, band_pct: float) -> dict:
    """Fraction of each verdict kind over `experiments` synthetic experiments of `visits` per arm."""
    import numpy as np

    shape = (experiments, visits)
    triton = noise * rng.standard_normal(shape)
    helion = np.log(ratio) + noise * rng.standard_normal(shape)
    triton[rng.random(shape) < FAIL_RATE] = np.nan
    helion[rng.random(shape) < FAIL_RATE] = np.nan
    kinds = stats.judge_visits(triton, helion, band_pct)["kind"]
    return {kind: float(np.mean(kinds == kind)) for kind in stats.KINDS}


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
                found = simulate(protocol.repeats, noise, ratio, experiments, rng, protocol.band_pct)
                rows.append({"protocol": name, "visits": protocol.repeats, "noise": noise, "ratio": ratio,
                             "band_pct": protocol.band_pct, **found})  # fmt: skip
    return rows


def markdown(rows: list[dict], experiments: int = EXPERIMENTS) -> str:
    b = f"±{rows[0]['band_pct']:g} %" if rows else "±1 %"
    lines = [
        f"{experiments} simulated experiments per row (seed {SEED}); visits per arm from "
        "bench/protocols.toml; "
        f"each visit fails with probability {FAIL_RATE:.0%}; noise: per visit and arm. "
        f'Identical arms (ratio 1.00): a wrong verdict is "outside {b}" or "different but inside {b}".',
        "",
        "| protocol | visits | noise | true ratio | within | different but inside | outside | cannot tell "
        "| no data |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [f"{100 * r[k]:.1f} %" for k in stats.KINDS]
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
