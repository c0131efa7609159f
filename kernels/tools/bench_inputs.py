"""The bench's inputs and calls: random activations and parameters at a run's shapes, each arm called the way
SGLang's adapters call it (TritonKDAKernel / HelionKDAKernel), and the check of an arm against SGLang's Triton
kernel (relative L2 error, TOLERANCES). Needs torch (CUDA) when called; importing it does not.
"""

from __future__ import annotations

import math


def torch_module():
    import torch

    return torch


def rel_err(x, ref) -> float:
    torch = torch_module()
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


def check_errors(errors: dict[str, float], tolerance: dict[str, float], extra: dict | None = None) -> dict:
    ok = all(errors[k] <= tolerance[k] for k in errors)
    result = {"ok": ok and all((extra or {}).values()), "rel_err": errors, "tolerance": tolerance}
    if extra:
        result.update(extra)
    return result


def decode_inputs(cfg, batch: int, sets: int, gen):
    torch = torch_module()
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


def params(cfg, gen):
    torch = torch_module()
    HV, K = cfg.value_heads, cfg.head_dim
    A_log = torch.log(torch.empty(HV, device="cuda").uniform_(1.0, 16.0, generator=gen))
    dt_bias = torch.randn(HV * K, device="cuda", generator=gen) * 0.5
    return A_log.float().contiguous(), dt_bias.float().contiguous()


def split_qkv(packed, cfg) -> tuple:
    """q, k, v as [1, T, heads, dim] views of the packed projection, the way SGLang's adapters split it."""
    H, HV, K, V = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim
    q, k, v = packed.split([H * K, H * K, HV * V], dim=-1)
    return (
        q.unflatten(-1, (H, K)).unsqueeze(0),
        k.unflatten(-1, (H, K)).unsqueeze(0),
        v.unflatten(-1, (HV, V)).unsqueeze(0),
    )


def decode_call(arm: str, fn, cfg, x: dict, A_log, dt_bias, pool, idx, qsl):
    """One decode call the way SGLang's adapters make it."""
    HV, K, V = cfg.value_heads, cfg.head_dim, cfg.head_dim
    scale = K**-0.5
    if arm == "triton":  # TritonKDAKernel.decode: q/k/v are views of the packed projection
        batch = x["mixed_qkv"].shape[0]
        q, k, v = split_qkv(x["mixed_qkv"], cfg)
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


def verify_call(arm: str, fn, cfg, x: dict, A_log, dt_bias, pool, idx, rows, qsl, snapshots, extra=None):
    """One verify call as the adapters make it; `extra`: further keywords (the ReplaySSM ring's)."""
    HV, V = cfg.value_heads, cfg.head_dim
    q, k, v = split_qkv(x["mixed_qkv"], cfg)
    common = dict(
        A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=x["a"], b=x["b"],
        intermediate_states_buffer=snapshots, intermediate_state_indices=rows,
        cache_steps=cfg.draft_tokens, retrieve_parent_token=None, lower_bound=cfg.lower_bound,
        **(extra or {}),
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


def prefill_call(fn, cfg, x: dict, A_log, dt_bias, pool, idx, cu):
    """HelionKDAKernel/TritonKDAKernel.extend: q/k/v views of the conv output, o written into v."""
    q, k, v = split_qkv(x["qkv"], cfg)
    out = fn(
        q=q, k=k, v=v, g=x["g"], beta=x["beta"], initial_state=pool, initial_state_indices=idx,
        use_qk_l2norm_in_kernel=True, cu_seqlens=cu, A_log=A_log, dt_bias=dt_bias,
        lower_bound=cfg.lower_bound, beta_is_raw=True, output_intermediate_states=False,
    )  # fmt: skip
    return out[0] if isinstance(out, tuple) else out
