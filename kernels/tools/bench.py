"""`kdakit kernels bench`: SGLang's Triton and Helion KDA kernels against kdakit's, in the PR's table format.

Timing is kernels/tools/timing.py's method (CUDA-graph per-call medians, L2-cold slot rotation, in-graph
restore for prefill, single-call replays with L2 flushed, HBM floor from the measured copy bandwidth). Every
arm's outputs and states are checked against SGLang's Triton kernel before it is timed. Shapes and defaults
come from kernels/shapes.toml. Each shape is timed in `repeats` rounds: every arm once per round, the order
rotated round to round, so drift and thermal state hit every arm alike; the table shows each arm's median over
the rounds, and kdakit's time over each other arm's gets a 95 % interval paired by round
(kdakit.records.stats).

The pure parts (byte counts, statistics, table, JSON) run anywhere; timing needs an NVIDIA GPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import socket
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kdakit.kernels import shapes
from kdakit.kernels.tools.timing import (
    L2_COLD_BYTES,
    MIB,
    PREFILL_CALLS,
    GraphTimer,
    calls_per_graph,
    measure_copy_bandwidth,
    slot_sets,
)

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError

RAW_NAME = "kernels-bench.json"
RECORD_NAME = "kernels.result.json"


# ---------------------------------------------------------------------------------------------------------
# Configuration


PHASES = ("prefill", "decode", "verify")
_MODEL, _BENCH = shapes.load()["model"], shapes.load()["bench"]


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """One bench run; the defaults are kernels/shapes.toml's."""

    phases: tuple[str, ...] = PHASES
    decode_batches: tuple[int, ...] = tuple(_BENCH["decode_batches"])
    verify_batches: tuple[int, ...] = tuple(_BENCH["verify_batches"])
    draft_tokens: int = _MODEL["draft_tokens"]
    prefill_shapes: tuple[tuple[int, int], ...] = shapes.prefill_shapes()
    heads: int = _MODEL["heads"]
    value_heads: int = _MODEL["heads"]
    head_dim: int = _MODEL["head_dim"]
    lower_bound: float = _MODEL["lower_bound"]
    replays: int = _BENCH["replays"]
    single_replays: int = _BENCH["single_replays"]
    pool_bytes: int = _MODEL["pool_slots"] * _MODEL["heads"] * _MODEL["head_dim"] ** 2 * 4  # fp32 states
    repeats: int = _BENCH["repeats"]  # rounds per shape, arms interleaved
    band_pct: float = _BENCH["band_pct"]  # the "within" band of the kdakit / arm verdicts
    seed: int = 0
    kdakit_configs: str = "shipped"  # "shipped", "default", or "both" (adds the helion-kdakit-default arm)


# (phase, arm id) -> (column family, label). "triton" rows are the reference each change is measured against.
ARMS = {
    "decode": {
        "triton": "SGLang Triton, non-packed (server path with a bounded gate)",
        "triton-packed": "SGLang Triton packed kernel (CUDA-JIT dispatch off)",
        "triton-packed-dispatch": "SGLang packed dispatch (CUDA JIT at B >= 8, fp32 state)",
        "helion-upstream": "SGLang upstream Helion",
        "helion-kdakit": "kdakit Helion",
        "helion-kdakit-default": "kdakit Helion, default configs",
    },
    "verify": {
        "triton": "SGLang Triton verify",
        "helion-upstream": "SGLang upstream Helion",
        "helion-kdakit": "kdakit Helion",
        "helion-kdakit-default": "kdakit Helion, default configs",
    },
    "prefill": {
        "triton": "SGLang Triton chunk_kda",
        "helion-upstream": "SGLang upstream Helion chunk_kda",
        "helion-kdakit": "kdakit Helion chunk_kda",
        "helion-kdakit-default": "kdakit Helion chunk_kda, default configs",
    },
}


# Arms that run only when asked for (`--configs both`): absent from a run's rows otherwise, never "missing".
# helion-kdakit runs the configs of `--configs` (shipped: tuned files where valid); helion-kdakit-default the
# module defaults, in the same run, so tuned vs default is measured side by side.
OPTIONAL_ARMS = frozenset({"helion-kdakit-default"})
KDAKIT = "helion-kdakit"  # the arm compared with every other one
CONFIG_MODES = ("shipped", "default", "both")


def parse_int_list(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--{name}: expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"--{name}: expected positive integers, got {text!r}")
    return values


def parse_prefill_shapes(text: str) -> tuple[tuple[int, int], ...]:
    shapes = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise UsageError(f"--prefill-shapes: expected BATCHxTOKENS items like 1x4096, got {item!r}")
        shapes.append((int(parts[0]), int(parts[1])))
    if not shapes:
        raise UsageError("--prefill-shapes: no shape given")
    return tuple(shapes)


def parse_phases(text: str) -> tuple[str, ...]:
    phases = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in phases if p not in PHASES]
    if bad or not phases:
        raise UsageError(f"--phases: expected a subset of {','.join(PHASES)}, got {text!r}")
    return tuple(p for p in PHASES if p in phases)


# ---------------------------------------------------------------------------------------------------------
# Bytes a call must move (each input read once, each output written once) and the floor they imply.


def _state_bytes(hv: int, k: int, v: int, state_itemsize: int = 4) -> int:
    return hv * v * k * state_itemsize


def decode_bytes(batch: int, h: int, hv: int, k: int, v: int, act: int = 2, state: int = 4) -> int:
    per_request = (
        2 * _state_bytes(hv, k, v, state)  # state read and written back
        + (2 * h * k + hv * v) * act  # mixed_qkv
        + hv * k * act  # raw gate a
        + hv * act  # raw beta b
        + hv * v * act  # output
        + 4  # slot index
    )
    params = hv * 4 + hv * k * 4  # A_log, dt_bias (fp32)
    return batch * per_request + params


def verify_bytes(
    batch: int, tokens: int, h: int, hv: int, k: int, v: int, act: int = 2, state: int = 4
) -> int:
    per_request = (
        _state_bytes(hv, k, v, state)  # committed state read once, never written
        + tokens * _state_bytes(hv, k, v, 4)  # one fp32 snapshot written per candidate
        + tokens * ((2 * h * k + hv * v) * act + hv * k * act + hv * act + hv * v * act)
        + 2 * 4  # slot and snapshot-row indices
    )
    params = hv * 4 + hv * k * 4 + (batch + 1) * 4
    return batch * per_request + params


def prefill_bytes(
    batch: int, tokens: int, h: int, hv: int, k: int, v: int, act: int = 2, state: int = 4
) -> int:
    total = batch * tokens
    per_token = (2 * h * k + hv * v) * act + hv * k * act + hv * act + hv * v * act  # q k v g beta in, o out
    return total * per_token + batch * 2 * _state_bytes(hv, k, v, state) + hv * 4 + hv * k * 4


def floor_us(nbytes: int, bandwidth_bytes_per_s: float | None) -> float | None:
    if not bandwidth_bytes_per_s:
        return None
    return nbytes / bandwidth_bytes_per_s * 1e6


def change(candidate: float | None, reference: float | None) -> float | None:
    """(candidate - reference) / reference, as a fraction (negative = faster)."""
    if candidate is None or reference is None or reference <= 0:
        return None
    return (candidate - reference) / reference


def summarize(samples: list[float]) -> dict[str, Any]:
    """Median and spread of per-call samples (µs)."""
    if not samples:
        return {"n": 0, "median": None, "p20": None, "p80": None, "min": None}
    ordered = sorted(samples)

    def quantile(q: float) -> float:
        pos = q * (len(ordered) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "p20": quantile(0.2),
        "p80": quantile(0.8),
        "min": ordered[0],
    }


# ---------------------------------------------------------------------------------------------------------
# Rounds: every arm timed once per round, the order rotated, kdakit compared with each arm round by round.


def time_rounds(
    arms: list[str], time_arm: Callable[[str], dict], repeats: int
) -> tuple[dict[str, list[dict]], dict[str, Exception]]:
    """`repeats` rounds, each timing every arm once, the order rotated by one arm per round (ABC, BCA, CAB,
    ...). Returns each arm's rounds ({"round", "position", **time_arm(arm)}) and the arms that raised (left
    out of the later rounds)."""
    rounds: dict[str, list[dict]] = {arm: [] for arm in arms}
    errors: dict[str, Exception] = {}
    for r in range(repeats):
        shift = r % len(arms) if arms else 0
        for position, arm in enumerate(arms[shift:] + arms[:shift]):
            if arm in errors:
                continue
            try:
                rounds[arm].append({"round": r, "position": position, **time_arm(arm)})
            except Exception as exc:
                errors[arm] = exc
    return rounds, errors


def _median_of(samples: list[float]) -> float | None:
    return statistics.median(samples) if samples else None


def arm_timing(rounds: list[dict]) -> dict:
    """An arm's timing fields from its rounds: every sample list pooled in round order, per_call and
    single_call summarizing the pooled samples except for the median, which is the median over rounds of
    each round's median (with one round, that round's median: the fields of a record without rounds)."""
    timing = {k: [x for r in rounds for x in r[k]] for k, v in rounds[0].items() if isinstance(v, list)}
    for summary, samples in (("per_call", "samples_us"), ("single_call", "single_samples_us")):
        timing[summary] = summarize(timing.get(samples, []))
        medians = [statistics.median(r[samples]) for r in rounds if r.get(samples)]
        if medians:
            timing[summary]["median"] = statistics.median(medians)
    timing["rounds"] = [
        {
            "round": r["round"],
            "position": r["position"],
            "per_call_us": _median_of(r.get("samples_us", [])),
            "single_call_us": _median_of(r.get("single_samples_us", [])),
        }
        for r in rounds
    ]
    return timing


def kdakit_vs(row: dict, band_pct: float) -> dict[str, dict]:
    """kdakit's per-call time / each other arm's, as kdakit.records.stats' paired ratio interval over the
    rounds both arms ran (a pair: one round's two medians) and its verdict; only arms sharing >= 2 rounds
    with kdakit."""
    ours = _round_values(row, KDAKIT)
    if len(ours) < 2:
        return {}
    from kdakit.records import stats  # scipy: imported only for a record with rounds

    out = {}
    for arm in (a for a in row["arms"] if a != KDAKIT):
        theirs = _round_values(row, arm)
        common = sorted(ours.keys() & theirs.keys())  # pairs: the same round
        if len(common) < 2:
            continue
        try:
            ci = stats.paired_ratio_ci([theirs[r] for r in common], [ours[r] for r in common])
        except ValueError:  # no positive pair (a prefill time at or below its restore's)
            continue
        out[arm] = {"ci": dataclasses.asdict(ci), "verdict": stats.verdict(ci, band_pct)}
    return out


def _round_values(row: dict, arm: str) -> dict[int, float]:
    entry = row["arms"].get(arm, {})
    if entry.get("status") != "ok":
        return {}
    return {r["round"]: r["per_call_us"] for r in entry.get("rounds", []) if r["per_call_us"] is not None}


# ---------------------------------------------------------------------------------------------------------
# The printed table (PR format) and the records.


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
    with the HBM floor; then the decode Triton paths and the single-call replay latencies."""
    rows = result["rows"]
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
    lines += ["", "Single-call graph replay (µs, L2 flushed before each replay; includes launch):", ""]
    arms = ["triton", "triton-packed", "triton-packed-dispatch", "helion-upstream", "helion-kdakit"]
    arms += [a for a in sorted(OPTIONAL_ARMS) if any(a in r["arms"] for r in rows)]
    lines.append("| phase | shape | " + " | ".join(arms) + " |")
    lines.append("|---|---|" + "---:|" * len(arms))
    for row in rows:
        if row["phase"] == "prefill":
            continue
        cells = [_arm_cell(row, a, "single_call") if a in row["arms"] else "" for a in arms]
        lines.append(f"| {row['phase']} | {row['shape_label']} | " + " | ".join(cells) + " |")
    lines += config_comparison(result)
    failed = [
        f"{row['phase']} {row['shape_label']} {arm}: {entry.get('error') or entry.get('check')}"
        for row in rows
        for arm, entry in row["arms"].items()
        if entry.get("status") == "failed" or not entry.get("check", {}).get("ok", True)
    ]
    if failed:
        lines += ["", "Failures:"] + [f"- {f}" for f in failed]
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
    """Which of the six prefill kernels ran a shipped config for this row's token bucket in `mode`."""
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


def normalized_rows(result: dict) -> list[dict]:
    """Rows for the kdakit.result.v1 `kernels` record: one per (phase, shape, arm)."""
    out = []
    for row in result["rows"]:
        for arm_id, entry in row["arms"].items():
            status = entry.get("status", "failed")
            if status == "ok" and not entry.get("check", {}).get("ok", True):
                status = "failed"
            item = {
                "phase": row["phase"],
                "shape": row["shape"],
                "arm": "triton" if arm_id.startswith("triton") else "helion",
                "variant": arm_id,
                "median_us": entry["per_call"]["median"] if entry.get("status") == "ok" else None,
                "samples": entry["per_call"]["n"] if entry.get("status") == "ok" else 0,
                "floor_us": row.get("floor_us"),
                "status": status,
            }
            if entry.get("status") == "ok":
                item["single_call_us"] = entry["single_call"]["median"]
            if entry.get("error") or status == "failed":
                item["error"] = entry.get("error") or f"check against Triton failed: {entry.get('check')}"
            out.append(item)
    return out


def write_outputs(result: dict, out_dir: Path, run_id: str) -> tuple[Path, Path | None]:
    """The raw JSON (every sample) and, where kdakit.records.results imports, a validated `kernels` record."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / RAW_NAME
    raw.write_text(json.dumps(result, indent=1) + "\n")
    try:
        return raw, write_record(result, out_dir, run_id)
    except ImportError:  # no jsonschema on the bench host: `kdakit kernels record` writes it later
        return raw, None


def write_record(result: dict, out_dir: Path, run_id: str) -> Path:
    """The normalized kdakit.result.v1 `kernels` record; GPU, driver, host and versions come from the
    bench run itself (so a record written later, on another machine, still describes the bench host)."""
    from kdakit.records import provenance, results

    env = result["environment"]
    prov = provenance.gather()
    prov.update(gpus=[env["gpu"]] if env.get("gpu") else [], driver=env.get("driver"))
    prov.update(git_sha=env.get("git_sha"), git_dirty=env.get("git_dirty"))
    prov["hostname"] = env.get("hostname") or prov.get("hostname")
    prov["python"] = env.get("versions", {}).get("python") or prov.get("python")
    prov["tools"] = {k: v for k, v in env.get("versions", {}).items() if k != "python"}
    record = results.new_record(
        "kernels",
        run_id=run_id,
        host=env.get("hostname") or socket.gethostname(),
        sku=profiles.canonical_sku(profiles.sku_of_gpus([env["gpu"]] if env.get("gpu") else [])),
        arm="both",
        protocol="kernels-bench",
        metrics={
            "gpu": env.get("gpu") or "unknown",
            "rows": normalized_rows(result),
            "copy_bandwidth_bytes_per_s": result["copy_bandwidth"].get("bytes_per_s"),
            "versions": env.get("versions", {}),
        },
        provenance=prov,
        notes=result.get("notes", []),
        artifacts=[RAW_NAME],
    )
    return results.write_result(Path(out_dir) / RECORD_NAME, record)


# ---------------------------------------------------------------------------------------------------------
# GPU timing


def _torch():
    import torch

    return torch


def rel_err(x, ref) -> float:
    torch = _torch()
    x64, r64 = x.detach().double(), ref.detach().double()
    if not torch.isfinite(x64).all():
        return math.inf
    denom = torch.linalg.vector_norm(r64).item()
    return torch.linalg.vector_norm(x64 - r64).item() / (denom if denom > 0 else 1.0)


TOLERANCES = {  # relative L2 error vs SGLang's Triton kernel
    "out": 2e-2,  # bf16 outputs
    "state": 1e-4,  # fp32 recurrent state and snapshots (decode/verify)
    "prefill_state": 2e-2,  # chunked prefill: bf16 intermediates
}


def _check(errors: dict[str, float], tolerance: dict[str, float], extra: dict | None = None) -> dict:
    ok = all(errors[k] <= tolerance[k] for k in errors)
    result = {"ok": ok and all((extra or {}).values()), "rel_err": errors, "tolerance": tolerance}
    if extra:
        result.update(extra)
    return result


# ---------------------------------------------------------------------------------------------------------
# Kernel arms


def load_arms(
    upstream_source: str = "auto", kdakit_configs: str = "shipped"
) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """(callables, why-missing, info). Keys: decode/verify/prefill arm ids as in ARMS; with kdakit_configs
    "both", also kdakit's kernels run under the default configs (helion-kdakit-default)."""
    from kdakit.kernels.tools import upstream

    found: dict[str, Any] = {}
    missing: dict[str, str] = {}
    info: dict[str, Any] = {}
    try:
        up = upstream.load(upstream_source)
        info["upstream_source"] = up.source
        info["upstream_missing"] = up.missing
        found["decode:triton"] = up.triton_recurrent
        found["verify:triton"] = up.triton_recurrent
        found["decode:triton-packed"] = up.triton_packed_decode
        found["decode:triton-packed-dispatch"] = up.triton_packed_decode_dispatch
        found["prefill:triton"] = up.triton_chunk_kda
        found["decode:helion-upstream"] = up.helion_packed_decode
        found["verify:helion-upstream"] = up.helion_verify
        found["prefill:helion-upstream"] = up.helion_chunk_kda
        for key in [k for k, v in found.items() if v is None]:
            del found[key]
            missing[key] = "; ".join(f"{k}: {v}" for k, v in up.missing.items()) or "not importable"
    except Exception as exc:
        for phase, arms in ARMS.items():
            for arm in arms:
                if not arm.endswith("kdakit") and arm not in OPTIONAL_ARMS:
                    missing[f"{phase}:{arm}"] = f"SGLang kernels unavailable: {type(exc).__name__}: {exc}"
    import importlib

    from kdakit.kernels import integration

    for phase, module in integration.KDAKIT_MODULES.items():
        try:
            found[f"{phase}:helion-kdakit"] = getattr(
                importlib.import_module(module), integration.ENTRY_POINTS[phase]
            )
        except Exception as exc:
            missing[f"{phase}:helion-kdakit"] = f"{type(exc).__name__}: {exc}"
    if kdakit_configs == "both":
        for phase in PHASES:
            if f"{phase}:helion-kdakit" in found:
                found[f"{phase}:helion-kdakit-default"] = with_default_configs(
                    found[f"{phase}:helion-kdakit"]
                )
    return found, missing, info


def with_default_configs(fn: Callable) -> Callable:
    """`fn` (a kdakit entry point) selecting the kernel modules' default configs, shipped files ignored."""
    from kdakit.kernels import tuned

    def call(*args, **kwargs):
        with tuned.configs_mode("default"):
            return fn(*args, **kwargs)

    return call


def _decode_inputs(cfg: BenchConfig, batch: int, sets: int, gen):
    torch = _torch()
    H, HV, K, V = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim
    dim = 2 * H * K + HV * V
    return [
        {
            "mixed_qkv": torch.randn(batch, dim, device="cuda", dtype=torch.bfloat16, generator=gen),
            "a": torch.randn(batch, HV * K, device="cuda", dtype=torch.bfloat16, generator=gen),
            "b": torch.randn(batch, HV, device="cuda", dtype=torch.bfloat16, generator=gen),
            "out": torch.empty(batch, 1, HV, V, device="cuda", dtype=torch.bfloat16),
        }
        for _ in range(sets)
    ]


def _params(cfg: BenchConfig, gen):
    torch = _torch()
    HV, K = cfg.value_heads, cfg.head_dim
    A_log = torch.log(torch.empty(HV, device="cuda").uniform_(1.0, 16.0, generator=gen))
    dt_bias = torch.randn(HV * K, device="cuda", generator=gen) * 0.5
    return A_log.float().contiguous(), dt_bias.float().contiguous()


def _split_qkv(packed, cfg: BenchConfig) -> tuple:
    """q, k, v as [1, T, heads, dim] views of the packed projection, the way SGLang's adapters split it."""
    H, HV, K, V = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim
    q, k, v = packed.split([H * K, H * K, HV * V], dim=-1)
    return (
        q.unflatten(-1, (H, K)).unsqueeze(0),
        k.unflatten(-1, (H, K)).unsqueeze(0),
        v.unflatten(-1, (HV, V)).unsqueeze(0),
    )


def decode_call(arm: str, fn, cfg: BenchConfig, x: dict, A_log, dt_bias, pool, idx, qsl):
    """One decode call the way SGLang's adapters make it."""
    HV, K, V = cfg.value_heads, cfg.head_dim, cfg.head_dim
    scale = K**-0.5
    if arm == "triton":  # TritonKDAKernel.decode: q/k/v are views of the packed projection
        batch = x["mixed_qkv"].shape[0]
        q, k, v = _split_qkv(x["mixed_qkv"], cfg)
        o = fn(
            A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=x["a"], b=x["b"],
            initial_state_source=pool, initial_state_indices=idx, cu_seqlens=qsl,
            use_qk_l2norm_in_kernel=True, softplus_beta=1.0, softplus_threshold=20.0,
            is_kda=True, lower_bound=cfg.lower_bound,
        )  # fmt: skip
        return o.reshape(batch, HV, V)
    fn(
        mixed_qkv=x["mixed_qkv"], a=x["a"], b=x["b"], A_log=A_log, dt_bias=dt_bias, scale=scale,
        initial_state=pool, out=x["out"], ssm_state_indices=idx, use_qk_l2norm_in_kernel=True,
        lower_bound=cfg.lower_bound,
    )  # fmt: skip
    return x["out"].reshape(x["out"].shape[0], HV, V)


def verify_call(arm: str, fn, cfg: BenchConfig, x: dict, A_log, dt_bias, pool, idx, rows, qsl, snapshots):
    HV, V = cfg.value_heads, cfg.head_dim
    q, k, v = _split_qkv(x["mixed_qkv"], cfg)
    common = dict(
        A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=x["a"], b=x["b"],
        intermediate_states_buffer=snapshots, intermediate_state_indices=rows,
        cache_steps=cfg.draft_tokens, retrieve_parent_token=None, lower_bound=cfg.lower_bound,
    )  # fmt: skip
    if arm == "triton":  # TritonKDAKernel.target_verify
        o = fn(
            initial_state_source=pool, initial_state_indices=idx, cu_seqlens=qsl,
            use_qk_l2norm_in_kernel=True, softplus_beta=1.0, softplus_threshold=20.0, is_kda=True,
            disable_state_update=True, **common,
        )  # fmt: skip
    else:  # HelionKDAKernel.target_verify
        o = fn(ssm_states=pool, cache_indices=idx, query_start_loc=qsl, **common)
    return o.reshape(-1, HV, V)


def prefill_call(fn, cfg: BenchConfig, x: dict, A_log, dt_bias, pool, idx, cu):
    """HelionKDAKernel/TritonKDAKernel.extend: q/k/v views of the conv output, o written into v."""
    q, k, v = _split_qkv(x["qkv"], cfg)
    out = fn(
        q=q, k=k, v=v, g=x["g"], beta=x["beta"], initial_state=pool, initial_state_indices=idx,
        use_qk_l2norm_in_kernel=True, cu_seqlens=cu, A_log=A_log, dt_bias=dt_bias,
        lower_bound=cfg.lower_bound, beta_is_raw=True, output_intermediate_states=False,
    )  # fmt: skip
    return out[0] if isinstance(out, tuple) else out


def _warm(fn: Callable[[], Any], times: int = 4) -> None:
    torch = _torch()
    for _ in range(times):
        fn()
    torch.cuda.synchronize()


def _arm_entry(status: str, **kw) -> dict:
    return {"status": status, **kw}


def _raised(exc: Exception) -> dict:
    # SGLang's CUDA-JIT toolchain is absent from the extracted kernel tree: not a kernel failure.
    status = "missing" if type(exc).__name__ == "CudaJitUnavailable" else "failed"
    return _arm_entry(status, error=f"{type(exc).__name__}: {exc}"[:2000])


def run_arms(
    phase: str,
    row: dict,
    arms: dict,
    missing: dict,
    observe: Callable,
    time_arm: Callable,
    repeats: int = 1,
    band_pct: float = BenchConfig.band_pct,
) -> None:
    """Check every arm of `phase` into row["arms"], then time them in `repeats` rotated rounds (time_rounds)
    and compare kdakit's with each other arm by round (row["kdakit_vs"], with >= 2 rounds).
    observe(arm, fn) -> ({name: tensor}, {flag: bool}) runs the arm once on the check inputs; the first arm
    that runs (SGLang's Triton) is the reference the others' relative errors are measured against.
    time_arm(arm, fn) -> one round's samples ({"samples_us": [...], ...}). An arm that raises is recorded
    ("missing" where SGLang's CUDA-JIT toolchain is absent, else "failed")."""
    reference = None
    for arm in ARMS[phase]:
        key = f"{phase}:{arm}"
        if key not in arms:
            if arm not in OPTIONAL_ARMS:
                row["arms"][arm] = _arm_entry("missing", error=missing.get(key, "not available"))
            continue
        try:
            outputs, flags = observe(arm, arms[key])
            if reference is None:
                reference = outputs
                check = _check(dict.fromkeys(outputs, 0.0), TOLERANCES, {"reference": arm, **flags})
            else:
                errors = {name: rel_err(out, reference[name]) for name, out in outputs.items()}
                check = _check(errors, {name: TOLERANCES[name] for name in outputs}, flags)
            row["arms"][arm] = _arm_entry("ok", check=check)
        except Exception as exc:
            row["arms"][arm] = _raised(exc)
    checked = [arm for arm, entry in row["arms"].items() if entry["status"] == "ok"]
    rounds, errors = time_rounds(checked, lambda arm: time_arm(arm, arms[f"{phase}:{arm}"]), repeats)
    for arm in checked:
        if arm in errors:
            row["arms"][arm] = _raised(errors[arm])
        else:
            row["arms"][arm].update(arm_timing(rounds[arm]))
    if repeats > 1:
        try:
            row["kdakit_vs"] = kdakit_vs(row, band_pct)
        except ImportError:  # no scipy on the bench host: the table computes it from the rounds later
            pass


def _time_rotating(timer: GraphTimer, calls: list[Callable[[], Any]]) -> dict:
    """Per-call samples of a graph of `calls` (slots rotating) and single-call replays of the first."""
    _warm(calls[0])
    return dict(samples_us=timer.per_call(calls), single_samples_us=timer.single_call(calls[0]))


def bench_decode(cfg: BenchConfig, batch: int, arms: dict, missing: dict, timer: GraphTimer, gen) -> dict:
    torch = _torch()
    H, HV, K, V = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim
    state_bytes = _state_bytes(HV, K, V)
    pool_slots = max(cfg.pool_bytes // state_bytes, 4 * batch)
    n_calls = calls_per_graph(batch, state_bytes)
    A_log, dt_bias = _params(cfg, gen)
    pool = torch.randn(pool_slots, HV, V, K, device="cuda", generator=gen) * 0.05
    sets = slot_sets(pool_slots, batch, n_calls, cfg.seed + batch)
    idx = [torch.tensor(s, dtype=torch.int32, device="cuda") for s in sets]
    inputs = _decode_inputs(cfg, batch, min(n_calls, 64), gen)
    qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    nbytes = decode_bytes(batch, H, HV, K, V)
    row = dict(phase="decode", shape=f"{batch}x1", shape_label=f"{batch} × 1", batch=batch, tokens=1)
    row.update(bytes=nbytes, calls_per_graph=n_calls, pool_slots=pool_slots, arms={})

    # Check every arm against Triton on its own copy of a few slots, outputs poisoned first.
    check_pool = pool[: 2 * batch].clone()
    check_idx = torch.arange(batch, 2 * batch, dtype=torch.int32, device="cuda").flip(0).contiguous()

    def observe(arm, fn):
        state = check_pool.clone()
        inputs[0]["out"].fill_(float("nan"))
        out = decode_call(arm, fn, cfg, inputs[0], A_log, dt_bias, state, check_idx, qsl).clone()
        torch.cuda.synchronize()
        untouched = bool(torch.equal(state[:batch], check_pool[:batch]))
        return {"out": out, "state": state}, {"other_slots_untouched": untouched}

    def time_arm(arm, fn):
        def make(i):
            x = inputs[i % len(inputs)]
            return lambda: decode_call(arm, fn, cfg, x, A_log, dt_bias, pool, idx[i], qsl)

        return _time_rotating(timer, [make(i) for i in range(n_calls)])

    run_arms("decode", row, arms, missing, observe, time_arm, cfg.repeats, cfg.band_pct)
    return row


def bench_verify(cfg: BenchConfig, batch: int, arms: dict, missing: dict, timer: GraphTimer, gen) -> dict:
    torch = _torch()
    H, HV, K, V, T = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim, cfg.draft_tokens
    state_bytes = _state_bytes(HV, K, V)
    pool_slots = max(cfg.pool_bytes // state_bytes, 4 * batch)
    n_calls = calls_per_graph(batch, state_bytes * (1 + T))
    A_log, dt_bias = _params(cfg, gen)
    pool = torch.randn(pool_slots, HV, V, K, device="cuda", generator=gen) * 0.05
    sets = slot_sets(pool_slots, batch, n_calls, cfg.seed + 1000 + batch)
    idx = [torch.tensor(s, dtype=torch.int32, device="cuda") for s in sets]
    # Snapshot rows rotate too, over >= L2_COLD_BYTES of scratch.
    row_sets = max(1, math.ceil(L2_COLD_BYTES / (batch * T * state_bytes)))
    snapshots = torch.empty(row_sets * batch, T, HV, V, K, device="cuda")
    rows = [
        torch.arange((i % row_sets) * batch, (i % row_sets + 1) * batch, dtype=torch.int32, device="cuda")
        for i in range(n_calls)
    ]
    inputs = [
        {
            "mixed_qkv": torch.randn(batch * T, 2 * H * K + HV * V, device="cuda", dtype=torch.bfloat16,
                                     generator=gen),
            "a": torch.randn(batch * T, HV * K, device="cuda", dtype=torch.bfloat16, generator=gen),
            "b": torch.randn(batch * T, HV, device="cuda", dtype=torch.bfloat16, generator=gen),
        }
        for _ in range(min(n_calls, 32))
    ]  # fmt: skip
    qsl = torch.arange(0, batch * T + 1, T, dtype=torch.int32, device="cuda")
    nbytes = verify_bytes(batch, T, H, HV, K, V)
    row = dict(phase="verify", shape=f"{batch}x{T}", shape_label=f"{batch} × {T}", batch=batch, tokens=T)
    row.update(bytes=nbytes, calls_per_graph=n_calls, pool_slots=pool_slots, arms={})

    check_idx = idx[0]
    check_rows = rows[0]
    pool_before = pool[check_idx.long()].clone()

    def observe(arm, fn):
        snapshots.fill_(float("nan"))
        out = verify_call(arm, fn, cfg, inputs[0], A_log, dt_bias, pool, check_idx, check_rows, qsl,
                          snapshots).clone()  # fmt: skip
        snaps = snapshots[check_rows.long()].clone()
        torch.cuda.synchronize()
        pool_untouched = bool(torch.equal(pool[check_idx.long()], pool_before))
        return {"out": out, "state": snaps}, {"pool_untouched": pool_untouched}

    def time_arm(arm, fn):
        def make(i):
            x, r, slots = inputs[i % len(inputs)], rows[i], idx[i]
            return lambda: verify_call(arm, fn, cfg, x, A_log, dt_bias, pool, slots, r, qsl, snapshots)

        return _time_rotating(timer, [make(i) for i in range(n_calls)])

    run_arms("verify", row, arms, missing, observe, time_arm, cfg.repeats, cfg.band_pct)
    return row


def bench_prefill(cfg: BenchConfig, shape: tuple[int, int], arms: dict, missing: dict, timer: GraphTimer,
                  gen, calls: int = PREFILL_CALLS) -> dict:  # fmt: skip
    torch = _torch()
    H, HV, K, V = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim
    batch, tokens = shape
    total = batch * tokens
    A_log, dt_bias = _params(cfg, gen)
    dim = 2 * H * K + HV * V
    qkv0 = torch.randn(total, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    x = {
        "qkv": qkv0.clone(),
        "g": torch.randn(1, total, HV, K, device="cuda", dtype=torch.bfloat16, generator=gen),
        "beta": torch.randn(1, total, HV, device="cuda", dtype=torch.bfloat16, generator=gen),
    }
    pool_slots = 4 * batch
    pool0 = torch.randn(pool_slots, HV, V, K, device="cuda", generator=gen) * 0.05
    pool = pool0.clone()
    idx = torch.arange(batch, 2 * batch, dtype=torch.int32, device="cuda")
    cu = torch.arange(0, total + 1, tokens, dtype=torch.int32, device="cuda")
    nbytes = prefill_bytes(batch, tokens, H, HV, K, V)
    row = dict(phase="prefill", shape=f"{batch}x{tokens}", shape_label=f"{batch} × {tokens}", batch=batch)
    row.update(tokens=tokens, bytes=nbytes, calls_per_graph=calls, arms={})

    def restore():
        x["qkv"].copy_(qkv0)

    restore_samples = timer.per_call([restore] * calls)
    row["restore"] = summarize(restore_samples)
    restore_median = row["restore"]["median"]

    def observe(arm, fn):
        restore()
        pool.copy_(pool0)
        out = prefill_call(fn, cfg, x, A_log, dt_bias, pool, idx, cu).clone()
        state = pool[idx.long()].clone()
        torch.cuda.synchronize()
        return {"out": out, "prefill_state": state}, {}

    def time_arm(arm, fn):
        def call():
            restore()
            prefill_call(fn, cfg, x, A_log, dt_bias, pool, idx, cu)

        _warm(call)
        with_restore = timer.per_call([call] * calls)
        return dict(samples_us=[s - restore_median for s in with_restore], with_restore_us=with_restore)

    run_arms("prefill", row, arms, missing, observe, time_arm, cfg.repeats, cfg.band_pct)
    return row


def environment() -> dict:
    torch = _torch()
    from importlib import metadata

    from kdakit.facts import pins

    versions = {"python": platform.python_version()}
    for dist in ("torch", "triton", "helion", "sglang"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    props = torch.cuda.get_device_properties(0)
    driver = None
    try:
        import subprocess

        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.strip().splitlines()[0]  # fmt: skip
    except Exception:
        pass
    pinned = pins.load()["packages"]
    try:  # the code that ran (a record written later elsewhere must not take that machine's checkout)
        from kdakit.records.provenance import git_sha

        sha, dirty = git_sha()
    except Exception:
        sha, dirty = None, None
    return {
        "git_sha": sha,
        "git_dirty": dirty,
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "capability": f"{props.major}.{props.minor}",
        "driver": driver,
        "cuda": torch.version.cuda,
        "versions": versions,
        "pins": {k: pinned.get(k) for k in ("torch", "triton", "helion", "sglang")},
        "pins_match": all(
            versions.get(k) and versions[k].split("+")[0] == pinned.get(k)
            for k in ("torch", "triton", "helion")
        ),
        "hostname": socket.gethostname(),
    }


def run(
    cfg: BenchConfig,
    upstream_source: str = "auto",
    log: Callable[[str], None] = print,
    partial_path: Path | None = None,
) -> dict:
    """Run every configured case; with partial_path, the rows so far are rewritten there after each case."""
    torch = _torch()
    if not torch.cuda.is_available():
        raise UsageError("kdakit kernels bench needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    started = time.time()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(cfg.seed)
    arms, missing, info = load_arms(upstream_source, cfg.kdakit_configs)
    log(f"arms: {sorted(arms)}; missing: {sorted(missing)}")
    env = environment()
    log(f"GPU {env['gpu']}, driver {env['driver']}, versions {env['versions']}")
    bandwidth = measure_copy_bandwidth()
    log(f"copy bandwidth {bandwidth['bytes_per_s'] / 1e12:.2f} TB/s")
    timer = GraphTimer(cfg.replays, cfg.single_replays)
    rows = []
    # Decode and verify first (the targets), prefill last; rows are reported in the PR's order.
    for phase in sorted(cfg.phases, key=("decode", "verify", "prefill").index):
        if phase == "prefill":
            cases = [(bench_prefill, s) for s in cfg.prefill_shapes]
        elif phase == "decode":
            cases = [(bench_decode, b) for b in cfg.decode_batches]
        else:
            cases = [(bench_verify, b) for b in cfg.verify_batches]
        for bench, shape in cases:
            t0 = time.time()
            row = bench(cfg, shape, arms, missing, timer, gen)
            row["floor_us"] = floor_us(row["bytes"], bandwidth["bytes_per_s"])
            rows.append(row)
            cells = {
                a: (round(e["per_call"]["median"], 2) if e["status"] == "ok" else e["status"])
                for a, e in row["arms"].items()
            }
            log(f"{phase} {row['shape_label']}: {cells} ({time.time() - t0:.1f} s)")
            if partial_path is not None:
                partial = {"environment": env, "copy_bandwidth": bandwidth, "rows": rows}
                partial_path.write_text(json.dumps(partial))
            torch.cuda.empty_cache()
    rows.sort(key=lambda r: PHASES.index(r["phase"]))
    notes = []
    if not env["pins_match"]:
        notes.append(
            f"ran with torch {env['versions']['torch']}, triton {env['versions']['triton']}, "
            f"helion {env['versions']['helion']}, not the pins"
        )
    return {
        "kind": "kdakit.kernels-bench",
        "version": 1,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": time.time() - started,
        "config": dataclasses.asdict(cfg),
        "method": {
            "per_call": "median over replays of a CUDA graph of calls_per_graph back-to-back calls, / N",
            "rotation": f"slot sets disjoint per call; one graph cycle touches >= {L2_COLD_BYTES // MIB} MiB",
            "single_call": "one call per graph, L2 flushed (256 MiB write) before each timed replay",
            "prefill": "each call preceded by an in-graph restore of the packed qkv, its median subtracted",
            "check": f"relative L2 error vs SGLang Triton before timing; tolerances {TOLERANCES}",
            "rounds": f"{cfg.repeats} per shape, each timing every arm once, the order rotated by one arm "
            "per round; per_call/single_call median: over the rounds' medians; kdakit_vs: kdakit / arm, 95 % "
            f"t interval of the log ratios paired by round, verdict band ±{cfg.band_pct:g} %",
        },
        "environment": env,
        "upstream": info,
        "copy_bandwidth": bandwidth,
        "rows": rows,
        "notes": notes,
    }


def any_failure(result: dict) -> bool:
    return any(
        entry.get("status") == "failed" or not entry.get("check", {}).get("ok", True)
        for row in result["rows"]
        for entry in row["arms"].values()
    )
