"""Readable fp64 PyTorch reference for Kimi Delta Attention (KDA).

Every kdakit kernel test compares against these functions. They favour clarity over speed: one sequence,
one token at a time, float64 throughout, inputs of any float dtype.

Notation (per value head hv; its query/key head is h = hv // (HV // H), "GVA" when HV > H):

    gate, natural-log decay per key channel (every entry < 0):
        unbounded (Kimi-Linear):  g = -exp(A_log[hv]) * softplus(a + dt_bias[hv])
        bounded ("safe" gate):    g = lower_bound * sigmoid(exp(A_log[hv]) * (a + dt_bias[hv]))
    beta = sigmoid(b)                         (b is the raw logit)
    q^ = q / sqrt(sum(q^2) + eps), k^ likewise (when the L2 norm is on; eps = 1e-6 inside the sqrt)

The state is kept in SGLang's V-first layout M = S^T with shape [V, K] per head:

    M' = M * exp(g)[None, :]                  decay each key column
    r  = beta * (v - M' k^)                   delta-rule residual, [V]
    M  = M' + r k^^T                          rank-one update
    o  = M (scale * q^)                       the output uses the updated state

Pool-level references mirror SGLang 0.5.23's kernel contracts: a state pool [slots, HV, V, K] addressed by
slot indices, where a negative index is CUDA Graph padding.
"""

from __future__ import annotations

import torch

F64 = torch.float64


def kda_gate(
    a: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    lower_bound: float | None = None,
) -> torch.Tensor:
    """Log decay g from the raw gate `a` [..., HV, K]; `A_log` [HV], `dt_bias` [HV*K]. Returns fp64."""
    hv, k = a.shape[-2:]
    x = a.to(F64) + dt_bias.to(F64).reshape(hv, k)
    A = torch.exp(A_log.to(F64)).reshape(hv, 1)
    if lower_bound is None:
        # softplus with the usual linear tail above 20, as the kernels compute it
        return -A * torch.where(x <= 20.0, torch.log1p(torch.exp(x)), x)
    return float(lower_bound) * torch.sigmoid(A * x)


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, in fp64."""
    x = x.to(F64)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def kda_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token for all value heads. state [HV,V,K]; q,k [HV,K] (already per value head, normalized);
    v [HV,V]; g [HV,K]; beta [HV]. Returns (o [HV,V], new state)."""
    decayed = state * torch.exp(g)[:, None, :]
    residual = beta[:, None] * (v - torch.einsum("hvk,hk->hv", decayed, k))
    new_state = decayed + residual[:, :, None] * k[:, None, :]
    o = torch.einsum("hvk,hk->hv", new_state, scale * q)
    return o, new_state


def kda_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    scale: float,
    use_qk_l2norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence, token by token.

    q, k [T,H,K]; v [T,HV,V]; g [T,HV,K] log decay; beta [T,HV] post-sigmoid; state [HV,V,K].
    Returns o [T,HV,V] and the state after every token [T,HV,V,K], all fp64.
    """
    T, H, _ = q.shape
    HV = v.shape[1]
    if HV % H:
        raise ValueError(f"value heads ({HV}) must be a multiple of query heads ({H})")
    group = HV // H
    q, k, v, g, beta = (x.to(F64) for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    # GVA: value head hv reads query/key head hv // group
    q = q.repeat_interleave(group, dim=1)
    k = k.repeat_interleave(group, dim=1)
    s = state.to(F64)
    outs, states = [], []
    for t in range(T):
        o, s = kda_step(s, q[t], k[t], v[t], g[t], beta[t], scale)
        outs.append(o)
        states.append(s)
    return torch.stack(outs), torch.stack(states)


def split_mixed_qkv(mixed_qkv: torch.Tensor, H: int, HV: int, K: int, V: int):
    """[B, 2*H*K + HV*V] -> q [B,H,K], k [B,H,K], v [B,HV,V] (SGLang's packing order q | k | v)."""
    B = mixed_qkv.shape[0]
    q = mixed_qkv[:, : H * K].reshape(B, H, K)
    k = mixed_qkv[:, H * K : 2 * H * K].reshape(B, H, K)
    v = mixed_qkv[:, 2 * H * K :].reshape(B, HV, V)
    return q, k, v


# Contract mirror: the same parameters as kdakit.kernels.decode's helion_fused_recurrent_kda_packed_decode
# (SGLang's decode contract), so a test hands both one set of inputs.
def packed_decode_reference(
    mixed_qkv: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    scale: float,
    state_pool: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    use_qk_l2norm_in_kernel: bool = False,
    lower_bound: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed single-token decode over a state pool (SGLang's `fused_recurrent_kda_packed_decode`).

    mixed_qkv [B, 2*H*K + HV*V]; a [B, HV*K] raw gate; b [B, HV] raw beta logits; state_pool
    [slots, HV, V, K]; ssm_state_indices [B] (negative: zero output, slot untouched).
    Returns (out [B,1,HV,V], updated pool), both fp64; the inputs are not modified.
    """
    _, HV, V, K = state_pool.shape
    H = (mixed_qkv.shape[1] - HV * V) // (2 * K)
    q, k, v = split_mixed_qkv(mixed_qkv, H, HV, K, V)
    g = kda_gate(a.reshape(-1, HV, K), A_log, dt_bias, lower_bound)
    beta = torch.sigmoid(b.to(F64))
    pool = state_pool.to(F64).clone()
    out = torch.zeros(mixed_qkv.shape[0], 1, HV, V, dtype=F64)
    for i, slot in enumerate(ssm_state_indices.tolist()):
        if slot < 0:
            continue
        o, states = kda_recurrence(
            q[i : i + 1], k[i : i + 1], v[i : i + 1], g[i : i + 1], beta[i : i + 1],
            pool[slot], scale, use_qk_l2norm_in_kernel,
        )  # fmt: skip
        out[i, 0] = o[0]
        pool[slot] = states[-1]
    return out, pool


# Contract mirror: the same parameters as kdakit.kernels.verify's helion_kda_verify (SGLang's verify
# contract), so a test hands both one set of inputs.
def verify_reference(
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
    retrieve_parent_token: torch.Tensor | None = None,
    lower_bound: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative (MTP) verification without touching the committed pool (SGLang's verify contract).

    q, k [1,T,H,K] and v [1,T,HV,V] hold N packed requests split by query_start_loc [N+1]; a [T, HV*K]
    (or [1,T,HV,K]) raw gate; b [T, HV] raw beta. q/k are always L2-normalized and scale = K**-0.5.
    Request n starts from ssm_states[cache_indices[n]] (zeros when the index is negative) and, after its
    step s, its state is stored as snapshot intermediate_states_buffer[intermediate_state_indices[n], s]
    unless that index is negative.
    Chain (retrieve_parent_token None): the state carries from one candidate to the next. Tree: before
    step s > 0 the state is reloaded from the snapshot of step retrieve_parent_token[n, s] (only where the
    snapshot index is valid; the reload reads what this call stored, rounded to the buffer's dtype).
    Returns (out [1,T,HV,V], snapshot buffer after the call), both fp64; the inputs are not modified.
    """
    _, T, H, K = q.shape
    HV, V = v.shape[2:]
    g = kda_gate(a.reshape(T, HV, K), A_log, dt_bias, lower_bound)
    beta = torch.sigmoid(b.reshape(T, HV).to(F64))
    scale = K**-0.5
    qn = l2_normalize(q[0]).repeat_interleave(HV // H, dim=1)
    kn = l2_normalize(k[0]).repeat_interleave(HV // H, dim=1)
    vv = v[0].to(F64)
    snaps = intermediate_states_buffer.to(F64).clone()
    snap_dtype = intermediate_states_buffer.dtype
    out = torch.zeros(1, T, HV, V, dtype=F64)
    bounds = query_start_loc.tolist()
    for n in range(len(bounds) - 1):
        start, end = bounds[n], bounds[n + 1]
        slot = int(cache_indices[n])
        row = int(intermediate_state_indices[n])
        state = ssm_states[slot].to(F64) if slot >= 0 else torch.zeros(HV, V, K, dtype=F64)
        for step, t in enumerate(range(start, end)):
            if retrieve_parent_token is not None and step > 0 and row >= 0:
                parent = int(retrieve_parent_token[n, step])
                # the kernel reloads the stored snapshot, so round as the buffer does
                state = snaps[row, parent].to(snap_dtype).to(F64)
            o, state = kda_step(state, qn[t], kn[t], vv[t], g[t], beta[t], scale)
            out[0, t] = o
            if row >= 0:
                snaps[row, step] = state
    return out, snaps
