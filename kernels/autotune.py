"""`kdakit kernels autotune`: tune kdakit's Helion KDA kernels ahead of time on one GPU and write the configs.

For each kernel and shape bucket (SGLang's shapes on the SKU: 16 local heads at TP4 and 8 at TP8, K = V = 128,
fp32 state, bounded gate -5, q/k L2 norm; decode and verify at the CUDA graph batch buckets up to 48, verify
with 6 draft tokens):
1. Helion's autotuner searches configs (`bound.autotune(args, force=True)`) within `--budget-seconds`, timing
   candidates under CUDA graph replay (HELION_BENCHMARK_CUDAGRAPH=1). The search is seeded with the kernel
   module's default config (`autotune_seed_configs`): with effort "quick" (the default) Helion's initial
   population is then the seed, its compiler seeds and its own default (`from_best_available`, no random
   padding), so the first candidates finish within seconds and the rest of the budget goes to the pattern
   search around the best of them. Effort "full" starts from 100 random configs, which a budget under a few
   minutes does not get through. The search runs on a state pool of just the bucket's requests (Helion
   clones the mutated pool per candidate; its timing reuses one slot set, so it is L2-hot anyway);
2. the search's best config and the module default are then checked against each other (outputs and
   state/snapshots) and timed the way `kdakit kernels bench` does: per-call median inside a CUDA graph of
   back-to-back calls whose slots rotate over a pool larger than L2;
3. the faster of the two is written to `<out>/<sku>/<kernel>-<bucket>.json` (atomically), with both times.
   A bucket where the default wins still gets its file: it records that the default was measured best.
   When the search finds nothing (or its best disagrees with the default's outputs), the default alone is
   timed and written with chosen "default" and the failure in `tuning.search_error`, so the bucket is not
   lost and the table says what happened.
Run it inside the kdakit image on the target GPU (see tuned.py for the version policy at run time).
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kdakit.kernels import tuned
from kdakit.kernels.tuned import BATCH_BUCKETS, KERNEL_GROUPS, Bucket, TunedConfig

from kdakit.errors import UsageError

DEFAULT_HEADS = (16, 8)  # local heads of GLM-5.3 / Kimi-Linear KDA layers at TP4 and TP8
HEAD_DIM = 128
DRAFT_TOKENS = 6
LOWER_BOUND = -5.0
POOL_SLOTS = 512  # 512 fp32 states of 16x128x128 = 512 MiB: larger than any L2
SNAPSHOT_ROWS = 2 * max(BATCH_BUCKETS)
DEFAULT_BUDGET_S = 60
DEFAULT_EFFORT = "quick"
METHOD = (
    "helion autotune seeded with the module default (CUDA graph benchmarking, pool of the bucket's slots), "
    "then per-call median of a CUDA graph of back-to-back calls with slots rotating over a pool larger than "
    "L2, best of autotuned and module default"
)


@dataclass
class Job:
    kernel: str
    bucket: Bucket

    @property
    def name(self) -> str:
        return f"{self.kernel} {self.bucket.slug()}"


@dataclass
class JobResult:
    job: Job
    default_us: float | None = None
    tuned_us: float | None = None
    chosen: str | None = None  # "autotuned" | "default"
    path: Path | None = None
    error: str | None = None  # the bucket got no file
    search_error: str | None = None  # Helion's search gave nothing usable: the default was written
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def parse_kernels(text: str) -> list[str]:
    kernels = []
    for name in (t.strip() for t in text.split(",") if t.strip()):
        if name not in KERNEL_GROUPS:
            raise UsageError(f"--kernels: unknown kernel {name!r}; choose from {', '.join(KERNEL_GROUPS)}")
        kernels += [k for k in KERNEL_GROUPS[name] if k not in kernels]
    if not kernels:
        raise UsageError("--kernels: name at least one kernel")
    return kernels


def parse_ints(text: str, option: str, allowed: tuple[int, ...] | None = None) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--{option}: expected comma-separated integers (got {text!r})") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"--{option}: expected positive integers (got {text!r})")
    if allowed is not None and (bad := [v for v in values if v not in allowed]):
        raise UsageError(f"--{option}: {bad} are not batch buckets; buckets: {','.join(map(str, allowed))}")
    return values


def plan(kernels: list[str], heads: tuple[int, ...], batches: tuple[int, ...], head_dim: int = HEAD_DIM):
    return [
        Job(kernel, Bucket(h, h, head_dim, head_dim, "fp32", b))
        for kernel in kernels
        for h in heads
        for b in batches
    ]


def require_gpu(sku: str) -> str:
    """The GPU's name, or a UsageError saying why this machine cannot tune `sku`."""
    try:
        import torch
    except ImportError as exc:
        raise UsageError(f"needs torch with CUDA ({exc})") from None
    if not torch.cuda.is_available():
        raise UsageError(
            f"no CUDA GPU visible: configs for {sku} are tuned on a {sku} GPU (run it there, inside the "
            "kdakit image, so the versions match what the image runs); --dry-run prints the plan"
        )
    name = torch.cuda.get_device_name(0)
    if tuned.sku_of(name) != sku:
        raise UsageError(
            f"this GPU is a {name} (sku {tuned.sku_of(name)}), not {sku}: tune each SKU on its own"
        )
    return name


# ---------------------------------------------------------------------------------------- inputs per job
def decode_problem(bucket: Bucket, device, pool_slots: int = POOL_SLOTS):
    """(kernel fn, default config, args(slots), observed(slots), mutated tensors, first slots) for decode."""
    import torch
    from kdakit.kernels import decode as kd
    from kdakit.kernels.testing import decode_case

    B, H, HV, K, V = bucket.batch, bucket.heads, bucket.value_heads, bucket.k, bucket.v
    case = decode_case(B, H, HV, K, V, pool_slots, indices=list(range(B)), device=device)
    default = kd.DECODE_CONFIGS["bf16" if bucket.state_dtype == "bf16" else "fp32"]

    def args(slots: torch.Tensor) -> tuple:
        c = case
        return (
            c["mixed_qkv"], c["a"], c["b"], c["A_log"], c["dt_bias"], K**-0.5, LOWER_BOUND,
            c["initial_state"], c["out"], slots, True, True,
        )  # fmt: skip

    def observed(slots: torch.Tensor) -> list:
        return [case["out"], case["initial_state"][slots.long()]]

    return kd._packed_decode, default, args, observed, [case["initial_state"]], case["ssm_state_indices"]


def verify_problem(bucket: Bucket, mode: str, device, pool_slots: int = POOL_SLOTS, steps: int | None = None):
    """The same as `decode_problem` for verify ("chain" or "tree"); the snapshot buffer is what it mutates."""
    import torch
    from kdakit.kernels import verify as kv
    from kdakit.kernels.testing import verify_case

    N, H, HV, K, V = bucket.batch, bucket.heads, bucket.value_heads, bucket.k, bucket.v
    steps = steps or DRAFT_TOKENS
    rows = min(SNAPSHOT_ROWS, max(N, pool_slots))
    parents = [[0] + list(range(steps - 1)) for _ in range(N)] if mode == "tree" else None
    case = verify_case(
        [steps] * N, H, HV, K, V, pool_slots, cache_indices=list(range(N)), rows=list(range(N)),
        num_rows=rows, parents=parents, device=device,
    )  # fmt: skip
    case["intermediate_states_buffer"].normal_()
    out = torch.empty_like(case["v"])
    rows_of = {}

    def args(slots: torch.Tensor) -> tuple:
        # snapshot rows follow the slot set (same length N), so each call writes other rows too
        key = slots.data_ptr()
        if key not in rows_of:
            rows_of[key] = (slots.long() % rows).to(torch.int32)
        c = case
        return kv.kernel_args(
            c["q"], c["k"], c["v"], c["a"], c["b"], c["A_log"], c["dt_bias"], c["ssm_states"], slots,
            c["query_start_loc"], c["intermediate_states_buffer"], rows_of[key], c["retrieve_parent_token"],
            out, LOWER_BOUND,
        )  # fmt: skip

    def observed(slots: torch.Tensor) -> list:
        return [out, case["intermediate_states_buffer"][rows_of[slots.data_ptr()].long()]]

    mutated = [case["intermediate_states_buffer"]]
    return kv._verify, kv.VERIFY_CONFIGS[mode], args, observed, mutated, case["cache_indices"]


def problem_for(job: Job, device, pool_slots: int = POOL_SLOTS):
    if job.kernel == "decode":
        return decode_problem(job.bucket, device, pool_slots)
    return verify_problem(job.bucket, job.kernel.removeprefix("verify-"), device, pool_slots)


# ------------------------------------------------------------------------------------------- GPU pieces
def helion_autotune(fn, args: tuple, budget_s: int, effort: str, seeds=(), verbose: bool = False):
    """Helion's own search for `fn` at `args` (GPU only), its initial population seeded with `seeds`: the
    best helion.Config it finds. Raises (helion.exc.NoConfigFound, ...) when no candidate works."""
    import helion

    os.environ.setdefault("HELION_BENCHMARK_CUDAGRAPH", "1")
    settings = {
        "static_shapes": False,
        "autotune_budget_seconds": int(budget_s),
        "autotune_effort": effort,
        "autotune_progress_bar": False,
        "autotune_seed_configs": list(seeds),
    }
    if not verbose:
        settings["autotune_log_level"] = logging.WARNING
    kernel = helion.kernel(fn, **settings)
    return kernel.bind(args).autotune(args, force=True)


def rotating_slot_sets(batch: int, pool_slots: int, device) -> list:
    """Slot sets for a graph of back-to-back calls that together touch >= 128 MiB-equivalent slots."""
    import torch

    calls = max(16, math.ceil(128 / batch))
    perm = torch.randperm(pool_slots, generator=torch.Generator().manual_seed(0))
    return [
        perm[[(i * batch + j) % pool_slots for j in range(batch)]].to(torch.int32).to(device)
        for i in range(calls)
    ]


def graph_per_call_us(run: Callable[[object], None], slot_sets: list) -> float:
    """Per-call median (us) of a CUDA graph of back-to-back calls over rotating slot sets (GPU only)."""
    from kdakit.kernels.tune import graph_time_us

    per_call, _single = graph_time_us([lambda s=s: run(s) for s in slot_sets])
    return per_call


def _close(got, want, tol: float) -> bool:
    import torch

    return bool(torch.allclose(got.float(), want.float(), atol=tol, rtol=tol))


# ----------------------------------------------------------------------------------------------- a job
def run_job(
    job: Job,
    *,
    sku: str,
    gpu_name: str,
    out_dir: Path,
    budget_s: int,
    effort: str,
    device="cuda",
    pool_slots: int = POOL_SLOTS,
    autotune: Callable[..., Any] = helion_autotune,
    time_us: Callable[[Callable, list], float] = graph_per_call_us,
    slot_sets: Callable[[int, int, Any], list] = rotating_slot_sets,
) -> JobResult:
    """Search, check, time and write one (kernel, bucket). A failed search still writes the timed default
    (`search_error` says why); only a failure to run or time the default leaves the bucket without a file
    (`error`). Nothing is raised, so one bucket cannot lose the others."""
    import helion
    import torch

    started = time.monotonic()
    result = JobResult(job)
    try:
        fn, default, args, observed, mutated, first_slots = problem_for(job, device, pool_slots)
        candidates = {"default": default}
        search_started = time.monotonic()
        try:
            # a pool of only the bucket's slots: Helion clones the mutated pool for every candidate
            _, _, s_args, _, _, s_slots = problem_for(job, device, job.bucket.batch)
            best = autotune(fn, s_args(s_slots), budget_s, effort, seeds=[default])
            candidates["autotuned"] = helion.Config.from_dict(dict(best))
        except Exception as exc:
            result.search_error = f"{type(exc).__name__}: {exc}"[:300]
        search_s = time.monotonic() - search_started
        kernels = {
            name: helion.kernel(fn, static_shapes=False, config=cfg) for name, cfg in candidates.items()
        }
        saved = [t.clone() for t in mutated]

        # same inputs, same starting state: the tuned config must reproduce the default's outputs. The
        # default runs first: its failure is the bucket's; the autotuned config's failure only drops it.
        def drop_autotuned(why: str) -> None:
            result.search_error = why[:300]
            kernels.pop("autotuned", None)

        outputs = {}
        for name, kernel in list(kernels.items()):
            for t, s in zip(mutated, saved, strict=True):
                t.copy_(s)
            try:
                kernel(*args(first_slots))
            except Exception as exc:
                if name == "default":
                    raise
                drop_autotuned(f"autotuned config failed to run: {type(exc).__name__}: {exc}")
                continue
            outputs[name] = [t.clone() for t in observed(first_slots)]
        if "autotuned" in outputs:
            tolerances = (2e-2, 1e-4)  # bf16 output, fp32 state/snapshots
            for got, want, tol in zip(outputs["autotuned"], outputs["default"], tolerances, strict=True):
                if not _close(got, want, tol):
                    err = float((got.float() - want.float()).abs().max())
                    drop_autotuned(f"autotuned config disagrees with the default (max abs diff {err:.3g})")
                    break

        sets = slot_sets(job.bucket.batch, pool_slots, device)
        times = {}
        for name, kernel in list(kernels.items()):
            try:
                times[name] = time_us(lambda s, kernel=kernel: kernel(*args(s)), sets)
            except Exception as exc:
                if name == "default":
                    raise
                drop_autotuned(
                    f"autotuned config failed under CUDA graph timing: {type(exc).__name__}: {exc}"
                )
        for t, s in zip(mutated, saved, strict=True):
            t.copy_(s)
        result.default_us, result.tuned_us = times["default"], times.get("autotuned")
        result.chosen = min(times, key=times.get)
        searched = candidates.get("autotuned")
        record = TunedConfig(
            kernel=job.kernel,
            sku=sku,
            gpu_name=gpu_name,
            bucket=job.bucket,
            config=_config_dict(candidates[result.chosen]),
            source_sha256=tuned.source_sha256(job.kernel),
            versions=tuned.installed_versions(),
            tuning={
                "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "chosen": result.chosen,
                "default_per_call_us": round(times["default"], 3),
                "autotuned_per_call_us": round(times["autotuned"], 3) if "autotuned" in times else None,
                "autotuned_config": _config_dict(searched) if searched is not None else None,
                "search_error": result.search_error,
                "search_seconds": round(search_s, 1),
                "budget_seconds": budget_s,
                "effort": effort,
                "seeded_with_default": True,
                "method": METHOD,
                "draft_tokens": DRAFT_TOKENS if job.kernel.startswith("verify") else None,
                "lower_bound": LOWER_BOUND,
                "pool_slots": pool_slots,
                "cuda": torch.version.cuda,
            },
        )
        result.path = tuned.write_file(record, out_dir)
    except Exception as exc:  # one bucket failing must not lose the others
        result.error = f"{type(exc).__name__}: {exc}"[:400]
    result.seconds = time.monotonic() - started
    return result


def _config_dict(cfg) -> dict:
    import json

    return json.loads(cfg.to_json())


# ------------------------------------------------------------------------------------------ the command
def status_line(r: JobResult) -> str:
    """One line per finished bucket for the progress log."""
    if r.error:
        return f"FAILED, no file: {r.error}"
    if r.search_error:
        return f"search gave nothing usable ({r.search_error}); default {r.default_us:.2f} us written"
    return f"default {r.default_us:.2f} us, tuned {r.tuned_us:.2f} us -> {r.chosen}"


def render(results: list[JobResult]) -> str:
    lines = [f"{'kernel':<13} {'bucket':<28} {'default us':>10} {'tuned us':>9} {'change':>7}  written"]
    for r in results:
        head = f"{r.job.kernel:<13} {r.job.bucket.slug():<28}"
        if r.error:
            lines.append(f"{head} FAILED, no file: {r.error}")
            continue
        if r.tuned_us is None:
            lines.append(
                f"{head} {r.default_us:10.2f} {'-':>9} {'-':>7}  default (SEARCH FAILED: {r.search_error}) "
                f"-> {r.path}"
            )
            continue
        change = (r.tuned_us / r.default_us - 1) * 100 if r.default_us else float("nan")
        lines.append(f"{head} {r.default_us:10.2f} {r.tuned_us:9.2f} {change:+6.1f}%  {r.chosen} -> {r.path}")
    return "\n".join(lines)


def run(args) -> int:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", args.sku):
        raise UsageError(f"--sku {args.sku!r}: a lower-case SKU name such as h200 or b200")
    kernels = parse_kernels(args.kernels)
    heads = parse_ints(args.heads, "heads")
    batches = parse_ints(args.batches, "batches", BATCH_BUCKETS)
    if args.budget_seconds < 1:
        raise UsageError(f"--budget-seconds must be >= 1 (got {args.budget_seconds})")
    out_dir = Path(args.out) if args.out else tuned.CONFIG_DIR
    jobs = plan(kernels, heads, batches)
    total_min = len(jobs) * args.budget_seconds / 60
    header = (
        f"autotune {args.sku}: {len(jobs)} kernel/bucket tunes x {args.budget_seconds} s search budget "
        f"(effort {args.effort}) = up to {total_min:.0f} min of search, plus compile and timing; "
        f"configs -> {out_dir / args.sku}"
    )
    if args.dry_run:
        print(header)
        for job in jobs:
            print(f"  {job.name:<40} -> {out_dir / args.sku / tuned.file_name(job.kernel, job.bucket)}")
        return 0
    gpu_name = require_gpu(args.sku)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    console.print(header)
    results = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(), console=console,
    ) as progress:  # fmt: skip
        task = progress.add_task("autotune", total=len(jobs))
        for job in jobs:
            progress.update(task, description=f"tuning {job.name}")
            r = run_job(job, sku=args.sku, gpu_name=gpu_name, out_dir=out_dir, budget_s=args.budget_seconds,
                        effort=args.effort)  # fmt: skip
            progress.console.print(f"{job.name}: {status_line(r)} ({r.seconds:.0f} s)")
            results.append(r)
            progress.advance(task)
    tuned.reset()  # this process selects from the new files from now on
    print(render(results))
    return 1 if any(r.error for r in results) else 0
