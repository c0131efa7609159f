"""Probe variant: the state pass with the state kept V-first ([BV, K], the pool's own layout), so the state
and v_new are the left (register) operands of every product and the right operands come straight from the
pipelined loads."""
import torch
import helion.language as hl
from kdakit.kernels.prefill import _dot32


def state_pass_vfirst_fn(
    w_rows: torch.Tensor,
    u_rows: torch.Tensor,
    kg_rows: torch.Tensor,
    qg_rows: torch.Tensor,
    aqk_rows: torch.Tensor,
    decay_flat: torch.Tensor,
    pool_rows: torch.Tensor,
    pool_index: torch.Tensor,
    cu_seqlens: torch.Tensor,
    chunk_ends: torch.Tensor,
    track_rows: torch.Tensor,
    track_chunk: torch.Tensor,
    lanes: torch.Tensor,
    seq_count: torch.Tensor,
    count_range: torch.Tensor,
    has_track: hl.constexpr,
    HV: hl.constexpr,
) -> torch.Tensor:
    K = hl.specialize(w_rows.size(1))
    V = hl.specialize(u_rows.size(1)) // HV
    N = pool_index.size(0)
    P = lanes.size(0)
    block_v = hl.register_block_size(16, V)
    hl.specialize((w_rows.stride(0), u_rows.stride(0), pool_rows.stride(0)))
    for tile_p, tile_h, tile_v in hl.tile([P, HV, V], block_size=[1, 1, block_v]):
        hv, count = tile_h.id, seq_count[0]
        count = torch.where((count >= count_range[0]) & (count <= count_range[1]), count, 0)
        for tile_s in hl.tile((count - tile_p.id + P - 1) // P, block_size=1):
            n = tile_p.id + tile_s.id * P
            begin = cu_seqlens[n].long()
            end = cu_seqlens[n + 1].long()
            first_chunk = chunk_ends[(n + N - 1) % N] * min(n, 1)
            slot = pool_index[n].long()
            has_slot = slot >= 0
            kk = hl.arange(K)
            state_row = (torch.clamp(slot, min=0) * HV + hv) * V + tile_v.index
            state = hl.load(pool_rows, [state_row[:, None], kk[None, :]], extra_mask=has_slot).float()
            if has_track:
                track_at = track_chunk[n].long()
                tracked = hl.zeros([tile_v, K], dtype=torch.float32)
            cols64 = hl.arange(64)
            decay_next = hl.load(decay_flat, [(first_chunk * HV + hv) * K + kk], extra_mask=end > begin)
            for tile_t in hl.tile(end - begin, block_size=64):
                chunk = first_chunk + tile_t.id
                decay = decay_next
                has_next = begin + (tile_t.id + 1) * 64 < end
                decay_next = hl.load(decay_flat, [((chunk + 1) * HV + hv) * K + kk], extra_mask=has_next)
                token = begin + tile_t.index
                valid = token < end
                row = token * HV + hv
                w_t = hl.load(w_rows, [row[None, :], kk[:, None]], extra_mask=valid[None, :])
                kg = hl.load(kg_rows, [row[:, None], kk[None, :]], extra_mask=valid[:, None])
                qg_t = hl.load(qg_rows, [row[None, :], kk[:, None]], extra_mask=valid[None, :])
                aqk_t = hl.load(aqk_rows, [row[None, :], cols64[:, None]], extra_mask=valid[None, :])
                if has_track:
                    tracked = torch.where(tile_t.id == track_at, state, tracked)
                state_b = state.to(torch.bfloat16)
                v_cols = hv * V + tile_v.index
                u_t = hl.load(u_rows, [token[None, :], v_cols[:, None]], extra_mask=valid[None, :]).float()
                v_new = (u_t - _dot32(state_b, w_t)).to(torch.bfloat16)
                o_t = _dot32(state_b, qg_t) + _dot32(v_new, aqk_t)
                hl.store(u_rows, [token[None, :], v_cols[:, None]], o_t.to(u_rows.dtype),
                         extra_mask=valid[None, :])  # fmt: skip
                state = state * decay[None, :] + _dot32(v_new, kg)
            hl.store(pool_rows, [state_row[:, None], kk[None, :]], state.to(pool_rows.dtype),
                     extra_mask=has_slot)  # fmt: skip
            if has_track:
                written = (track_at >= 0) & (track_at * 64 < end - begin)
                t_row = (n * HV + hv) * V + tile_v.index
                hl.store(track_rows, [t_row[:, None], kk[None, :]], tracked, extra_mask=written)
    return pool_rows
