"""Per-SKU tuned Helion configs for kdakit's KDA kernels: the files, their validation, run-time selection.

Files: `kernels/configs/<sku>/<kernel>-<bucket>.json` (package data, so the image carries them), written by
`kdakit kernels autotune` on a GPU of that SKU. Each holds one `helion.Config` plus what it is valid for:
kernel name, sha256 of the kernel function's source, the helion/triton/torch versions it was tuned with, the
GPU name and the shape bucket, and how it was tuned (budget, effort, measured per-call times).

Shape buckets: (query heads, value heads, K, V, state dtype, batch bucket). Batches are bucketed to the CUDA
graph batch sizes SGLang pads decode/verify to: a batch B uses the bucket of the smallest size in
BATCH_BUCKETS that is >= B (B = 3 -> 4, B = 20 -> 24); larger batches use the largest bucket.

Selection, once per (kernel, bucket) and cached, so a call costs one dict lookup:
1. a config set explicitly (`set_decode_config` / `set_verify_config`) wins;
2. else the shipped file for the running GPU's SKU and the bucket, under the version policy below;
3. else the kernel module's default config, with ONE warning (KernelConfigWarning) per kernel and bucket
   that names the command which tunes it.
Nothing is ever autotuned at run time. CPU tensors (the Triton interpreter) have no SKU: the default config
runs silently unless KDAKIT_KERNEL_SKU names one.

Version policy (what a file records vs what is installed):
- kernel source hash or helion version differs: the file is REFUSED (the default runs, one warning). A
  Helion config's per-load/per-loop lists are positional in the traced body, and helion's code generation
  decides what they mean, so under another body or another helion they configure something else;
- triton or torch version differs (torch compared without its local label): the file is USED but FLAGGED:
  one warning naming the versions and the re-tune command, and `kdakit selftest` lists it as "active, tuned
  with other triton/torch: re-tune in the image". The config still means the same thing to Helion; only its
  measured advantage may not carry over to another compiler. Why not refuse: the configs we can measure are
  tuned on the lent H200, whose torch/triton differ from the image's pins (pins.toml); refusing them would
  ship nothing measured, trusting them silently would hide where they came from.

Environment: KDAKIT_KERNEL_SKU (override the SKU derived from the GPU name), KDAKIT_KERNEL_CONFIG_DIR (read
configs from another folder), KDAKIT_KERNEL_CONFIGS=default (ignore shipped configs, e.g. to compare).

Prefill: each of its five Helion kernels has its own files (`prefill-gate`, `prefill-intra`, `prefill-solve`,
`prefill-recompute`, `prefill-state`): they are separate launches with their own
config spaces and source hashes, so an edit to one kernel stales only its files. Their bucket's size field is
the total token count (B x T) bucketed to PREFILL_TOKEN_BUCKETS (slug `t<tokens>` instead of `b<batch>`);
heads, value heads, K, V and the pool dtype must match exactly. `prefill.chunk_kda` selects all five at once
(`select_group`), so a bucket without configs costs one warning, not five.

A new kernel opts in with a few lines: an entry in KERNEL_FUNCTIONS (and SIZE_BUCKETS if it is not bucketed by
batch), and `tuned.select(name, Bucket(...), DEFAULT_CONFIG, device)` where it builds its Helion kernel (see
decode.py's `_config_for`); `kdakit kernels autotune` then needs an input builder for it
(`autotune.problem_for`) and a `--kernels` name in KERNEL_GROUPS.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
import importlib
import inspect
import json
import os
import re
import types
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kdakit.kernels import shapes

from kdakit.facts import profiles

SCHEMA = "kdakit.kernel-config.v1"
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
BATCH_BUCKETS = tuple(shapes.get("buckets", "batch"))
ENV_SKU = "KDAKIT_KERNEL_SKU"
ENV_DIR = "KDAKIT_KERNEL_CONFIG_DIR"
ENV_MODE = "KDAKIT_KERNEL_CONFIGS"
MODES = ("shipped", "default")
STATE_DTYPES = ("fp32", "bf16", "fp16")

# kernel name -> "module:function" whose source the config was tuned for (its hash goes into the file).
# The two verify modes share one body but trace different loads, so they are tuned separately.
KERNEL_FUNCTIONS = {
    "decode": "kdakit.kernels.decode:_packed_decode",
    "verify-chain": "kdakit.kernels.verify:_verify",
    "verify-tree": "kdakit.kernels.verify:_verify",
}
# tuned name -> prefill.py's kernel name (its key in DEFAULT_CONFIGS / configure())
PREFILL_KERNELS = {
    "prefill-gate": "gate",
    "prefill-intra": "intra",
    "prefill-solve": "solve",
    "prefill-recompute": "recompute",
    "prefill-state": "state",
}
_PREFILL_FUNCTIONS = {
    "gate": "_gate_cumsum_fn",
    "intra": "_intra_chunk_fn",
    "solve": "_solve_fn",
    "recompute": "_recompute_fn",
    "state": "_state_pass_fn",
}
KERNEL_FUNCTIONS.update(
    {name: f"kdakit.kernels.prefill:{_PREFILL_FUNCTIONS[short]}" for name, short in PREFILL_KERNELS.items()}
)
# Prefill's total tokens (B x T) bucket: the grids of all five kernels scale with the chunk count, so the
# token count is what moves their best config. A prefill uses the smallest bucket >= its tokens, anything
# above the largest bucket that one.
PREFILL_TOKEN_BUCKETS = tuple(shapes.get("buckets", "prefill_tokens"))
# The leading size a kernel is bucketed by (decode/verify: requests at SGLang's CUDA graph batch sizes;
# prefill: total tokens).
SIZE_BUCKETS: dict[str, tuple[int, ...]] = {name: PREFILL_TOKEN_BUCKETS for name in PREFILL_KERNELS}


def size_buckets(kernel: str) -> tuple[int, ...]:
    return SIZE_BUCKETS.get(kernel, BATCH_BUCKETS)


def size_label(kernel: str) -> str:
    """The bucket slug's size prefix: `t` (total tokens) for prefill kernels, `b` (batch) for the others."""
    return "t" if kernel in PREFILL_KERNELS else "b"


def slug_of(kernel: str, bucket: Bucket) -> str:
    return bucket.slug(size_label(kernel))


# `--kernels` names of `kdakit kernels autotune` -> kernel names
KERNEL_GROUPS = {
    "decode": ("decode",),
    "verify": ("verify-chain",),
    "verify-chain": ("verify-chain",),
    "verify-tree": ("verify-tree",),
    "prefill": tuple(PREFILL_KERNELS),
    **{name: (name,) for name in PREFILL_KERNELS},
}


class KernelConfigWarning(UserWarning):
    """A kernel runs its default config (no usable tuned config for this GPU and shape), or runs a tuned one
    that was tuned with another triton/torch (see the version policy in the module doc)."""


class ConfigFileError(ValueError):
    """A config file that is not a valid kdakit kernel config."""


def sku_of(gpu_name: str) -> str:
    """The configs folder of a GPU, through the SKU registry's one mapping (kdakit.facts.profiles)."""
    return profiles.configs_of(profiles.sku_of_gpus(gpu_name))


def batch_bucket(batch: int, buckets: tuple[int, ...] = BATCH_BUCKETS) -> int:
    """The smallest bucket >= batch; the largest bucket for anything above it."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1 (got {batch})")
    i = bisect.bisect_left(buckets, batch)
    return buckets[min(i, len(buckets) - 1)]


def dtype_name(dtype) -> str:
    return {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}[str(dtype)]


class Bucket(NamedTuple):
    heads: int
    value_heads: int
    k: int
    v: int
    state_dtype: str
    batch: int

    def slug(self, size: str = "b") -> str:
        return f"h{self.heads}-hv{self.value_heads}-k{self.k}-v{self.v}-{self.state_dtype}-{size}{self.batch}"


def file_name(kernel: str, bucket: Bucket) -> str:
    return f"{kernel}-{slug_of(kernel, bucket)}.json"


@dataclass
class TunedConfig:
    kernel: str
    sku: str
    gpu_name: str
    bucket: Bucket
    config: dict[str, Any]
    source_sha256: str
    versions: dict[str, str]
    tuning: dict[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    def to_dict(self) -> dict:
        data = asdict(self)
        data["bucket"] = self.bucket._asdict()
        return data

    def helion_config(self):
        import helion

        return helion.Config.from_dict(dict(self.config))


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise ConfigFileError(what)


def parse(data: Any) -> TunedConfig:
    """Validate a config file's JSON object; raises ConfigFileError naming the first problem."""
    _require(isinstance(data, dict), "not a JSON object")
    _require(data.get("schema") == SCHEMA, f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    known = {"schema", "kernel", "sku", "gpu_name", "bucket", "config", "source_sha256", "versions", "tuning"}
    missing = sorted(known - {"tuning"} - set(data))
    _require(not missing, f"missing fields: {', '.join(missing)}")
    extra = sorted(set(data) - known)
    _require(not extra, f"unknown fields: {', '.join(extra)}")
    _require(data["kernel"] in KERNEL_FUNCTIONS, f"unknown kernel {data['kernel']!r}")
    for name in ("sku", "gpu_name"):
        _require(isinstance(data[name], str) and data[name], f"`{name}` must be a non-empty string")
    _require(
        isinstance(data["source_sha256"], str) and re.fullmatch(r"[0-9a-f]{64}", data["source_sha256"]),
        "`source_sha256` must be 64 hex digits",
    )
    versions = data["versions"]
    _require(
        isinstance(versions, dict)
        and all(isinstance(versions.get(p), str) for p in ("helion", "triton", "torch")),
        "`versions` must give helion, triton and torch as strings",
    )
    b = data["bucket"]
    _require(isinstance(b, dict) and set(b) == set(Bucket._fields), f"`bucket` needs {Bucket._fields}")
    for name in ("heads", "value_heads", "k", "v", "batch"):
        _require(isinstance(b[name], int) and b[name] >= 1, f"bucket.{name} must be a positive integer")
    _require(b["state_dtype"] in STATE_DTYPES, f"bucket.state_dtype must be one of {STATE_DTYPES}")
    sizes = size_buckets(data["kernel"])
    _require(b["batch"] in sizes, f"bucket.batch must be one of {sizes}")
    _require(b["value_heads"] % b["heads"] == 0, "bucket.value_heads must be a multiple of bucket.heads")
    cfg = data["config"]
    _require(isinstance(cfg, dict) and cfg, "`config` must be a non-empty object")
    blocks = cfg.get("block_sizes")
    _require(
        isinstance(blocks, list) and all(isinstance(x, int) and x >= 1 for x in blocks),
        "config.block_sizes must be a list of positive integers",
    )
    warps = cfg.get("num_warps", 4)
    _require(warps in (1, 2, 4, 8, 16, 32), f"config.num_warps must be a power of two <= 32 (got {warps})")
    tuning = data.get("tuning", {})
    _require(isinstance(tuning, dict), "`tuning` must be an object")
    return TunedConfig(
        kernel=data["kernel"],
        sku=data["sku"],
        gpu_name=data["gpu_name"],
        bucket=Bucket(**b),
        config=cfg,
        source_sha256=data["source_sha256"],
        versions=dict(versions),
        tuning=tuning,
    )


def load_file(path: Path) -> TunedConfig:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigFileError(f"{path}: unreadable ({exc})") from None
    try:
        tc = parse(data)
    except ConfigFileError as exc:
        raise ConfigFileError(f"{path}: {exc}") from None
    expected = file_name(tc.kernel, tc.bucket)
    if Path(path).name != expected:
        raise ConfigFileError(f"{path}: its kernel and bucket say the file is named {expected}")
    return tc


def write_file(tc: TunedConfig, directory: Path) -> Path:
    """Write `directory/<sku>/<kernel>-<bucket>.json` atomically (temp file + rename); returns the path."""
    parse(tc.to_dict())  # never write what the loader would reject
    folder = Path(directory) / tc.sku
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(tc.kernel, tc.bucket)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(tc.to_dict(), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------------ what is installed
def installed_versions() -> dict[str, str]:
    import importlib.metadata as metadata

    import torch
    import triton

    return {"helion": metadata.version("helion"), "triton": triton.__version__, "torch": torch.__version__}


def kernel_function(kernel: str):
    module, _, name = KERNEL_FUNCTIONS[kernel].partition(":")
    return getattr(importlib.import_module(module), name)


def _helpers(fn) -> list:
    """The module-level functions fn calls, transitively, from its own module or another module of this
    package (kernels/recurrent.py, shared by decode and verify): Helion traces through them, so they are
    part of the kernel body. In first-call order."""
    found: list = []

    def names(code) -> list[str]:
        out = list(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                out += names(const)
        return out

    def walk(f) -> None:
        for name in names(f.__code__):
            obj = f.__globals__.get(name)
            if isinstance(obj, types.FunctionType) and _in_package(obj) and obj is not fn:
                if obj not in found:
                    found.append(obj)
                    walk(obj)

    walk(fn)
    return found


def _in_package(obj) -> bool:
    return obj.__module__.startswith(f"{__package__}.")


@functools.cache
def source_sha256(kernel: str) -> str:
    """sha256 of the kernel function's source followed by the source of the helpers it calls (`_helpers`):
    a config's positional per-load lists only fit that traced body."""
    fn = kernel_function(kernel)
    text = inspect.getsource(fn) + "".join(inspect.getsource(h) for h in _helpers(fn))
    return hashlib.sha256(text.encode()).hexdigest()


def _base(version: str) -> str:
    return version.split("+")[0]


REFUSING_PACKAGES = ("helion",)  # a config tuned with another version of these is not used
FLAGGED_PACKAGES = ("triton", "torch")  # ... of these is used, with a warning


def _version_differs(pkg: str, want: str, have: str) -> bool:
    return _base(want) != _base(have) if pkg == "torch" else want != have


def mismatches(tc: TunedConfig, versions: dict[str, str], source: str) -> list[str]:
    """Why a tuned config must not be used here (empty: it may): another kernel source or helion."""
    problems = []
    if tc.source_sha256 != source:
        problems.append(f"kernel source changed (tuned for {tc.source_sha256[:12]}, installed {source[:12]})")
    for pkg in REFUSING_PACKAGES:
        if _version_differs(pkg, tc.versions[pkg], versions[pkg]):
            problems.append(f"tuned with {pkg} {tc.versions[pkg]}, installed {versions[pkg]}")
    return problems


def version_flags(tc: TunedConfig, versions: dict[str, str]) -> list[str]:
    """Why a usable tuned config's timing may not hold here: it was tuned with another triton/torch."""
    return [
        f"tuned with {pkg} {tc.versions[pkg]}, installed {versions[pkg]}"
        for pkg in FLAGGED_PACKAGES
        if _version_differs(pkg, tc.versions[pkg], versions[pkg])
    ]


FLAG_LABEL = "tuned with other triton/torch: re-tune in the image"


# ---------------------------------------------------------------------------------------------- selection
class Selection(NamedTuple):
    source: str  # "shipped" | "default" | "explicit"
    path: str | None
    reason: str


# keyed by (mode, kernel, bucket): one process may run both modes (`kdakit kernels bench --configs both`)
_selected: dict[tuple[str, str, Bucket], Any] = {}
_active: dict[tuple[str, str, Bucket], Selection] = {}
_warned: set[tuple[str, Bucket]] = set()
_mode: str | None = None
_generation = 0  # bumped by reset(): callers that cache selections (prefill) key on it


def config_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or CONFIG_DIR)


def mode() -> str:
    value = _mode or os.environ.get(ENV_MODE) or "shipped"
    if value not in MODES:
        raise ValueError(f"{ENV_MODE}={value!r}: expected one of {MODES}")
    return value


@contextlib.contextmanager
def configs_mode(value: str):
    """Run the calls inside with configs mode `value` (selections are cached per mode, nothing is reset)."""
    global _mode
    if value not in MODES:
        raise ValueError(f"configs mode {value!r}: expected one of {MODES}")
    previous, _mode = _mode, value
    try:
        yield
    finally:
        _mode = previous


def set_mode(value: str) -> None:
    """'shipped' (use tuned configs where valid) or 'default' (module defaults, no warnings)."""
    global _mode
    if value not in MODES:
        raise ValueError(f"configs mode {value!r}: expected one of {MODES}")
    _mode = value
    reset()


def generation() -> int:
    return _generation


def reset() -> None:
    """Forget every selection (the next call per bucket looks again and may warn again)."""
    global _generation
    _generation += 1
    _selected.clear()
    _active.clear()
    _warned.clear()
    _sku_index.cache_clear()


@functools.cache
def _device_sku(index: int) -> str:
    import torch

    return sku_of(torch.cuda.get_device_name(index))


def current_sku(device=None) -> str | None:
    """The SKU whose configs apply: KDAKIT_KERNEL_SKU, else from the CUDA device's name; None on CPU."""
    override = os.environ.get(ENV_SKU)
    if override:
        return override
    if device is None or getattr(device, "type", None) != "cuda":
        return None
    return _device_sku(device.index if device.index is not None else 0)


@functools.cache
def _sku_index(directory: str, sku: str) -> tuple[dict, dict]:
    """({(kernel, bucket): (TunedConfig, path)}, {path: error}) for one SKU folder, read once."""
    found, errors = {}, {}
    folder = Path(directory) / sku
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            tc = load_file(path)
        except ConfigFileError as exc:
            errors[str(path)] = str(exc)
            continue
        if tc.sku != sku:
            errors[str(path)] = f"{path}: says sku {tc.sku!r} but lies in the {sku!r} folder"
            continue
        found[(tc.kernel, tc.bucket)] = (tc, str(path))
    return found, errors


def tune_command(kernel: str, sku: str, bucket: Bucket) -> str:
    """The command that tunes `kernel` (or the group "prefill") at `bucket` on a GPU of `sku`."""
    if kernel == "prefill" or kernel in PREFILL_KERNELS:
        return (
            f"kdakit kernels autotune --sku {sku} --kernels {kernel} --heads {bucket.value_heads} "
            f"--tokens {bucket.batch} (or: make autotune SKU={sku} AUTOTUNE_KERNELS=prefill)"
        )
    return (
        f"kdakit kernels autotune --sku {sku} --kernels {kernel} --heads {bucket.value_heads} "
        f"--batches {bucket.batch} (or: make autotune SKU={sku})"
    )


def _warn_once(key: tuple[str, Bucket], message: str, stacklevel: int = 5) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, KernelConfigWarning, stacklevel=stacklevel)


def select(kernel: str, bucket: Bucket, default, device=None):
    """The helion.Config `kernel` runs with for `bucket` on `device` (see the module doc for the order)."""
    key = (mode(), kernel, bucket)
    chosen = _selected.get(key)
    if chosen is not None:
        return chosen
    chosen, selection, notice = _resolve(kernel, bucket, default, device)
    _selected[key] = chosen
    _active[key] = selection
    if notice is not None:
        _warn_once((kernel, bucket), notice.message(tune_command(kernel, notice.sku, bucket)))
    return chosen


def select_group(group: str, defaults: dict[str, Any], bucket: Bucket, device=None) -> dict[str, Any]:
    """`select` for the kernels one entry point launches together (prefill's five): {kernel: config}. What
    would be one warning per kernel is ONE warning for the group and bucket, listing each kernel's reason and
    the command that tunes the group. Each kernel's selection is cached as `select` caches it."""
    chosen, notices = {}, []
    for kernel, default in defaults.items():
        key = (mode(), kernel, bucket)
        if key in _selected:
            chosen[kernel] = _selected[key]
            continue
        chosen[kernel], _active[key], notice = _resolve(kernel, bucket, default, device)
        _selected[key] = chosen[kernel]
        if notice is not None:
            notices.append((kernel, notice))
    if notices:
        sku = notices[0][1].sku
        reasons = "; ".join(f"{kernel}: {n.short}" for kernel, n in notices)
        used = [kernel for kernel, n in notices if n.kind == "flagged"]
        action = (
            f"{len(used)} tuned config(s) used anyway ({', '.join(used)}), the others run their defaults"
            if used
            else "running the default configs"
        )
        _warn_once(
            (group, bucket),
            f"kdakit: {len(notices)} of {len(defaults)} {group} kernels have no usable tuned config for "
            f"{sku} at {slug_of(next(iter(defaults)), bucket)} ({reasons}): {action}. Tune them on this GPU: "
            f"{tune_command(group, sku, bucket)}",
        )
    return chosen


class _Notice(NamedTuple):
    """Why a selection warns: kind "missing" | "refused" (the default runs) | "flagged" (the file runs)."""

    kind: str
    sku: str
    short: str
    text: str  # the single-kernel message, `{command}` where the tune command goes

    def message(self, command: str) -> str:
        return self.text.replace("{command}", command)


def _resolve(kernel: str, bucket: Bucket, default, device) -> tuple[Any, Selection, _Notice | None]:
    if mode() == "default":
        return default, Selection("default", None, f"{ENV_MODE}=default"), None
    sku = current_sku(device)
    if sku is None:
        return default, Selection("default", None, "no GPU SKU (CPU)"), None
    directory = config_dir()
    found, errors = _sku_index(str(directory), sku)
    entry = found.get((kernel, bucket))
    slug = slug_of(kernel, bucket)
    if entry is None:
        why = f"no tuned config for {sku}"
        notice = _Notice(
            "missing",
            sku,
            f"no file {file_name(kernel, bucket)}",
            f"kdakit: no tuned {kernel} config for {sku} at {slug} in {directory / sku}: running "
            "the default config. Tune it on this GPU: {command}",
        )
        if errors:
            why += f" ({len(errors)} unreadable file(s) in {directory / sku})"
        return default, Selection("default", None, why), notice
    tc, path = entry
    versions = installed_versions()
    problems = mismatches(tc, versions, source_sha256(kernel))
    if problems:
        notice = _Notice(
            "refused",
            sku,
            f"{path} not used: {'; '.join(problems)}",
            f"kdakit: tuned config {path} is not used: {'; '.join(problems)}. Running the default config; "
            "re-tune: {command}",
        )
        return default, Selection("default", path, "; ".join(problems)), notice
    flags = version_flags(tc, versions)
    if flags:
        notice = _Notice(
            "flagged",
            sku,
            f"{path} used, but {'; '.join(flags)}",
            f"kdakit: tuned config {path} is used, but it was {'; '.join(flags)}: its measured advantage may "
            "not hold with these versions. Re-tune in the image: {command}",
        )
        selection = Selection("shipped", path, f"tuned on {tc.gpu_name}; {'; '.join(flags)}")
        return tc.helion_config(), selection, notice
    return tc.helion_config(), Selection("shipped", path, f"tuned on {tc.gpu_name}"), None


def note_explicit(kernel: str, bucket: Bucket, config) -> None:
    """Record (for `active()`) that a caller-set config ran for this bucket."""
    _active[(mode(), kernel, bucket)] = Selection("explicit", None, "set by set_*_config")


def set_explicit_config(configs: dict[str, Any], explicit: set[str], name: str, config) -> None:
    """`configs[name] = config`, marked in `explicit` as set by the caller (decode's and verify's setters)."""
    if name not in configs:
        raise KeyError(f"unknown config {name!r}; known: {sorted(configs)}")
    configs[name] = config
    explicit.add(name)


def kernel_maker(fn):
    """`config -> helion.Kernel` over the kernel function `fn`, cached per config (decode's and verify's
    `make_*_kernel`, used by their wrappers and by the tuning scripts)."""
    import helion

    @functools.cache
    def make(config):
        return helion.kernel(fn, static_shapes=False, config=config)

    return make


def select_config(
    kernel: str, configs: dict[str, Any], name: str, explicit: set[str],
    state, batch: int, H: int, HV: int, K: int, V: int,
):  # fmt: skip
    """The config `kernel` runs for this state pool and shape: `configs[name]` when the caller set it
    (`explicit`), else the tuned one shipped for the GPU's SKU and shape bucket, else `configs[name]`."""
    bucket = Bucket(H, HV, K, V, dtype_name(state.dtype), batch_bucket(max(batch, 1)))
    if name in explicit:
        note_explicit(kernel, bucket, configs[name])
        return configs[name]
    return select(kernel, bucket, configs[name], state.device)


def active() -> list[dict]:
    """What each (mode, kernel, bucket) used so far in this process: for bench records and debugging."""
    return [
        {
            "kernel": k,
            "bucket": slug_of(k, b),
            "source": s.source,
            "path": s.path,
            "reason": s.reason,
            "mode": m,
        }
        for (m, k, b), s in sorted(_active.items(), key=lambda item: (item[0][1], item[0][2], item[0][0]))
    ]


def describe_active(mode_name: str) -> str:
    """One line for a bench: which configs kdakit's kernels ran with."""
    rows = active()
    if not rows:
        return f"kdakit kernel configs ({mode_name}): none selected in this process"
    counts = {s: sum(r["source"] == s for r in rows) for s in ("shipped", "default", "explicit")}
    parts = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return f"kdakit kernel configs ({mode_name}): {parts} of {len(rows)} kernel/bucket selections"


# ------------------------------------------------------------------------------------------- inventory
def shipped_skus(directory: Path | None = None) -> list[str]:
    folder = Path(directory or config_dir())
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("*.json")))


def inventory(sku: str, directory: Path | None = None) -> list[dict]:
    """Every file for `sku`: path, kernel, bucket, whether it would be used here (`problems` if not) and
    why its timing may not hold (`flags`: tuned with another triton/torch, used anyway)."""
    directory = Path(directory or config_dir())
    found, errors = _sku_index(str(directory), sku)
    rows = [
        {"path": p, "kernel": None, "bucket": None, "problems": [e], "flags": []} for p, e in errors.items()
    ]
    versions = installed_versions() if found else {}
    for (kernel, bucket), (tc, path) in found.items():
        problems = mismatches(tc, versions, source_sha256(kernel))
        flags = [] if problems else version_flags(tc, versions)
        row = {
            "path": path,
            "kernel": kernel,
            "bucket": slug_of(kernel, bucket),
            "problems": problems,
            "flags": flags,
        }
        rows.append(row | {"tuning": tc.tuning})
    return sorted(rows, key=lambda r: r["path"])
