"""Per-kernel device time of every prefill arm (torch profiler): where a prefill's time goes, by kernel.

`kdakit kernels profile` (GPU only) calls each prefill arm the way SGLang's adapters do (bench_inputs), warms
it, then profiles `calls` calls and records each CUDA kernel's time per call. The input restore between
calls (copies of v and the state pool) is listed and left out of the arm's total. Writes
RESULTS_DIR/RUN_ID/HOST/prefill-profile.json, rewritten after every (case, arm) row, so a run cut short keeps
the rows it finished.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from kdakit.facts.errors import UsageError

KIND = "kdakit.prefill-profile"
RAW_NAME = "prefill-profile.json"
DEFAULT_CASES = "1x4096:16,1x4096:8,1x512:16,1x16:16,8x512:16,1x8192:16"
RESTORE_MARKERS = ("Memcpy", "copy", "elementwise")  # the restore's copies (torch's copy_ kernels)


def parse_cases(text: str) -> list[tuple[int, int, int]]:
    """'BATCHxTOKENS:HEADS,...' -> [(batch, tokens, heads)]."""
    cases = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        shape, _, heads = item.partition(":")
        batch, sep, tokens = shape.partition("x")
        if not (sep and batch.isdigit() and tokens.isdigit() and heads.isdigit()) or 0 in map(
            int, (batch, tokens, heads)
        ):
            raise UsageError(f"profile case {item!r}: expected BATCHxTOKENS:HEADS, e.g. 1x4096:16")
        cases.append((int(batch), int(tokens), int(heads)))
    if not cases:
        raise UsageError("no profile cases given")
    return cases


def is_restore(kernel_name: str) -> bool:
    return any(marker.lower() in kernel_name.lower() for marker in RESTORE_MARKERS)


def summarize(per_kernel_us: dict[str, float]) -> dict:
    """An arm's row: its kernels (µs per call, largest first) and its total without the restore's copies."""
    kernels = dict(sorted(per_kernel_us.items(), key=lambda kv: -kv[1]))
    restore = sum(v for k, v in kernels.items() if is_restore(k))
    return {
        "kernels": {k: round(v, 2) for k, v in kernels.items()},
        "restore_us": round(restore, 2),
        "total_us": round(sum(kernels.values()) - restore, 2),
    }


def kernel_times(call, calls: int) -> dict[str, float]:
    """µs per call of each GPU kernel that `calls` runs of call() launch (CUDA graph replays included)."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per[event.name] += event.device_time_total
    return {name: us / calls for name, us in per.items()}


def _versions() -> dict:
    from kdakit.records.provenance import package_versions

    return package_versions(("torch", "triton", "helion", "sglang", "fla-core"))


def _inputs(batch: int, tokens: int, heads: int) -> dict:
    """One case's inputs as the bench makes them (bf16 activations, fp32 state pool, raw gate and beta)."""
    import torch
    from kdakit.kernels.tools import bench, bench_inputs

    cfg = bench.BenchConfig(heads=heads, value_heads=heads)
    gen = torch.Generator(device="cuda").manual_seed(0)
    total, K = batch * tokens, cfg.head_dim
    A_log, dt_bias = bench_inputs.params(cfg, gen)
    qkv0 = torch.randn(total, 3 * heads * K, device="cuda", dtype=torch.bfloat16, generator=gen)
    return {
        "cfg": cfg, "A_log": A_log, "dt_bias": dt_bias, "qkv0": qkv0,
        "x": {
            "qkv": qkv0.clone(),
            "g": torch.randn(1, total, heads, K, device="cuda", dtype=torch.bfloat16, generator=gen),
            "beta": torch.randn(1, total, heads, device="cuda", dtype=torch.bfloat16, generator=gen),
        },
        "pool0": torch.randn(4 * batch, heads, K, K, device="cuda", generator=gen) * 0.05,
        "idx": torch.arange(batch, 2 * batch, dtype=torch.int32, device="cuda"),
        "cu": torch.arange(0, total + 1, tokens, dtype=torch.int32, device="cuda"),
    }  # fmt: skip


def _arm_call(fn, inputs: dict):
    """One prefill call with its inputs restored first (the kernels write o into v and update the pool)."""
    from kdakit.kernels.tools import bench_inputs

    pool = inputs["pool0"].clone()

    def call():
        inputs["x"]["qkv"].copy_(inputs["qkv0"])
        pool.copy_(inputs["pool0"])
        return bench_inputs.prefill_call(
            fn, inputs["cfg"], inputs["x"], inputs["A_log"], inputs["dt_bias"], pool, inputs["idx"],
            inputs["cu"],
        )  # fmt: skip

    return call


def profiled_arms() -> list[str]:
    """The prefill arms a profile runs, SGLang's Triton first (the others' reference)."""
    from kdakit.kernels.tools import bench

    return [arm for arm in bench.ARMS["prefill"] if arm not in bench.OPTIONAL_ARMS]


def parse_arms(
    text: str | None, known: list[str] | None = None, what: str = "prefill arms"
) -> list[str] | None:
    """--arms: a comma list of `known` arms (default: the profiled prefill arms); None when not given."""
    if text is None:
        return None
    known = profiled_arms() if known is None else known
    arms = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in arms if a not in known]
    if not arms or unknown:
        raise UsageError(f"--arms: not {', '.join(unknown) or repr(text)}; {what}: {', '.join(known)}")
    return arms


def run(
    cases: list[tuple[int, int, int]],
    out_file: Path,
    calls: int = 20,
    log=print,
    arms: list[str] | None = None,
) -> dict:
    """Profile each case's arms (all, or `arms` in the profile's order); the record is rewritten after every
    row. The first arm run is the reference of the others' rel_err_vs_first_arm."""
    import torch
    from kdakit.kernels.tools import bench

    if not torch.cuda.is_available():
        raise UsageError("kdakit kernels profile needs an NVIDIA GPU")
    found, missing, _info = bench.load_arms()
    arms = {arm: found.get(f"prefill:{arm}") for arm in profiled_arms() if arms is None or arm in arms}
    record = {"kind": KIND, "gpu": torch.cuda.get_device_name(), "versions": _versions(), "calls": calls,
              "rows": []}  # fmt: skip
    for batch, tokens, heads in cases:
        inputs = _inputs(batch, tokens, heads)
        reference = None
        for arm, fn in arms.items():
            row = {"case": f"{batch}x{tokens}", "heads": heads, "arm": arm}
            if fn is None:
                row["error"] = missing.get(f"prefill:{arm}", "not loaded")
            else:
                call = _arm_call(fn, inputs)
                try:
                    for _ in range(3):
                        call()
                    out = call().float()
                    torch.cuda.synchronize()
                    row["finite"] = bool(torch.isfinite(out).all())
                    if reference is None:
                        reference = out  # the first arm (SGLang's Triton) is the reference
                    else:
                        row["rel_err_vs_first_arm"] = float((out - reference).norm() / reference.norm())
                    row.update(summarize(kernel_times(call, calls)))
                except Exception as exc:  # one arm failing leaves the others' rows
                    row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            record["rows"].append(row)
            out_file.write_text(json.dumps(record, indent=1) + "\n")
            log(render_row(row))
    return record


def render_row(row: dict) -> str:
    head = f"{row['case']} h{row['heads']} {row['arm']}"
    if "error" in row:
        return f"{head}: {row['error']}"
    top = ", ".join(f"{k[:40]} {v}" for k, v in list(row["kernels"].items())[:7] if not is_restore(k))
    return f"{head}: {row['total_us']} µs without the restore ({top})"
