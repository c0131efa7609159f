"""Two 64-token chunks as one 128-token step of the state pass: the algebra, and what bf16 operands cost.

A state-pass step of main takes one chunk's operands (W, U, kg, qg, Aqk, the chunk's decay D) and the state
S at the chunk's start:

    v = U - W S;   S' = D S + kg^T v;   o = qg S + Aqk v.

Two chunks in one step, with S the state at the first one's start:

    W  = [W1; W2 D1 - M W1],   U = [U1; U2 - M U1],   M = W2 kg1^T        (v = U - W S, 128 rows)
    KG = [kg1 D2; kg2],        D = D2 D1                                  (S'' = D S + KG^T v)
    QG = [qg1; qg2 D1],        AQK = [[Aqk1, 0], [qg2 kg1^T, Aqk2]]       (o = QG S + AQK v)

and in the Q' form of the output, o = Q' S + AQK U with Q' = QG - AQK W. None of these depends on S: a
chunk-pair pre-pass can make them. This script checks, for one head of KDA with the bounded gate:
1. main's chunk operands, built here from the definition, against kdakit's fp64 token recurrence;
2. the pair step against the chunk steps in fp64 (exact up to rounding);
3. both with their operands rounded to bf16 as the kernels store them (the state fp32, S and v rounded to
   bf16 for the products), against the fp64 recurrence.

    python pairs.py
"""

import torch
from kdakit.kernels import reference, shapes

F64 = torch.float64


def chunk_operands(q, k, v, g, beta, scale):
    """Main's per-chunk operands for one head, fp64: lists of (W, U, kg, qg, Aqk, decay) per 64 tokens."""
    out = []
    for c in range(q.size(0) // 64):
        s = slice(64 * c, 64 * (c + 1))
        qc, kc, vc, bc = q[s], k[s], v[s], beta[s]
        gam = g[s].cumsum(0)  # [64, K], natural log
        lower = torch.tril(torch.ones(64, 64, dtype=F64), -1)
        # Akk[i, j] = beta_i sum_k k_i k_j exp(gam_i - gam_j), j < i
        akk = bc[:, None] * torch.einsum("ik,jk->ij", kc * gam.exp(), kc * (-gam).exp()) * lower
        tinv = torch.linalg.inv(torch.eye(64, dtype=F64) + akk)
        w = tinv @ (bc[:, None] * kc * gam.exp())
        u = tinv @ (bc[:, None] * vc)
        kg = kc * (gam[-1] - gam).exp()
        qg = scale * qc * gam.exp()
        causal = lower + torch.eye(64, dtype=F64)
        aqk = scale * torch.einsum("ik,jk->ij", qc * gam.exp(), kc * (-gam).exp()) * causal
        out.append((w, u, kg, qg, aqk, gam[-1].exp()))
    return out


def pair_operands(first, second):
    w1, u1, kg1, qg1, a1, d1 = first
    w2, u2, kg2, qg2, a2, d2 = second
    m = w2 @ kg1.T
    w = torch.cat([w1, w2 * d1 - m @ w1])
    u = torch.cat([u1, u2 - m @ u1])
    kg = torch.cat([kg1 * d2, kg2])
    qg = torch.cat([qg1, qg2 * d1])
    aqk = torch.cat([torch.cat([a1, torch.zeros_like(a1)], 1), torch.cat([qg2 @ kg1.T, a2], 1)])
    return w, u, kg, qg, aqk, d1 * d2


def run_steps(steps, state, bf16: bool, qprime: bool = False):
    """The state pass over `steps`; bf16: operands and the products' S and v rounded as the kernels do."""
    r = (lambda t: t.to(torch.bfloat16).to(F64)) if bf16 else (lambda t: t)
    outs = []
    for w, u, kg, qg, aqk, d in steps:
        if qprime:
            qp, au = r(qg - aqk @ w), r(aqk @ u)
        w, u, kg, qg, aqk = r(w), r(u), r(kg), r(qg), r(aqk)
        sb = r(state)
        v = r(u - w @ sb)
        outs.append(qp @ sb + au if qprime else qg @ sb + aqk @ v)
        state = state * d[:, None] + kg.T @ v
    return torch.cat(outs), state


def main() -> None:
    T, K, V = 2048, 128, 128
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(T, 1, K, generator=gen, dtype=F64) for _ in range(2))
    v = torch.randn(T, 1, V, generator=gen, dtype=F64)
    # gate logits spread per key channel: from long memory (about -2e-4 a token) to fast decay (about -2.5)
    a = torch.randn(T, 1, K, generator=gen, dtype=F64) + torch.linspace(-10.0, 0.0, K, dtype=F64)
    g = reference.kda_gate(a, torch.zeros(1), torch.zeros(K), shapes.get("model", "lower_bound"))
    beta = torch.sigmoid(torch.randn(T, 1, generator=gen, dtype=F64))
    state0 = torch.randn(1, V, K, generator=gen, dtype=F64) * 0.1
    scale = K**-0.5
    o_ref, states = reference.kda_recurrence(q, k, v, g, beta, state0, scale)
    o_ref, s_ref = o_ref[:, 0], states[-1, 0].T  # [T, V], the final state K-first
    qn, kn = reference.l2_normalize(q)[:, 0], reference.l2_normalize(k)[:, 0]
    chunks = chunk_operands(qn, kn, v[:, 0], g[:, 0], beta[:, 0], scale)
    pairs = [pair_operands(chunks[i], chunks[i + 1]) for i in range(0, len(chunks), 2)]
    s0 = state0[0].T.clone()
    peak = o_ref.abs().max().item()
    print(f"T {T}, K = V = {K}, one head, bounded gate; largest output {peak:.3f}; errors: largest, rms")
    for label, steps, bf16, qprime in (
        ("64-token steps (main), fp64", chunks, False, False),
        ("128-token pair steps, fp64", pairs, False, False),
        ("128-token pair steps, Q' form, fp64", pairs, False, True),
        ("64-token steps (main), bf16 operands", chunks, True, False),
        ("64-token steps, Q' form, bf16 operands", chunks, True, True),
        ("128-token pair steps, bf16 operands", pairs, True, False),
        ("128-token pair steps, Q' form, bf16 operands", pairs, True, True),
    ):
        o, s = run_steps(steps, s0.clone(), bf16, qprime)
        err_o, err_s = o - o_ref, s - s_ref
        print(f"  {label:46s} output {err_o.abs().max():.2e} (rms {err_o.pow(2).mean().sqrt():.1e}), "
              f"final state {err_s.abs().max():.2e} (rms {err_s.pow(2).mean().sqrt():.1e})")  # fmt: skip


if __name__ == "__main__":
    main()
