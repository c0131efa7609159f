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
import importlib
import json
import math
import platform
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kdakit.kernels import shapes
from kdakit.kernels.tools import cost_model, timing, verify_layer
from kdakit.kernels.tools.bench_inputs import (
    TOLERANCES,
    check_errors,
    decode_call,
    decode_inputs,
    params,
    prefill_call,
    rel_err,
    torch_module,
    verify_call,
)
from kdakit.kernels.tools.timing import (
    L2_COLD_BYTES,
    MIB,
    PREFILL_CALLS,
    GraphTimer,
    calls_per_graph,
    measure_copy_bandwidth,
    measure_matmul_rate,
    slot_sets,
)

from kdakit.facts.errors import UsageError

# ---------------------------------------------------------------------------------------------------------
# Configuration


PHASES = ("prefill", "decode", "verify", "verify-layer")
# verify-layer (the CuTe-verify PR's per-layer table) runs only when asked for by name
DEFAULT_PHASES = ("prefill", "decode", "verify")
_MODEL, _BENCH = shapes.load()["model"], shapes.load()["bench"]


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """One bench run; the defaults are kernels/shapes.toml's."""

    phases: tuple[str, ...] = DEFAULT_PHASES
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
    verify_layer_requests: tuple[int, ...] = tuple(_BENCH["verify_layer_requests"])
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
        "fla": "FLA 0.6.0 chunk_kda (fla-core)",
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
# kdakit compared with each arm round by round.


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
# Kernel arms


# arm id -> the attribute of kdakit.kernels.tools.upstream's kernels (None where it did not import)
UPSTREAM_ARMS = {
    "decode:triton": "triton_recurrent",
    "verify:triton": "triton_recurrent",
    "decode:triton-packed": "triton_packed_decode",
    "decode:triton-packed-dispatch": "triton_packed_decode_dispatch",
    "prefill:triton": "triton_chunk_kda",
    "decode:helion-upstream": "helion_packed_decode",
    "verify:helion-upstream": "helion_verify",
    "prefill:helion-upstream": "helion_chunk_kda",
    "verify-layer:conv1d-update": "conv1d_update",
    "verify-layer:replayssm-commit": "replayssm_commit",
}


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
        found.update({key: getattr(up, name) for key, name in UPSTREAM_ARMS.items()})
        for key in [k for k, v in found.items() if v is None]:
            del found[key]
            missing[key] = "; ".join(f"{k}: {v}" for k, v in up.missing.items()) or "not importable"
    except Exception as exc:
        for phase, arms in ARMS.items():
            for arm in arms:
                if not arm.endswith("kdakit") and arm not in OPTIONAL_ARMS and arm != "fla":
                    missing[f"{phase}:{arm}"] = f"SGLang kernels unavailable: {type(exc).__name__}: {exc}"
    try:
        found["prefill:fla"] = fla_prefill(importlib.import_module(FLA_MODULE).chunk_kda)
        info["fla_version"] = _version("fla-core")
    except ImportError as exc:
        missing["prefill:fla"] = f"fla-core {FLA_VERSION} not installed ({type(exc).__name__}: {exc})"[:500]
    from kdakit.kernels import integration

    for phase, module in integration.KDAKIT_MODULES.items():
        try:
            found[f"{phase}:helion-kdakit"] = getattr(
                importlib.import_module(module), integration.ENTRY_POINTS[phase]
            )
        except Exception as exc:
            missing[f"{phase}:helion-kdakit"] = f"{type(exc).__name__}: {exc}"
    if kdakit_configs == "both":
        for phase in ARMS:
            if f"{phase}:helion-kdakit" in found:
                found[f"{phase}:helion-kdakit-default"] = with_default_configs(
                    found[f"{phase}:helion-kdakit"]
                )
    return found, missing, info


FLA_MODULE = "fla.ops.kda"
FLA_VERSION = "0.6.0"  # PyPI fla-core, a pure-Python wheel: the FLA release the prefill is compared with


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def fla_prefill(chunk_kda: Callable) -> Callable:
    """FLA's `chunk_kda` behind SGLang's prefill contract: the pool rows gathered into FLA's per-sequence
    states (V-first, as SGLang's pool), the gate, beta sigmoid and L2 norm in FLA's kernels, the final states
    written back into the pool; the output is FLA's own tensor."""

    def call(*, q, k, v, g, beta, initial_state, initial_state_indices, cu_seqlens, A_log, dt_bias,
             lower_bound, use_qk_l2norm_in_kernel, beta_is_raw, **_):  # fmt: skip
        import torch

        slots = initial_state_indices.long()
        with torch.no_grad():
            o, final = chunk_kda(
                q, k, v, g[:, : q.shape[1]], beta[:, : q.shape[1]],
                initial_state=initial_state[slots].float(), output_final_state=True,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=True,
                use_beta_sigmoid_in_kernel=beta_is_raw, safe_gate=lower_bound is not None,
                lower_bound=lower_bound, state_v_first=True, cu_seqlens=cu_seqlens.long(), A_log=A_log,
                dt_bias=dt_bias, use_graph=True, max_num_seqs=slots.numel(),
            )  # fmt: skip
        initial_state[slots] = final.to(initial_state.dtype)
        return o

    return call


def with_default_configs(fn: Callable) -> Callable:
    """`fn` (a kdakit entry point) selecting the kernel modules' default configs, shipped files ignored."""
    from kdakit.kernels import tuned

    def call(*args, **kwargs):
        with tuned.configs_mode("default"):
            return fn(*args, **kwargs)

    return call


def _warm(fn: Callable[[], Any], times: int = 4) -> None:
    torch = torch_module()
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
    progress: Callable[[str, dict], None] | None = None,
) -> None:
    """Check every arm of `phase` into row["arms"], then time them in `repeats` rotated rounds (time_rounds)
    and compare kdakit's with each other arm by round (row["kdakit_vs"], with >= 2 rounds).
    observe(arm, fn) -> ({name: tensor}, {flag: bool}) runs the arm once on the check inputs; the first arm
    that runs (SGLang's Triton) is the reference the others' relative errors are measured against.
    time_arm(arm, fn) -> one round's samples ({"samples_us": [...], ...}). An arm that raises is recorded
    ("missing" where SGLang's CUDA-JIT toolchain is absent, else "failed").
    progress(message, row), if given, follows each check and each timed round (a first call compiles, and
    can take minutes): until the rounds are summarized, each arm's per-call medians so far are in
    row["arms"][arm]["timed_rounds_us"]."""
    tell = timing.teller(progress, row)
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
                check = check_errors(dict.fromkeys(outputs, 0.0), TOLERANCES, {"reference": arm, **flags})
            else:
                errors = {name: rel_err(out, reference[name]) for name, out in outputs.items()}
                check = check_errors(errors, {name: TOLERANCES[name] for name in outputs}, flags)
            row["arms"][arm] = _arm_entry("ok", check=check)
        except Exception as exc:
            row["arms"][arm] = _raised(exc)
        tell(f"{arm} {row['arms'][arm]['status']}")
    checked = [arm for arm, entry in row["arms"].items() if entry["status"] == "ok"]

    def time_one(arm: str) -> dict:
        return time_arm(arm, arms[f"{phase}:{arm}"])

    rounds, errors = timing.time_rounds(checked, time_one, repeats, timing.rounds_so_far(row, repeats, tell))
    for arm in checked:
        row["arms"][arm].pop("timed_rounds_us", None)  # the summary's rounds hold them
        if arm in errors:
            row["arms"][arm] = _raised(errors[arm])
        else:
            row["arms"][arm].update(timing.arm_timing(rounds[arm]))
    if repeats > 1:
        try:
            row["kdakit_vs"] = kdakit_vs(row, band_pct)
        except ImportError:  # no scipy on the bench host: the table computes it from the rounds later
            pass


def _time_rotating(timer: GraphTimer, calls: list[Callable[[], Any]]) -> dict:
    """Per-call samples of a graph of `calls` (slots rotating) and single-call replays of the first."""
    _warm(calls[0])
    return dict(samples_us=timer.per_call(calls), single_samples_us=timer.single_call(calls[0]))


def bench_decode(cfg: BenchConfig, batch: int, arms: dict, missing: dict, timer: GraphTimer, gen,
                 progress=None) -> dict:  # fmt: skip
    torch = torch_module()
    H, HV, K, V = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim
    state_bytes = cost_model.state_bytes(HV, K, V)
    pool_slots = max(cfg.pool_bytes // state_bytes, 4 * batch)
    n_calls = calls_per_graph(batch, state_bytes)
    A_log, dt_bias = params(cfg, gen)
    pool = torch.randn(pool_slots, HV, V, K, device="cuda", generator=gen) * 0.05
    sets = slot_sets(pool_slots, batch, n_calls, cfg.seed + batch)
    idx = [torch.tensor(s, dtype=torch.int32, device="cuda") for s in sets]
    inputs = decode_inputs(cfg, batch, min(n_calls, 64), gen)
    qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    nbytes = cost_model.decode_bytes(batch, H, HV, K, V)
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

    run_arms("decode", row, arms, missing, observe, time_arm, cfg.repeats, cfg.band_pct, progress)
    return row


def bench_verify(cfg: BenchConfig, batch: int, arms: dict, missing: dict, timer: GraphTimer, gen,
                 progress=None) -> dict:  # fmt: skip
    torch = torch_module()
    H, HV, K, V, T = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim, cfg.draft_tokens
    state_bytes = cost_model.state_bytes(HV, K, V)
    pool_slots = max(cfg.pool_bytes // state_bytes, 4 * batch)
    n_calls = calls_per_graph(batch, state_bytes * (1 + T))
    A_log, dt_bias = params(cfg, gen)
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
    nbytes = cost_model.verify_bytes(batch, T, H, HV, K, V)
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

    run_arms("verify", row, arms, missing, observe, time_arm, cfg.repeats, cfg.band_pct, progress)
    return row


def bench_prefill(cfg: BenchConfig, shape: tuple[int, int], arms: dict, missing: dict, timer: GraphTimer,
                  gen, progress=None, calls: int = PREFILL_CALLS) -> dict:  # fmt: skip
    torch = torch_module()
    H, HV, K, V = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim
    batch, tokens = shape
    total = batch * tokens
    A_log, dt_bias = params(cfg, gen)
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
    nbytes = cost_model.prefill_bytes(batch, tokens, H, HV, K, V)
    row = dict(phase="prefill", shape=f"{batch}x{tokens}", shape_label=f"{batch} × {tokens}", batch=batch)
    row.update(tokens=tokens, bytes=nbytes, calls_per_graph=calls, arms={})
    row["flops"] = cost_model.prefill_flops(batch, tokens, H, HV, K, V)

    def restore():
        x["qkv"].copy_(qkv0)

    restore_samples = timer.per_call([restore] * calls)
    row["restore"] = timing.summarize(restore_samples)
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

    run_arms("prefill", row, arms, missing, observe, time_arm, cfg.repeats, cfg.band_pct, progress)
    return row


def environment() -> dict:
    torch = torch_module()
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
    torch = torch_module()
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
    matmul = measure_matmul_rate() if "prefill" in cfg.phases else {"flops_per_s": None}
    if matmul["flops_per_s"]:
        log(f"bf16 matmul rate {matmul['flops_per_s'] / 1e12:.0f} TFLOP/s")
    timer = GraphTimer(cfg.replays, cfg.single_replays)
    rows = []

    def write_partial(rows_so_far: list[dict]) -> None:
        if partial_path is not None:
            partial = {"kind": "kdakit.kernels-bench.partial", "config": dataclasses.asdict(cfg)}
            partial.update(environment=env, copy_bandwidth=bandwidth, matmul_rate=matmul, rows=rows_so_far)
            partial_path.write_text(json.dumps(partial))

    # Decode and verify first (the targets), prefill last; rows are reported in the PR's order.
    for phase in sorted(cfg.phases, key=("decode", "verify", "verify-layer", "prefill").index):
        if phase == "verify-layer":
            cases = [(verify_layer.bench_row, n) for n in cfg.verify_layer_requests]
        elif phase == "prefill":
            cases = [(bench_prefill, s) for s in cfg.prefill_shapes]
        elif phase == "decode":
            cases = [(bench_decode, b) for b in cfg.decode_batches]
        else:
            cases = [(bench_verify, b) for b in cfg.verify_batches]
        for bench, shape in cases:
            t0 = time.time()

            def progress(message: str, row: dict, phase=phase, t0=t0) -> None:
                log(f"{phase} {row['shape_label']}: {message} ({time.time() - t0:.1f} s)")
                write_partial([*rows, {**row, "in_progress": True}])

            row = bench(cfg, shape, arms, missing, timer, gen, progress=progress)
            row["floor_us"] = cost_model.floor_us(row["bytes"], bandwidth["bytes_per_s"])
            if "bytes_ring" in row:
                row["floor_ring_us"] = cost_model.floor_us(row["bytes_ring"], bandwidth["bytes_per_s"])
            if "flops" in row:
                row["compute_floor_us"] = cost_model.compute_floor_us(row["flops"], matmul["flops_per_s"])
            rows.append(row)
            cells = {
                a: (round(e["per_call"]["median"], 2) if e["status"] == "ok" else e["status"])
                for a, e in row["arms"].items()
            }
            log(f"{phase} {row['shape_label']}: {cells} ({time.time() - t0:.1f} s)")
            write_partial(rows)
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
        "matmul_rate": matmul,
        "rows": rows,
        "notes": notes,
    }
