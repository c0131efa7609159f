"""Quick GPU timing of kdakit's Helion prefill against SGLang's Triton `chunk_kda` (for tuning).

The official numbers come from `kdakit kernels bench`; this script uses the same method
(h200-baseline notes): per-call time inside a CUDA graph of many back-to-back calls, each preceded by an
in-graph restore of v (the prefill writes its output over v), the separately timed restore subtracted.

    python -m kdakit.kernels.prefill_timing --shapes 1x4096,1x8192,2x4096 [--sweep] [--json out.json]

Shapes are PR-like: H = HV = 16, K = V = 128, bf16 activations, fp32 pool, bounded gate (-5) from raw g
with A_log/dt_bias, q/k L2 norm in the kernel, raw beta, varlen cu_seqlens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from kdakit.kernels import prefill


def make_inputs(lens, H=16, K=128, V=128, slots=8, seed=0, device="cuda", lower_bound=-5.0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    T = sum(lens)

    def rnd(*shape, s=1.0):
        return (torch.randn(*shape, generator=gen) * s).to(device)

    bf = torch.bfloat16
    inputs = dict(
        q=rnd(1, T, H, K).to(bf),
        k=rnd(1, T, H, K).to(bf),
        v=rnd(1, T, H, V).to(bf),
        g=rnd(1, T, H, K).to(bf),
        beta=rnd(1, T, H).to(bf),
        A_log=(torch.rand(H, generator=gen) * 0.5).to(device),
        dt_bias=rnd(H * K, s=0.1),
        pool=rnd(slots, H, V, K, s=0.1),
        indices=torch.arange(len(lens), dtype=torch.int32, device=device) * 2 + 1,
        cu_seqlens=torch.tensor(
            [0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device
        ),
        lower_bound=lower_bound,
    )
    return inputs


def call(fn, x, v_buf, pool):
    return fn(
        x["q"], x["k"], v_buf, x["g"], x["beta"],
        initial_state=pool, initial_state_indices=x["indices"], use_qk_l2norm_in_kernel=True,
        cu_seqlens=x["cu_seqlens"], A_log=x["A_log"], dt_bias=x["dt_bias"], lower_bound=x["lower_bound"],
        beta_is_raw=True,
    )  # fmt: skip


def graph_time_us(body, calls=10, reps=40) -> float:
    """Median replay time of a CUDA graph of `calls` bodies, per body, in us."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            body()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / calls)
    return statistics.median(samples)


def time_arm(fn, x, calls=10, reps=40) -> float:
    v_src = x["v"].clone()
    v_buf = x["v"].clone()
    pool = x["pool"].clone()
    for _ in range(3):  # compile outside capture
        v_buf.copy_(v_src)
        call(fn, x, v_buf, pool)
    torch.cuda.synchronize()

    def both():
        v_buf.copy_(v_src)
        call(fn, x, v_buf, pool)

    def restore():
        v_buf.copy_(v_src)

    return graph_time_us(both, calls, reps) - graph_time_us(restore, calls, reps)


def kernel_breakdown(fn, x, iters=5) -> dict[str, float]:
    """Average device time per call of each kernel (torch profiler), in us."""
    from torch.profiler import ProfilerActivity, profile

    v_buf = x["v"].clone()
    pool = x["pool"].clone()
    call(fn, x, v_buf, pool)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            v_buf.copy_(x["v"])
            call(fn, x, v_buf, pool)
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for evt in prof.key_averages():
        if evt.device_type is not None and "cuda" in str(evt.device_type).lower():
            total = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0.0)
            out[evt.key[:60]] = round(total / iters, 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def parity(fn_ref, fn, x) -> dict[str, float]:
    outs = []
    for f in (fn_ref, fn):
        v_buf = x["v"].clone()
        pool = x["pool"].clone()
        o = call(f, x, v_buf, pool)
        o = o[0] if isinstance(o, tuple) else o
        outs.append((o.float(), pool[x["indices"].long()].float()))
    (o_r, s_r), (o_k, s_k) = outs
    return {
        "o_max_abs": (o_r - o_k).abs().max().item(),
        "o_ref_max": o_r.abs().max().item(),
        "state_max_abs": (s_r - s_k).abs().max().item(),
        "state_ref_max": s_r.abs().max().item(),
    }


_STATE = {"block_sizes": [16], "num_warps": 8, "num_stages": 3, "indexing": "pointer"}


def _gate(block_k: int, warps: int) -> dict:
    cfg = {"block_sizes": [block_k, 32], "num_warps": warps, "num_stages": 1, "indexing": "pointer"}
    return {"gate": cfg}


SWEEP = [
    # (label, configs that differ from prefill.DEFAULT_CONFIGS, widen the state pass's V tile)
    ("default", {}, True),
    ("gate-k16-w1", _gate(16, 1), True),
    ("gate-k32-w1", _gate(32, 1), True),
    ("gate-k64-w2", _gate(64, 2), True),
    ("gate-k128-w8", _gate(128, 8), True),  # one program per (chunk, head): the layout before K tiles
    ("intra-w2", {"intra": {"block_sizes": [32], "num_warps": 2, "num_stages": 2}}, True),
    ("wk-k32", {"recompute_wk": {"block_sizes": [32], "num_warps": 4, "num_stages": 2}}, True),
    ("u-v32", {"recompute_u": {"block_sizes": [32], "num_warps": 4, "num_stages": 2}}, True),
    ("state-s1", {"state": {**_STATE, "num_stages": 1}}, True),
    ("state-s2", {"state": {**_STATE, "num_stages": 2}}, True),
    ("state-v16-fixed", {}, False),  # two waves at 2x4096
    ("state-v32", {"state": {**_STATE, "block_sizes": [32]}}, True),
    ("state-td", {"state": {**_STATE, "indexing": "tensor_descriptor"}}, True),
    # 4 warps: fastest in one H200 sweep, an illegal memory access in three other runs (BENCH.md, run 5)
    ("state-w4", {"state": {**_STATE, "num_warps": 4}}, True),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x4096,1x8192,2x4096")
    ap.add_argument("--sweep", action="store_true", help="time a few configs at every shape")
    ap.add_argument("--only", default=None, help="comma-separated sweep labels (default: all)")
    ap.add_argument("--triton", default="upstream", choices=["upstream", "fla", "none"])
    ap.add_argument("--upstream-dir", default=".carry/sglang-0.5.23")
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    shapes = []
    for spec in args.shapes.split(","):
        n, t = spec.lower().split("x")
        shapes.append((spec, [int(t)] * int(n)))
    triton_fn = None
    if args.triton == "upstream":
        from kdakit.kernels import upstream

        triton_fn = upstream.load("extracted", Path(args.upstream_dir)).triton_chunk_kda
    report: dict = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "helion": __import__("importlib.metadata").metadata.version("helion"),
        "rows": [],
    }
    if args.sweep:
        wanted = set(args.only.split(",")) if args.only else None
        inputs = {label_shape: make_inputs(lens) for label_shape, lens in shapes}  # built once, reused
        for label, configs, widen_state in SWEEP:
            if wanted is not None and label not in wanted:
                continue
            prefill.configure(configs, widen_state)
            for label_shape, x in inputs.items():
                try:
                    us = time_arm(prefill.chunk_kda, x)
                    row = {"sweep": label, "shape": label_shape, "us": round(us, 2)}
                except Exception as exc:  # a config that fails to compile is reported, not fatal
                    row = {
                        "sweep": label,
                        "shape": label_shape,
                        "error": f"{type(exc).__name__}: {exc}"[:300],
                    }
                print(json.dumps(row), flush=True)
                report["rows"].append(row)
        prefill.configure({})
    for label_shape, lens in shapes if not args.only else []:
        x = make_inputs(lens)
        row = {"shape": label_shape, "kdakit_us": round(time_arm(prefill.chunk_kda, x), 2)}
        if triton_fn is not None:
            row["triton_us"] = round(time_arm(triton_fn, x), 2)
            row["ratio"] = round(row["kdakit_us"] / row["triton_us"], 3)
            row["parity_vs_triton"] = parity(triton_fn, prefill.chunk_kda, x)
        if args.breakdown:
            row["kdakit_kernels"] = kernel_breakdown(prefill.chunk_kda, x)
            if triton_fn is not None:
                row["triton_kernels"] = kernel_breakdown(triton_fn, x)
        print(json.dumps(row), flush=True)
        report["rows"].append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
