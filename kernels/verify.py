"""kdakit's Helion KDA verify for speculative decoding (MTP): per-candidate snapshots, pool read-only.

Shapes (N requests packed into T tokens, H query/key heads, HV value heads, K and V powers of two):
    q, k                        [1, T, H, K]
    v                           [1, T, HV, V]
    a                           [T, HV*K] (any shape with T*HV*K elements)   raw forget gate
    b                           [T, HV]   (any shape with T*HV elements)     raw beta logits
    A_log [HV], dt_bias [HV*K]
    ssm_states                  [slots, HV, V, K]  committed pool, only read
    cache_indices               [N]   pool slot per request (negative: start from a zero state)
    query_start_loc             [N+1] token offsets of the requests
    intermediate_states_buffer  [rows, >= cache_steps, HV, V, K]  snapshots[row, step] = state after step
    intermediate_state_indices  [>= N] snapshot row of request n at position n; SGLang's KDA backend passes
                                its whole per-pool row table (`build_verify_intermediate_state_indices`),
                                longer than N; negative rows: CUDA Graph padding, nothing stored
    retrieve_parent_token       [N, >= steps] or None: tree verification, step s > 0 starts from the
                                snapshot of step parent[n, s]; None is chain verification (one fp32
                                accumulator carried across the candidates)
Returns out [1, T, HV, V] in v's dtype; q and k are L2-normalized and scale = K**-0.5.

Design: one program per (request, value head, V tile), the [block_v, K] state slice stays in fp32 registers
across all of the request's candidates; each step stores one contiguous snapshot tile (the kernel is
write-bound: steps x state per request). Token rows no request covers are zero-filled by the last request's
programs, so no separate memset launch is needed. Reference: `kdakit.kernels.reference.verify_reference`.
"""

from __future__ import annotations

import helion
import helion.language as hl
import torch
from kdakit.kernels import tuned
from kdakit.kernels.decode import _check_runnable_device, _is_power_of_two
from kdakit.kernels.recurrent import LOG2E as _LOG2E
from kdakit.kernels.recurrent import gate_log_decay, program_heads

# Fallback configs (no run-time autotuning): a tuned config shipped for the GPU's SKU and shape bucket wins
# (`kdakit.kernels.tuned`), and one set with `set_verify_config` wins over both.
# loop_orders [[2, 1, 0]]: the V tile is the fastest grid axis, then the head, then the request, so
# neighbouring programs write neighbouring snapshot memory. Chain: state loads evict-first and snapshot
# stores streaming (.cs); these lists are positional in traced order (loads slot,row,start,end,A_log,
# dt_bias,state, a,b,q,k,v of the first step, a,b,q,k,v of the next step in the loop; stores out,snapshot,
# pad) and the tree body has two more loads, so its config carries no such lists.
# The chain default unrolls the token loop twice (the 2 in range_unroll_factors): on the H200, with each
# call's activations fresh from HBM as in a server, block 8 unrolled was the fastest chain config at B = 1, 16
# and 48 (kernels/README.md).
_BASE = {"num_stages": 1, "indexing": "pointer", "pid_type": "flat", "loop_orders": [[2, 1, 0]]}
CHAIN_CACHE_HINTS = {
    "load_eviction_policies": [""] * 6 + ["first"] + [""] * 10,
    "store_cache_modifiers": ["", ".cs", ""],
}
VERIFY_CONFIGS: dict[str, helion.Config] = {
    "chain": helion.Config(
        block_sizes=[8], num_warps=1, range_unroll_factors=[0, 2, 0], **_BASE, **CHAIN_CACHE_HINTS
    ),
    "tree": helion.Config(block_sizes=[16], num_warps=1, **_BASE),
}  # fmt: skip
# Configs `kdakit kernels autotune` seeds Helion's search with and times against its result, besides the
# default: block 8 with the token loop unrolled three times, on the flat and on the 3-D launch grid (within
# 0.5 % of the default on the H200; the tune chose the 3-D one at B = 1, 16 and 48, kernels/BENCH.md runs
# 9-11), and block 16 with one and two warps. Helion's search space has no 3-D grid for this kernel, so that
# seed is timed but not seeded (`autotune.searchable_seeds`).
_UNROLL3 = {"block_sizes": [8], "num_warps": 1, "range_unroll_factors": [0, 3, 0], **CHAIN_CACHE_HINTS}
VERIFY_SEEDS: dict[str, list[helion.Config]] = {
    "chain": [
        helion.Config(**_UNROLL3, **_BASE),
        helion.Config(**_UNROLL3, **dict(_BASE, pid_type="xyz")),
        helion.Config(block_sizes=[16], num_warps=1, **_BASE, **CHAIN_CACHE_HINTS),
        helion.Config(block_sizes=[16], num_warps=2, **_BASE, **CHAIN_CACHE_HINTS),
    ],
    "tree": [],
}


def _verify(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    pool: torch.Tensor,
    slots: torch.Tensor,
    cu_seqlens: torch.Tensor,
    snapshots: torch.Tensor,
    rows: torch.Tensor,
    parents: torch.Tensor | None,
    out: torch.Tensor,
    total_tokens: int,
    lower_bound: float,
    bounded_gate: hl.constexpr,
) -> torch.Tensor:
    H, K = hl.specialize(q.shape[1:])
    HV, V = hl.specialize(v.shape[1:])
    N = slots.size(0)
    hl.specialize(
        (
            q.stride(0),
            q.stride(1),
            q.stride(2),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            v.stride(0),
            v.stride(1),
            v.stride(2),
            a.stride(0),
            a.stride(1),
            a.stride(2),
            b.stride(0),
            b.stride(1),
            dt_bias.stride(0),
            dt_bias.stride(1),
            pool.stride(1),
            pool.stride(2),
            pool.stride(3),
            snapshots.stride(1),
            snapshots.stride(2),
            snapshots.stride(3),
            snapshots.stride(4),
            out.stride(0),
            out.stride(1),
            out.stride(2),
        )
    )
    scale = K**-0.5
    block_v = hl.register_block_size(1, V)
    for tile_n, tile_hv, tile_v in hl.tile([N, HV, V], block_size=[1, 1, block_v]):
        n, hv, h, keys = program_heads(tile_n, tile_hv, H, HV, K)
        slot = slots[n].to(torch.int64)
        row = rows[n].to(torch.int64)
        start = cu_seqlens[n].to(torch.int64)
        end = cu_seqlens[n + 1].to(torch.int64)
        store_snapshots = row >= 0
        decay_rate = torch.exp2(A_log[hv].to(torch.float32) * _LOG2E)
        bias = dt_bias[hv, keys].to(torch.float32)
        state = hl.load(pool, [slot, hv, tile_v.index, keys], extra_mask=slot >= 0).to(torch.float32)
        # Each step's inputs are loaded one step ahead, so their round trip (HBM when the activations are
        # cold, as in a server) overlaps the previous step's math and snapshot store instead of stalling it.
        more = start < end
        a_next = hl.load(a, [start, hv, keys], extra_mask=more)
        b_next = hl.load(b, [start, hv], extra_mask=more)
        q_next = hl.load(q, [start, h, keys], extra_mask=more)
        k_next = hl.load(k, [start, h, keys], extra_mask=more)
        v_next = hl.load(v, [start, hv, tile_v.index], extra_mask=more)
        for token in range(start, end):
            step = token - start
            a_raw, b_raw, q_raw, k_raw, v_raw = a_next, b_next, q_next, k_next, v_next
            more = token + 1 < end
            a_next = hl.load(a, [token + 1, hv, keys], extra_mask=more)
            b_next = hl.load(b, [token + 1, hv], extra_mask=more)
            q_next = hl.load(q, [token + 1, h, keys], extra_mask=more)
            k_next = hl.load(k, [token + 1, h, keys], extra_mask=more)
            v_next = hl.load(v, [token + 1, hv, tile_v.index], extra_mask=more)
            if parents is not None:
                from_parent = (step > 0) & store_snapshots
                parent = hl.load(parents, [n, step], extra_mask=from_parent).to(torch.int64)
                parent_state = hl.load(
                    snapshots, [row, parent, hv, tile_v.index, keys], extra_mask=from_parent
                ).to(torch.float32)
                state = torch.where(from_parent, parent_state, state)
            x = a_raw.to(torch.float32) + bias
            log_decay, softplus = gate_log_decay(x, decay_rate, lower_bound, _LOG2E, bounded_gate)
            beta = torch.sigmoid(b_raw.to(torch.float32))
            qt = q_raw.to(torch.float32)
            kt = k_raw.to(torch.float32)
            qt = qt * (torch.rsqrt((qt * qt).sum() + 1e-6) * scale)
            kt = kt * torch.rsqrt((kt * kt).sum() + 1e-6)
            vt = v_raw.to(torch.float32)
            decay = torch.exp2(log_decay * _LOG2E)
            # Both K-reductions read the state from before this step's update, so they do not wait on
            # each other: (S * decay) k = S (decay * k), and the new state's q-product is the old one's
            # plus the update's share, residual * (k . q).
            k_seen = (state * (decay * kt)[None, :]).sum(-1)
            q_seen = (state * (decay * qt)[None, :]).sum(-1)
            residual = (vt - k_seen) * beta
            out[token, hv, tile_v] = (q_seen + residual * (kt * qt).sum()).to(out.dtype)
            state = state * decay[None, :] + residual[:, None] * kt[None, :]
            hl.store(
                snapshots,
                [row, step, hv, tile_v.index, keys],
                state.to(snapshots.dtype),
                extra_mask=store_snapshots,
            )
        if n == N - 1:
            # rows past the last request (bucket padding) get the zeros SGLang's contract promises
            for pad_token in range(end, total_tokens):
                out[pad_token, hv, tile_v] = hl.zeros([tile_v], dtype=out.dtype)
    return out


make_verify_kernel = tuned.kernel_maker(_verify)  # config -> helion.Kernel, cached


_EXPLICIT: set[str] = set()


def set_verify_config(mode: str, config: helion.Config) -> None:
    """Run `config` for "chain" or "tree" verification at every shape, over any tuned one."""
    tuned.set_explicit_config(VERIFY_CONFIGS, _EXPLICIT, mode, config)


def kernel_args(
    q, k, v, a, b, A_log, dt_bias, ssm_states, cache_indices, query_start_loc,
    intermediate_states_buffer, intermediate_state_indices, retrieve_parent_token, out, lower_bound,
) -> tuple:  # fmt: skip
    """The raw Helion kernel's arguments for the wrapper's (checked) inputs and output `out` [1, T, HV, V]."""
    _, T, _, K = q.shape
    HV = v.shape[2]
    return (
        q[0],
        k[0],
        v[0],
        a.reshape(T, HV, K),
        b.reshape(T, HV),
        A_log.reshape(HV),
        dt_bias.reshape(HV, K),
        ssm_states,
        cache_indices,
        query_start_loc,
        intermediate_states_buffer,
        intermediate_state_indices,
        retrieve_parent_token,
        out[0],
        T,
        0.0 if lower_bound is None else float(lower_bound),
        lower_bound is not None,
    )


def _new_output(v: torch.Tensor) -> torch.Tensor:
    # every element is written by the kernel (candidates, then zero-filled padding rows)
    return torch.empty_like(v)


# Contract mirror: SGLang 0.5.23's verify parameters, by keyword. The kernel (_verify) takes the same tensors
# positionally under its own names (its source is hashed into every tuned config); the fp64 reference
# (reference.verify_reference) takes them as they are.
def helion_kda_verify(
    *,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    ssm_states: torch.Tensor,
    cache_indices: torch.Tensor,
    query_start_loc: torch.Tensor,
    intermediate_states_buffer: torch.Tensor,
    intermediate_state_indices: torch.Tensor,
    cache_steps: int,
    retrieve_parent_token: torch.Tensor | None = None,
    lower_bound: float | None = None,
) -> torch.Tensor:
    """Verify packed candidate tokens without mutating `ssm_states` (SGLang 0.5.23's contract)."""
    if q.ndim != 4 or q.shape[0] != 1:
        raise ValueError("Helion KDA verify expects packed [1, T, H, K] inputs")
    _, T, H, K = q.shape
    if k.shape != q.shape or v.ndim != 4 or v.shape[:2] != q.shape[:2] or v.shape[2] % H:
        raise ValueError("Inconsistent Helion KDA verify query/key head layout")
    HV, V = v.shape[2:]
    if intermediate_states_buffer is None or cache_steps is None or cache_steps <= 0:
        raise ValueError("Helion KDA verify requires per-candidate state snapshots")
    if intermediate_states_buffer.ndim != 5 or tuple(intermediate_states_buffer.shape[2:]) != (HV, V, K):
        raise ValueError(
            f"Helion KDA verify snapshots must be [rows, steps, {HV}, {V}, {K}] "
            f"(got {tuple(intermediate_states_buffer.shape)})"
        )
    if intermediate_states_buffer.shape[1] < cache_steps:
        raise ValueError("Helion KDA verify snapshot capacity is smaller than cache_steps")
    if not (_is_power_of_two(K) and _is_power_of_two(V)):
        raise ValueError(f"Helion KDA verify needs power-of-two head dims (got K={K}, V={V})")
    if ssm_states.ndim != 4 or tuple(ssm_states.shape[1:]) != (HV, V, K):
        raise ValueError(f"`ssm_states` must be [slots, {HV}, {V}, {K}] (got {tuple(ssm_states.shape)})")
    if a.numel() != T * HV * K or b.numel() != T * HV:
        raise ValueError(f"`a` must hold T*HV*K = {T * HV * K} and `b` T*HV = {T * HV} elements")
    if A_log.numel() != HV or dt_bias.numel() != HV * K:
        raise ValueError(f"`A_log` needs {HV} and `dt_bias` {HV * K} elements")
    N = cache_indices.shape[0]
    if query_start_loc.shape != (N + 1,):
        raise ValueError(f"`query_start_loc` must be [N+1] = [{N + 1}] (got {tuple(query_start_loc.shape)})")
    if intermediate_state_indices.ndim != 1 or intermediate_state_indices.shape[0] < N:
        raise ValueError(
            f"`intermediate_state_indices` must be 1-D with at least N = {N} rows "
            f"(got {tuple(intermediate_state_indices.shape)})"
        )
    intermediate_state_indices = intermediate_state_indices[:N]
    if retrieve_parent_token is not None and (
        retrieve_parent_token.ndim != 2 or retrieve_parent_token.shape[0] != N
    ):
        raise ValueError("`retrieve_parent_token` must be [N, steps]")
    device = q.device
    others = [k, v, a, b, A_log, dt_bias, ssm_states, cache_indices, query_start_loc]
    others += [intermediate_states_buffer, intermediate_state_indices]
    if retrieve_parent_token is not None:
        others.append(retrieve_parent_token)
    if any(t.device != device for t in others):
        raise ValueError("All Helion KDA verify inputs must be on the same device")
    _check_runnable_device(device)
    if ssm_states.stride(-1) != 1 or intermediate_states_buffer.stride(-1) != 1:
        raise ValueError("`ssm_states` and the snapshot buffer must be contiguous in their last dim")

    out = _new_output(v)
    mode = "chain" if retrieve_parent_token is None else "tree"
    kernel_name = f"verify-{mode}"
    config = tuned.select_config(kernel_name, VERIFY_CONFIGS, mode, _EXPLICIT, ssm_states, N, H, HV, K, V)
    kernel = make_verify_kernel(config)
    kernel(
        *kernel_args(
            q, k, v, a, b, A_log, dt_bias, ssm_states, cache_indices, query_start_loc,
            intermediate_states_buffer, intermediate_state_indices, retrieve_parent_token, out, lower_bound,
        )
    )  # fmt: skip
    return out
