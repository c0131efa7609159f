"""Writes .carry/calls/prefill_split.py from kernels/prefill.py: the state pass without the output, which
instead stores each chunk's starting state (bf16, [K, V tile]) and v_new (into the output rows), and an
output kernel of its own, chunk-parallel like recompute: o = qg h + Aqk v_new, written over v_new. A probe
of moving the output's two dots out of the sequential loop, at the cost of the states' round trip."""
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "kernels/prefill.py"
dst = sys.argv[2] if len(sys.argv) > 2 else ".carry/calls/prefill_split.py"
text = open(src).read()


def swap(old, new):
    global text
    assert text.count(old) == 1, old
    text = text.replace(old, new)


swap("""    track_dst: torch.Tensor,  # [N] (track_to 2): the pool slot the tracked state goes to
    lanes: torch.Tensor,  # [P]: its size is the number of sequence lanes (values unused)""",
     """    track_dst: torch.Tensor,  # [N] (track_to 2): the pool slot the tracked state goes to
    h_rows: torch.Tensor,  # [M*HV*K, V] bf16 out: each chunk's starting state
    lanes: torch.Tensor,  # [P]: its size is the number of sequence lanes (values unused)""")
swap("""                qg = hl.load(qg_rows, [row[:, None], kk[None, :]])
                aqk = hl.load(aqk_rows, [row[:, None], cols64[None, :]])
""", "")
swap("""                o = _dot32(qg, state_b) + _dot32(aqk, v_new)
                hl.store(o_rows, [token[:, None], v_cols[None, :]], o.to(o_rows.dtype),
                         extra_mask=valid[:, None])  # fmt: skip
""", """                h_row = (chunk * HV + hv) * K + kk
                hl.store(h_rows, [h_row[:, None], tile_v.index[None, :]], state_b)
                hl.store(o_rows, [token[:, None], v_cols[None, :]], v_new.to(o_rows.dtype),
                         extra_mask=valid[:, None])  # fmt: skip
""")
swap("""# --------------------------------------------------------------------------------------------------------
# configs and the entry point""", '''def _output_fn(
    qg_rows: torch.Tensor,  # [T*HV, K] bf16
    aqk_rows: torch.Tensor,  # [T*HV, 64] bf16
    h_rows: torch.Tensor,  # [M*HV*K, V] bf16
    o_rows: torch.Tensor,  # [T, HV*V] in: v_new, out: o
    spans: torch.Tensor,  # [M, 2] int64
    chunk_count: torch.Tensor,  # [1] int64
    lanes: torch.Tensor,  # [P]
    HV: hl.constexpr,
) -> torch.Tensor:
    P = lanes.size(0)
    K = hl.specialize(qg_rows.size(1))
    V = hl.specialize(o_rows.size(1)) // HV
    hl.specialize((qg_rows.stride(0), aqk_rows.stride(0), o_rows.stride(0)))
    block_v = hl.register_block_size(16, V)
    for tile_p, tile_h, tile_v in hl.tile([P, HV, V], block_size=[1, 1, block_v]):
        hv, chunks = tile_h.id, chunk_count[0]
        for tile_s in hl.tile((chunks - tile_p.id + P - 1) // P, block_size=1):
            m, start, end, token, valid, row = _chunk_slots(spans, tile_p, tile_s, P, hv, HV)
            kk = hl.arange(K)
            qg = hl.load(qg_rows, [row[:, None], kk[None, :]], extra_mask=valid[:, None])
            aqk = hl.load(aqk_rows, [row[:, None], hl.arange(64)[None, :]], extra_mask=valid[:, None])
            h = hl.load(h_rows, [((m * HV + hv) * K + kk)[:, None], tile_v.index[None, :]])
            v_cols = hv * V + tile_v.index
            v_new = hl.load(o_rows, [token[:, None], v_cols[None, :]], extra_mask=valid[:, None])
            o = _dot32(qg, h) + _dot32(aqk, v_new.to(torch.bfloat16))
            hl.store(o_rows, [token[:, None], v_cols[None, :]], o.to(o_rows.dtype), extra_mask=valid[:, None])
    return o_rows


OUTPUT_CONFIG = {"block_sizes": [64], "num_warps": 4, "num_stages": 1, "indexing": "pointer"}
_output_kernel = helion.kernel(
    _output_fn, static_shapes=False, config=helion.Config(**OUTPUT_CONFIG), key=_size_one_key,
    ignore_warnings=_IGNORED,
)


# --------------------------------------------------------------------------------------------------------
# configs and the entry point''')
swap("""    pool_rows = initial_state.view(-1, K)
""", """    pool_rows = initial_state.view(-1, K)
    h = torch.empty(slots * HV * K, V, dtype=act, device=dev)
""")
swap("""            track_rows, track_chunk, modes, dsts, lane_ids, counts[1:], count_range, track_to, HV,
        ))  # fmt: skip
""", """            track_rows, track_chunk, modes, dsts, h, lane_ids, counts[1:], count_range, track_to, HV,
        ))  # fmt: skip
    _output_kernel(qg, aqk, h, o_rows, spans, chunk_count, chunk_lanes, HV)
""")
open(dst, "w").write(text)
