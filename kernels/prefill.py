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

Five Helion kernels. Everything before the state pass is fully parallel and built from small programs (few
warps, a [16 or 64, 32] tile at a time), so many run per SM: the intra-chunk work is latency-bound, not
bandwidth-bound.

1. `gate`: one program per (chunk lane, value head, K slice): gate activation from the raw gate and the
   chunk-local cumsum in log2 units, row by row with each thread owning whole K columns (no shuffles). The
   chunk's token span, like every kernel's, comes from the tables kernel (`_tables_fn`), which maps each
   chunk once for all heads.
2. `intra`: one program per (chunk, value head, 16-row block i): row block i of L and of Aqk, K in 32-wide
   slices, the q/k L2 norms applied to the dot results (and stored for `recompute`); the diagonal block
   factorised around its middle row, the blocks left of it around the block's first row (so exp never
   overflows). One K loop: each slice of block i is loaded and scaled once and serves the diagonal block
   and every earlier block j < i (three guarded static blocks); each exp2 factor is computed in one layout
   and converted (`_EXP2_ONCE`), not recomputed for each consumer.
3. `solve`: one program per (chunk, value head): Tinv = (I + L)^-1 row block by row block (diagonal blocks
   by the nilpotent product formula, the rest by block substitution), stored as 64-wide bf16 rows.
4. `recompute`: one program per (chunk, value head, 64-column tile): U = Tinv diag(beta) v (written over
   v), then scale q exp Gamma, k exp(Gamma_last - Gamma), W = Tinv diag(beta)(k exp Gamma) and exp
   Gamma_last, from one load of Tinv and beta, each output stored before the next one's operands load.
5. `state`: one program per (sequence, value head, V tile): the only sequential part, over the chunks of one
   sequence, with the state kept K-first in registers; the output is fused in, so no per-chunk state goes
   through HBM. Each step's dot operands are loaded at its top and pipelined by Triton (3 stages); the
   chunk's decay, which Triton does not stage, is loaded one step ahead. A step runs the chain's two dots
   (W S, then kg^T v_new) back to back and the output's two (qg S, Aqk v_new) after them. Each program
   takes a whole SM, so the V tile is widened at run time while the programs would need a second wave
   (`widened_block_v`: 2x4096 tokens runs 32-wide), and a specialization that needs more shared memory
   than the GPU has runs with fewer stages (`_launch_within_shared_memory`). No per-chunk state
   leaves the loop: with `output_intermediate_states` the second return value is None (as SGLang's FlashInfer
   and gfx950 prefills return it). SGLang 0.5.23's KDA backend never reads it from a kernel that declares
   `supports_track_state_snapshot`: radix-cache tracking takes the in-kernel `track_state` snapshot or the
   final pool state (`KDAAttnBackend.forward_extend` -> `MambaAttnBackendBase._track_mamba_state_extend`,
   which asserts rather than read a missing h). In SGLang's prefill graph the state pass writes the track
   slots themselves (`track_mode`, `track_dst`; `writes_track_slots`) and o into the layer's output buffer
   (`output`; `writes_into_output`), where elsewhere o goes over U in v's storage.

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
from kdakit.kernels import tuned
from triton.runtime.errors import OutOfResources

CHUNK = 64  # (written as a literal inside kernel bodies: Helion passes module globals as runtime args)
SUB = 16  # sub-block rows of the 64x64 intra-chunk matrices (literal 16 inside the kernels)

_IGNORED = [helion.exc.ProcessGroupNameNotFound]

# Gate modes (constexpr): the raw gate goes through one of these before the cumsum.
GATE_PREACTIVATED = 0
GATE_SOFTPLUS = 1
GATE_BOUNDED = 2


_IS_ONE = (1).__eq__


def _size_one_key(*args) -> tuple:
    """Split Helion's shape buckets on every dim that equals one (the size-one specialization trap): per
    tensor, False where no dim is one, else which dims are. Helion's own key holds each tensor's rank.

    It runs on every launch (Helion's dispatch cache keys on it too), so the usual case, no dim of one, is
    one membership test in C: host time of a launch, which bounds a short eager prefill. For the recompute
    kernel's 15 tensors it takes a third of the time of a flag per dim (2-core CPU: 4-7 against 13-17 µs)."""
    shapes = [a.shape for a in args if isinstance(a, torch.Tensor)]
    return tuple([1 in s and tuple(map(_IS_ONE, s)) for s in shapes])


# --------------------------------------------------------------------------------------------------------
# 1. gate activation + chunk-local cumsum (log2 units)
# --------------------------------------------------------------------------------------------------------


# Row-streamed gate: each thread owns whole K columns and walks the chunk's 64 rows, so the cumsum needs no
# shuffles, no shared memory and no layout conversion. The sums follow the order of tl.cumsum over a [64, 32]
# fp32 tile on one warp (4 row threads x 16 repeats): within each group of 4 rows a two-step Hillis-Steele
# scan, then the previous group's last output added, whatever this kernel's config.

# lower_bound * (1 / d), d >= 1: one MUFU.RCP and one multiply (div.approx.ftz), where torch.sigmoid's
# div.full.f32 adds a range check and a select. Equal to sigmoid(.) * lower_bound while that is not
# subnormal (a * (x + dt_bias) > -87.3 for lower_bound <= -1); below, where torch.sigmoid keeps a subnormal,
# this flushes it to zero. (The CPU interpreter's shim divides exactly.)
_SCALED_RCP = "libdevice.fast_dividef({0}, {1})"
# x * log2(e) rounded on its own (mul.rn.f32, the constant Triton's exp uses): Triton lets LLVM contract a
# multiply and the add after it into one fma, which would change the rounding of the scan's adds;
# libdevice's mul_rn would flush subnormals
_TO_LOG2 = (
    'tl.inline_asm_elementwise("mul.rn.f32 $0, $1, 0f3FB8AA3B;", "=r,r", [{0}], dtype=tl.float32, '
    "is_pure=True, pack=1)"
)


def _activate_row(x, bias, a, lower_bound, gate_mode, has_bias):
    """A row slice of the raw gate -> its activated log decay in log2 units, op for op as Triton lowers
    the activation on the GPU. Rows past the end are not zeroed: they only follow real rows, and a prefix
    sum never reads a later row."""
    if gate_mode != 0:
        if has_bias:
            x = x + bias
        if gate_mode == 1:
            # no clamp: it only guarded exp on the branch where() drops (NaN still propagates)
            x = -a * torch.where(x > 20.0, x, torch.log(1.0 + torch.exp(x)))
        else:
            # sigmoid(t) = 1 / (1 + exp(-t)), exp(-t) as Triton lowers it: ex2(-t * log2e); the ftz form of
            # ex2 differs only on results below 2^-126, which vanish in 1 + e
            e = hl.inline_triton("tl.exp2({0} * -1.4426950408889634)", args=(a * x,), output_like=x)
            x = hl.inline_triton(_SCALED_RCP, args=(lower_bound, 1.0 + e), output_like=x)
    return hl.inline_triton(_TO_LOG2, args=(x,), output_like=x)


def _gate_chunk(g_rows, gcum_rows, rows0, length, kk, bias, a, lower_bound, gate_mode, has_bias, HV):
    """The chunk's 64 rows (g_rows row rows0 + r * HV, real while r < length) -> their log2 cumsum in
    gcum_rows. Python loops: traced once per row, so the kernel is straight-line code with every row's load
    issued before the first use (64 loads in flight a warp, not one group's)."""
    rows, oks, raw = [], [], []
    for r in range(64):
        rows.append(rows0 + r * HV)
        oks.append(r < length)
        raw.append(hl.load(g_rows, [_column(rows[r]), _row(kk)], extra_mask=_column(oks[r])))
    carry = None
    for r0 in range(0, 64, 4):
        x0, x1, x2, x3 = (
            _activate_row(raw[r0 + t].float(), bias, a, lower_bound, gate_mode, has_bias) for t in range(4)
        )
        # Hillis-Steele over 4 rows, then the previous group's last output (the order named above)
        s1 = x1 + x0
        out = [x0, s1, (x2 + x1) + x0, (x3 + x2) + s1]
        if carry is not None:
            out = [o + carry for o in out]
        carry = out[3]
        for t in range(4):
            hl.store(gcum_rows, [_column(rows[r0 + t]), _row(kk)], out[t], extra_mask=_column(oks[r0 + t]))


def _gate_cumsum_fn(
    g_rows: torch.Tensor,  # [T*HV, K] raw or pre-activated gate
    a_log: torch.Tensor,  # [HV] (unused in mode 0)
    dt_bias: torch.Tensor,  # [HV*K] (unused unless has_bias)
    spans: torch.Tensor,  # [M, 2] int64: token range [start, end) of every real chunk
    chunk_count: torch.Tensor,  # [1] int64: the batch's real chunks (device data)
    lanes: torch.Tensor,  # [P]: its size is the number of chunk lanes (values unused)
    gcum_rows: torch.Tensor,  # [T*HV, K] fp32 out
    lower_bound: float,
    gate_mode: hl.constexpr,
    has_bias: hl.constexpr,
    HV: hl.constexpr,
) -> torch.Tensor:
    P = lanes.size(0)
    K = hl.specialize(g_rows.size(1))
    hl.specialize((g_rows.stride(0), gcum_rows.stride(0)))
    block_kk = hl.register_block_size(16, K)
    for tile_p, tile_h, tile_kk in hl.tile([P, HV, K], block_size=[1, 1, block_kk]):
        hv, chunks = tile_h.id, chunk_count[0]
        kk = tile_kk.index
        bias = hl.zeros([tile_kk], dtype=torch.float32)
        if has_bias:
            bias = hl.load(dt_bias, [hv * K + kk]).float()
        bias = _row(bias)
        a = torch.exp(hl.load(a_log, [hv]).float())
        for tile_s in hl.tile((chunks - tile_p.id + P - 1) // P, block_size=1):
            m = tile_p.id + tile_s.id * P
            start = spans[m, 0] + hl.zeros([1], dtype=torch.int64)  # [1]: _gate_chunk broadcasts rows by it
            end = spans[m, 1]
            rows0 = start * HV + hv
            length = (end - start).to(torch.int32)  # (int32: one compare a row)
            _gate_chunk(g_rows, gcum_rows, rows0, length, kk, bias, a, lower_bound, gate_mode, has_bias, HV)
    return gcum_rows


# --------------------------------------------------------------------------------------------------------
# 2. intra-chunk: L and Aqk by 16-row blocks;  solve: Tinv = (I+L)^-1;  recompute: U, qg, kg, W, decay
# --------------------------------------------------------------------------------------------------------


# exp2 as the one instruction tl.exp2 lowers to (ex2.approx.ftz.f32), but opaque to Triton's layout pass:
# that pass computes a pure op again in every layout a consumer wants, and intra's [16, K slice] factors
# feed both a dot operand and a blocked layout (as a pure op: 176 exp2 a thread a K step instead of 96)
_EXP2_ONCE = (
    'tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [tl.clamp({0}, -126.0, 126.0)], '
    "dtype=tl.float32, is_pure=False, pack=1)"
)


def _exp2c(x: torch.Tensor) -> torch.Tensor:
    # clamped so exp2 stays finite in fp32 (see the numerical limit in the module docstring). Triton's
    # clamp is one min/max pair; torch.clamp lowers to NaN-propagating compares and selects, a third of
    # intra's instructions per K slice. The two differ only on NaN input.
    return hl.inline_triton(_EXP2_ONCE, args=(x,), output_like=x)


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


def _load_beta(beta_rows, row, valid, beta_is_raw):
    """beta of the given token rows (the sigmoid of raw logits when beta_is_raw), zero where not valid."""
    beta = hl.load(beta_rows, [row], extra_mask=valid).float()
    if beta_is_raw:
        beta = torch.sigmoid(beta)
    return torch.where(valid, beta, 0.0)


def _column(x: torch.Tensor) -> torch.Tensor:
    # x[:, None] as the kernel body writes it: a helper's own indexing is traced by torch, which cannot
    # slice a tile-sized tensor and would emit other code
    return hl.subscript(x, [slice(None), None])


def _row(x: torch.Tensor) -> torch.Tensor:
    # x[None, :] (see _column)
    return hl.subscript(x, [None, slice(None)])


def _load_block_i(q_rows, k_rows, gcum_rows, tok_i, m_i, row_i, col0, cols):
    """k and q (fp32) and the log2 gate cumsum of row block i's tokens in the K slice `cols` (q/k head
    columns from col0); rows past the chunk's end load as zeros."""
    ki = hl.load(k_rows, [_column(tok_i), col0 + _row(cols)], extra_mask=_column(m_i)).float()
    qi = hl.load(q_rows, [_column(tok_i), col0 + _row(cols)], extra_mask=_column(m_i)).float()
    gi = hl.load(gcum_rows, [_column(row_i), _row(cols)], extra_mask=_column(m_i))
    return ki, qi, gi


def _off_block_step(
    k_rows, gcum_rows, tok_j, m_j, row_j, col0, cols, g_first, a_k, a_q, off_kk, off_qk, ssq_j
):
    """One K slice of the block left of the diagonal whose rows are tok_j: a_k / a_q are block i's k and q
    slices decayed to its first row (bf16); the block's k is decayed from that row back (both factors
    <= 1)."""
    kj = hl.load(k_rows, [_column(tok_j), col0 + _row(cols)], extra_mask=_column(m_j)).float()
    gj = hl.load(gcum_rows, [_column(row_j), _row(cols)], extra_mask=_column(m_j))
    kr = (kj * _exp2c(g_first - gj)).to(torch.bfloat16).T
    off_kk = off_kk + _dot32(a_k, kr)
    off_qk = off_qk + _dot32(a_q, kr)
    ssq_j = ssq_j + (kj * kj).sum(1)
    return off_kk, off_qk, ssq_j


def _inverse_norm(ssq, rows, use_l2norm):
    """1 / ||x|| of each row from its sum of squares (eps 1e-6 inside the root, as SGLang's l2norm), or
    ones where the L2 norm is off."""
    if use_l2norm:
        return torch.rsqrt(ssq + 1e-6)
    return torch.where(rows, 1.0, 1.0)


def _store_off_block(akk_rows, aqk_rows, row_i, m_i, b_i, rk_i, rq_i, m_j, cols_j, off_kk, off_qk, ssq_j,
                     scale, use_l2norm):  # fmt: skip
    """Block (i, j < i) of L and Aqk from its K sums, normalised and stored."""
    rk_j = _inverse_norm(ssq_j, m_j, use_l2norm)
    off_kk = off_kk * _column(rk_i) * _row(rk_j)
    off_qk = off_qk * _column(rq_i) * _row(rk_j)
    l_off = torch.where(_column(m_i), off_kk * _column(b_i), 0.0)
    hl.store(akk_rows, [_column(row_i), _row(cols_j)], l_off, extra_mask=_column(m_i))
    hl.store(
        aqk_rows, [_column(row_i), _row(cols_j)], (off_qk * scale).to(aqk_rows.dtype), extra_mask=_column(m_i)
    )


def _intra_chunk_fn(
    q_rows: torch.Tensor,  # [T, H*K] token rows (any row stride)
    k_rows: torch.Tensor,  # [T, H*K]
    gcum_rows: torch.Tensor,  # [T*HV, K] fp32 log2 cumsum
    beta_rows: torch.Tensor,  # [T*HV]
    rnorm_q: torch.Tensor,  # [T*HV] fp32 out: 1/||q|| per token and value head (ones without the L2 norm)
    rnorm_k: torch.Tensor,  # [T*HV] fp32 out: 1/||k||
    spans: torch.Tensor,  # [M, 2] int64
    chunk_count: torch.Tensor,  # [1] int64: the batch's real chunks (device data)
    lanes: torch.Tensor,  # [P]: its size is the number of chunk lanes (values unused)
    akk_rows: torch.Tensor,  # [T*HV, 64] fp32 out: L (beta-scaled, strictly lower; blocks above not written)
    aqk_rows: torch.Tensor,  # [T*HV, 64] bf16 out: scaled causal Aqk, zeros above the diagonal
    scale: float,
    use_l2norm: hl.constexpr,
    beta_is_raw: hl.constexpr,
    HV: hl.constexpr,
    GROUP: hl.constexpr,
) -> torch.Tensor:
    """One program per (chunk, value head, 16-row block i): row block i of L and of Aqk.

    The L2 norms are row scalings, applied to the dot results: the sums of squares come from the same
    K slices the dots read, and block i's inverse norms are stored for the recompute kernel.

    Small programs (a [16, block_k] slice of q, k and the gate at a time) keep registers low, so many run
    per SM. One K loop: each slice of block i's q, k and gate is loaded and decayed once and feeds the
    diagonal block and the (up to three) j < i blocks, each j a static block behind a runtime guard, so no
    program computes blocks it does not need. The diagonal block is formed factorised in that loop; the
    extreme-decay form replaces it after the loop only when the anchor rows' spread calls for it."""
    P = lanes.size(0)
    K = hl.specialize(gcum_rows.size(1))
    hl.specialize((q_rows.stride(0), k_rows.stride(0), gcum_rows.stride(0)))
    block_k = hl.register_block_size(16, K)
    for tile_p, tile_h, tile_i in hl.tile([P, HV, 4], block_size=[1, 1, 1]):
        # (names used inside the lane loop are bound before it: Helion hoists their index arithmetic)
        hv = tile_h.id
        col0 = (hv // GROUP) * K  # q/k head columns within a token row
        chunks = chunk_count[0]
        for tile_s in hl.tile((chunks - tile_p.id + P - 1) // P, block_size=1):
            m = tile_p.id + tile_s.id * P
            start = spans[m, 0]
            end = spans[m, 1]
            # row blocks past the chunk's end (a short last chunk) do nothing
            if start + tile_i.id * 16 < end:
                lane = hl.arange(16)
                tok_i = start + tile_i.id * 16 + lane
                m_i = tok_i < end
                row_i = tok_i * HV + hv
                b_i = _load_beta(beta_rows, row_i, m_i, beta_is_raw)
                # anchor rows, clamped to the chunk's last row
                mid_row = torch.clamp(torch.minimum(start + tile_i.id * 16 + 8, end - 1), min=0) * HV + hv
                first_row = torch.clamp(torch.minimum(start + tile_i.id * 16, end - 1), min=0) * HV + hv

                last_row = torch.clamp(torch.minimum(start + tile_i.id * 16 + 15, end - 1), min=0) * HV + hv

                # One K loop. Diagonal block: factorised around its middle row, as two tensor-core dots;
                # valid while every exponent of the two factors stays within +-FACTOR_SPAN log2 units (no
                # factor or product overflows fp32), which the anchor rows' spread, taken in the same loop,
                # tells. Blocks j < i: factorised around the first row of block i, both factors <= 1, from
                # the same slices.
                acc_kk = hl.zeros([16, 16], dtype=torch.float32)
                acc_qk = hl.zeros([16, 16], dtype=torch.float32)
                ssq_k = hl.zeros([16], dtype=torch.float32)
                ssq_q = hl.zeros([16], dtype=torch.float32)
                spread = hl.zeros([block_k], dtype=torch.float32)
                off_kk0 = hl.zeros([16, 16], dtype=torch.float32)
                off_qk0 = hl.zeros([16, 16], dtype=torch.float32)
                ssq_j0 = hl.zeros([16], dtype=torch.float32)
                off_kk1 = hl.zeros([16, 16], dtype=torch.float32)
                off_qk1 = hl.zeros([16, 16], dtype=torch.float32)
                ssq_j1 = hl.zeros([16], dtype=torch.float32)
                off_kk2 = hl.zeros([16, 16], dtype=torch.float32)
                off_qk2 = hl.zeros([16, 16], dtype=torch.float32)
                ssq_j2 = hl.zeros([16], dtype=torch.float32)
                # rows of blocks 0..2 (a block j < i lies wholly inside the chunk)
                tok_j0 = start + lane
                tok_j1 = start + 16 + lane
                tok_j2 = start + 32 + lane
                m_j0 = tok_j0 < end
                m_j1 = tok_j1 < end
                m_j2 = tok_j2 < end
                row_j0 = tok_j0 * HV + hv
                row_j1 = tok_j1 * HV + hv
                row_j2 = tok_j2 * HV + hv
                for tile_k in hl.tile(K, block_size=block_k):
                    cols = tile_k.index
                    ki, qi, gi = _load_block_i(q_rows, k_rows, gcum_rows, tok_i, m_i, row_i, col0, cols)
                    top = hl.load(gcum_rows, [first_row, cols])
                    centre = hl.load(gcum_rows, [mid_row, cols])
                    bottom = hl.load(gcum_rows, [last_row, cols])
                    spread = torch.maximum(spread, torch.maximum(top - centre, centre - bottom))
                    g_mid = centre[None, :]
                    up = _exp2c(gi - g_mid)
                    kd = (ki * _exp2c(g_mid - gi)).T
                    acc_kk = acc_kk + _dot32(ki * up, kd)
                    acc_qk = acc_qk + _dot32(qi * up, kd)
                    ssq_k = ssq_k + (ki * ki).sum(1)
                    ssq_q = ssq_q + (qi * qi).sum(1)
                    if tile_i.id > 0:
                        g_first = top[None, :]
                        left = _exp2c(gi - g_first)
                        a_k = (ki * left).to(torch.bfloat16)
                        a_q = (qi * left).to(torch.bfloat16)
                        off_kk0, off_qk0, ssq_j0 = _off_block_step(
                            k_rows, gcum_rows, tok_j0, m_j0, row_j0, col0, cols, g_first, a_k, a_q,
                            off_kk0, off_qk0, ssq_j0,
                        )  # fmt: skip
                        if tile_i.id > 1:
                            off_kk1, off_qk1, ssq_j1 = _off_block_step(
                                k_rows, gcum_rows, tok_j1, m_j1, row_j1, col0, cols, g_first, a_k, a_q,
                                off_kk1, off_qk1, ssq_j1,
                            )  # fmt: skip
                            if tile_i.id > 2:
                                off_kk2, off_qk2, ssq_j2 = _off_block_step(
                                    k_rows, gcum_rows, tok_j2, m_j2, row_j2, col0, cols, g_first, a_k, a_q,
                                    off_kk2, off_qk2, ssq_j2,
                                )  # fmt: skip
                # Extreme decay (e.g. a softplus gate with a large A_log): the diagonal block again, column by
                # column with each exp2(g_i - g_j) <= 1 formed directly (the factorised sums are dropped)
                if torch.amax(spread, 0) > 120.0:
                    acc_kk = hl.zeros([16, 16], dtype=torch.float32)
                    acc_qk = hl.zeros([16, 16], dtype=torch.float32)
                    for tile_k in hl.tile(K, block_size=block_k):
                        cols = tile_k.index
                        ki, qi, gi = _load_block_i(q_rows, k_rows, gcum_rows, tok_i, m_i, row_i, col0, cols)
                        for tile_c in hl.tile(16, block_size=1):
                            # column c of the block is its row c (taken from the registers)
                            row_c = lane[:, None] == tile_c.id
                            kc = torch.where(row_c, ki, 0.0).sum(0)
                            gc = torch.where(row_c, gi, 0.0).sum(0)
                            # rows at or below column c decay (<= 1); the rows above are masked below
                            e = torch.exp2(torch.clamp(gi - gc[None, :], max=0.0)) * kc[None, :]
                            pick = lane[None, :] == tile_c.id
                            acc_kk = acc_kk + torch.where(pick, (ki * e).sum(1)[:, None], 0.0)
                            acc_qk = acc_qk + torch.where(pick, (qi * e).sum(1)[:, None], 0.0)
                rk_i = _inverse_norm(ssq_k, m_i, use_l2norm)
                rq_i = _inverse_norm(ssq_q, m_i, use_l2norm)
                hl.store(rnorm_k, [row_i], rk_i, extra_mask=m_i)
                hl.store(rnorm_q, [row_i], rq_i, extra_mask=m_i)
                acc_kk = acc_kk * rk_i[:, None] * rk_i[None, :]
                acc_qk = acc_qk * rq_i[:, None] * rk_i[None, :]
                strict = lane[:, None] > lane[None, :]
                causal = lane[:, None] >= lane[None, :]
                diag_cols = tile_i.id * 16 + lane
                l_diag = torch.where(strict & m_i[:, None], acc_kk * b_i[:, None], 0.0)
                hl.store(akk_rows, [row_i[:, None], diag_cols[None, :]], l_diag, extra_mask=m_i[:, None])
                a_diag = torch.where(causal, acc_qk * scale, 0.0).to(aqk_rows.dtype)
                hl.store(aqk_rows, [row_i[:, None], diag_cols[None, :]], a_diag, extra_mask=m_i[:, None])
                # Aqk rows are read whole by the state pass: zeros right of the diagonal block
                for tile_z in hl.tile(tile_i.id * 16 + 16, 64, block_size=16):
                    zeros = hl.zeros([16, 16], dtype=aqk_rows.dtype)
                    hl.store(
                        aqk_rows,
                        [row_i[:, None], (tile_z.begin + lane)[None, :]],
                        zeros,
                        extra_mask=m_i[:, None],
                    )
                if tile_i.id > 0:
                    _store_off_block(akk_rows, aqk_rows, row_i, m_i, b_i, rk_i, rq_i, m_j0, lane,
                                     off_kk0, off_qk0, ssq_j0, scale, use_l2norm)  # fmt: skip
                if tile_i.id > 1:
                    _store_off_block(akk_rows, aqk_rows, row_i, m_i, b_i, rk_i, rq_i, m_j1, 16 + lane,
                                     off_kk1, off_qk1, ssq_j1, scale, use_l2norm)  # fmt: skip
                if tile_i.id > 2:
                    _store_off_block(akk_rows, aqk_rows, row_i, m_i, b_i, rk_i, rq_i, m_j2, 32 + lane,
                                     off_kk2, off_qk2, ssq_j2, scale, use_l2norm)  # fmt: skip
    return aqk_rows


def _invert_rows(akk_rows, tinv_rows, start, end, hv, HV):
    """Tinv = (I + L)^-1 of one chunk, row block by row block (a plain Python helper: its loops unroll).

    Tinv[i,i] = (I + L[i,i])^-1 by the nilpotent product;
    Tinv[i,j] = -Tinv[i,i] sum_{j<=m<i} L[i,m] Tinv[m,j]."""
    lane = hl.arange(16)
    zero = hl.zeros([16, 16], dtype=torch.float32)
    inv = {}
    for i in range(4):
        tok = start + i * 16 + lane
        mask = tok < end
        row = tok * HV + hv
        blocks = [
            hl.load(akk_rows, [row[:, None], (j * 16 + lane)[None, :]], extra_mask=mask[:, None])
            for j in range(i + 1)
        ]
        inv[(i, i)] = _invert_unit_lower_16(blocks[i])
        for j in range(i - 1, -1, -1):
            acc = _dot32(blocks[j], inv[(j, j)])
            for m in range(j + 1, i):
                acc = acc + _dot32(blocks[m], inv[(m, j)])
            inv[(i, j)] = -_dot32(inv[(i, i)], acc)
        for j in range(4):
            val = inv[(i, j)] if j <= i else zero
            hl.store(tinv_rows, [row[:, None], (j * 16 + lane)[None, :]], val.to(tinv_rows.dtype),
                     extra_mask=mask[:, None])  # fmt: skip


def _solve_fn(
    akk_rows: torch.Tensor,  # [T*HV, 64] fp32: L (strictly lower blocks)
    spans: torch.Tensor,  # [M, 2] int64
    chunk_count: torch.Tensor,  # [1] int64: the batch's real chunks (device data)
    lanes: torch.Tensor,  # [P]: its size is the number of chunk lanes (values unused)
    tinv_rows: torch.Tensor,  # [T*HV, 64] bf16 out: (I + L)^-1, zeros above the diagonal
    HV: hl.constexpr,
) -> torch.Tensor:
    """One program per (chunk, value head): Tinv = (I + L)^-1 (see `_invert_rows`)."""
    P = lanes.size(0)
    for tile_p, tile_h in hl.tile([P, HV], block_size=[1, 1]):
        hv, chunks = tile_h.id, chunk_count[0]
        for tile_s in hl.tile((chunks - tile_p.id + P - 1) // P, block_size=1):
            m = tile_p.id + tile_s.id * P
            _invert_rows(akk_rows, tinv_rows, spans[m, 0], spans[m, 1], hv, HV)
    return tinv_rows


def _chunk_slots(spans, tile_p, tile_s, P, hv, HV):
    """The chunk m that lane `tile_p` takes on its step `tile_s` (lane p takes chunks p, p + P, ...), its
    token span [start, end) and its 64 token slots: token, whether it is in the chunk, and its row in the
    per-(token, value head) layouts."""
    m = tile_p.id + tile_s.id * P
    start = hl.load(spans, [m, 0])
    end = hl.load(spans, [m, 1])
    token = start + hl.arange(64)
    valid = token < end
    row = token * HV + hv
    return m, start, end, token, valid, row


def _load_tinv_beta(tinv_rows, beta_rows, row, valid, beta_is_raw):
    """The chunk's Tinv rows and beta: the left factor both W and U are built with."""
    tinv = hl.load(tinv_rows, [_column(row), _row(hl.arange(64))], extra_mask=_column(valid))
    beta = _load_beta(beta_rows, row, valid, beta_is_raw)
    return tinv, beta


def _column_masks(valid, cols, K: int, V: int):
    """Masks of a column tile that runs to max(K, V): (value columns, key columns, key columns alone). With
    K == V (the served models) the columns need none."""
    if K == V:
        return _column(valid), _column(valid), None
    return _column(valid) & _row(cols < V), _column(valid) & _row(cols < K), cols < K


def _recompute_fn(
    q_rows: torch.Tensor,  # [T, H*K]
    k_rows: torch.Tensor,  # [T, H*K]
    v_rows: torch.Tensor,  # [T, HV*V] in: v, out: U
    gcum_rows: torch.Tensor,  # [T*HV, K] fp32
    beta_rows: torch.Tensor,  # [T*HV]
    rnorm_q: torch.Tensor,  # [T*HV] fp32
    rnorm_k: torch.Tensor,  # [T*HV] fp32
    spans: torch.Tensor,  # [M, 2] int64
    chunk_count: torch.Tensor,  # [1] int64: the batch's real chunks (device data)
    lanes: torch.Tensor,  # [P]: its size is the number of chunk lanes (values unused)
    tinv_rows: torch.Tensor,  # [T*HV, 64] bf16
    w_rows: torch.Tensor,  # [T*HV, K] out: Tinv diag(beta) (k exp Gamma)
    kg_rows: torch.Tensor,  # [T*HV, K] out: k exp(Gamma_last - Gamma)
    qg_rows: torch.Tensor,  # [T*HV, K] out: scale q exp Gamma
    decay_rows: torch.Tensor,  # [M*HV, K] fp32 out: exp2(Gamma_last)
    scale: float,
    beta_is_raw: hl.constexpr,
    HV: hl.constexpr,
    GROUP: hl.constexpr,
) -> torch.Tensor:
    """One program per (chunk, value head, column tile c): U = Tinv diag(beta) v for the value columns c
    (written over v, read first), then qg, kg, W and the chunk decay for the key columns c, from one load of
    Tinv and beta.

    Each output is stored before the next one's operands load (U, qg, kg, W), so only one phase's tiles are
    live at a time besides Tinv: 127 registers a thread at 64-wide tiles and 4 warps, three programs an SM
    (with W, kg and qg live together a program needs 191, two an SM). Columns run to max(K, V); where K != V
    those past K or V are masked (`_column_masks`)."""
    P = lanes.size(0)
    K = hl.specialize(gcum_rows.size(1))
    V = hl.specialize(v_rows.size(1)) // HV
    hl.specialize((q_rows.stride(0), k_rows.stride(0), gcum_rows.stride(0), v_rows.stride(0)))
    block_c = hl.register_block_size(16, max(K, V))
    for tile_p, tile_h, tile_c in hl.tile([P, HV, max(K, V)], block_size=[1, 1, block_c]):
        hv, chunks = tile_h.id, chunk_count[0]
        for tile_s in hl.tile((chunks - tile_p.id + P - 1) // P, block_size=1):
            m, start, end, token, valid, row = _chunk_slots(spans, tile_p, tile_s, P, hv, HV)
            cols = tile_c.index
            in_v, in_k, col_in_k = _column_masks(valid, cols, K, V)
            tinv, beta = _load_tinv_beta(tinv_rows, beta_rows, row, valid, beta_is_raw)
            v_cols = hv * V + cols
            vt = hl.load(v_rows, [token[:, None], v_cols[None, :]], extra_mask=in_v).float()
            u = _dot32(tinv, (vt * beta[:, None]).to(torch.bfloat16))
            hl.store(v_rows, [token[:, None], v_cols[None, :]], u.to(v_rows.dtype), extra_mask=in_v)
            qk_cols = (hv // GROUP) * K + cols
            # last row of the chunk (padding chunks: any in-bounds row; nothing of theirs is stored but decay)
            last = torch.clamp(torch.minimum(start + 63, end - 1), min=0)
            g_last = hl.load(gcum_rows, [last * HV + hv, cols], extra_mask=col_in_k)
            decay = torch.exp2(torch.clamp(g_last, max=0.0))
            hl.store(decay_rows, [m * HV + hv, cols], decay, extra_mask=col_in_k)
            gam = hl.load(gcum_rows, [row[:, None], cols[None, :]], extra_mask=in_k)
            eg = torch.exp2(torch.clamp(gam, max=0.0))
            rq = hl.load(rnorm_q, [row], extra_mask=valid)
            q = hl.load(q_rows, [token[:, None], qk_cols[None, :]], extra_mask=in_k).float()
            hl.store(qg_rows, [row[:, None], cols[None, :]], (q * rq[:, None] * eg * scale).to(qg_rows.dtype),
                     extra_mask=in_k)  # fmt: skip
            rk = hl.load(rnorm_k, [row], extra_mask=valid)
            k = hl.load(k_rows, [token[:, None], qk_cols[None, :]], extra_mask=in_k).float() * rk[:, None]
            kg = k * torch.exp2(torch.clamp(g_last[None, :] - gam, max=0.0))
            hl.store(kg_rows, [row[:, None], cols[None, :]], kg.to(kg_rows.dtype), extra_mask=in_k)
            kb = (k * eg * beta[:, None]).to(torch.bfloat16)
            hl.store(
                w_rows, [row[:, None], cols[None, :]], _dot32(tinv, kb).to(w_rows.dtype), extra_mask=in_k
            )
    return w_rows


# --------------------------------------------------------------------------------------------------------
# 3. sequential state pass (optionally with the output fused in)
# --------------------------------------------------------------------------------------------------------


def _state_pass_fn(
    w_rows: torch.Tensor,  # [T*HV, K] bf16
    u_rows: torch.Tensor,  # [T, HV*V] (v's storage) in: U
    o_rows: torch.Tensor,  # [T, HV*V] out: o (v's storage again, or the caller's output buffer)
    kg_rows: torch.Tensor,  # [T*HV, K] bf16
    qg_rows: torch.Tensor,  # [T*HV, K] bf16
    aqk_rows: torch.Tensor,  # [T*HV, 64] bf16
    decay_flat: torch.Tensor,  # [M*HV*K] fp32
    pool_rows: torch.Tensor,  # [slots*HV*V, K] fp32 or bf16, updated in place
    pool_index: torch.Tensor,  # [N]
    cu_seqlens: torch.Tensor,  # [N+1]
    chunk_ends: torch.Tensor,  # [N]
    track_rows: torch.Tensor,  # [N*HV*V, K] fp32 out (track_to 1)
    track_chunk: torch.Tensor,  # [N]
    track_mode: torch.Tensor,  # [N] (track_to 2): 0 untracked, 1 the final state, 2 the state at track_chunk
    track_dst: torch.Tensor,  # [N] (track_to 2): the pool slot the tracked state goes to
    lanes: torch.Tensor,  # [P]: its size is the number of sequence lanes (values unused)
    seq_count: torch.Tensor,  # [1] int64: sequences up to the last non-empty one (device data)
    count_range: torch.Tensor,  # [2] int64: this launch runs the batch only if lo <= seq_count <= hi
    track_to: hl.constexpr,  # 0: no tracking; 1: snapshots into track_rows; 2: into the pool's track slots
    HV: hl.constexpr,
) -> torch.Tensor:
    K = hl.specialize(w_rows.size(1))
    V = hl.specialize(u_rows.size(1)) // HV
    N = pool_index.size(0)
    P = lanes.size(0)
    block_v = hl.register_block_size(16, V)
    hl.specialize((w_rows.stride(0), u_rows.stride(0), o_rows.stride(0), pool_rows.stride(0)))
    # the operands' row strides as constants: w and qg share their staged loads' offsets
    hl.specialize((kg_rows.stride(0), qg_rows.stride(0), aqk_rows.stride(0)))
    # One program per (lane, value head, V tile); lane p runs sequences p, p + P, ... up to seq_count. A
    # CUDA graph's tables hold many empty sequence slots past the batch: no program is spent on them. The
    # tile width suited to a batch depends on its sequence count, which is device data: chunk_kda launches
    # one width per count range and the launches outside the batch's range run no sequence.
    for tile_p, tile_h, tile_v in hl.tile([P, HV, V], block_size=[1, 1, block_v]):
        hv, count = tile_h.id, seq_count[0]
        count = torch.where((count >= count_range[0]) & (count <= count_range[1]), count, 0)
        for tile_s in hl.tile((count - tile_p.id + P - 1) // P, block_size=1):
            n = tile_p.id + tile_s.id * P
            begin = cu_seqlens[n].long()
            end = cu_seqlens[n + 1].long()
            # chunk_ends[n - 1] (0 for n = 0): the load wraps to a valid index, the multiply zeroes it
            first_chunk = chunk_ends[(n + N - 1) % N] * min(n, 1)
            slot = pool_index[n].long()
            has_slot = slot >= 0
            kk = hl.arange(K)
            # The state is kept K-first ([K, BV], the transpose of the pool's [V, K] rows) so that all four
            # products of a step are M >= 64 tensor-core dots with no register transposes.
            state_row = (torch.clamp(slot, min=0) * HV + hv) * V + tile_v.index
            state = hl.load(pool_rows, [state_row[None, :], kk[:, None]], extra_mask=has_slot).float()
            if track_to:
                # the state at the start of chunk track_at, kept in registers and stored after the loop (the
                # only state stores are the final ones: a per-chunk state store inside this loop gave wrong
                # values on the H200)
                track_at = track_chunk[n].long()
                tracked = hl.zeros([K, tile_v], dtype=torch.float32)
            # The operands of a step are loaded at its top and feed its dots; with num_stages 3 Triton's
            # pipeliner stages them through shared memory (cp.async) ahead of use.
            cols64 = hl.arange(64)
            # A chunk's decay is loaded one step ahead: Triton does not stage this small load, and loaded in
            # its own step it would hold the state update for a global round trip.
            decay_next = hl.load(decay_flat, [(first_chunk * HV + hv) * K + kk], extra_mask=end > begin)
            last = end - 1
            for tile_t in hl.tile(end - begin, block_size=64):
                chunk = first_chunk + tile_t.id
                decay = decay_next
                has_next = begin + (tile_t.id + 1) * 64 < end
                decay_next = hl.load(decay_flat, [((chunk + 1) * HV + hv) * K + kk], extra_mask=has_next)
                token = begin + tile_t.index
                valid = token < end
                # The operand rows past the sequence's end are clamped to its last token rather than masked:
                # no per-row predicates on the staged loads. What those rows feed is dropped: v_new's rows
                # past the end are zeroed before kg^T @ v_new (the clamped kg columns meet zeros), and the
                # output rows past the end are not stored.
                clamped = torch.minimum(token, last)
                row = clamped * HV + hv
                w = hl.load(w_rows, [row[:, None], kk[None, :]])
                kg_t = hl.load(kg_rows, [row[None, :], kk[:, None]])
                qg = hl.load(qg_rows, [row[:, None], kk[None, :]])
                aqk = hl.load(aqk_rows, [row[:, None], cols64[None, :]])
                if track_to:
                    tracked = torch.where(tile_t.id == track_at, state, tracked)
                state_b = state.to(torch.bfloat16)
                v_cols = hv * V + tile_v.index
                u = hl.load(u_rows, [clamped[:, None], v_cols[None, :]]).float()
                v_new = torch.where(valid[:, None], u - _dot32(w, state_b), 0.0).to(torch.bfloat16)
                # the chain's two dots back to back and the output's after them: qg S in between would hold
                # up the state update, and here the decay's layout conversion shares v_new's barrier
                state = state * decay[:, None] + _dot32(kg_t, v_new)
                o = _dot32(qg, state_b) + _dot32(aqk, v_new)
                hl.store(o_rows, [token[:, None], v_cols[None, :]], o.to(o_rows.dtype),
                         extra_mask=valid[:, None])  # fmt: skip
            hl.store(pool_rows, [state_row[None, :], kk[:, None]], state.to(pool_rows.dtype),
                     extra_mask=has_slot)  # fmt: skip
            if track_to:
                written = (track_at >= 0) & (track_at * 64 < end - begin)
                if track_to == 1:
                    t_row = (n * HV + hv) * V + tile_v.index
                    hl.store(track_rows, [t_row[None, :], kk[:, None]], tracked, extra_mask=written)
                else:
                    # SGLang's radix-cache track slot, written here rather than copied by a kernel of its own
                    # after this one: the final state (mode 1) or the tracked chunk's (mode 2)
                    mode = track_mode[n]
                    snapshot = torch.where(mode == 1, state, tracked).to(pool_rows.dtype)
                    d_row = (torch.clamp(track_dst[n].long(), min=0) * HV + hv) * V + tile_v.index
                    hl.store(pool_rows, [d_row[None, :], kk[:, None]], snapshot,
                             extra_mask=(mode == 1) | ((mode == 2) & written))  # fmt: skip
    return pool_rows


# --------------------------------------------------------------------------------------------------------
# configs and the entry point
# --------------------------------------------------------------------------------------------------------

# Module defaults (no runtime autotuning). Small programs with few warps: the intra-chunk work is many 16-row
# and 64-row dots, and a program that holds little runs many to an SM (8-warp versions of these kernels
# used 255 registers a thread, one program per SM, and were latency-bound: 250 and 191 us at 1x4096).
# Warps and tiles: the H200 sweeps in measurements/kernels-tuning/h200_prefill_sweep.json. The state pass's
# V tile is chosen at run time per sequence count (state_plan: one launch per count range); 4 warps,
# not 8: 103 against 135 us at 1x4096, 16 heads (measurements/kernels-tuning/h200-2026-12-04-state).
# At run time, per kernel: a config set by configure() / KDAKIT_PREFILL_CONFIGS wins, else the tuned config
# shipped for the GPU's SKU and bucket (`prefill-<kernel>` files, kdakit.kernels.tuned), else these.
DEFAULT_CONFIGS: dict[str, dict] = {
    # block_sizes in trace order
    "gate": {"block_sizes": [64], "num_warps": 1, "num_stages": 1, "indexing": "pointer"},  # [K]
    "intra": {"block_sizes": [32], "num_warps": 1, "num_stages": 2, "indexing": "pointer"},  # [K slice]
    "solve": {"block_sizes": [], "num_warps": 2, "num_stages": 1, "indexing": "pointer"},
    "recompute": {"block_sizes": [64], "num_warps": 4, "num_stages": 2, "indexing": "pointer"},  # [K, V tile]
    "state": {"block_sizes": [16], "num_warps": 4, "num_stages": 3, "indexing": "pointer"},  # [V tile]
}

# Kernels `kdakit kernels autotune` does not hand to Helion's search, with the configs it times beside the
# module default instead. Some candidate of the state pass's search stops with an illegal memory access on
# the H200 at every bucket (triton 3.6), taking the process's CUDA context and the bucket with it; Helion
# cannot isolate it in a subprocess because the kernel writes its inputs. These ran on the H200 and matched
# the default's outputs bit for bit (measurements/kernels-tuning/h200-2026-12-04-state).
UNSEARCHED_CANDIDATES: dict[str, list[dict]] = {
    "state": [
        {"block_sizes": [16], "num_warps": 4, "num_stages": 4, "indexing": "pointer"},
        {"block_sizes": [32], "num_warps": 4, "num_stages": 3, "indexing": "pointer"},
        {"block_sizes": [64], "num_warps": 4, "num_stages": 2, "indexing": "pointer"},
        {"block_sizes": [16], "num_warps": 8, "num_stages": 3, "indexing": "pointer"},
    ]
}

# Configs `kdakit kernels autotune` seeds into Helion's search of a kernel and times beside its result, so
# that they are measured even where the search ends before reaching them. The grid's order: by default the
# chunk lane varies fastest, so the programs that read the same chunk rows (intra's four row blocks,
# recompute's column tiles) start P x HV programs apart; these orders start them side by side (a
# loop_orders entry lists the grid's dims fastest first: chunk lane 0, value head 1, block or tile 2).
SEARCH_SEEDS: dict[str, list[dict]] = {
    name: [{**DEFAULT_CONFIGS[name], "loop_orders": [order]} for order in orders]
    for name, orders in {
        "intra": ([1, 2, 0], [2, 1, 0], [2, 0, 1]),
        "recompute": ([1, 2, 0], [2, 1, 0]),
    }.items()
}

_FNS = {
    "gate": _gate_cumsum_fn,
    "intra": _intra_chunk_fn,
    "solve": _solve_fn,
    "recompute": _recompute_fn,
    "state": _state_pass_fn,
}
_kernels: dict[str, helion.Kernel] = {}  # the configured (explicit or default) kernel of each name
_TUNED_NAMES = {short: name for name, short in tuned.PREFILL_KERNELS.items()}


_built: dict[str, tuple] = {}
_explicit: set[str] = set()  # names set by configure(): they win over tuned configs
_by_config: dict[tuple, helion.Kernel] = {}  # (name, config signature) -> kernel, shared by buckets
_for_bucket: dict[tuple, dict[str, helion.Kernel]] = {}  # (tuned generation, mode, bucket) -> kernels


def _signature(cfg: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in cfg.items()))


def _kernel(name: str, cfg: dict) -> helion.Kernel:
    """The kernel of `name` under `cfg` (one object per distinct config: compiled once)."""
    key = (name, _signature(cfg))
    if key not in _by_config:
        _by_config[key] = helion.kernel(
            _FNS[name],
            static_shapes=False,
            config=helion.Config(**cfg),
            key=_size_one_key,
            ignore_warnings=_IGNORED,
        )
    return _by_config[key]


_widen_state = True  # see _state_launches


def configure(configs: dict[str, dict] | None = None, widen_state: bool = True) -> None:
    """Set the kernels' configs explicitly (they win over shipped tuned configs; missing names go back to
    tuned-or-default selection); for tuning. widen_state=False keeps the state pass's V tile as configured
    (no widening by program count).

    Only kernels whose config changed are rebuilt (a rebuild means a new trace and compile)."""
    global _widen_state
    _widen_state = widen_state
    merged = {name: dict(cfg) for name, cfg in DEFAULT_CONFIGS.items()}
    for name, cfg in (configs or {}).items():
        if name not in merged:
            raise ValueError(f"unknown prefill kernel {name!r}; known: {sorted(merged)}")
        merged[name] = dict(cfg)
    _explicit.clear()
    _explicit.update(configs or {})
    _for_bucket.clear()
    for name in _FNS:
        signature = _signature(merged[name])
        if _built.get(name) == signature:
            continue
        _kernels[name] = _kernel(name, merged[name])
        _built[name] = signature


configure()


def reset() -> None:
    """Fresh kernel objects (drops every compiled specialization), as in a new process."""
    _built.clear()
    _by_config.clear()
    _fewer_stages.clear()
    _state_plans.clear()
    configure({})


def _kernels_for(bucket: tuned.Bucket | None, device) -> dict[str, helion.Kernel]:
    """The five kernels for this call: explicit configs, else the shipped tuned ones for the GPU's SKU and
    bucket, else the defaults (one KernelConfigWarning per bucket, from tuned.select_group). Cached per
    bucket: after the first call of a bucket this is one dict lookup (no file access, no host sync)."""
    if bucket is None:  # a pool dtype tuned files do not describe: configured kernels
        return _kernels
    key = (tuned.generation(), tuned.mode(), bucket)
    kernels = _for_bucket.get(key)
    if kernels is None:
        defaults = {
            _TUNED_NAMES[name]: helion.Config(**DEFAULT_CONFIGS[name])
            for name in _FNS
            if name not in _explicit
        }
        chosen = tuned.select_group("prefill", defaults, bucket, device) if defaults else {}
        kernels = dict(_kernels)
        for name in _FNS:
            if name in _explicit:
                tuned.note_explicit(_TUNED_NAMES[name], bucket, None)
                continue
            cfg = dict(chosen[_TUNED_NAMES[name]])
            if _signature(cfg) != _signature(DEFAULT_CONFIGS[name]):
                kernels[name] = _kernel(name, cfg)
        _for_bucket[key] = kernels
    return kernels


def _bucket(total: int, H: int, HV: int, K: int, V: int, pool_dtype: torch.dtype) -> tuned.Bucket | None:
    state = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(pool_dtype)
    if state is None:
        return None
    return tuned.Bucket(H, HV, K, V, state, tuned.batch_bucket(max(total, 1), tuned.PREFILL_TOKEN_BUCKETS))


def _configure_from_env() -> None:
    raw = os.environ.get("KDAKIT_PREFILL_CONFIGS")
    if raw:
        import json

        data = json.loads(raw)
        configure(data.get("configs"), data.get("widen_state", True))


_configure_from_env()


MAX_STATE_TILE = 64
# Pipeline stages of the widest tile: three need more shared memory than the H200 has; set here rather than
# left to _launch_within_shared_memory's retry, whose recompile would fall inside a prefill graph's capture.
MAX_TILE_STAGES = 2


def widened_block_v(block_v: int, programs_per_tile: int, V: int, sms: int) -> int:
    """The state pass's V tile: the configured one, doubled while its programs (programs_per_tile =
    sequences x value heads, per V tile) outnumber the SMs and a wider tile can bring them within one wave;
    where no tile brings them within one wave, the widest (the most sequences side by side).

    Each program runs one sequence's whole chain of chunks and takes a whole SM (its pipelined operands fill
    shared memory). A step of the chain is latency-bound: 1.6 us at a 16-wide tile, 1.8 at 32, 2.9 at 64
    (H200, 4 warps), so one sequence runs fastest narrow, and many sequences wide, in parallel lanes
    (8 x 512 tokens at 16 heads: 118 us at 16 wide in one lane, 61 us at 64 wide in four;
    measurements/kernels-tuning/h200-2026-12-04-state).

    The tile never widens past MAX_STATE_TILE: a 128-wide tile's stages overflow the H200's shared memory
    (a prefill graph with 8 sequence slots at 16 heads failed to capture with one)."""
    widest = max(block_v, min(V, MAX_STATE_TILE))
    width = block_v
    while width < widest and programs_per_tile * math.ceil(V / width) > sms:
        width *= 2
    return width


def _state_variant(kernel: helion.Kernel, **changes) -> helion.Kernel:
    """The state pass kernel under `kernel`'s config with some fields changed (compiled once per config)."""
    return _kernel("state", {**dict(kernel.configs[0]), **changes})


def state_lanes(N: int, HV: int, tiles: int, sms: int) -> int:
    """Sequence lanes of the state pass: every sequence in parallel while one wave holds them (N x HV x
    V tiles programs, one an SM), else as many lanes as fill one wave, each running its sequences in turn
    (a second wave would wait for the first anyway). A CUDA graph's tables have many sequence slots, most
    empty: the lanes stop at the last non-empty sequence, so empty slots cost nothing."""
    if N * HV * tiles <= sms:
        return N
    return max(1, min(N, sms // (HV * tiles)))


def state_plan(N: int, HV: int, V: int, block_v: int, sms: int) -> list[tuple[int, int, int, int]]:
    """The state pass's launches for a table of N sequence slots: (width, lanes, lo, hi) per V tile width,
    each to run the batch when its real sequence count (device data) is in [lo, hi]. The count ranges
    partition 0..N by widened_block_v; lanes are sized for the range's largest count."""
    plan: list[list[int]] = []
    for count in range(1, N + 1):
        width = widened_block_v(block_v, count * HV, V, sms)
        if plan and plan[-1][0] == width:
            plan[-1][3] = count
        else:
            plan.append([width, 0, count, count])
    plan[0][2] = 0
    return [(w, state_lanes(hi, HV, math.ceil(V / w), sms), lo, hi) for w, _, lo, hi in plan]


_CPU_LANES = 2  # the interpreter has no SMs: two lanes, so a lane strides over sequences whenever N > 2


def _sm_count(device) -> int | None:
    """The GPU's SMs; None for the CPU (the interpreter: one launch, _CPU_LANES lanes)."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return helion.runtime.get_num_sm(torch.device("cuda", index))


_state_plans: dict[tuple, tuple] = {}  # (kernel, N, HV, V, device) -> ((kernel, lane ids, count range), ...)


def _state_launches(kernel, N: int, HV: int, V: int, device) -> tuple:
    """The state pass's launches for this call: (kernel, lane ids, count range) per entry of state_plan, the
    kernel `kernel` with its V tile set to the entry's width. One launch of the configured tile where the
    tile is fixed (configure(widen_state=False), autotune's recorder) or there are no SMs to fill. Cached,
    so a repeated shape costs one dict lookup."""
    key = (kernel, N, HV, V, str(device))
    launches = _state_plans.get(key)
    if launches is not None:
        return launches
    sms = _sm_count(device)
    if not isinstance(kernel, helion.Kernel) or not _widen_state or sms is None:
        width = int(kernel.configs[0]["block_sizes"][0]) if isinstance(kernel, helion.Kernel) else V
        lanes = min(N, _CPU_LANES) if sms is None else state_lanes(N, HV, math.ceil(V / width), sms)
        launches = ((kernel, _lane_ids(lanes, device), _count_range(0, N, device)),)
    else:
        block_sizes = list(kernel.configs[0]["block_sizes"])
        stages = int(kernel.configs[0].config.get("num_stages", 1))

        def variant(width: int):
            if width == block_sizes[0]:
                return kernel
            changes = {"block_sizes": [width, *block_sizes[1:]]}
            if width >= MAX_STATE_TILE:
                changes["num_stages"] = min(stages, MAX_TILE_STAGES)
            return _state_variant(kernel, **changes)

        launches = tuple(
            (variant(width), _lane_ids(lanes, device), _count_range(lo, hi, device))
            for width, lanes, lo, hi in state_plan(N, HV, V, int(block_sizes[0]), sms)
        )
    _state_plans[key] = launches
    return launches


_fewer_stages: dict[int, helion.Kernel] = {}  # id(bound kernel) -> the state kernel with fewer stages


def _launch_within_shared_memory(kernel, args: tuple):
    """Launch the state pass; where its pipeline stages need more shared memory than the GPU has (Triton's
    OutOfResources at the first launch of a specialization: 248 KiB at 3 stages for a multi-sequence
    varlen batch on the H200, against 227 KiB), run it with one stage fewer, remembered per
    specialization. The error is raised before anything is launched, so the retry sees untouched inputs."""
    if not isinstance(kernel, helion.Kernel):
        return kernel(*args)
    bound = kernel.bind(args)
    fallback = _fewer_stages.get(id(bound))
    if fallback is not None:
        return _launch_within_shared_memory(fallback, args)
    try:
        return bound(*args)
    except OutOfResources:
        stages = int(kernel.configs[0].config.get("num_stages", 1))
        if stages <= 1:
            raise
        fallback = _state_variant(kernel, num_stages=stages - 1)
        _fewer_stages[id(bound)] = fallback
        return _launch_within_shared_memory(fallback, args)


_lanes_cache: dict[tuple, torch.Tensor] = {}


def _lane_ids(lanes: int, device) -> torch.Tensor:
    key = (lanes, str(device))
    if key not in _lanes_cache:
        _lanes_cache[key] = torch.zeros(lanes, dtype=torch.int32, device=device)
    return _lanes_cache[key]


_ranges_cache: dict[tuple, torch.Tensor] = {}


def _count_range(lo: int, hi: int, device) -> torch.Tensor:
    key = (lo, hi, str(device))
    if key not in _ranges_cache:
        _ranges_cache[key] = torch.tensor([lo, hi], dtype=torch.int64, device=device)
    return _ranges_cache[key]


def _is_pow2(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


_fixed_cus: dict[tuple, torch.Tensor] = {}


def _token_rows_are_a_view(x: torch.Tensor) -> bool:
    """Whether [B, T, heads, dim] x is [B*T, heads*dim] token rows of one row stride."""
    B, T = x.shape[:2]
    return x.stride(-1) == 1 and x.stride(-2) == x.shape[-1] and (B == 1 or x.stride(0) == T * x.stride(1))


def _fixed_cu(B: int, T: int, device) -> torch.Tensor:
    key = (B, T, str(device))
    if key not in _fixed_cus:
        _fixed_cus[key] = torch.arange(B + 1, dtype=torch.int32, device=device) * T
    return _fixed_cus[key]


def _tables_fn(
    cu_seqlens: torch.Tensor,  # [N+1]
    ends: torch.Tensor,  # [N] int64 out: packed chunk index after the last chunk of each sequence
    counts: torch.Tensor,  # [2] int64 out: the real chunks; the index after the last sequence with tokens
    spans: torch.Tensor,  # [M, 2] int64 out: token range [start, end) of every real chunk
    out_rows: torch.Tensor,  # [T, HV*V] the output's token rows: zeroed past the batch's tokens
) -> torch.Tensor:
    """The chunk map every later kernel reads, from cu_seqlens on the device (no host sync). One program
    writes the chunk ends and counts, and maps each real chunk to its token span, once for all heads and K
    tiles (the gate, intra, solve and recompute read it): each sequence's chunks, from the end of the chunks
    before it, 16 at a time. Empty sequences before the last one with tokens are run by the state pass (they
    change nothing); the graph tables' empty slots after it are not.

    The row programs zero the output rows past the batch's tokens (a CUDA graph's bucket padding: no later
    kernel writes them), so SGLang's graph need not mask them (`zeroes_padded_rows`)."""
    N = ends.size(0)
    for tile_one in hl.tile(1, block_size=1):
        chunks = hl.zeros([tile_one], dtype=torch.int64)
        last = hl.zeros([tile_one], dtype=torch.int64)
        for tile_n in hl.tile(N, block_size=128):
            n = tile_n.index
            begin = cu_seqlens[n].long()
            finish = cu_seqlens[n + 1].long()
            lengths = finish - begin
            per_seq = (lengths + 63) // 64
            seq_ends = hl.cumsum(per_seq, 0) + chunks
            hl.store(ends, [n], seq_ends)
            first = seq_ends - per_seq  # the sequence's first chunk
            for tile_j in hl.tile(per_seq.amax(0), block_size=16):
                j = tile_j.index  # the chunk within its sequence
                own = _row(j) < _column(per_seq)
                m = _column(first) + _row(j)
                hl.store(spans, [m, 0], _column(begin) + _row(j).long() * 64, extra_mask=own)
                hl.store(spans, [m, 1], _column(finish) + hl.zeros([tile_n, tile_j], dtype=torch.int64),
                         extra_mask=own)  # fmt: skip
            chunks = chunks + per_seq.sum(0)
            last = torch.maximum(last, torch.where(lengths > 0, n + 1, 0).amax(0))
        hl.store(counts, [tile_one.index], chunks)
        hl.store(counts, [tile_one.index + 1], last)
    for tile_r, tile_c in hl.tile([out_rows.size(0), out_rows.size(1)], block_size=[64, 128]):
        past = tile_r.index >= cu_seqlens[N].long()
        zeros = hl.zeros([tile_r, tile_c], dtype=out_rows.dtype)
        hl.store(out_rows, [tile_r, tile_c], zeros, extra_mask=_column(past))
    return counts


_tables_kernel = helion.kernel(
    _tables_fn,
    static_shapes=False,
    config=helion.Config(block_sizes=[], num_warps=4, num_stages=1, indexing="pointer"),
    key=_size_one_key,
    ignore_warnings=_IGNORED,
)
_fixed_tables: dict[tuple, tuple] = {}


def _chunk_tables(cu_seqlens: torch.Tensor | None, B: int, T: int, device, out_rows: torch.Tensor) -> tuple:
    """(ends [N] int64, counts [2] int64, spans [M, 2] int64, M): the inclusive cumsum of the chunk counts
    per sequence, the batch's real chunks and sequences, every real chunk's token span (all on the device,
    no host sync), and an upper bound M on the chunks (the chunk-indexed buffers' rows). Varlen tables are
    one small kernel launch, which also zeroes out_rows' rows past the batch's tokens; fixed-length ones
    (B sequences of T tokens) are constants, cached (no row is past)."""
    if cu_seqlens is None:
        per_seq = math.ceil(T / CHUNK)
        key = (B, T, str(device))
        if key not in _fixed_tables:
            ends = torch.arange(1, B + 1, dtype=torch.int64, device=device) * per_seq
            counts = torch.tensor([B * per_seq, B], dtype=torch.int64, device=device)
            m = torch.arange(max(B * per_seq, 1), dtype=torch.int64)
            seq, chunk = m // max(per_seq, 1), m % max(per_seq, 1)
            spans = torch.stack([seq * T + chunk * CHUNK, (seq + 1) * T], 1).to(device)
            _fixed_tables[key] = (ends, counts, spans)
        return (*_fixed_tables[key], max(B * per_seq, 1))
    n = cu_seqlens.numel() - 1
    slots = max(math.ceil(T / CHUNK) if n == 1 else T // CHUNK + n, 1)
    ends = torch.empty(n, dtype=torch.int64, device=device)
    counts = torch.empty(2, dtype=torch.int64, device=device)
    spans = torch.empty(slots, 2, dtype=torch.int64, device=device)
    _tables_kernel(cu_seqlens, ends, counts, spans, out_rows)
    return ends, counts, spans, slots


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
    track_mode: torch.Tensor | None = None,
    track_dst: torch.Tensor | None = None,
    beta_is_raw: bool = False,
    chunk_indices: torch.Tensor | None = None,
    chunk_offsets: torch.Tensor | None = None,
    output: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Chunked KDA prefill with SGLang 0.5.23's Helion `chunk_kda` contract.

    q, k [B,T,H,K]; v [B,T,HV,V]; g [B,T',HV,K] raw gate when A_log is given (bounded with lower_bound,
    else softplus), else pre-activated log decay; beta [B,T',HV] (logits when beta_is_raw); T' >= T, rows
    past T (CUDA Graph padding) are ignored. initial_state [slots,HV,V,K] (fp32/bf16) is updated in place
    at initial_state_indices [N] (negative: zero start, nothing written). Varlen: B == 1 and cu_seqlens
    [N+1]. The output is written into `output` [B,T,HV,V] (v's dtype, token rows a view) where given (the
    layer's output buffer, handed over by SGLang's prefill graph with kdakit's patch, which then copies
    nothing), else into v's storage; v's storage is scratch either way. Returns o, or (o, None) with
    output_intermediate_states (per-chunk states are not materialised; see the module docstring).
    Radix-cache tracking, either way keyed by track_chunk_idx [N] (the chunk whose starting state is tracked,
    -1 none): track_state [N,HV,V,K] fp32 receives those snapshots (SGLang's KDA backend then copies them);
    or track_mode [N] (0 none, 1 the final state, 2 the tracked chunk's) and track_dst [N] name the pool
    slot each goes to, written here in the pool's dtype (SGLang's prefill graph with kdakit's patch, which
    then skips its own copy). chunk_indices/chunk_offsets are accepted for signature compatibility; the
    chunk map is rebuilt on the device without a host sync.
    """
    del chunk_indices, chunk_offsets, kwargs
    if initial_state is None or initial_state_indices is None:
        raise ValueError("KDA prefill requires an indexed initial-state pool")
    if track_state is not None and track_mode is not None:
        raise ValueError("pass track_state (snapshots) or track_mode/track_dst (track slots), not both")
    if (track_state is None and track_mode is None) != (track_chunk_idx is None):
        raise ValueError("track_chunk_idx comes with track_state or with track_mode and track_dst")
    if (track_mode is None) != (track_dst is None):
        raise ValueError("track_mode and track_dst must be passed together")
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
    kernels = _kernels_for(_bucket(total, H, HV, K, V, initial_state.dtype), q.device)
    # token rows [T, heads*dim] with any row stride: views of SGLang's packed conv output stay views
    q_rows = q.reshape(total, H * K)
    k_rows = k.reshape(total, H * K)
    # U overwrites v in its storage: directly when v's token rows are a view (contiguous v, or a slice of a
    # packed qkv buffer), else in a contiguous copy, as SGLang's kernels do; o follows it there unless the
    # caller gives the output buffer
    work = v if _token_rows_are_a_view(v) else v.contiguous()
    v_rows = work.as_strided((total, HV * V), (work.stride(1), 1))
    out = work
    if output is not None:
        if output.shape != v.shape or output.dtype != v.dtype or not _token_rows_are_a_view(output):
            raise ValueError(
                f"output must be a {tuple(v.shape)} {v.dtype} tensor whose token rows are a view; got "
                f"{tuple(output.shape)} {output.dtype} with strides {output.stride()}"
            )
        out = output
    o_rows = out.as_strided((total, HV * V), (out.stride(1), 1))
    ends, counts, spans, slots = _chunk_tables(
        cu_seqlens, B, total if cu_seqlens is not None else T, q.device, o_rows
    )
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
    rnorm_q = torch.empty(total * HV, dtype=torch.float32, device=dev)
    rnorm_k = torch.empty_like(rnorm_q)
    l2norm, raw_beta, group = bool(use_qk_l2norm_in_kernel), bool(beta_is_raw), HV // H
    # One program per chunk lane (and head, tile): a lane runs the real chunks p, p + P, ... (their count is
    # device data), so the empty chunk slots of a CUDA graph's tables cost no program.
    chunk_lanes = _lane_ids(slots if cu_seqlens is None else max(1, math.ceil(total / CHUNK)), dev)
    chunk_count = counts[:1]
    kernels["gate"](
        g_rows, a_log, bias, spans, chunk_count, chunk_lanes, gcum,
        float(lower_bound if lower_bound is not None else 0.0), gate_mode, has_bias, HV,
    )  # fmt: skip
    akk = torch.empty(total * HV, CHUNK, dtype=torch.float32, device=dev)
    aqk = torch.empty(total * HV, CHUNK, dtype=act, device=dev)
    kernels["intra"](
        q_rows, k_rows, gcum, beta_rows, rnorm_q, rnorm_k, spans, chunk_count, chunk_lanes, akk, aqk,
        float(scale), l2norm, raw_beta, HV, group,
    )  # fmt: skip
    tinv = torch.empty(total * HV, CHUNK, dtype=act, device=dev)
    kernels["solve"](akk, spans, chunk_count, chunk_lanes, tinv, HV)
    w = torch.empty(total * HV, K, dtype=act, device=dev)
    kg = torch.empty_like(w)
    qg = torch.empty_like(w)
    decay = torch.empty(slots * HV, K, dtype=torch.float32, device=dev)
    kernels["recompute"](
        q_rows, k_rows, v_rows, gcum, beta_rows, rnorm_q, rnorm_k, spans, chunk_count, chunk_lanes, tinv, w,
        kg, qg, decay, float(scale), raw_beta, HV, group,
    )  # fmt: skip

    # (where no snapshot is written: one row the kernel never stores to)
    track_rows, track_chunk = torch.empty(1, K, dtype=torch.float32, device=dev), initial_state_indices
    modes, dsts = initial_state_indices, initial_state_indices
    track_to = 0
    if track_state is not None:
        track_to, track_rows, track_chunk = 1, track_state.view(-1, K), track_chunk_idx
    elif track_mode is not None:
        track_to, track_chunk, modes, dsts = 2, track_chunk_idx, track_mode, track_dst
    if not initial_state.is_contiguous():
        raise ValueError("initial_state must be a contiguous [slots,HV,V,K] pool")
    pool_rows = initial_state.view(-1, K)
    for state_kernel, lane_ids, count_range in _state_launches(kernels["state"], N, HV, V, dev):
        _launch_within_shared_memory(state_kernel, (
            w, v_rows, o_rows, kg, qg, aqk, decay.view(-1), pool_rows, initial_state_indices, cu, ends,
            track_rows, track_chunk, modes, dsts, lane_ids, counts[1:], count_range, track_to, HV,
        ))  # fmt: skip
    return (out, None) if output_intermediate_states else out


# SGLang's breakable prefill CUDA graph captures an extend kernel that runs on the bucket's static tables
# (KDAAttnBackend.supports_prefill_graph_extend with kdakit's patch): q/k/v padded to the bucket's tokens,
# cu_seqlens with empty sequences past the batch, negative (PAD_SLOT_ID) state slots, track_chunk_idx -1 for
# untracked rows. chunk_kda qualifies: every length is device data, every grid is fixed by the bucket (T and
# the table sizes), nothing syncs with the host, and empty sequences and padded chunk slots write no state.
chunk_kda.takes_prefill_graph_tables = True
# The output rows past the batch's tokens come back zero (`_tables_fn`): SGLang's graph, with kdakit's patch,
# skips its own masking pass over the whole output for an extend kernel that declares this.
chunk_kda.zeroes_padded_rows = True
# The graph's radix-cache track slots are written by the state pass (track_mode / track_dst): SGLang's graph,
# with kdakit's patch, passes them instead of a snapshot buffer and skips its own copy kernel.
chunk_kda.writes_track_slots = True
# The output goes into the buffer passed as `output`: SGLang's graph, with kdakit's patch, passes the layer's
# output buffer, so the layer's copy of the extend's output into it does not run.
chunk_kda.writes_into_output = True
