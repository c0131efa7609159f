"""kdakit's Helion chunked KDA prefill with SGLang 0.5.23's `chunk_kda` contract.

Chunked form (C = 64 tokens per chunk, Gamma = chunk-local cumulative log2 decay, S0 = state at chunk start,
state kept V-first as M = S^T [V, K] like SGLang's pool):

    L[i,j]  = beta_i * sum_d k_i k_j exp(Gamma_i - Gamma_j)       j < i
    Tinv    = (I + L)^-1                                           unit lower triangular
    W       = Tinv diag(beta) (k * exp Gamma)     U = Tinv diag(beta) v
    Aqk     = scale * sum_d q_i k_j exp(Gamma_i - Gamma_j)         j <= i
    Vnew    = U - W S0
    O       = scale (q * exp Gamma) S0 + Aqk Vnew
    S_next  = diag(exp Gamma_last) S0 + (k * exp(Gamma_last - Gamma))^T Vnew

Four Helion kernels (five when the output is not fused into the state pass):

1. `gate`: one program per (chunk, value head): gate activation from the raw gate, chunk-local cumsum in log2
   units.
2. `intra`: one program per (chunk, value head): the 64x64 L and Aqk from 16x16 blocks (each block
   factorised around its own anchor row so that exp never overflows), then Tinv = (I + L)^-1 row block by
   row block (diagonal blocks by the nilpotent product formula, the rest by block substitution).
3. `recompute`: one program per (chunk, value head): W = Tinv diag(beta)(k exp Gamma), U = Tinv diag(beta) v
   (written over v) as 64x64 @ 64xK tensor-core dots, plus k exp(Gamma_last - Gamma), scale q exp Gamma and
   exp Gamma_last.
4. `state`: one program per (sequence, value head, V tile): the only sequential part, over the chunks of one
   sequence, with the state kept K-first in registers; the output is fused in, so no per-chunk state goes
   through HBM.
5. `output` (unfused mode, for tuning only): fully parallel output from stored per-chunk states.

Every length enters the kernels as data (cu_seqlens and the per-sequence chunk ends, computed on the device
with no host sync, so a captured call replays correctly with new lengths) or as a symbolic size, and each
kernel's specialization key records which dims are one (helion-fla notes 4.1): a first call at T = 1 never
poisons the kernel used for T > 1, so T = 1 needs no Triton fallback.

Numerical limit (shared with SGLang's Helion prefill): the 16x16 diagonal blocks factor exp(Gamma_i -
Gamma_j) around the block's middle row with exponents clamped to +-126 (log2). It is exact while the decay
over 8 tokens stays under 126 log2 units (about 87 nats): always for the bounded gate (lower_bound >= -10),
and for the softplus gate unless per-token log decays average below about -11.
"""

from __future__ import annotations

import math
import os

import helion
import helion.language as hl
import torch

CHUNK = 64  # (written as a literal inside kernel bodies: Helion passes module globals as runtime args)
SUB = 16  # sub-block rows of the 64x64 intra-chunk matrices (literal 16 inside the kernels)

_IGNORED = [helion.exc.ProcessGroupNameNotFound]

# Gate modes (constexpr): the raw gate goes through one of these before the cumsum.
GATE_PREACTIVATED = 0
GATE_SOFTPLUS = 1
GATE_BOUNDED = 2


def _size_one_key(*args) -> tuple:
    """Split Helion's shape buckets on every dim that equals one (the size-one specialization trap)."""
    return tuple(tuple(int(d) == 1 for d in a.shape) for a in args if isinstance(a, torch.Tensor))


# --------------------------------------------------------------------------------------------------------
# 1. gate activation + chunk-local cumsum (log2 units)
# --------------------------------------------------------------------------------------------------------


def _gate_cumsum_fn(
    g_rows: torch.Tensor,  # [T*HV, K] raw or pre-activated gate
    a_log: torch.Tensor,  # [HV] (unused in mode 0)
    dt_bias: torch.Tensor,  # [HV*K] (unused unless has_bias)
    cu_seqlens: torch.Tensor,  # [N+1]
    chunk_ends: torch.Tensor,  # [N] int64: packed chunk index after the last chunk of each sequence
    gcum_rows: torch.Tensor,  # [T*HV, K] fp32 out
    decay_rows: torch.Tensor,  # [M*HV, K] (only its size: M chunk slots)
    lower_bound: float,
    gate_mode: hl.constexpr,
    has_bias: hl.constexpr,
    HV: hl.constexpr,
) -> torch.Tensor:
    M = decay_rows.size(0) // HV
    K = hl.specialize(g_rows.size(1))
    hl.specialize((g_rows.stride(0), gcum_rows.stride(0)))
    for tile_m, tile_h in hl.tile([M, HV], block_size=[1, 1]):
        # which sequence and chunk this program owns: count sequences whose chunks all end at or before it
        count = hl.zeros([1], dtype=torch.int32)
        for tile_n in hl.tile(chunk_ends.size(0)):
            ends = chunk_ends[tile_n]
            count = count + (ends[None, :] <= tile_m.id).to(torch.int32).sum(1).to(torch.int32)
        seq = torch.clamp(count, max=chunk_ends.size(0) - 1).long()
        first = torch.where(seq > 0, chunk_ends[torch.clamp(seq - 1, min=0)], 0)
        begin = cu_seqlens[seq].long()
        end = cu_seqlens[seq + 1].long()
        start = begin + (tile_m.id - first) * 64
        token = start + hl.arange(64)
        valid = token < end
        row = token * HV + tile_h.id
        kk = hl.arange(K)
        x = hl.load(g_rows, [row[:, None], kk[None, :]], extra_mask=valid[:, None]).float()
        if gate_mode != 0:
            if has_bias:
                x = x + hl.load(dt_bias, [tile_h.id * K + kk]).float()[None, :]
            a = torch.exp(hl.load(a_log, [tile_h.id]).float())
            if gate_mode == 1:
                soft = torch.where(x > 20.0, x, torch.log(1.0 + torch.exp(torch.clamp(x, max=20.0))))
                x = -a * soft
            else:
                x = lower_bound * torch.sigmoid(a * x)
        x = torch.where(valid[:, None], x * 1.4426950216293335, 0.0)
        hl.store(gcum_rows, [row[:, None], kk[None, :]], hl.cumsum(x, 0), extra_mask=valid[:, None])
    return gcum_rows


# --------------------------------------------------------------------------------------------------------
# 2. intra-chunk: L, Aqk, Tinv = (I+L)^-1;  then recompute: W, U, kg, qg, decay
# --------------------------------------------------------------------------------------------------------


def _exp2c(x: torch.Tensor) -> torch.Tensor:
    # clamped so exp2 stays finite in fp32 (see the numerical limit in the module docstring)
    return torch.exp2(torch.clamp(x, -126.0, 126.0))


def _dot32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return hl.dot(a, b, out_dtype=torch.float32)


def _invert_unit_lower_16(strict: torch.Tensor) -> torch.Tensor:
    """(I + N)^-1 for a strictly lower 16x16 block N (N^16 = 0): (I - N)(I + N^2)(I + N^4)(I + N^8).

    Six small tensor-core dots instead of a 15-step substitution (two cross-warp reductions a step); the
    result is rounded to bf16 right after, far coarser than the tf32 products."""
    lane = hl.arange(16)
    eye = (lane[:, None] == lane[None, :]).float()
    n2 = _dot32(strict, strict)
    n4 = _dot32(n2, n2)
    n8 = _dot32(n4, n4)
    inv = _dot32(eye - strict, eye + n2)
    inv = _dot32(inv, eye + n4)
    return _dot32(inv, eye + n8)


def _acc(blocks: dict, key, value):
    return value if key not in blocks else blocks[key] + value


def _load_unit(x_tok, token, valid, cols, rnorm):
    """[16, len(cols)] fp32 rows of q or k, scaled by their precomputed inverse L2 norms (or 1)."""
    x = hl.load(x_tok, [token[:, None], cols[None, :]], extra_mask=valid[:, None]).float()
    return x * rnorm[:, None]


def _inv_norm(x_tok, token, valid, cols, use_l2norm):
    """1/sqrt(sum x^2 + 1e-6) per row (ones without the L2 norm), computed once per 16-row block."""
    x = hl.load(x_tok, [token[:, None], cols[None, :]], extra_mask=valid[:, None]).float()
    if use_l2norm:
        return torch.rsqrt((x * x).sum(1) + 1e-6)
    return torch.where(valid, 1.0, 1.0)


def _intra_blocks(
    q_rows, k_rows, gcum_rows, gcum_flat, beta_rows, aqk_rows, tinv_rows,
    start, end, hv, scale, K, HV, GROUP, use_l2norm, beta_is_raw,
):  # fmt: skip
    """L and Aqk of one (chunk, value head) from 16x16 blocks, then Tinv = (I + L)^-1; stores Aqk, Tinv."""
    kk = hl.arange(K)
    lane = hl.arange(16)
    tokens = [start + i * 16 + lane for i in range(4)]
    masks = [t < end for t in tokens]
    rows = [t * HV + hv for t in tokens]
    qk_col0 = (hv // GROUP) * K  # q/k head columns within a token row
    betas = []
    for i in range(4):
        b = hl.load(beta_rows, [rows[i]], extra_mask=masks[i]).float()
        if beta_is_raw:
            b = torch.sigmoid(b)
        betas.append(torch.where(masks[i], b, 0.0))
    strict = lane[:, None] > lane[None, :]
    causal = lane[:, None] >= lane[None, :]
    rn_k = [_inv_norm(k_rows, tokens[i], masks[i], qk_col0 + kk, use_l2norm) for i in range(4)]
    rn_q = [_inv_norm(q_rows, tokens[i], masks[i], qk_col0 + kk, use_l2norm) for i in range(4)]

    def anchor(token, cols):
        # an in-bounds row of this chunk (padding chunks: never stored, any finite value will do)
        token = torch.clamp(torch.minimum(token, end - 1), min=0)
        return hl.load(gcum_flat, [(token * HV + hv) * K + cols])

    # Row block by row block: the 16x16 blocks of L (beta-scaled, strictly lower) and of Aqk (scaled,
    # causal; zeros stored above the diagonal so that the output pass can use whole 64-wide rows), then at
    # once row block i of Tinv = (I + L)^-1:  Tinv[i,i] = (I + L[i,i])^-1,
    # Tinv[i,j] = -Tinv[i,i] @ sum_{j<=m<i} L[i,m] @ Tinv[m,j].  L of row i dies here, keeping few 16x16
    # blocks live (each costs ~8 registers a thread in the MMA layout whatever the warp count).
    inv = {}
    zero = hl.zeros([16, 16], dtype=torch.float32)
    for i in range(4):
        row_mask = masks[i][:, None]
        akk = {}
        aqk = {}
        # The K reduction runs in 32-wide slices: a 16-row dot replicates its operands in every warp, so
        # full-K operands would take most of the register file.
        for ks in range(K // 32):
            cols = ks * 32 + hl.arange(32)
            ki = _load_unit(k_rows, tokens[i], masks[i], qk_col0 + cols, rn_k[i])
            qi = _load_unit(q_rows, tokens[i], masks[i], qk_col0 + cols, rn_q[i])
            gi = hl.load(gcum_rows, [rows[i][:, None], cols[None, :]], extra_mask=row_mask)
            # diagonal block, factorised around its middle row
            g_mid = anchor(start + i * 16 + 8, cols)
            up = _exp2c(gi - g_mid[None, :])
            kd = (ki * _exp2c(g_mid[None, :] - gi)).T
            akk[i] = _acc(akk, i, _dot32(ki * up, kd))
            aqk[i] = _acc(aqk, i, _dot32(qi * up, kd))
            if i > 0:
                # blocks left of the diagonal, factorised around the first row of block i: factors <= 1
                g_first = anchor(start + i * 16, cols)
                left = _exp2c(gi - g_first[None, :])
                kl = (ki * left).to(torch.bfloat16)
                ql = (qi * left).to(torch.bfloat16)
                for j in range(i):
                    kj = _load_unit(k_rows, tokens[j], masks[j], qk_col0 + cols, rn_k[j])
                    gj = hl.load(gcum_rows, [rows[j][:, None], cols[None, :]], extra_mask=masks[j][:, None])
                    kr = (kj * _exp2c(g_first[None, :] - gj)).to(torch.bfloat16).T
                    akk[j] = _acc(akk, j, _dot32(kl, kr))
                    aqk[j] = _acc(aqk, j, _dot32(ql, kr))
        akk[i] = torch.where(strict & row_mask, akk[i] * betas[i][:, None], 0.0)
        for j in range(i):
            akk[j] = torch.where(row_mask, akk[j] * betas[i][:, None], 0.0)
        for j in range(4):
            if j < i:
                val = aqk[j] * scale
            elif j == i:
                val = torch.where(causal, aqk[i] * scale, 0.0)
            else:
                val = zero
            hl.store(aqk_rows, [rows[i][:, None], (j * 16 + lane)[None, :]], val.to(aqk_rows.dtype),
                     extra_mask=row_mask)  # fmt: skip
        # row block i of Tinv, stored as 64-wide bf16 rows for the recompute kernel
        inv[(i, i)] = _invert_unit_lower_16(akk[i])
        for j in range(i - 1, -1, -1):
            acc = _dot32(akk[j], inv[(j, j)])
            for m in range(j + 1, i):
                acc = acc + _dot32(akk[m], inv[(m, j)])
            inv[(i, j)] = -_dot32(inv[(i, i)], acc)
        for j in range(4):
            val = inv[(i, j)].to(tinv_rows.dtype) if j <= i else zero.to(tinv_rows.dtype)
            hl.store(tinv_rows, [rows[i][:, None], (j * 16 + lane)[None, :]], val, extra_mask=row_mask)


def _intra_chunk_fn(
    q_rows: torch.Tensor,  # [T, H*K] token rows (any row stride)
    k_rows: torch.Tensor,  # [T, H*K]
    gcum_rows: torch.Tensor,  # [T*HV, K] fp32 log2 cumsum
    gcum_flat: torch.Tensor,  # the same, flat (single-row loads)
    beta_rows: torch.Tensor,  # [T*HV]
    cu_seqlens: torch.Tensor,
    chunk_ends: torch.Tensor,
    aqk_rows: torch.Tensor,  # [T*HV, 64] out
    tinv_rows: torch.Tensor,  # [T*HV, 64] out: (I + L)^-1, bf16
    decay_rows: torch.Tensor,  # [M*HV, K] (only its size: M chunk slots)
    scale: float,
    use_l2norm: hl.constexpr,
    beta_is_raw: hl.constexpr,
    HV: hl.constexpr,
    GROUP: hl.constexpr,
) -> torch.Tensor:
    M = decay_rows.size(0) // HV
    K = hl.specialize(gcum_rows.size(1))
    hl.specialize((q_rows.stride(0), k_rows.stride(0), gcum_rows.stride(0)))
    for tile_m, tile_h in hl.tile([M, HV], block_size=[1, 1]):
        # which sequence and chunk this program owns: count sequences whose chunks all end at or before it
        count = hl.zeros([1], dtype=torch.int32)
        for tile_n in hl.tile(chunk_ends.size(0)):
            ends = chunk_ends[tile_n]
            count = count + (ends[None, :] <= tile_m.id).to(torch.int32).sum(1).to(torch.int32)
        seq = torch.clamp(count, max=chunk_ends.size(0) - 1).long()
        first = torch.where(seq > 0, chunk_ends[torch.clamp(seq - 1, min=0)], 0)
        begin = cu_seqlens[seq].long()
        end = cu_seqlens[seq + 1].long()
        start = begin + (tile_m.id - first) * 64
        _intra_blocks(
            q_rows, k_rows, gcum_rows, gcum_flat, beta_rows, aqk_rows, tinv_rows,
            start, end, tile_h.id, scale, K, HV, GROUP, use_l2norm, beta_is_raw,
        )  # fmt: skip
    return tinv_rows


def _recompute_fn(
    q_rows: torch.Tensor,  # [T, H*K] token rows (any row stride)
    k_rows: torch.Tensor,  # [T, H*K]
    v_rows: torch.Tensor,  # [T, HV*V] in: v, out: U
    gcum_rows: torch.Tensor,  # [T*HV, K] fp32
    gcum_flat: torch.Tensor,
    beta_rows: torch.Tensor,  # [T*HV]
    cu_seqlens: torch.Tensor,
    chunk_ends: torch.Tensor,
    tinv_rows: torch.Tensor,  # [T*HV, 64] bf16
    w_rows: torch.Tensor,  # [T*HV, K] out: Tinv diag(beta) (k exp Gamma)
    kg_rows: torch.Tensor,  # [T*HV, K] out: k exp(Gamma_last - Gamma)
    qg_rows: torch.Tensor,  # [T*HV, K] out: scale q exp Gamma
    decay_rows: torch.Tensor,  # [M*HV, K] fp32 out: exp2(Gamma_last)
    scale: float,
    use_l2norm: hl.constexpr,
    beta_is_raw: hl.constexpr,
    HV: hl.constexpr,
    GROUP: hl.constexpr,
) -> torch.Tensor:
    M = decay_rows.size(0) // HV
    K = hl.specialize(gcum_rows.size(1))
    V = hl.specialize(v_rows.size(1)) // HV
    hl.specialize((q_rows.stride(0), k_rows.stride(0), v_rows.stride(0), gcum_rows.stride(0)))
    block_v = hl.register_block_size(16, V)
    for tile_m, tile_h in hl.tile([M, HV], block_size=[1, 1]):
        # which sequence and chunk this program owns: count sequences whose chunks all end at or before it
        count = hl.zeros([1], dtype=torch.int32)
        for tile_n in hl.tile(chunk_ends.size(0)):
            ends = chunk_ends[tile_n]
            count = count + (ends[None, :] <= tile_m.id).to(torch.int32).sum(1).to(torch.int32)
        seq = torch.clamp(count, max=chunk_ends.size(0) - 1).long()
        first = torch.where(seq > 0, chunk_ends[torch.clamp(seq - 1, min=0)], 0)
        begin = cu_seqlens[seq].long()
        end = cu_seqlens[seq + 1].long()
        start = begin + (tile_m.id - first) * 64
        hv = tile_h.id
        token = start + hl.arange(64)
        valid = token < end
        row = token * HV + hv
        qk_cols = (hv // GROUP) * K + hl.arange(K)
        kk = hl.arange(K)
        tinv = hl.load(tinv_rows, [row[:, None], hl.arange(64)[None, :]], extra_mask=valid[:, None])
        beta = hl.load(beta_rows, [row], extra_mask=valid).float()
        if beta_is_raw:
            beta = torch.sigmoid(beta)
        beta = torch.where(valid, beta, 0.0)
        # last row of the chunk (padding chunks: any in-bounds row; nothing of theirs is stored but decay)
        last = torch.clamp(torch.minimum(start + 63, end - 1), min=0)
        g_last = hl.load(gcum_flat, [(last * HV + hv) * K + kk])
        hl.store(decay_rows, [tile_m.id * HV + hv, kk], torch.exp2(torch.clamp(g_last, max=0.0)))
        gam = hl.load(gcum_rows, [row[:, None], kk[None, :]], extra_mask=valid[:, None])
        k = hl.load(k_rows, [token[:, None], qk_cols[None, :]], extra_mask=valid[:, None]).float()
        if use_l2norm:
            k = k * torch.rsqrt((k * k).sum(1) + 1e-6)[:, None]
        eg = torch.exp2(torch.clamp(gam, max=0.0))
        kb = (k * eg * beta[:, None]).to(torch.bfloat16)
        hl.store(
            w_rows, [row[:, None], kk[None, :]], _dot32(tinv, kb).to(w_rows.dtype), extra_mask=valid[:, None]
        )
        kg = k * torch.exp2(torch.clamp(g_last[None, :] - gam, max=0.0))
        hl.store(kg_rows, [row[:, None], kk[None, :]], kg.to(kg_rows.dtype), extra_mask=valid[:, None])
        q = hl.load(q_rows, [token[:, None], qk_cols[None, :]], extra_mask=valid[:, None]).float()
        if use_l2norm:
            q = q * torch.rsqrt((q * q).sum(1) + 1e-6)[:, None]
        hl.store(qg_rows, [row[:, None], kk[None, :]], (q * eg * scale).to(qg_rows.dtype),
                 extra_mask=valid[:, None])  # fmt: skip
        # U = Tinv diag(beta) v, written over v (each V tile is read before it is written)
        for tile_v in hl.tile(V, block_size=block_v):
            v_cols = hv * V + tile_v.index
            vt = hl.load(v_rows, [token[:, None], v_cols[None, :]], extra_mask=valid[:, None]).float()
            u = _dot32(tinv, (vt * beta[:, None]).to(torch.bfloat16))
            hl.store(v_rows, [token[:, None], v_cols[None, :]], u.to(v_rows.dtype), extra_mask=valid[:, None])
    return w_rows


# --------------------------------------------------------------------------------------------------------
# 3. sequential state pass (optionally with the output fused in)
# --------------------------------------------------------------------------------------------------------


def _state_pass_fn(
    w_rows: torch.Tensor,  # [T*HV, K] bf16
    u_rows: torch.Tensor,  # [T, HV*V] (v's storage) in: U, out: o (fused) or Vnew
    kg_rows: torch.Tensor,  # [T*HV, K] bf16
    qg_rows: torch.Tensor,  # [T*HV, K] bf16
    aqk_rows: torch.Tensor,  # [T*HV, 64] bf16
    decay_flat: torch.Tensor,  # [M*HV*K] fp32
    pool_rows: torch.Tensor,  # [slots*HV*V, K] fp32 or bf16, updated in place
    pool_index: torch.Tensor,  # [N]
    cu_seqlens: torch.Tensor,  # [N+1]
    chunk_ends: torch.Tensor,  # [N]
    h_rows: torch.Tensor,  # [M*HV*V, K] bf16 out (store_h)
    track_rows: torch.Tensor,  # [rows*HV*V, K] fp32 out (has_track)
    track_chunk: torch.Tensor,  # [N]
    fuse_output: hl.constexpr,
    store_h: hl.constexpr,
    has_track: hl.constexpr,
    HV: hl.constexpr,
) -> torch.Tensor:
    N = pool_index.size(0)
    K = hl.specialize(w_rows.size(1))
    V = hl.specialize(u_rows.size(1)) // HV
    hl.specialize((w_rows.stride(0), u_rows.stride(0), pool_rows.stride(0)))
    block_v = hl.register_block_size(16, V)
    for tile_n, tile_h, tile_v in hl.tile([N, HV, V], block_size=[1, 1, block_v]):
        hv = tile_h.id
        begin = cu_seqlens[tile_n.id].long()
        end = cu_seqlens[tile_n.id + 1].long()
        # chunk_ends[n - 1] (0 for n = 0): the load wraps to a valid index, the multiply zeroes it
        first_chunk = chunk_ends[(tile_n.id + N - 1) % N] * min(tile_n.id, 1)
        slot = pool_index[tile_n.id].long()
        has_slot = slot >= 0
        kk = hl.arange(K)
        # The state is kept K-first ([K, BV], the transpose of the pool's [V, K] rows) so that all four
        # products of a step are M >= 64 tensor-core dots with no register transposes.
        state_row = (torch.clamp(slot, min=0) * HV + hv) * V + tile_v.index
        state = hl.load(pool_rows, [state_row[None, :], kk[:, None]], extra_mask=has_slot).float()
        if has_track:
            track_at = track_chunk[tile_n.id].long()
        # Operands of chunk t+1 are loaded during step t (register double buffering): the loop is a
        # latency chain of small dots, and Triton does not pipeline these loads by itself.
        token0 = begin + hl.arange(64)
        valid0 = token0 < end
        row0 = token0 * HV + hv
        w_next = hl.load(w_rows, [row0[:, None], kk[None, :]], extra_mask=valid0[:, None])
        kg_next = hl.load(kg_rows, [row0[None, :], kk[:, None]], extra_mask=valid0[None, :])
        qg_next = hl.load(qg_rows, [row0[:, None], kk[None, :]], extra_mask=valid0[:, None] & fuse_output)
        aqk_next = hl.load(
            aqk_rows, [row0[:, None], hl.arange(64)[None, :]], extra_mask=valid0[:, None] & fuse_output
        )
        for tile_t in hl.tile(end - begin, block_size=64):
            chunk = first_chunk + tile_t.id
            token = begin + tile_t.index
            valid = token < end
            w = w_next
            kg_t = kg_next
            qg = qg_next
            aqk = aqk_next
            token_n = token + 64
            valid_n = token_n < end
            row_n = token_n * HV + hv
            w_next = hl.load(w_rows, [row_n[:, None], kk[None, :]], extra_mask=valid_n[:, None])
            kg_next = hl.load(kg_rows, [row_n[None, :], kk[:, None]], extra_mask=valid_n[None, :])
            if fuse_output:
                qg_next = hl.load(qg_rows, [row_n[:, None], kk[None, :]], extra_mask=valid_n[:, None])
                aqk_next = hl.load(
                    aqk_rows, [row_n[:, None], hl.arange(64)[None, :]], extra_mask=valid_n[:, None]
                )
            if store_h:
                h_row = (chunk * HV + hv) * V + tile_v.index
                hl.store(h_rows, [h_row[None, :], kk[:, None]], state.to(h_rows.dtype))
            if has_track:
                if tile_t.id == track_at:
                    t_row = (tile_n.id * HV + hv) * V + tile_v.index
                    hl.store(track_rows, [t_row[None, :], kk[:, None]], state)
            state_b = state.to(torch.bfloat16)
            v_cols = hv * V + tile_v.index
            u = hl.load(u_rows, [token[:, None], v_cols[None, :]], extra_mask=valid[:, None]).float()
            v_new = (u - _dot32(w, state_b)).to(torch.bfloat16)
            if fuse_output:
                o = _dot32(qg, state_b) + _dot32(aqk, v_new)
                hl.store(u_rows, [token[:, None], v_cols[None, :]], o.to(u_rows.dtype),
                         extra_mask=valid[:, None])  # fmt: skip
            else:
                hl.store(u_rows, [token[:, None], v_cols[None, :]], v_new.to(u_rows.dtype),
                         extra_mask=valid[:, None])  # fmt: skip
            decay = hl.load(decay_flat, [(chunk * HV + hv) * K + kk])
            state = state * decay[:, None] + _dot32(kg_t, v_new)
        hl.store(pool_rows, [state_row[None, :], kk[:, None]], state.to(pool_rows.dtype),
                 extra_mask=has_slot)  # fmt: skip
    return pool_rows


# --------------------------------------------------------------------------------------------------------
# 4. parallel output (unfused mode)
# --------------------------------------------------------------------------------------------------------


def _chunk_output_fn(
    u_rows: torch.Tensor,  # [T, HV*V] (v's storage) in: Vnew, out: o
    qg_rows: torch.Tensor,
    aqk_rows: torch.Tensor,
    h_rows: torch.Tensor,  # [M*HV*V, K] bf16
    decay_rows: torch.Tensor,  # [M*HV, K] (only its size: M chunk slots)
    cu_seqlens: torch.Tensor,
    chunk_ends: torch.Tensor,
    HV: hl.constexpr,
) -> torch.Tensor:
    M = decay_rows.size(0) // HV
    K = hl.specialize(qg_rows.size(1))
    V = hl.specialize(u_rows.size(1)) // HV
    hl.specialize((u_rows.stride(0), qg_rows.stride(0)))
    block_v = hl.register_block_size(16, V)
    for tile_m, tile_h, tile_v in hl.tile([M, HV, V], block_size=[1, 1, block_v]):
        hv = tile_h.id
        # which sequence and chunk this program owns: count sequences whose chunks all end at or before it
        count = hl.zeros([1], dtype=torch.int32)
        for tile_n in hl.tile(chunk_ends.size(0)):
            ends = chunk_ends[tile_n]
            count = count + (ends[None, :] <= tile_m.id).to(torch.int32).sum(1).to(torch.int32)
        seq = torch.clamp(count, max=chunk_ends.size(0) - 1).long()
        first = torch.where(seq > 0, chunk_ends[torch.clamp(seq - 1, min=0)], 0)
        begin = cu_seqlens[seq].long()
        end = cu_seqlens[seq + 1].long()
        start = begin + (tile_m.id - first) * 64
        token = start + hl.arange(64)
        valid = token < end
        row = token * HV + hv
        kk = hl.arange(K)
        qg = hl.load(qg_rows, [row[:, None], kk[None, :]], extra_mask=valid[:, None])
        h_row = (tile_m.id * HV + hv) * V + tile_v.index
        h = hl.load(h_rows, [h_row[:, None], kk[None, :]])
        aqk = hl.load(aqk_rows, [row[:, None], hl.arange(64)[None, :]], extra_mask=valid[:, None])
        v_cols = hv * V + tile_v.index
        v_new = hl.load(u_rows, [token[:, None], v_cols[None, :]], extra_mask=valid[:, None])
        o = _dot32(qg, h.T) + _dot32(aqk, v_new.to(torch.bfloat16))
        hl.store(u_rows, [token[:, None], v_cols[None, :]], o.to(u_rows.dtype), extra_mask=valid[:, None])
    return u_rows


# --------------------------------------------------------------------------------------------------------
# configs and the entry point
# --------------------------------------------------------------------------------------------------------

# Fixed configs (no runtime autotuning). block_sizes: intra = [U tile], state/output = [V tile].
DEFAULT_CONFIGS: dict[str, dict] = {
    # block_sizes in trace order: [sequence-search tile, then the kernel's own tile]
    "gate": {"block_sizes": [32], "num_warps": 8, "num_stages": 1, "indexing": "pointer"},
    "intra": {"block_sizes": [32], "num_warps": 8, "num_stages": 1, "indexing": "pointer"},
    "recompute": {"block_sizes": [32, 64], "num_warps": 8, "num_stages": 1, "indexing": "pointer"},
    "state": {"block_sizes": [16], "num_warps": 8, "num_stages": 3, "indexing": "pointer"},
    "output": {"block_sizes": [32, 32], "num_warps": 4, "num_stages": 1, "indexing": "pointer"},
}
# Fusing the output into the state pass keeps per-chunk states out of HBM.
DEFAULT_FUSE_OUTPUT = True

_FNS = {
    "gate": _gate_cumsum_fn,
    "intra": _intra_chunk_fn,
    "recompute": _recompute_fn,
    "state": _state_pass_fn,
    "output": _chunk_output_fn,
}
_kernels: dict[str, helion.Kernel] = {}
_fuse_output = DEFAULT_FUSE_OUTPUT


_built: dict[str, tuple] = {}


def configure(configs: dict[str, dict] | None = None, fuse_output: bool | None = None) -> None:
    """Set the kernels' configs (missing names keep the defaults) and the fusion mode; for tuning.

    Only kernels whose config changed are rebuilt (a rebuild means a new trace and compile)."""
    global _fuse_output
    merged = {name: dict(cfg) for name, cfg in DEFAULT_CONFIGS.items()}
    for name, cfg in (configs or {}).items():
        if name not in merged:
            raise ValueError(f"unknown prefill kernel {name!r}; known: {sorted(merged)}")
        merged[name] = dict(cfg)
    for name, fn in _FNS.items():
        signature = tuple(sorted((k, str(v)) for k, v in merged[name].items()))
        if _built.get(name) == signature:
            continue
        _kernels[name] = helion.kernel(
            fn,
            static_shapes=False,
            config=helion.Config(**merged[name]),
            key=_size_one_key,
            ignore_warnings=_IGNORED,
        )
        _built[name] = signature
    if fuse_output is not None:
        _fuse_output = bool(fuse_output)


configure()


def reset() -> None:
    """Fresh kernel objects (drops every compiled specialization), as in a new process."""
    _built.clear()
    configure({}, DEFAULT_FUSE_OUTPUT)


def _configure_from_env() -> None:
    raw = os.environ.get("KDAKIT_PREFILL_CONFIGS")
    if raw:
        import json

        spec = json.loads(raw)
        configure(spec.get("configs"), spec.get("fuse_output"))


_configure_from_env()


def _is_pow2(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


_fixed_ends: dict[tuple, torch.Tensor] = {}


_fixed_cus: dict[tuple, torch.Tensor] = {}


def _fixed_cu(B: int, T: int, device) -> torch.Tensor:
    key = (B, T, str(device))
    if key not in _fixed_cus:
        _fixed_cus[key] = torch.arange(B + 1, dtype=torch.int32, device=device) * T
    return _fixed_cus[key]


def _chunk_ends(cu_seqlens: torch.Tensor | None, B: int, T: int, device) -> tuple[torch.Tensor, int]:
    """Inclusive cumsum of the chunk counts per sequence [N] (int64, on the device, no host sync) and an
    upper bound M on the number of chunks. Programs past the last chunk find an empty row range."""
    if cu_seqlens is None:
        per_seq = math.ceil(T / CHUNK)
        key = (B, per_seq, str(device))
        if key not in _fixed_ends:
            _fixed_ends[key] = torch.arange(1, B + 1, dtype=torch.int64, device=device) * per_seq
        return _fixed_ends[key], max(B * per_seq, 1)
    n = cu_seqlens.numel() - 1
    ends = torch.cumsum((cu_seqlens[1:] - cu_seqlens[:-1] + (CHUNK - 1)) // CHUNK, 0)
    slots = math.ceil(T / CHUNK) if n == 1 else T // CHUNK + n
    return ends, max(slots, 1)


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    initial_state_indices: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    lower_bound: float | None = None,
    output_intermediate_states: bool = False,
    track_state: torch.Tensor | None = None,
    track_chunk_idx: torch.Tensor | None = None,
    beta_is_raw: bool = False,
    chunk_indices: torch.Tensor | None = None,
    chunk_offsets: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Chunked KDA prefill with SGLang 0.5.23's Helion `chunk_kda` contract.

    q, k [B,T,H,K]; v [B,T,HV,V]; g [B,T',HV,K] raw gate when A_log is given (bounded with lower_bound,
    else softplus), else pre-activated log decay; beta [B,T',HV] (logits when beta_is_raw); T' >= T, rows
    past T (CUDA Graph padding) are ignored. initial_state [slots,HV,V,K] (fp32/bf16) is updated in place
    at initial_state_indices [N] (negative: zero start, nothing written). Varlen: B == 1 and cu_seqlens
    [N+1]. The output is written into v's storage; returns o, or (o, h [B,NT,HV,V,K]) with
    output_intermediate_states. chunk_indices/chunk_offsets are accepted for signature compatibility; the
    chunk map is rebuilt on the device without a host sync.
    """
    del chunk_indices, chunk_offsets, kwargs
    if initial_state is None or initial_state_indices is None:
        raise ValueError("KDA prefill requires an indexed initial-state pool")
    if (track_state is None) != (track_chunk_idx is None):
        raise ValueError("track_state and track_chunk_idx must be passed together")
    if track_state is not None and track_state.dtype != torch.float32:
        raise ValueError(f"track_state must be fp32, got {track_state.dtype}")
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"expected q, k [B,T,H,K] and v [B,T,HV,V]; got {tuple(q.shape)}, {tuple(v.shape)}")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % H:
        raise ValueError(f"value heads ({HV}) must be a multiple of query/key heads ({H})")
    if not (_is_pow2(K) and _is_pow2(V)) or K > 256 or V > 256:
        raise ValueError(f"K and V must be powers of two in [16, 256]; got K={K}, V={V}")
    if g.dim() != 4 or g.shape[0] != B or g.shape[2:] != (HV, K) or beta.shape[0] != B or beta.shape[2] != HV:
        raise ValueError(
            f"expected g [B,T,HV,K] and beta [B,T,HV]; got {tuple(g.shape)}, {tuple(beta.shape)}"
        )
    if g.shape[1] < T or beta.shape[1] < T:
        raise ValueError("g and beta must cover every q token")
    if tuple(initial_state.shape[1:]) != (HV, V, K):
        raise ValueError(f"initial_state must be [slots,{HV},{V},{K}]; got {tuple(initial_state.shape)}")
    g = g[:, :T]
    beta = beta[:, :T]
    if scale is None:
        scale = K**-0.5

    if cu_seqlens is not None:
        if B != 1:
            raise ValueError("varlen KDA requires batch size 1")
        cu = cu_seqlens
    else:
        cu = _fixed_cu(B, T, q.device)
    N = cu.numel() - 1
    if initial_state_indices.numel() != N:
        raise ValueError(f"initial_state_indices must have one slot per sequence ({N})")
    total = B * T
    ends, slots = _chunk_ends(cu_seqlens, B, total if cu_seqlens is not None else T, q.device)

    # token rows [T, heads*dim] with any row stride: views of SGLang's packed conv output stay views
    q_rows = q.reshape(total, H * K)
    k_rows = k.reshape(total, H * K)
    # the output goes into v's storage: directly when v's token rows are a view (contiguous v, or a
    # slice of a packed qkv buffer), else into a contiguous copy, as SGLang's kernels do
    if v.stride(-1) == 1 and v.stride(-2) == V and (B == 1 or v.stride(0) == T * v.stride(1)):
        out = v
    else:
        out = v.contiguous()
    v_rows = out.as_strided((total, HV * V), (out.stride(1), 1))
    g_rows = g.reshape(total * HV, K)
    beta_rows = beta.reshape(total * HV)
    if not beta_rows.is_floating_point():
        raise ValueError("beta must be a floating-point tensor")
    dev = q.device
    act = torch.bfloat16

    if A_log is None:
        gate_mode, a_log, bias = GATE_PREACTIVATED, torch.zeros(HV, device=dev), None
    else:
        gate_mode = GATE_SOFTPLUS if lower_bound is None else GATE_BOUNDED
        a_log, bias = A_log.reshape(HV), dt_bias
    has_bias = bias is not None
    bias = bias.reshape(HV * K) if has_bias else a_log
    gcum = torch.empty(total * HV, K, dtype=torch.float32, device=dev)
    decay = torch.empty(slots * HV, K, dtype=torch.float32, device=dev)
    _kernels["gate"](
        g_rows, a_log, bias, cu, ends, gcum, decay,
        float(lower_bound if lower_bound is not None else 0.0), gate_mode, has_bias, HV,
    )  # fmt: skip

    aqk = torch.empty(total * HV, CHUNK, dtype=act, device=dev)
    tinv = torch.empty(total * HV, CHUNK, dtype=act, device=dev)
    flags = (float(scale), bool(use_qk_l2norm_in_kernel), bool(beta_is_raw), HV, HV // H)
    _kernels["intra"](q_rows, k_rows, gcum, gcum.view(-1), beta_rows, cu, ends, aqk, tinv, decay, *flags)
    w = torch.empty(total * HV, K, dtype=act, device=dev)
    kg = torch.empty_like(w)
    qg = torch.empty_like(w)
    _kernels["recompute"](
        q_rows, k_rows, v_rows, gcum, gcum.view(-1), beta_rows, cu, ends, tinv, w, kg, qg, decay, *flags
    )

    fuse = _fuse_output and not output_intermediate_states
    need_h = output_intermediate_states or not fuse
    h = torch.empty(slots * HV * V if need_h else 1, K, dtype=q.dtype if need_h else act, device=dev)
    has_track = track_state is not None
    if has_track:
        track_rows = track_state.view(-1, K)
        track_chunk = track_chunk_idx
    else:
        track_rows = torch.empty(1, K, dtype=torch.float32, device=dev)
        track_chunk = initial_state_indices
    if not initial_state.is_contiguous():
        raise ValueError("initial_state must be a contiguous [slots,HV,V,K] pool")
    pool_rows = initial_state.view(-1, K)
    _kernels["state"](
        w, v_rows, kg, qg, aqk, decay.view(-1), pool_rows, initial_state_indices, cu, ends,
        h, track_rows, track_chunk, fuse, need_h, has_track, HV,
    )  # fmt: skip
    if not fuse:
        _kernels["output"](v_rows, qg, aqk, h, decay, cu, ends, HV)

    o = out
    if output_intermediate_states:
        if cu_seqlens is None:
            nt = math.ceil(T / CHUNK)
            return o, h[: slots * HV * V].view(B, nt, HV, V, K)
        n_chunks = int(ends[-1])  # host sync, only on this path
        return o, h[: n_chunks * HV * V].view(1, n_chunks, HV, V, K)
    return o
