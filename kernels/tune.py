"""Time kdakit's decode/verify configs against SGLang's kernels on one GPU (a tuning aid, not the bench).

    python -m kdakit.kernels.tune --json out.json [--upstream-dir .carry/sglang-0.5.23]

Method (as in the H200 baseline notes): H = HV = 16, K = V = 128, bf16 activations, fp32 state pool of 512
slots (512 MiB, larger than L2), bounded gate -5, q/k L2 norm. For each arm a CUDA graph holds N back-to-back
calls whose slot sets rotate over the pool (one graph cycle touches >= 128 MiB of state); per-call time =
median replay time / N after warm-up (compilation excluded). The single-call graph replay latency is reported
too. Outputs are checked against SGLang's Triton kernel before timing. The HBM floor is bytes moved divided by
the device-to-device copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

H = HV = 16
K = V = 128
POOL_SLOTS = 512
SNAPSHOT_ROWS = 96
STEPS = 6
LOWER_BOUND = -5.0

# Config tags: "bv<block_v>w<warps>" plus flags: o0 = default loop order (batch fastest; otherwise the V tile
# is the fastest grid axis, then the head, then the request: neighbouring programs touch neighbouring state),
# e = evict-first state loads and streaming (.cs) state/snapshot stores, u<n> = unroll the token loop n times,
# xyz = 3-D launch grid.
DECODE_SWEEP = (
    ["o0bv8w4", "o0bv8w1"]
    + [f"bv{bv}w{w}" for bv in (8, 16) for w in (1, 2, 4)]
    + ["bv32w2", "bv32w4", "bv8w1e", "bv8w2e", "bv16w2e", "bv8w1xyz"]
)
VERIFY_SWEEP = (
    ["o0bv16w1"]
    + [f"bv{bv}w{w}" for bv in (8, 16, 32) for w in (1, 2)]
    + [f"bv{bv}w{w}e" for bv, w in ((8, 1), (16, 1), (16, 2), (32, 2))]
    + ["bv8w1eu2", "bv16w1eu2"]
)


def make_config(tag: str, kind: str):
    """helion.Config for a sweep tag (see above); kind is "decode" or "verify" (their load/store orders)."""
    import re

    import helion

    m = re.fullmatch(r"(o0)?bv(\d+)w(\d+)(e)?(?:u(\d+))?(xyz)?", tag)
    if not m:
        raise ValueError(f"bad config tag {tag!r}")
    default_order, bv, warps, evict, unroll, xyz = m.groups()
    fields: dict = {
        "block_sizes": [int(bv)],
        "num_warps": int(warps),
        "num_stages": 1,
        "indexing": "pointer",
        "pid_type": "xyz" if xyz else "flat",
    }
    if not default_order:
        fields["loop_orders"] = [[2, 1, 0]]
    if evict:  # the kernel modules' positional per-load/per-store lists (they follow the traced body)
        from kdakit.kernels import decode, verify

        fields.update(decode.CACHE_HINTS if kind == "decode" else verify.CHAIN_CACHE_HINTS)
    if unroll:
        fields["range_unroll_factors"] = [0, int(unroll), 0]
    return helion.Config(**fields)


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting read + write."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * nbytes / statistics.median(times)


def graph_time_us(calls, replays: int = 40) -> tuple[float, float]:
    """(per-call us in a graph of all `calls` back to back, single-call graph replay us)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls[:3]:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()

    def timed(graph, n):
        for _ in range(3):
            graph.replay()
        samples = []
        for _ in range(n):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
        return statistics.median(samples)

    many = torch.cuda.CUDAGraph()
    with torch.cuda.graph(many):
        for fn in calls:
            fn()
    per_call = timed(many, replays) / len(calls)
    one = torch.cuda.CUDAGraph()
    with torch.cuda.graph(one):
        calls[0]()
    single = timed(one, replays * 2)
    return per_call, single


def slot_sets(batch: int, n_calls: int, total: int, gen: torch.Generator) -> list[torch.Tensor]:
    perm = torch.randperm(total, generator=gen)
    sets = []
    for i in range(n_calls):
        ids = [(i * batch + j) % total for j in range(batch)]
        sets.append(perm[ids].to(torch.int32).cuda())
    return sets


def n_calls_for(batch: int) -> int:
    return max(16, math.ceil(128 / batch))


# ----------------------------------------------------------------------------------------------- decode
def decode_inputs(B: int, seed: int = 0) -> dict:
    from kdakit.kernels.testing import decode_case

    case = decode_case(B, H, HV, K, V, POOL_SLOTS, indices=list(range(B)), device="cuda", seed=seed)
    return case


def decode_bytes(B: int) -> int:
    state = 2 * HV * V * K * 4
    inputs = (2 * H * K + HV * V) * 2 + HV * K * 2 + HV * 2 + HV * V * 2
    return B * (state + inputs)


def run_decode(B: int, up, configs, results: list, gen) -> None:
    from kdakit.kernels import decode as kd

    case = decode_inputs(B)
    sets = slot_sets(B, n_calls_for(B), POOL_SLOTS, gen)
    scale = K**-0.5
    mixed, a, b = case["mixed_qkv"], case["a"], case["b"]
    q = mixed[:, : H * K].reshape(1, B, H, K)
    k = mixed[:, H * K : 2 * H * K].reshape(1, B, H, K)
    v = mixed[:, 2 * H * K :].reshape(1, B, HV, V)
    cu = torch.arange(B + 1, dtype=torch.int32, device="cuda")
    pool = case["initial_state"]
    out = case["out"]

    def triton_nonpacked(idx):
        return up.triton_recurrent(
            A_log=case["A_log"], a=a, dt_bias=case["dt_bias"], softplus_beta=1.0, softplus_threshold=20.0,
            q=q, k=k, v=v, b=b, initial_state_source=pool, initial_state_indices=idx, cu_seqlens=cu,
            use_qk_l2norm_in_kernel=True, is_kda=True, lower_bound=LOWER_BOUND,
        )  # fmt: skip

    def packed(fn):
        def call(idx):
            return fn(mixed, a, b, case["A_log"], case["dt_bias"], scale, pool, out, idx, True, LOWER_BOUND)

        return call

    def kdakit_with(cfg):
        kernel = kd.make_decode_kernel(cfg)

        def call(idx):
            kernel(
                mixed, a, b, case["A_log"], case["dt_bias"], scale, LOWER_BOUND, pool, out, idx, True, True
            )

        return call

    # correctness against Triton (non-packed) on a private copy of the pool
    saved = pool.clone()
    ref = triton_nonpacked(sets[0]).reshape(B, HV, V).float()
    ref_pool = pool.clone()
    # the same state bytes as one plain contiguous copy per call: what a bandwidth-optimal kernel would cost
    # with the same launch overhead in the same graph method
    slabs = pool.view(POOL_SLOTS, -1)
    copy_dst = torch.empty_like(slabs)
    copy_offset = {idx.data_ptr(): (i * B) % (POOL_SLOTS - B + 1) for i, idx in enumerate(sets)}

    def copy_equivalent(idx):
        o = copy_offset[idx.data_ptr()]
        copy_dst[o : o + B].copy_(slabs[o : o + B])

    arms = [("triton-nonpacked", "", triton_nonpacked), ("copy-equivalent", "", copy_equivalent)]
    if up.triton_packed_decode_dispatch is not None:
        arms.append(("triton-packed", "", packed(up.triton_packed_decode)))
    if up.helion_packed_decode is not None:
        arms.append(("sglang-helion", "", packed(up.helion_packed_decode)))
    for tag in configs:
        arms.append(("kdakit", tag, kdakit_with(make_config(tag, "decode"))))
    for name, tag, fn in arms:
        row = {"kind": "decode", "B": B, "arm": name, "config": tag, "bytes": decode_bytes(B)}
        try:
            pool.copy_(saved)
            fn(sets[0])
            torch.cuda.synchronize()
            if name not in ("triton-nonpacked", "copy-equivalent"):
                got = out.reshape(B, HV, V).float()
                row["out_err_vs_triton"] = float((got - ref).abs().max())
                row["state_err_vs_triton"] = float((pool - ref_pool).abs().max())
            row["per_call_us"], row["single_us"] = graph_time_us(
                [lambda i=i, fn=fn: fn(sets[i]) for i in range(len(sets))]
            )
        except Exception as exc:  # keep sweeping; the error is part of the record
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            traceback.print_exc()
        results.append(row)
        print(json.dumps(row), flush=True)
    pool.copy_(saved)


# ----------------------------------------------------------------------------------------------- verify
def verify_bytes(N: int) -> int:
    state = HV * V * K * 4
    inputs = STEPS * ((2 * H * K + HV * V) * 2 + HV * K * 2 + HV * 2 + HV * V * 2)
    return N * (state * (1 + STEPS) + inputs)


def run_verify(N: int, up, configs, results: list, gen) -> None:
    from kdakit.kernels import verify as kv
    from kdakit.kernels.testing import verify_case

    case = verify_case(
        [STEPS] * N, H, HV, K, V, POOL_SLOTS, cache_indices=list(range(N)), rows=list(range(N)),
        num_rows=SNAPSHOT_ROWS, device="cuda",
    )  # fmt: skip
    case["intermediate_states_buffer"].normal_()
    slot_list = slot_sets(N, n_calls_for(N), POOL_SLOTS, gen)
    row_list = slot_sets(N, n_calls_for(N), SNAPSHOT_ROWS, gen)
    snaps = case["intermediate_states_buffer"]
    T = N * STEPS

    def kw(i):
        d = dict(case)
        d["cache_indices"] = slot_list[i]
        d["intermediate_state_indices"] = row_list[i]
        return d

    def triton_verify(i):
        d = kw(i)
        return up.triton_recurrent(
            A_log=d["A_log"], a=d["a"], dt_bias=d["dt_bias"], softplus_beta=1.0, softplus_threshold=20.0,
            q=d["q"], k=d["k"], v=d["v"], b=d["b"], initial_state_source=d["ssm_states"],
            initial_state_indices=d["cache_indices"], cu_seqlens=d["query_start_loc"],
            use_qk_l2norm_in_kernel=True, is_kda=True, lower_bound=LOWER_BOUND, disable_state_update=True,
            intermediate_states_buffer=snaps, intermediate_state_indices=d["intermediate_state_indices"],
            cache_steps=STEPS, retrieve_parent_token=None,
        )  # fmt: skip

    def sglang_helion(i):
        return up.helion_verify(**kw(i), lower_bound=LOWER_BOUND)

    def kdakit_with(cfg):
        def call(i):
            kv.set_verify_config("chain", cfg)  # read at launch (and so at capture) time
            return kv.helion_kda_verify(**kw(i), lower_bound=LOWER_BOUND)

        return call

    ref_out = triton_verify(0).reshape(T, HV, V).float()
    rows0 = row_list[0].long()
    ref_snap = snaps[rows0].clone()
    pool_before = case["ssm_states"].clone()
    slabs = case["ssm_states"].view(POOL_SLOTS, 1, -1)
    snap_slabs = snaps.view(SNAPSHOT_ROWS, STEPS, -1)

    def copy_equivalent(i):
        # read N states, write STEPS copies of each: the verify's state bytes in one plain copy kernel
        o = (i * N) % (SNAPSHOT_ROWS - N + 1)
        snap_slabs[o : o + N].copy_(slabs[o : o + N].expand(N, STEPS, -1))
        return None

    arms = [("triton", "", triton_verify), ("copy-equivalent", "", copy_equivalent)]
    if up.helion_verify is not None:
        arms.append(("sglang-helion", "", sglang_helion))
    for tag in configs:
        arms.append(("kdakit", tag, kdakit_with(make_config(tag, "verify"))))
    for name, tag, fn in arms:
        row = {"kind": "verify", "B": N, "arm": name, "config": tag, "bytes": verify_bytes(N)}
        try:
            snaps[rows0] = float("nan")
            got = fn(0)
            torch.cuda.synchronize()
            if name not in ("triton", "copy-equivalent"):
                row["out_err_vs_triton"] = float((got.reshape(T, HV, V).float() - ref_out).abs().max())
                row["snapshot_err_vs_triton"] = float((snaps[rows0] - ref_snap).abs().max())
                row["pool_untouched"] = bool(torch.equal(case["ssm_states"], pool_before))
            row["per_call_us"], row["single_us"] = graph_time_us(
                [lambda i=i, fn=fn: fn(i) for i in range(len(slot_list))]
            )
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            traceback.print_exc()
        results.append(row)
        print(json.dumps(row), flush=True)


def summarize(results: list, bandwidth: float) -> str:
    lines = [f"copy bandwidth {bandwidth / 1e12:.2f} TB/s (read+write)"]
    for kind in ("decode", "verify"):
        for B in sorted({r["B"] for r in results if r["kind"] == kind}):
            rows = [r for r in results if r["kind"] == kind and r["B"] == B and "per_call_us" in r]
            if not rows:
                continue
            floor = rows[0]["bytes"] / bandwidth * 1e6
            base = next((r for r in rows if r["arm"] in ("triton-nonpacked", "triton")), None)
            best_copy = next((r for r in rows if r["arm"] == "copy-equivalent"), None)
            lines.append(f"{kind} B={B}  HBM floor {floor:.2f} us")
            for r in sorted(rows, key=lambda r: r["per_call_us"]):
                vs = f"{r['per_call_us'] / base['per_call_us']:.2f}x triton" if base else ""
                if best_copy:
                    vs += f"  {r['per_call_us'] / best_copy['per_call_us']:.2f}x copy"
                lines.append(
                    f"  {r['arm']:>16} {r['config']:>9} {r['per_call_us']:8.2f} us"
                    f"  single {r['single_us']:6.2f}"
                    f"  {vs}  {r['per_call_us'] / floor:.2f}x floor"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="where to write all measurements")
    parser.add_argument("--summary", action="store_true", help="only print the table of an existing --json")
    parser.add_argument("--upstream-dir", default=None, help="extracted SGLang kernel tree (kdakit upstream)")
    parser.add_argument("--batches", default="1,16,48")
    parser.add_argument(
        "--decode-configs", default=None, help="e.g. 16x2,32x4u2 (block_v x warps [u unroll])"
    )
    parser.add_argument("--verify-configs", default=None)
    args = parser.parse_args(argv)
    if args.summary:
        data = json.loads(Path(args.json).read_text())
        print(summarize(data["results"], data["meta"]["copy_bandwidth_Bps"]))
        return 0

    from kdakit.kernels import upstream

    def parse(text, default):
        return text.split(",") if text else default

    up = upstream.load(
        "extracted" if args.upstream_dir else "auto", Path(args.upstream_dir) if args.upstream_dir else None
    )
    batches = [int(b) for b in args.batches.split(",")]
    gen = torch.Generator().manual_seed(0)
    results: list = []
    started = time.time()
    bandwidth = copy_bandwidth()
    import helion
    import triton

    meta = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "helion": getattr(helion, "__version__", None) or _dist_version("helion"),
        "copy_bandwidth_Bps": bandwidth,
        "upstream": up.source,
        "upstream_missing": up.missing,
    }

    def save():  # after every batch, so a run cut short still leaves its numbers
        meta["seconds"] = time.time() - started
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))

    for B in batches:
        run_decode(B, up, parse(args.decode_configs, DECODE_SWEEP), results, gen)
        save()
    for B in batches:
        run_verify(B, up, parse(args.verify_configs, VERIFY_SWEEP), results, gen)
        save()
    print(summarize(results, bandwidth))
    return 0


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
