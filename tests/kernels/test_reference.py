"""The fp64 KDA reference against independent formulations (scalar math, K-first matrices, chunked form)."""

from __future__ import annotations

import math

import pytest
import torch
from kdakit.kernels import reference as ref

F64 = torch.float64


def test_gates_match_scalar_math():
    gen = torch.Generator().manual_seed(0)
    HV, K = 3, 4
    a = torch.randn(2, HV, K, generator=gen) * 8  # reaches the softplus tail above 20 after the bias
    a[0, 0, 0] = 30.0
    A_log = torch.randn(HV, generator=gen)
    dt_bias = torch.randn(HV * K, generator=gen)
    unbounded = ref.kda_gate(a, A_log, dt_bias)
    bounded = ref.kda_gate(a, A_log, dt_bias, lower_bound=-5.0)
    for t in range(2):
        for h in range(HV):
            for d in range(K):
                x = float(a[t, h, d]) + float(dt_bias[h * K + d])
                A = math.exp(float(A_log[h]))
                softplus = x if x > 20 else math.log1p(math.exp(x))
                assert unbounded[t, h, d].item() == pytest.approx(-A * softplus, rel=1e-12)
                assert bounded[t, h, d].item() == pytest.approx(-5.0 / (1 + math.exp(-A * x)), rel=1e-12)
    assert (unbounded < 0).all() and unbounded.dtype == F64
    assert ((bounded >= -5.0) & (bounded <= 0)).all()  # open interval, saturates in fp64 at |x| >> 1


def test_l2_normalize_puts_eps_inside_the_sqrt():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    y = ref.l2_normalize(x, eps=1e-6)
    assert y[0].tolist() == pytest.approx([3 / math.sqrt(25 + 1e-6), 4 / math.sqrt(25 + 1e-6)], rel=1e-15)
    assert y[1].tolist() == [0.0, 0.0]


def _k_first_recurrence(q, k, v, g, beta, state_vk, scale, group):
    """KDA written as in the paper, K-first: S_t = (I - b k k^T) Diag(e^g) S + b k v^T, o = s S^T q."""
    S = state_vk.to(F64).transpose(-1, -2).clone()  # [HV, K, V]
    outs = []
    for t in range(q.shape[0]):
        o_t = []
        for hv in range(S.shape[0]):
            qh = ref.l2_normalize(q[t, hv // group])
            kh = ref.l2_normalize(k[t, hv // group])
            eye = torch.eye(kh.numel(), dtype=F64)
            decay = torch.diag(torch.exp(g[t, hv].to(F64)))
            b = beta[t, hv].to(F64)
            S[hv] = (eye - b * torch.outer(kh, kh)) @ decay @ S[hv] + b * torch.outer(kh, v[t, hv].to(F64))
            o_t.append(scale * S[hv].T @ qh)
        outs.append(torch.stack(o_t))
    return torch.stack(outs), S.transpose(-1, -2)


@pytest.mark.parametrize("H,HV", [(2, 2), (1, 3)])
def test_recurrence_matches_k_first_matrix_form(H, HV):
    gen = torch.Generator().manual_seed(1)
    T, K, V = 5, 6, 4
    q, k = torch.randn(T, H, K, generator=gen), torch.randn(T, H, K, generator=gen)
    v = torch.randn(T, HV, V, generator=gen)
    g = -torch.rand(T, HV, K, generator=gen)
    beta = torch.rand(T, HV, generator=gen)
    state = torch.randn(HV, V, K, generator=gen)
    o, states = ref.kda_recurrence(q, k, v, g, beta, state, K**-0.5)
    o2, final = _k_first_recurrence(q, k, v, g, beta, state, K**-0.5, HV // H)
    assert torch.allclose(o, o2, atol=1e-12)
    assert torch.allclose(states[-1], final, atol=1e-12)
    assert states.shape == (T, HV, V, K) and o.dtype == F64


def test_delta_rule_writes_the_value_exactly_when_beta_is_one():
    # a unit key, no in-kernel l2norm: its eps would leave |k|^2 = 1 - eps/|k|^2 and the write off by ~1e-7
    gen = torch.Generator().manual_seed(2)
    K, V = 8, 5
    q = torch.randn(1, 1, K, generator=gen, dtype=F64)
    k = torch.randn(1, 1, K, generator=gen, dtype=F64)
    k = k / k.norm()
    v = torch.randn(1, 1, V, generator=gen, dtype=F64)
    state = torch.randn(1, V, K, generator=gen, dtype=F64)
    gate, beta = torch.zeros(1, 1, K), torch.ones(1, 1)
    _, states = ref.kda_recurrence(q, k, v, gate, beta, state, 1.0, use_qk_l2norm=False)
    assert torch.allclose(states[0, 0] @ k[0, 0], v[0, 0], rtol=0, atol=1e-12)
    assert not torch.allclose(state[0] @ k[0, 0], v[0, 0], rtol=0, atol=1e-3)


def test_chunked_form_matches_the_recurrence():
    """The chunked equations a prefill kernel implements (one chunk) give the token-by-token result."""
    gen = torch.Generator().manual_seed(3)
    C, K, V = 8, 6, 5
    q, k = torch.randn(C, 1, K, generator=gen), torch.randn(C, 1, K, generator=gen)
    v = torch.randn(C, 1, V, generator=gen)
    g = -torch.rand(C, 1, K, generator=gen)
    beta = torch.rand(C, 1, generator=gen)
    S0 = torch.randn(1, V, K, generator=gen)
    s = K**-0.5
    o_ref, states = ref.kda_recurrence(q, k, v, g, beta, S0, s)

    qn, kn = ref.l2_normalize(q[:, 0]), ref.l2_normalize(k[:, 0])
    G = torch.cumsum(g[:, 0].to(F64), 0)  # [C, K] chunk-local cumulative log decay
    b = beta[:, 0].to(F64)
    L = torch.zeros(C, C, dtype=F64)
    Aqk = torch.zeros(C, C, dtype=F64)
    for i in range(C):
        for j in range(C):
            w = torch.exp(G[i] - G[j])
            if j < i:
                L[i, j] = b[i] * (kn[i] * kn[j] * w).sum()
            if j <= i:
                Aqk[i, j] = s * (qn[i] * kn[j] * w).sum()
    Tinv = torch.linalg.inv(torch.eye(C, dtype=F64) + L)
    W = Tinv @ (b[:, None] * (kn * torch.exp(G)))
    U = Tinv @ (b[:, None] * v[:, 0].to(F64))
    S0_kv = S0[0].to(F64).T  # [K, V]
    Vnew = U - W @ S0_kv
    out_chunk = s * (qn * torch.exp(G)) @ S0_kv + Aqk @ Vnew
    S_end = torch.diag(torch.exp(G[-1])) @ S0_kv + (kn * torch.exp(G[-1] - G)).T @ Vnew
    assert torch.allclose(out_chunk, o_ref[:, 0], atol=1e-10)
    assert torch.allclose(S_end.T, states[-1, 0], atol=1e-10)


def test_packed_decode_reference_pads_and_leaves_other_slots():
    gen = torch.Generator().manual_seed(4)
    H, HV, K, V = 1, 2, 4, 4
    mixed = torch.randn(2, 2 * H * K + HV * V, generator=gen)
    a, b = torch.randn(2, HV * K, generator=gen), torch.randn(2, HV, generator=gen)
    A_log, dt_bias = torch.randn(HV, generator=gen), torch.randn(HV * K, generator=gen)
    pool = torch.randn(3, HV, V, K, generator=gen)
    out, new_pool = ref.packed_decode_reference(
        mixed, a, b, A_log, dt_bias, 0.5, pool, torch.tensor([2, -1]), True, -5.0
    )
    q, k, v = ref.split_mixed_qkv(mixed, H, HV, K, V)
    g = ref.kda_gate(a.reshape(2, HV, K), A_log, dt_bias, -5.0)
    o, states = ref.kda_recurrence(q[:1], k[:1], v[:1], g[:1], torch.sigmoid(b[:1]), pool[2], 0.5)
    assert torch.allclose(out[0, 0], o[0]) and torch.allclose(new_pool[2], states[-1])
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(new_pool[:2], pool[:2].to(F64))


def test_verify_reference_chain_and_tree_snapshots():
    gen = torch.Generator().manual_seed(5)
    T, H, HV, K, V = 3, 1, 1, 4, 4
    q, k = torch.randn(1, T, H, K, generator=gen), torch.randn(1, T, H, K, generator=gen)
    v = torch.randn(1, T, HV, V, generator=gen)
    a, b = torch.randn(T, HV * K, generator=gen), torch.randn(T, HV, generator=gen)
    A_log, dt_bias = torch.randn(HV, generator=gen), torch.randn(HV * K, generator=gen)
    pool = torch.randn(2, HV, V, K, generator=gen)
    snaps = torch.zeros(2, T, HV, V, K)
    args = (q, k, v, a, b, A_log, dt_bias, pool, torch.tensor([1]), torch.tensor([0, T]))
    out, chain = ref.verify_reference(*args, snaps, torch.tensor([1]))
    g = ref.kda_gate(a.reshape(T, HV, K), A_log, dt_bias)
    o, states = ref.kda_recurrence(q[0], k[0], v[0], g, torch.sigmoid(b), pool[1], K**-0.5)
    assert torch.allclose(out[0], o) and torch.allclose(chain[1], states)
    assert torch.equal(chain[0], snaps[0].to(F64))  # other rows untouched
    # tree: tokens 1 and 2 both branch from token 0
    _, tree = ref.verify_reference(*args, snaps, torch.tensor([1]), torch.tensor([[0, 0, 0]]))
    o2, s2 = ref.kda_recurrence(q[0, [0, 2]], k[0, [0, 2]], v[0, [0, 2]], g[[0, 2]], torch.sigmoid(b[[0, 2]]),
                                pool[1], K**-0.5)  # fmt: skip
    assert torch.allclose(tree[1, 2], s2[1], atol=1e-6)  # parent reload is rounded to the fp32 buffer
    assert torch.allclose(tree[1, 1], chain[1, 1])
    # negative snapshot row: nothing stored
    _, none = ref.verify_reference(*args, snaps, torch.tensor([-1]))
    assert torch.equal(none, snaps.to(F64))
