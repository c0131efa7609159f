"""kdakit's Helion packed KDA decode: one new token per request, state pool updated in place.

Shapes (B requests, H query/key heads, HV value heads, HV % H == 0, K and V powers of two):
    mixed_qkv          [B, 2*H*K + HV*V]   q | k | v of the new token, packed as after the short conv
    a                  [B, HV*K]           raw forget gate
    b                  [B, HV]             raw beta logits (sigmoid applied here)
    A_log [HV], dt_bias [HV*K]             gate parameters
    initial_state      [slots, HV, V, K]   fp32 / bf16 / fp16 pool, V-first as in SGLang, updated in place
    out                [B, 1, HV, V]       written in place
    ssm_state_indices  [B]                 pool slot per request; negative = padding (zero output, no access)

Design: one program per (request, value head, V tile). It holds its [block_v, K] slice of the state in
registers with the whole key dimension, so the two K-reductions (k.S and q.S) stay inside the program and the
state crosses HBM exactly once each way. Everything that does not depend on the slot (q, k, v, gate, beta) is
loaded unconditionally and the state access is masked instead of branched, so those loads overlap the slot
index load. Math is fp32 with exp2.

The math and the check against the fp64 reference are in `kdakit.kernels.reference.packed_decode_reference`;
run `python -m kdakit.kernels.decode` for a quick self-check (GPU, or CPU with TRITON_INTERPRET=1).
"""

from __future__ import annotations

import os

import helion
import helion.language as hl
import torch
from kdakit.kernels import tuned
from kdakit.kernels.recurrent import LOG2E as _LOG2E
from kdakit.kernels.recurrent import gate_log_decay, program_heads

# Fixed configs (never autotuned at run time), keyed by state dtype (fp16 pools use "fp32").
# loop_orders [[2, 1, 0]] makes the V tile the fastest grid axis, then the head, then the request, so
# neighbouring programs stream neighbouring state; state loads are evict-first and state stores streaming
# (.cs). On the H200 the fp32 config is the fastest of those tried at every bench batch (kernels/README.md).
# These are the fallbacks: at run time a tuned config shipped for the GPU's SKU and shape bucket wins
# (`kdakit.kernels.tuned`), and a config set with `set_decode_config` wins over both.
# positional, in traced order: loads slot,q,k,v,a,dt_bias,A_log,b,state; stores out,state
CACHE_HINTS = {"load_eviction_policies": [""] * 8 + ["first"], "store_cache_modifiers": ["", ".cs"]}


def _config(block_v: int, warps: int, hints: bool = True) -> helion.Config:
    return helion.Config(
        block_sizes=[block_v], num_warps=warps, num_stages=1, indexing="pointer", pid_type="flat",
        loop_orders=[[2, 1, 0]], **(CACHE_HINTS if hints else {}),
    )  # fmt: skip


DECODE_CONFIGS: dict[str, helion.Config] = {"fp32": _config(8, 2), "bf16": _config(16, 1)}
# Configs `kdakit kernels autotune` seeds Helion's search with and times against its result, besides the
# default: one warp per program, with and without the cache hints, on 8- and 4-row V tiles. On the H200 they
# lose at B = 1 but win at B = 48 once each call's activations come from HBM, as in a server; the 4-row tile
# without hints is the fastest there: 56 registers against 72 for 8 rows, so more programs stay resident.
DECODE_SEEDS: dict[str, list[helion.Config]] = {
    "fp32": [_config(8, 1), _config(8, 1, hints=False), _config(4, 1, hints=False)],
    "bf16": [],
}


def _packed_decode(
    mixed_qkv: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    scale: float,
    lower_bound: float,
    state: torch.Tensor,
    out: torch.Tensor,
    slots: torch.Tensor,
    use_qk_l2norm: hl.constexpr,
    bounded_gate: hl.constexpr,
) -> torch.Tensor:
    HV, V, K = hl.specialize(state.shape[1:])
    B = mixed_qkv.size(0)
    H = hl.specialize((mixed_qkv.size(1) - HV * V) // (2 * K))
    # Baking the strides in gives compile-time address arithmetic (wide, coalesced state accesses).
    hl.specialize(
        (
            mixed_qkv.stride(0),
            mixed_qkv.stride(1),
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            A_log.stride(0),
            dt_bias.stride(0),
            state.stride(0),
            state.stride(1),
            state.stride(2),
            state.stride(3),
            out.stride(0),
            out.stride(1),
            out.stride(2),
            out.stride(3),
            slots.stride(0),
        )
    )
    block_v = hl.register_block_size(1, V)
    for tile_b, tile_hv, tile_v in hl.tile([B, HV, V], block_size=[1, 1, block_v]):
        i_b, hv, h, keys = program_heads(tile_b, tile_hv, H, HV, K)
        slot = slots[i_b].to(torch.int64)
        valid = slot >= 0

        q = mixed_qkv[i_b, h * K + keys].to(torch.float32)
        k = mixed_qkv[i_b, H * K + h * K + keys].to(torch.float32)
        v = mixed_qkv[i_b, 2 * H * K + hv * V + tile_v.index].to(torch.float32)
        x = a[i_b, hv * K + keys].to(torch.float32) + dt_bias[hv * K + keys].to(torch.float32)
        decay_rate = torch.exp2(A_log[hv].to(torch.float32) * _LOG2E)
        log_decay, softplus = gate_log_decay(x, decay_rate, lower_bound, _LOG2E, bounded_gate)
        beta = torch.sigmoid(b[i_b, hv].to(torch.float32))
        if use_qk_l2norm:
            q = q * torch.rsqrt((q * q).sum() + 1e-6)
            k = k * torch.rsqrt((k * k).sum() + 1e-6)

        s = hl.load(state, [slot, hv, tile_v.index, keys], extra_mask=valid).to(torch.float32)
        s = s * torch.exp2(log_decay * _LOG2E)[None, :]
        residual = (v - (s * k[None, :]).sum(-1)) * beta
        s = s + residual[:, None] * k[None, :]
        o = (s * (q * scale)[None, :]).sum(-1)

        out[i_b, 0, hv, tile_v] = torch.where(valid, o, 0.0).to(out.dtype)
        hl.store(state, [slot, hv, tile_v.index, keys], s.to(state.dtype), extra_mask=valid)
    return out


make_decode_kernel = tuned.kernel_maker(_packed_decode)  # config -> helion.Kernel, cached


_EXPLICIT: set[str] = set()


def set_decode_config(name: str, config: helion.Config) -> None:
    """Run `config` for "fp32" (also fp16 pools) or "bf16" state at every shape, over any tuned one."""
    tuned.set_explicit_config(DECODE_CONFIGS, _EXPLICIT, name, config)


def _config_for(state: torch.Tensor, B: int, H: int, HV: int, K: int, V: int) -> helion.Config:
    name = "bf16" if state.dtype == torch.bfloat16 else "fp32"
    return tuned.select_config("decode", DECODE_CONFIGS, name, _EXPLICIT, state, B, H, HV, K, V)


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _check_runnable_device(device: torch.device) -> None:
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise ValueError(
            f"Helion KDA kernels need a CUDA device (got {device}); on CPU set TRITON_INTERPRET=1"
        )


def validate_decode_inputs(mixed_qkv, a, b, A_log, dt_bias, initial_state, out, ssm_state_indices):
    """Check shapes, dtypes, layouts and devices; return (B, H, HV, K, V). Raises ValueError."""
    tensors = {
        "mixed_qkv": mixed_qkv,
        "a": a,
        "b": b,
        "A_log": A_log,
        "dt_bias": dt_bias,
        "initial_state": initial_state,
        "out": out,
        "ssm_state_indices": ssm_state_indices,
    }
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"`{name}` must be a tensor (got {type(t).__name__})")
    device = mixed_qkv.device
    for name, t in tensors.items():
        if t.device != device:
            raise ValueError(
                f"all inputs must be on one device: `{name}` is on {t.device}, mixed_qkv on {device}"
            )
    _check_runnable_device(device)
    if mixed_qkv.ndim != 2 or a.ndim != 2 or b.ndim != 2:
        raise ValueError(
            f"`mixed_qkv`, `a` and `b` must be 2-D (got ndim {mixed_qkv.ndim}, {a.ndim}, {b.ndim})"
        )
    if initial_state.ndim != 4:
        raise ValueError(
            f"`initial_state` must be [slots, HV, V, K] (got shape {tuple(initial_state.shape)})"
        )
    if ssm_state_indices.ndim != 1 or ssm_state_indices.dtype not in (torch.int32, torch.int64):
        raise ValueError("`ssm_state_indices` must be a 1-D int32/int64 tensor")
    if initial_state.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"`initial_state` must be fp32, bf16 or fp16 (got {initial_state.dtype})")
    for name in ("mixed_qkv", "a", "b", "initial_state"):
        if tensors[name].stride(-1) != 1:
            raise ValueError(f"`{name}` must be contiguous in its last dim")
    if not A_log.is_contiguous() or not dt_bias.is_contiguous():
        raise ValueError("`A_log` and `dt_bias` must be contiguous")
    if not out.is_contiguous():
        raise ValueError("`out` must be contiguous")
    _, HV, V, K = initial_state.shape
    if not (_is_power_of_two(K) and _is_power_of_two(V)):
        raise ValueError(f"Helion KDA decode needs power-of-two head dims (got K={K}, V={V})")
    B = mixed_qkv.shape[0]
    if a.shape[0] != B or b.shape[0] != B or ssm_state_indices.shape[0] != B:
        raise ValueError(
            f"batch mismatch: mixed_qkv {B}, a {a.shape[0]}, b {b.shape[0]}, "
            f"indices {ssm_state_indices.shape[0]}"
        )
    if tuple(a.shape) != (B, HV * K):
        raise ValueError(f"`a` must be [B, HV*K] = {(B, HV * K)} (got {tuple(a.shape)})")
    if tuple(b.shape) != (B, HV):
        raise ValueError(f"`b` must be [B, HV] = {(B, HV)} (got {tuple(b.shape)})")
    if A_log.numel() != HV or dt_bias.numel() != HV * K:
        raise ValueError(
            f"`A_log` needs {HV} and `dt_bias` {HV * K} elements (got {A_log.numel()}, {dt_bias.numel()})"
        )
    if tuple(out.shape) != (B, 1, HV, V):
        raise ValueError(f"`out` must be [B, 1, HV, V] = {(B, 1, HV, V)} (got {tuple(out.shape)})")
    qk = mixed_qkv.shape[1] - HV * V
    if qk <= 0 or qk % (2 * K):
        raise ValueError(
            f"`mixed_qkv` width {mixed_qkv.shape[1]} is not 2*H*K + HV*V for HV={HV}, K={K}, V={V}"
        )
    H = qk // (2 * K)
    if HV % H:
        raise ValueError(f"value heads HV={HV} must be a multiple of query heads H={H}")
    return B, H, HV, K, V


# Contract mirror: SGLang 0.5.23's packed decode parameters, by name. The kernel (_packed_decode) takes the
# same tensors positionally (its source is hashed into every tuned config) and the fp64 reference
# (reference.packed_decode_reference) repeats them, so the three lists look alike.
def helion_fused_recurrent_kda_packed_decode(
    mixed_qkv: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor,
    out: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    use_qk_l2norm_in_kernel: bool = False,
    lower_bound: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed KDA decode with SGLang 0.5.23's contract; returns the caller's (out, initial_state)."""
    B, H, HV, K, V = validate_decode_inputs(
        mixed_qkv, a, b, A_log, dt_bias, initial_state, out, ssm_state_indices
    )
    kernel = make_decode_kernel(_config_for(initial_state, B, H, HV, K, V))
    kernel(
        mixed_qkv,
        a,
        b,
        A_log,
        dt_bias,
        float(scale),
        0.0 if lower_bound is None else float(lower_bound),
        initial_state,
        out,
        ssm_state_indices,
        bool(use_qk_l2norm_in_kernel),
        lower_bound is not None,
    )
    return out, initial_state
