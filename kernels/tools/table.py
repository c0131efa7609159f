"""The printed table of `kdakit kernels bench` (the PR's format): kdakit's and SGLang's Helion against
SGLang's Triton with the HBM and compute floors, the decode paths, single-call latencies, the tuned-vs-default
comparison, kdakit / each arm over the rounds, and the performance targets (kernels/shapes.toml [targets]).
Pure Python: it reads a run's result dict only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kdakit.kernels import shapes
from kdakit.kernels.tools import verify_layer
from kdakit.kernels.tools.bench import ARMS, KDAKIT, OPTIONAL_ARMS, BenchConfig, kdakit_vs


def change(candidate: float | None, reference: float | None) -> float | None:
    """(candidate - reference) / reference, as a fraction (negative = faster)."""
    if candidate is None or reference is None or reference <= 0:
        return None
    return (candidate - reference) / reference


def _fmt_us(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _fmt_change(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.1f} %"


def _arm_median(row: dict, arm: str, key: str = "per_call") -> float | None:
    entry = row["arms"].get(arm)
    if not entry or entry.get("status") != "ok":
        return None
    return entry[key]["median"]


def _arm_cell(row: dict, arm: str, key: str = "per_call") -> str:
    entry = row["arms"].get(arm)
    if entry is None:
        return "—"
    if entry.get("status") != "ok":
        return "n/a" if entry.get("status") == "missing" else "FAIL"
    mark = "" if entry.get("check", {}).get("ok", True) else " ✗"
    return _fmt_us(entry[key]["median"]) + mark


def render_table(result: dict) -> str:
    """The PR's table (`| phase | shape | Triton | Helion | change |`) for kdakit's and upstream's Helion,
    with the HBM floor; then the decode Triton paths, the prefill peers with the compute floor, the
    single-call replay latencies, and the per-layer verify table (phase verify-layer) after all of them."""
    layer_rows = [r for r in result["rows"] if r["phase"] == verify_layer.PHASE]
    rows = [r for r in result["rows"] if r["phase"] != verify_layer.PHASE]
    if not rows:
        return "\n".join(verify_layer_table(result))
    bw = result.get("copy_bandwidth", {}).get("bytes_per_s")
    repeats = result.get("config", {}).get("repeats", 1)  # a record from before rounds: one
    over_rounds = f", then the median over {repeats} interleaved rounds" if repeats > 1 else ""
    lines = [
        f"Per-call µs, CUDA graph of N back-to-back calls, median of replays{over_rounds}; HBM floor at "
        f"{bw / 1e12:.2f} TB/s copy bandwidth measured in this run."
        if bw
        else f"Per-call µs{over_rounds}.",
        "",
        "| phase | shape | Triton | Helion (kdakit) | change | Helion (upstream) | change | HBM floor | "
        "kdakit / floor |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        triton = _arm_median(row, "triton")
        kdakit = _arm_median(row, "helion-kdakit")
        upstream = _arm_median(row, "helion-upstream")
        ratio = f"{kdakit / row['floor_us']:.2f}×" if kdakit and row.get("floor_us") else "—"
        lines.append(
            f"| {row['phase']} | {row['shape_label']} | {_arm_cell(row, 'triton')} | "
            f"{_arm_cell(row, 'helion-kdakit')} | {_fmt_change(change(kdakit, triton))} | "
            f"{_arm_cell(row, 'helion-upstream')} | {_fmt_change(change(upstream, triton))} | "
            f"{_fmt_us(row.get('floor_us'))} | {ratio} |"
        )
    lines += ratio_table(result)
    decode = [r for r in rows if r["phase"] == "decode"]
    if decode:
        lines += ["", "Decode paths (µs; change of kdakit vs each):", ""]
        lines.append("| decode path | " + " | ".join(r["shape_label"] for r in decode) + " |")
        lines.append("|---|" + "---:|" * len(decode))
        for arm, label in ARMS["decode"].items():
            if arm in OPTIONAL_ARMS and not any(arm in r["arms"] for r in decode):
                continue
            cells = []
            for r in decode:
                cell = _arm_cell(r, arm)
                ch = change(_arm_median(r, "helion-kdakit"), _arm_median(r, arm))
                cells.append(cell if arm == "helion-kdakit" or ch is None else f"{cell} ({_fmt_change(ch)})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    single = [r for r in rows if r["phase"] != "prefill"]  # prefill is timed in graphs only
    if single:
        lines += ["", "Single-call graph replay (µs, L2 flushed before each replay; includes launch):", ""]
        arms = ["triton", "triton-packed", "triton-packed-dispatch", "helion-upstream", "helion-kdakit"]
        arms += [a for a in sorted(OPTIONAL_ARMS) if any(a in r["arms"] for r in single)]
        lines.append("| phase | shape | " + " | ".join(arms) + " |")
        lines.append("|---|---|" + "---:|" * len(arms))
        for row in single:
            cells = [_arm_cell(row, a, "single_call") if a in row["arms"] else "" for a in arms]
            lines.append(f"| {row['phase']} | {row['shape_label']} | " + " | ".join(cells) + " |")
    lines += config_comparison(result)
    lines += prefill_peers(result, rows)
    failed = [
        f"{row['phase']} {row['shape_label']} {arm}: {entry.get('error') or entry.get('check')}"
        for row in rows + layer_rows
        for arm, entry in row["arms"].items()
        if entry.get("status") == "failed" or not entry.get("check", {}).get("ok", True)
    ]
    if failed:
        lines += ["", "Failures:"] + [f"- {f}" for f in failed]
    if layer_rows:
        lines += [""] + verify_layer_table(result)
    verdicts = targets(result)
    if verdicts:
        lines += ["", "Performance targets (kdakit Helion, kernels/shapes.toml [targets]):", ""]
        lines += [f"- {'PASS' if ok else 'MISS'} {what}" for what, ok in verdicts]
    return "\n".join(lines)


def ratio_table(result: dict) -> list[str]:
    """Lines of kdakit's time / each arm's with its 95 % interval paired by round and the verdict, for the
    rows timed in >= 2 rounds (none for a record of one round)."""
    band = result.get("config", {}).get("band_pct", BenchConfig.band_pct)
    try:
        compared = [(row, row.get("kdakit_vs") or kdakit_vs(row, band)) for row in result["rows"]]
        compared = [(row, vs) for row, vs in compared if vs]
        if not compared:
            return []
        from kdakit.records import stats
    except ImportError:  # no scipy where this prints (a bench host): the record keeps the rounds
        return ["", "kdakit / each arm over the rounds: needs scipy (`kdakit kernels bench-table RAW`)."]
    lines = [
        "",
        f"kdakit / each arm, per-call time paired by round (geometric mean and 95 % CI over the rounds; "
        f"below 1: kdakit faster; verdict band ±{band:g} %):",
        "",
        "| phase | shape | kdakit / | rounds | ratio [95 % CI] | verdict |",
        "|---|---|---|---:|---|---|",
    ]
    for row, vs in compared:
        for arm, found in vs.items():
            ci = stats.RatioCI(**found["ci"])
            lines.append(
                f"| {row['phase']} | {row['shape_label']} | {arm} | {ci.n} | {stats.fmt_ci(ci)} | "
                f"{found['verdict']} |"
            )
    return lines


def _run_bucket(result: dict, size: Callable[[], int]):
    """The tuned-config bucket of this run's head shape (fp32 state) at size(); None where the run or the
    row lacks a field it needs."""
    from kdakit.kernels.tuned import Bucket

    cfg = result.get("config", {})
    try:
        return Bucket(cfg["heads"], cfg["value_heads"], cfg["head_dim"], cfg["head_dim"], "fp32", size())
    except (KeyError, ValueError):
        return None


def _config_used(result: dict, row: dict, mode: str) -> str:
    """Which config kdakit's kernel ran for this row's bucket in `mode`, from the run's selection log."""
    from kdakit.kernels.tuned import batch_bucket, size_buckets

    if row["phase"] == "prefill":
        return _prefill_configs_used(result, row, mode)
    kernel = "decode" if row["phase"] == "decode" else "verify-chain"
    bucket = _run_bucket(result, lambda: batch_bucket(row["batch"], size_buckets(kernel)))
    if bucket is None:
        return "?"
    for sel in result.get("kernel_configs", {}).get("active", []):
        if sel["kernel"] == kernel and sel["bucket"] == bucket.slug() and sel.get("mode", mode) == mode:
            if sel["source"] == "shipped":
                name = Path(sel["path"]).name if sel.get("path") else "?"
                flagged = "tuned with" in sel.get("reason", "")
                return f"shipped {name}" + (" (tuned with other triton/torch)" if flagged else "")
            return sel["source"] + (f" ({sel['reason']})" if sel.get("reason") else "")
    return "?"


def _prefill_configs_used(result: dict, row: dict, mode: str) -> str:
    """Which of the five prefill kernels ran a shipped config for this row's token bucket in `mode`."""
    from kdakit.kernels.tuned import PREFILL_KERNELS, PREFILL_TOKEN_BUCKETS, batch_bucket, slug_of

    bucket = _run_bucket(result, lambda: batch_bucket(row["batch"] * row["tokens"], PREFILL_TOKEN_BUCKETS))
    if bucket is None:
        return "?"
    shipped = [
        sel["kernel"].removeprefix("prefill-")
        for sel in result.get("kernel_configs", {}).get("active", [])
        if sel["kernel"] in PREFILL_KERNELS
        and sel["bucket"] == slug_of(sel["kernel"], bucket)
        and sel.get("mode", mode) == mode
        and sel["source"] == "shipped"
    ]
    if not shipped:
        return f"default (no shipped prefill config at {bucket.slug('t')})"
    names = ", ".join(sorted(shipped))
    return f"shipped {len(shipped)} of {len(PREFILL_KERNELS)} at {bucket.slug('t')}: {names}"


def config_comparison(result: dict) -> list[str]:
    """Lines of the tuned-vs-default table (`--configs both`): kdakit's kernels under the shipped configs
    (helion-kdakit) and under the module defaults (helion-kdakit-default), measured in the same run."""
    rows = [r for r in result["rows"] if "helion-kdakit-default" in r["arms"]]
    if not rows:
        return []
    lines = [
        "",
        "kdakit Helion, shipped tuned configs vs module defaults (µs, same run; change: shipped vs default):",
        "",
        "| phase | shape | shipped configs | default configs | change | config of the shipped arm |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        shipped, default = _arm_median(row, "helion-kdakit"), _arm_median(row, "helion-kdakit-default")
        lines.append(
            f"| {row['phase']} | {row['shape_label']} | {_arm_cell(row, 'helion-kdakit')} | "
            f"{_arm_cell(row, 'helion-kdakit-default')} | {_fmt_change(change(shipped, default))} | "
            f"{_config_used(result, row, 'shipped')} |"
        )
    return lines


# The performance targets (kernels/shapes.toml [targets]): decode under a fraction of the non-packed Triton
# path and faster than every other SGLang path, near the HBM floor at one batch; verify under a fraction
# of Triton's.
_TARGETS = shapes.load()["targets"]

DECODE_VS_TRITON = _TARGETS["decode_vs_triton"]

DECODE_FLOOR_RATIO = _TARGETS["decode_floor_ratio"]

DECODE_FLOOR_BATCH = _TARGETS["decode_floor_batch"]

VERIFY_VS_TRITON = _TARGETS["verify_vs_triton"]


def targets(result: dict) -> list[tuple[str, bool]]:
    """(description with the measured numbers, met?) for every target the run has numbers for."""
    out = []
    for row in result["rows"]:
        ours = _arm_median(row, "helion-kdakit")
        if ours is None:
            continue
        label = f"{row['phase']} {row['shape_label']}"
        triton = _arm_median(row, "triton")
        if row["phase"] == "decode":
            if triton:
                ratio = ours / triton
                out.append((f"{label}: {ratio:.2f}x Triton non-packed (target <= {DECODE_VS_TRITON})",
                            ratio <= DECODE_VS_TRITON))  # fmt: skip
            others = {
                a: _arm_median(row, a)
                for a in ARMS["decode"]
                if a not in ("triton", "helion-kdakit") and a not in OPTIONAL_ARMS
            }
            for arm, t in others.items():
                if t:
                    out.append((f"{label}: {ours:.2f} vs {arm} {t:.2f} µs (target: faster)", ours < t))
            if row.get("batch") == DECODE_FLOOR_BATCH and row.get("floor_us"):
                ratio = ours / row["floor_us"]
                out.append((f"{label}: {ratio:.2f}x the HBM floor (target <= {DECODE_FLOOR_RATIO})",
                            ratio <= DECODE_FLOOR_RATIO))  # fmt: skip
        elif row["phase"] == "verify" and triton:
            ratio = ours / triton
            out.append((f"{label}: {ratio:.2f}x Triton verify (target <= {VERIFY_VS_TRITON})",
                        ratio <= VERIFY_VS_TRITON))  # fmt: skip
    return out


def prefill_peers(result: dict, rows: list[dict]) -> list[str]:
    """Lines of every prefill arm (FLA's beside SGLang's and kdakit's) with the HBM and compute floors, for a
    run that has the FLA arm or a compute floor (none for older records)."""
    prefill = [r for r in rows if r["phase"] == "prefill" and ("fla" in r["arms"] or "compute_floor_us" in r)]
    if not prefill:
        return []
    rate = (result.get("matmul_rate") or {}).get("flops_per_s")
    at = f"{rate / 1e12:.0f} TFLOP/s (bf16 matmul measured in this run)" if rate else "no measured rate"
    arms = [a for a in ARMS["prefill"] if any(a in r["arms"] for r in prefill)]
    lines = [
        "",
        "Prefill, every arm (µs; change of kdakit vs each); compute floor: the chunked prefill's FLOPs "
        f"at {at}:",
        "",
        "| shape | " + " | ".join(ARMS["prefill"][a] for a in arms) + " | HBM floor | compute floor | "
        "kdakit / compute floor |",
        "|---|" + "---:|" * (len(arms) + 3),
    ]
    for row in prefill:
        ours = _arm_median(row, KDAKIT)
        cells = []
        for arm in arms:
            cell = _arm_cell(row, arm)
            ch = change(ours, _arm_median(row, arm))
            cells.append(cell if arm == KDAKIT or ch is None else f"{cell} ({_fmt_change(ch)})")
        compute = row.get("compute_floor_us")
        ratio = f"{ours / compute:.1f}×" if ours and compute else "—"
        lines.append(
            f"| {row['shape_label']} | "
            + " | ".join(cells)
            + f" | {_fmt_us(row.get('floor_us'))} | {_fmt_us(compute)} | {ratio} |"
        )
    return lines


def verify_layer_table(result: dict) -> list[str]:
    """The CuTe-verify PR's per-layer table: conv1d update + recurrence per request count, snapshots for
    every arm, ReplaySSM rings for SGLang's Triton (verify + commit fold, and the fold alone), CuTe where it
    runs."""
    rows = [r for r in result["rows"] if r["phase"] == verify_layer.PHASE]
    if not rows:
        return []
    keys = list(verify_layer.MODES)
    lines = [
        "Target verify per layer (conv1d update + recurrence; µs, do_bench_cudagraph median per round, "
        "median of the rounds; fixed buffers):",
        "",
        "| requests × tokens | "
        + " | ".join(verify_layer.MODES[k][2] for k in keys)
        + " | commit fold alone | HBM floor (snapshots / ring) |",
        "|---|" + "---:|" * (len(keys) + 2),
    ]
    notes = {}
    for row in rows:
        cells = []
        for key in keys:
            entry = row["arms"].get(key)
            if entry and entry.get("status") == "missing":
                notes[key] = entry.get("error", "")
            cells.append(_arm_cell(row, key) if entry else "—")
        fold = row["arms"].get("triton:ring", {}).get("commit_fold", {}).get("median")
        floors = f"{_fmt_us(row.get('floor_us'))} / {_fmt_us(row.get('floor_ring_us'))}"
        lines.append(f"| {row['shape_label']} | " + " | ".join(cells) + f" | {_fmt_us(fold)} | {floors} |")
    for key, why in notes.items():
        lines.append(f"\n{verify_layer.MODES[key][2]}: {why}")
    return lines
