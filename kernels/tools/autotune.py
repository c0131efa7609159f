"""`kdakit kernels autotune`: tune kdakit's Helion KDA kernels ahead of time on one GPU and write the configs.

For each kernel and shape bucket (SGLang's shapes on the SKU, from kernels/shapes.toml: the local head counts
of the TP degrees, K = V, fp32 state, the bounded gate, q/k L2 norm; decode and verify at the CUDA graph batch
buckets, verify with the draft tokens):
1. Helion's autotuner searches configs (`bound.autotune(args, force=True)`) within `--budget-seconds`, timing
   candidates under CUDA graph replay (HELION_BENCHMARK_CUDAGRAPH=1). The search is seeded with the kernel
   module's default config and its seed configs (`DECODE_SEEDS` / `VERIFY_SEEDS`, `autotune_seed_configs`;
   those outside Helion's search space, e.g. a 3-D launch grid, are only timed in step 2): with effort
   "quick" (the default) Helion's initial population is then those seeds, its compiler seeds and its own
   default (`from_best_available`, no random padding), so the first candidates finish within seconds and the
   rest of the budget goes to the pattern search around the best of them. Effort "full" starts from 100
   random configs, which a budget under a few minutes does not get through. The search runs on a state pool
   of just the bucket's requests (Helion clones the mutated pool per candidate; its timing reuses one slot
   set, so it is L2-hot anyway);
2. the search's best config, the module default and the seed configs are then checked against the default
   (outputs and state/snapshots) and timed by `kdakit kernels bench`'s timer (kernels/tools/timing.py):
   per-call median inside a CUDA graph of back-to-back calls whose slots rotate over a pool larger than L2,
   each call with its own copy of the activations (cold in L2, as in a server; Helion's search times them
   hot, and the two rankings differ), every per-call input built before the capture;
3. the fastest is written to `<out>/<sku>/<kernel>-<bucket>.json` (atomically), with every candidate's time.
   A bucket where the default wins still gets its file: it records that the default was measured best.
   When the search finds nothing (or its best disagrees with the default's outputs), the default alone is
   timed and written with chosen "default" and the failure in `tuning.search_error`, so the bucket is not
   lost and the table says what happened.
Prefill (`--kernels prefill`, or one of prefill-gate, -intra, -solve, -recompute, -state):
each of the five kernels is tuned on its own, per total-tokens bucket (`--tokens`, default: the bench's
shapes) and head count. Its real inputs come from running `prefill.chunk_kda` on PR-like inputs
(H = HV, K = V, bf16, the bounded gate from raw g with A_log/dt_bias, raw beta, q/k L2 norm, varlen
cu_seqlens, one sequence of the bucket's tokens) and recording the arguments of that kernel's launch (the
earlier stages run for real). Check: the kernel's outputs under both configs from the same inputs. Timing
(`prefill_per_call_us`, the same timer): per-call median of a CUDA graph of
back-to-back calls; where the kernel overwrites an input (recompute and the state pass write over v's
storage) every call is preceded by an in-graph restore of it and the restore's own graph time is subtracted.
The state pass is not searched: its module default and `prefill.UNSEARCHED_CANDIDATES` are checked and timed.
`prefill.SEARCH_SEEDS` are seeded into the other kernels' searches and timed beside their results.
Run it inside the kdakit image on the target GPU (see tuned.py for the version policy at run time).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kdakit.kernels import shapes, tuned
from kdakit.kernels.tools import timing
from kdakit.kernels.tuned import (
    BATCH_BUCKETS,
    KERNEL_GROUPS,
    PREFILL_KERNELS,
    PREFILL_TOKEN_BUCKETS,
    Bucket,
    TunedConfig,
)

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError

HEAD_DIM = shapes.get("model", "head_dim")
DRAFT_TOKENS = shapes.get("model", "draft_tokens")
LOWER_BOUND = shapes.get("model", "lower_bound")
POOL_SLOTS = shapes.get("model", "pool_slots")
SNAPSHOT_ROWS = 2 * max(BATCH_BUCKETS)
DEFAULT_TOKENS = shapes.prefill_token_totals()
PREFILL_SLOTS = 8
PREFILL_METHOD = (
    "helion autotune seeded with the module default, on the kernel's arguments recorded from a chunk_kda "
    "call; then per-call median of a CUDA graph of back-to-back calls (in-graph restore of an overwritten "
    "input, its time subtracted), best of autotuned and module default"
)
# prefill kernel -> the parameters it writes: checked between configs; the pure outputs are zeroed first, the
# written inputs restored before each check run (v's storage also in-graph before each timed call)
PREFILL_OUTPUTS = {  # written only
    "gate": ("gcum_rows",),
    "intra": ("rnorm_q", "rnorm_k", "akk_rows", "aqk_rows"),
    "solve": ("tinv_rows",),
    "recompute": ("w_rows", "kg_rows", "qg_rows", "decay_rows"),
    "state": ("o_rows", "track_rows"),  # (recorded args are copies: o in a buffer of its own, as served)
}
PREFILL_INOUT = {"recompute": ("v_rows",), "state": ("pool_rows",)}  # read, then written
PREFILL_RESTORED_IN_GRAPH = ("v_rows",)  # v's storage: U overwrites it
METHOD = (
    "helion autotune seeded with the module default and its seed configs (CUDA graph benchmarking, pool of "
    "the bucket's slots), then per-call median of a CUDA graph of back-to-back calls with slots rotating "
    "over a pool larger than L2 and each call's activations its own (cold in L2), best of autotuned, "
    "module default and seeds"
)
ACTIVATION_SETS = 32  # distinct activation copies the timed calls rotate over (each cold in L2)


@dataclass
class Job:
    kernel: str
    bucket: Bucket

    @property
    def name(self) -> str:
        return f"{self.kernel} {tuned.slug_of(self.kernel, self.bucket)}"


@dataclass
class JobResult:
    job: Job
    default_us: float | None = None
    tuned_us: float | None = None
    chosen: str | None = None  # "autotuned" | "default" | "seed <n>"
    chosen_us: float | None = None
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


def parse_ints(
    text: str, option: str, allowed: tuple[int, ...] | None = None, what: str = "batch buckets"
) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--{option}: expected comma-separated integers (got {text!r})") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"--{option}: expected positive integers (got {text!r})")
    if allowed is not None and (bad := [v for v in values if v not in allowed]):
        raise UsageError(f"--{option}: {bad} are not {what}; {what}: {','.join(map(str, allowed))}")
    return values


def plan(
    kernels: list[str],
    heads: tuple[int, ...],
    batches: tuple[int, ...],
    head_dim: int = HEAD_DIM,
    tokens: tuple[int, ...] = DEFAULT_TOKENS,
):
    """Jobs in order: per kernel, per head count, per size (batch buckets; prefill: token buckets)."""
    return [
        Job(kernel, Bucket(h, h, head_dim, head_dim, "fp32", size))
        for kernel in kernels
        for h in heads
        for size in (tokens if kernel in PREFILL_KERNELS else batches)
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
    """(kernel fn, (default config, seed configs), args(slots), observed(slots), mutated tensors, first
    slots) for decode."""
    import torch
    from kdakit.kernels import decode as kd
    from kdakit.kernels.tools.testing import decode_case

    B, H, HV, K, V = bucket.batch, bucket.heads, bucket.value_heads, bucket.k, bucket.v
    case = decode_case(B, H, HV, K, V, pool_slots, indices=list(range(B)), device=device)
    name = "bf16" if bucket.state_dtype == "bf16" else "fp32"
    activations_of = _activation_rotation(case, ("mixed_qkv", "a", "b"))

    def args(slots: torch.Tensor) -> tuple:
        c = activations_of(slots)
        return (
            c["mixed_qkv"], c["a"], c["b"], c["A_log"], c["dt_bias"], K**-0.5, LOWER_BOUND,
            c["initial_state"], c["out"], slots, True, True,
        )  # fmt: skip

    def observed(slots: torch.Tensor) -> list:
        return [case["out"], case["initial_state"][slots.long()]]

    configs = (kd.DECODE_CONFIGS[name], kd.DECODE_SEEDS[name])
    return kd._packed_decode, configs, args, observed, [case["initial_state"]], case["ssm_state_indices"]


def _activation_rotation(case: dict, names: tuple[str, ...], sets: int = ACTIVATION_SETS):
    """slots -> the case with its own copy of the activations `names` for each slot set (in the order the
    sets are first seen, cycling after `sets`): the first set runs on the case itself, so the check sees it.
    A server's activations are fresh from HBM on every call; one set reused by every call would be L2-hot.
    The copies are made here, up front: made on first use, they would land inside the first timed config's
    CUDA graph capture as extra copy kernels."""
    order: dict[int, int] = {}
    copies = [case] + [{**case, **{n: case[n].clone() for n in names}} for _ in range(sets - 1)]

    def activations_of(slots) -> dict:
        return copies[order.setdefault(slots.data_ptr(), len(order)) % sets]

    return activations_of


def verify_problem(bucket: Bucket, mode: str, device, pool_slots: int = POOL_SLOTS, steps: int | None = None):
    """The same as `decode_problem` for verify ("chain" or "tree"); the snapshot buffer is what it mutates."""
    import torch
    from kdakit.kernels import verify as kv
    from kdakit.kernels.tools.testing import verify_case

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
    activations_of = _activation_rotation(case, ("q", "k", "v", "a", "b"))

    def args(slots: torch.Tensor) -> tuple:
        # snapshot rows follow the slot set (same length N), so each call writes other rows too
        key = slots.data_ptr()
        if key not in rows_of:
            rows_of[key] = (slots.long() % rows).to(torch.int32)
        c = activations_of(slots)
        return kv.kernel_args(
            c["q"], c["k"], c["v"], c["a"], c["b"], c["A_log"], c["dt_bias"], c["ssm_states"], slots,
            c["query_start_loc"], c["intermediate_states_buffer"], rows_of[key], c["retrieve_parent_token"],
            out, LOWER_BOUND,
        )  # fmt: skip

    def observed(slots: torch.Tensor) -> list:
        return [out, case["intermediate_states_buffer"][rows_of[slots.data_ptr()].long()]]

    mutated = [case["intermediate_states_buffer"]]
    configs = (kv.VERIFY_CONFIGS[mode], kv.VERIFY_SEEDS[mode])
    return kv._verify, configs, args, observed, mutated, case["cache_indices"]


def problem_for(job: Job, device, pool_slots: int = POOL_SLOTS):
    if job.kernel == "decode":
        return decode_problem(job.bucket, device, pool_slots)
    return verify_problem(job.bucket, job.kernel.removeprefix("verify-"), device, pool_slots)


@dataclass
class Problem:
    """One job's kernel and inputs: what the search, the check and the timing need."""

    fn: Any  # the Helion kernel function
    default: Any  # its module default helion.Config
    run_args: tuple  # the check's arguments
    observed: list  # tensors the check compares between configs
    mutated: list  # tensors restored before each check run
    time: Callable[[Any], float]  # per-call us of a helion.Kernel on these inputs
    search_args: Callable[[], tuple]  # the search's arguments (built when the search starts)
    tolerances: tuple[float, ...] | None = None  # per observed tensor; None: by dtype
    seeds: list = field(default_factory=list)  # module configs seeded into the search and timed against it
    settings: dict = field(default_factory=dict)  # extra helion.kernel settings
    searched: bool = True  # False: only the default and the seeds are timed (no Helion search)
    baseline: Any = None  # the kernel whose results the search checks candidates against (None: Helion's)
    tuning: dict = field(default_factory=dict)  # extra fields for the file's `tuning`


def slot_problem(job: Job, device, pool_slots: int, time_us, slot_sets) -> Problem:
    """Decode/verify: calls rotate over slot sets of a pool larger than L2; the search runs on a pool of only
    the bucket's slots (Helion clones the mutated pool for every candidate)."""
    fn, (default, seeds), args, observed, mutated, first_slots = problem_for(job, device, pool_slots)
    sets: list = []

    def search_args() -> tuple:
        _, _, s_args, _, _, s_slots = problem_for(job, device, job.bucket.batch)
        return s_args(s_slots)

    def time(kernel) -> float:
        if not sets:
            sets.extend(slot_sets(job.bucket.batch, pool_slots, device))
            for s in sets:
                # per-set inputs (activation copies, snapshot rows) are built now: built on first use, they
                # would be captured into the first timed config's CUDA graph as extra kernels
                args(s)
        return time_us(lambda s: kernel(*args(s)), sets)

    run_args = args(first_slots)
    return Problem(
        fn, default, run_args, observed(first_slots), mutated, time, search_args, tolerances=(2e-2, 1e-4),
        seeds=list(seeds), tuning={
            "method": METHOD,
            "draft_tokens": DRAFT_TOKENS if job.kernel.startswith("verify") else None,
            "pool_slots": pool_slots,
        },
    )  # fmt: skip


def prefill_lengths(bucket: Bucket) -> list[int]:
    """Sequence lengths a prefill bucket is tuned at: one sequence of the bucket's tokens (the longest serial
    chain for the state pass; the bench's 1x4096 and 1x8192)."""
    return [bucket.batch]


def cloned_args(args: tuple) -> tuple:
    """A kernel's arguments with every tensor copied (scalars and flags as they are)."""
    import torch

    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


class _Recorder:
    """Stands in for one prefill kernel inside chunk_kda: keeps a copy of its arguments, then runs it."""

    def __init__(self, kernel, launches: dict, name: str) -> None:
        self.kernel, self.launches, self.name = kernel, launches, name

    def __call__(self, *args):
        self.launches[self.name] = cloned_args(args)
        return self.kernel(*args)


@contextlib.contextmanager
def recorded_prefill_launches(name: str, launches: dict):
    """Inside, chunk_kda records the arguments of its `name` launch into `launches[name]`."""
    from kdakit.kernels import prefill

    real = prefill._kernels_for

    def recording(*args, **kwargs):
        kernels = dict(real(*args, **kwargs))
        kernels[name] = _Recorder(kernels[name], launches, name)
        return kernels

    prefill._kernels_for = recording
    try:
        yield
    finally:
        prefill._kernels_for = real


def prefill_problem(job: Job, device, time_us) -> Problem:
    """A prefill kernel's real arguments at the bucket: chunk_kda runs on PR-like inputs (default configs) and
    the kernel's launch is recorded. Its pure outputs are zeroed (regions it never writes then agree between
    configs); written inputs are restored before each check run, v's storage also in-graph when timed."""
    import helion
    import torch
    from kdakit.kernels import prefill
    from kdakit.kernels.tools.testing import prefill_call, prefill_case

    short = PREFILL_KERNELS[job.kernel]
    b = job.bucket
    lens = prefill_lengths(b)
    x = prefill_case(
        lens, H=b.heads, K=b.k, V=b.v, slots=PREFILL_SLOTS, device=device, lower_bound=LOWER_BOUND
    )
    x["pool"] = x["pool"].to(
        {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[b.state_dtype]
    )
    launches: dict = {}
    with recorded_prefill_launches(short, launches), tuned.configs_mode("default"):
        prefill_call(prefill.chunk_kda, x, x["v"].clone(), x["pool"].clone())
    args = launches[short]
    by_name = dict(zip(inspect.signature(prefill._FNS[short]).parameters, args, strict=True))
    outputs = [by_name[n] for n in PREFILL_OUTPUTS[short]]
    inout = [by_name[n] for n in PREFILL_INOUT.get(short, ())]
    for t in outputs:
        t.zero_()
    in_graph = [by_name[n] for n in PREFILL_INOUT.get(short, ()) if n in PREFILL_RESTORED_IN_GRAPH]
    sources = [t.clone() for t in in_graph]

    def restore() -> None:
        for t, src in zip(in_graph, sources, strict=True):
            t.copy_(src)

    def time(kernel) -> float:
        return time_us(lambda: kernel(*args), restore if in_graph else None)

    def search_args() -> tuple:  # copies: the search must not touch the check's inputs
        return cloned_args(args)

    default = helion.Config(**prefill.DEFAULT_CONFIGS[short])
    unsearched = prefill.UNSEARCHED_CANDIDATES.get(short)
    seeds = unsearched if unsearched is not None else prefill.SEARCH_SEEDS.get(short, ())
    return Problem(
        prefill._FNS[short], default, args, outputs + inout, outputs + inout, time, search_args,
        settings={"ignore_warnings": prefill._IGNORED},
        seeds=[helion.Config(**c) for c in seeds], searched=unsearched is None,
        baseline=prefill._kernel(short, prefill.DEFAULT_CONFIGS[short]),
        tuning={"method": PREFILL_METHOD, "sequence_lengths": lens, "pool_slots": PREFILL_SLOTS},
    )  # fmt: skip


def replayed_results(kernel, args: tuple) -> Callable:
    """A baseline for Helion's search that replays `kernel`'s results at `args`: the kernel runs once here,
    on copies, before the search; each call of the baseline writes those results into its arguments and
    returns the same output. A plain function, not the kernel: Helion deep-copies its settings, and a
    helion.Kernel that has run holds fake tensors that cannot be copied (every search then fails)."""
    import torch

    after = cloned_args(args)
    result = kernel(*after)

    def baseline(*given):
        for target, source in zip(given, after, strict=True):
            if isinstance(target, torch.Tensor):
                target.copy_(source)
        return result

    return baseline


# ------------------------------------------------------------------------------------------- GPU pieces
def helion_autotune(
    fn, args: tuple, budget_s: int, effort: str, seeds=(), verbose: bool = False, settings=None
):
    """Helion's own search for `fn` at `args` (GPU only), its initial population seeded with `seeds`: the
    best helion.Config it finds. Raises (helion.exc.NoConfigFound, ...) when no candidate works. Quiet
    (warnings only) unless `verbose` or HELION_AUTOTUNE_LOG_LEVEL is set; with HELION_AUTOTUNE_LOG=<base>
    Helion also writes every candidate's status and time to <base>.csv and its log to <base>.log, the way
    to learn why a search found nothing (its per-candidate errors are logged at DEBUG)."""
    import helion

    os.environ.setdefault("HELION_BENCHMARK_CUDAGRAPH", "1")
    options = {
        "static_shapes": False,
        "autotune_budget_seconds": int(budget_s),
        "autotune_effort": effort,
        "autotune_progress_bar": False,
        "autotune_seed_configs": searchable_seeds(fn, args, seeds, settings),
        **(settings or {}),
    }
    if not verbose and not os.environ.get("HELION_AUTOTUNE_LOG_LEVEL", "").strip():  # set: it asks for detail
        options["autotune_log_level"] = logging.WARNING
    kernel = helion.kernel(fn, **options)
    return kernel.bind(args).autotune(args, force=True)


def searchable_seeds(fn, args: tuple, seeds, settings=None) -> list:
    """The seeds that lie in Helion's search space for `fn` at `args`. That space is narrower than what runs:
    it has no 3-D launch grid for decode and verify (their request and head tiles have a fixed size of 1),
    and a seed outside it stops the whole search; the caller still times every seed against its result."""
    import helion

    bound = helion.kernel(fn, static_shapes=False, **(settings or {})).bind(args)
    space = bound.config_spec.create_config_generation()
    kept = []
    for seed in seeds:
        try:
            space.encode_config(space.flatten(seed))  # the search encodes its seeds: an unknown value raises
        except (ValueError, TypeError, KeyError, AssertionError):
            continue
        kept.append(seed)
    return kept


def rotating_slot_sets(batch: int, pool_slots: int, device, state_bytes: int | None = None) -> list:
    """Slot sets for a graph of back-to-back calls, disjoint from one call to the next, that together touch
    >= L2_COLD_BYTES of state (the bench's rotation; `state_bytes` per request, default 1 MiB)."""
    import torch

    calls = timing.calls_per_graph(batch, state_bytes or timing.MIB, minimum=16)
    return [
        torch.tensor(s, dtype=torch.int32, device=device)
        for s in timing.slot_sets(pool_slots, batch, calls, seed=0)
    ]


def graph_per_call_us(run: Callable[[object], None], slot_sets: list) -> float:
    """Per-call median (us) of a CUDA graph of back-to-back calls over rotating slot sets (GPU only)."""
    timer = timing.GraphTimer(timing.REPLAYS, timing.SINGLE_REPLAYS)
    return statistics.median(timer.per_call([lambda s=s: run(s) for s in slot_sets]))


def prefill_per_call_us(run: Callable[[], None], restore: Callable[[], None] | None) -> float:
    """Per-call median (us) of a CUDA graph of back-to-back calls (GPU only); with `restore`, each call is
    preceded by it in the graph and the restore's own per-call median is subtracted."""
    timer = timing.GraphTimer(timing.REPLAYS, timing.SINGLE_REPLAYS)
    if restore is None:
        return statistics.median(timer.per_call([run] * timing.PREFILL_CALLS))
    return timing.restored_per_call_us(timer, run, restore, timing.PREFILL_CALLS)


def _close(got, want, tol: float) -> bool:
    import torch

    return bool(torch.allclose(got.float(), want.float(), atol=tol, rtol=tol))


def _tolerance(t) -> float:
    """By dtype: bf16/fp16 outputs 2e-2, fp32 1e-3 (another tiling reorders fp32 sums), integers exact."""
    import torch

    if t.dtype in (torch.bfloat16, torch.float16):
        return 2e-2
    return 1e-3 if t.is_floating_point() else 0.0


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
    prefill_time_us: Callable[[Callable, Callable | None], float] = prefill_per_call_us,
) -> JobResult:
    """Search, check, time and write one (kernel, bucket). A failed search still writes the timed default
    (`search_error` says why); only a failure to run or time the default leaves the bucket without a file
    (`error`). Nothing is raised, so one bucket cannot lose the others."""
    import helion
    import torch

    started = time.monotonic()
    result = JobResult(job)
    try:
        if job.kernel in PREFILL_KERNELS:
            problem = prefill_problem(job, device, prefill_time_us)
        else:
            problem = slot_problem(job, device, pool_slots, time_us, slot_sets)
        default = problem.default
        candidates = {"default": default}
        candidates.update({f"seed {i}": cfg for i, cfg in enumerate(problem.seeds, 1)})
        search_started = time.monotonic()
        try:
            if problem.searched:
                settings = dict(problem.settings)
                search_args = problem.search_args()
                if problem.baseline is not None:
                    settings["autotune_baseline_fn"] = replayed_results(problem.baseline, search_args)
                extra = {"settings": settings} if settings else {}
                seeds = [default, *problem.seeds]
                best = autotune(problem.fn, search_args, budget_s, effort, seeds=seeds, **extra)
                candidates["autotuned"] = helion.Config.from_dict(dict(best))
        except Exception as exc:
            result.search_error = f"{type(exc).__name__}: {exc}"[:300]
        search_s = time.monotonic() - search_started
        if result.search_error and search_s >= budget_s:
            # Helion returns its best-so-far when the budget ends: nothing, if no candidate had compiled
            result.search_error = (
                f"nothing within the {budget_s}-s budget (the search took {search_s:.0f} s; a larger "
                f"--budget-seconds may find a config): {result.search_error}"
            )[:300]
        kernels = {
            name: helion.kernel(problem.fn, static_shapes=False, config=cfg, **problem.settings)
            for name, cfg in candidates.items()
        }
        mutated = problem.mutated
        saved = [t.clone() for t in mutated]

        # same inputs, same starting state: every other config must reproduce the default's outputs. The
        # default runs first: its failure is the bucket's; another config's failure only drops that one.
        dropped: dict[str, str] = {}

        def drop(name: str, why: str) -> None:
            if name == "autotuned":
                result.search_error = why[:300]
            else:
                dropped[name] = why[:300]
            kernels.pop(name, None)

        outputs = {}
        for name, kernel in list(kernels.items()):
            for t, s in zip(mutated, saved, strict=True):
                t.copy_(s)
            try:
                kernel(*problem.run_args)
            except Exception as exc:
                if name == "default":
                    raise
                drop(name, f"{name} config failed to run: {type(exc).__name__}: {exc}")
                continue
            outputs[name] = [t.clone() for t in problem.observed]
        tolerances = problem.tolerances or [_tolerance(t) for t in outputs["default"]]
        for name in [n for n in outputs if n != "default"]:
            for got, want, tol in zip(outputs[name], outputs["default"], tolerances, strict=True):
                if not _close(got, want, tol):
                    err = float((got.float() - want.float()).abs().max())
                    drop(name, f"{name} config disagrees with the default (max abs diff {err:.3g})")
                    break

        times = {}
        for name, kernel in list(kernels.items()):
            try:
                times[name] = problem.time(kernel)
            except Exception as exc:
                if name == "default":
                    raise
                drop(name, f"{name} config failed under CUDA graph timing: {type(exc).__name__}: {exc}")
        for t, s in zip(mutated, saved, strict=True):
            t.copy_(s)
        result.default_us, result.tuned_us = times["default"], times.get("autotuned")
        result.chosen = min(times, key=times.get)
        result.chosen_us = times[result.chosen]
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
                "seeds": [
                    {
                        "name": name,
                        "config": _config_dict(candidates[name]),
                        "per_call_us": round(times[name], 3) if name in times else None,
                        "error": dropped.get(name),
                    }
                    for name in candidates
                    if name.startswith("seed ")
                ],
                "searched": problem.searched,
                "search_seconds": round(search_s, 1),
                "budget_seconds": budget_s,
                "effort": effort,
                "seeded_with_default": True,
                **problem.tuning,
                "lower_bound": LOWER_BOUND,
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
def _written(r: JobResult) -> str:
    """The config written: its name, with its time when it is a seed (the table has no column for it)."""
    return f"{r.chosen} {r.chosen_us:.2f} us" if r.chosen.startswith("seed") else r.chosen


def status_line(r: JobResult) -> str:
    """One line per finished bucket for the progress log."""
    if r.error:
        return f"FAILED, no file: {r.error}"
    if r.search_error:
        return (
            f"search gave nothing usable ({r.search_error}); default {r.default_us:.2f} us, "
            f"{_written(r)} written"
        )
    if r.tuned_us is None:  # a kernel Helion does not search (the state pass): the default against its seeds
        return f"not searched; default {r.default_us:.2f} us, {_written(r)} written"
    return f"default {r.default_us:.2f} us, tuned {r.tuned_us:.2f} us -> {_written(r)}"


def render(results: list[JobResult]) -> str:
    """The table after a run: default and autotuned per-call us, and which config was written (a seed
    config with its own time)."""
    lines = [f"{'kernel':<20} {'bucket':<28} {'default us':>10} {'tuned us':>9} {'change':>7}  written"]
    for r in results:
        head = f"{r.job.kernel:<20} {tuned.slug_of(r.job.kernel, r.job.bucket):<28}"
        if r.error:
            lines.append(f"{head} FAILED, no file: {r.error}")
            continue
        written = _written(r)
        if r.tuned_us is None:
            why = f"SEARCH FAILED: {r.search_error}" if r.search_error else "not searched"
            lines.append(f"{head} {r.default_us:10.2f} {'-':>9} {'-':>7}  {written} ({why}) -> {r.path}")
            continue
        change = (r.tuned_us / r.default_us - 1) * 100 if r.default_us else float("nan")
        lines.append(f"{head} {r.default_us:10.2f} {r.tuned_us:9.2f} {change:+6.1f}%  {written} -> {r.path}")
    return "\n".join(lines)


def run(args) -> int:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", args.sku):
        raise UsageError(
            f"--sku {args.sku!r}: a SKU of the registry ({', '.join(profiles.skus())}) or, for another GPU, "
            "the lower-case slug of its name"
        )
    if args.sku in profiles.skus():
        args.sku = profiles.sku(args.sku).configs  # the SKU's configs folder
    kernels = parse_kernels(args.kernels)
    heads = parse_ints(args.heads, "heads")
    batches = parse_ints(args.batches, "batches", BATCH_BUCKETS)
    tokens = parse_ints(args.tokens, "tokens", PREFILL_TOKEN_BUCKETS, "prefill token buckets")
    if args.budget_seconds < 1:
        raise UsageError(f"--budget-seconds must be >= 1 (got {args.budget_seconds})")
    out_dir = Path(args.out) if args.out else tuned.CONFIG_DIR
    jobs = plan(kernels, heads, batches, tokens=tokens)
    total_min = len(jobs) * args.budget_seconds / 60
    header = (
        f"autotune {args.sku}: {len(jobs)} kernel/bucket tunes x {args.budget_seconds} s search budget "
        f"(effort {args.effort}) = up to {total_min:.0f} min of search, plus compile and timing; "
        f"configs -> {out_dir / args.sku}"
    )
    if args.dry_run:
        print(header)
        for job in jobs:
            print(f"  {job.name:<48} -> {out_dir / args.sku / tuned.file_name(job.kernel, job.bucket)}")
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
