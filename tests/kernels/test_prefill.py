"""kdakit's Helion chunked KDA prefill on CPU (Triton interpreter, small shapes) against the fp64 reference.

Token-by-token comparison of the output, the radix-cache track snapshots (the state at a chunk start) and
the final pool state. Tolerances are absolute, for unit-scale data: the kernels keep SGLang's bf16
intermediates (h, W, U, Aqk in bf16 for the dots, fp32 accumulation and fp32 state).
"""

from __future__ import annotations

import helion
import pytest
import torch
from kdakit.kernels import prefill
from kdakit.kernels import reference as R
from kdakit.kernels.tools.testing import interpreter

K = V = 32
O_TOL = 1.5e-2
S_TOL = 3e-2


@pytest.fixture(scope="module", autouse=True)
def _cpu_interpreter():
    with interpreter():
        yield


def make(lens, *, B=1, H=2, HV=2, pad=0, seed=0, slots=None, indices=None):
    """Varlen inputs (B = 1, lens packed) or fixed-length (B > 1, one length)."""
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens) if B == 1 else lens[0]

    def rnd(*shape, s=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen) * s).to(dtype)

    n = len(lens) if B == 1 else B
    slots = slots or 2 * n + 1
    return dict(
        q=rnd(B, T, H, K),
        k=rnd(B, T, H, K),
        v=rnd(B, T, HV, V),
        g=rnd(B, T + pad, HV, K),
        beta=rnd(B, T + pad, HV),
        A_log=rnd(HV, s=0.5, dtype=torch.float32),
        dt_bias=rnd(HV * K, s=0.3, dtype=torch.float32),
        pool=rnd(slots, HV, V, K, s=0.3, dtype=torch.float32),
        idx=torch.tensor(indices if indices is not None else [2 * i + 1 for i in range(n)]),
        cu=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32) if B == 1 else None,
    )


def sequences(x):
    """(batch row, start, end) of every sequence."""
    if x["cu"] is None:
        T = x["q"].shape[1]
        return [(b, 0, T) for b in range(x["q"].shape[0])]
    cu = x["cu"].tolist()
    return [(0, cu[n], cu[n + 1]) for n in range(len(cu) - 1)]


def reference(x, g_log, beta, l2norm=True):
    """fp64 per sequence: outputs, state at each chunk start, final state."""
    outs, chunk_states, finals = [], [], []
    for n, (b, s, e) in enumerate(sequences(x)):
        slot = int(x["idx"][n])
        start = x["pool"][slot].double() if slot >= 0 else torch.zeros_like(x["pool"][0], dtype=torch.float64)
        if e == s:  # an empty sequence (a graph table's slot past the batch) changes nothing
            outs.append(None)
            finals.append(start)
            continue
        o, states = R.kda_recurrence(
            x["q"][b, s:e],
            x["k"][b, s:e],
            x["v"][b, s:e],
            g_log[b, s:e],
            beta[b, s:e],
            start,
            K**-0.5,
            l2norm,
        )
        outs.append(o)
        finals.append(states[-1])
        chunk_states += [start if c == 0 else states[64 * c - 1] for c in range((e - s + 63) // 64)]
    return outs, chunk_states, finals


def packed_views(x):
    """q, k, v as views of one packed [B*T, 2HK + HV*V] buffer, like SGLang's conv output."""
    B, T, H, K_ = x["q"].shape
    HV, V_ = x["v"].shape[2:]
    qkv = torch.cat([x["q"].reshape(B * T, -1), x["k"].reshape(B * T, -1), x["v"].reshape(B * T, -1)], 1)
    q, k, v = qkv.split([H * K_, H * K_, HV * V_], dim=1)
    return qkv, q.view(B, T, H, K_), k.view(B, T, H, K_), v.view(B, T, HV, V_)


def graph_padded(real, bucket, empty, seed):
    """`real` (varlen) as SGLang's prefill graph calls with a bucket's tables: tokens padded to `bucket` with
    random rows, and `empty` empty sequence slots (PAD_SLOT_ID -1) after the batch."""
    x = dict(real)
    gen = torch.Generator().manual_seed(seed)
    for name in ("q", "k", "v", "g", "beta"):
        t = real[name]
        rows = torch.randn(1, bucket - t.shape[1], *t.shape[2:], generator=gen).to(t.dtype)
        x[name] = torch.cat([t, rows], 1)
    x["cu"] = torch.cat([real["cu"], torch.full((empty,), int(real["cu"][-1]), dtype=torch.int32)])
    x["idx"] = torch.cat([real["idx"], torch.full((empty,), -1, dtype=real["idx"].dtype)])
    return x


def run(x, *, lower_bound=-5.0, gate_in_kernel=True, beta_is_raw=True, l2norm=True, packed=False, **extra):
    q, k = x["q"], x["k"]
    v = x["v"].clone()
    if packed:
        x["qkv"], q, k, v = packed_views(x)
    pool = x["pool"].clone()
    if gate_in_kernel:
        g, A_log, dt_bias = x["g"], x["A_log"], x["dt_bias"]
    else:  # caller-activated log decay
        g, A_log, dt_bias = R.kda_gate(x["g"], x["A_log"], x["dt_bias"], lower_bound).float(), None, None
    out = prefill.chunk_kda(
        q, k, v, g, x["beta"], initial_state=pool, initial_state_indices=x["idx"],
        use_qk_l2norm_in_kernel=l2norm, cu_seqlens=x["cu"], A_log=A_log, dt_bias=dt_bias,
        lower_bound=lower_bound, beta_is_raw=beta_is_raw, **extra,
    )  # fmt: skip
    return out, v, pool


def check(x, out, pool, *, lower_bound, beta_is_raw=True, l2norm=True, track=None):
    T = x["q"].shape[1]
    g_log = R.kda_gate(x["g"][:, :T], x["A_log"], x["dt_bias"], lower_bound)
    beta = x["beta"][:, :T].double()
    beta = torch.sigmoid(beta) if beta_is_raw else beta
    outs, chunk_states, finals = reference(x, g_log, beta, l2norm)
    for (b, s, e), o_ref in zip(sequences(x), outs, strict=True):
        err = (out[b, s:e].double() - o_ref).abs().max().item() if e > s else 0.0
        assert err < O_TOL, f"output of tokens {s}:{e}: {err}"
    for n, final in enumerate(finals):
        slot = int(x["idx"][n])
        if slot >= 0:
            err = (pool[slot].double() - final).abs().max().item()
            assert err < S_TOL, f"final state of sequence {n}: {err}"
    used = [int(i) for i in x["idx"] if int(i) >= 0]
    untouched = [s for s in range(pool.shape[0]) if s not in used]
    assert torch.equal(pool[untouched], x["pool"][untouched]), "a slot outside the indices was written"
    if track is not None:  # (track_state [N, HV, V, K], track_chunk_idx [N]): varlen
        track_state, track_idx = track
        first_chunk = [0]
        for _, s, e in sequences(x):
            first_chunk.append(first_chunk[-1] + (e - s + 63) // 64)
        for n, c in enumerate(track_idx.tolist()):
            if c < 0:
                assert torch.isnan(track_state[n]).all(), f"untracked row {n} was written"
                continue
            err = (track_state[n].double() - chunk_states[first_chunk[n] + c]).abs().max().item()
            assert err < S_TOL, f"track state of sequence {n} (chunk {c}): {err}"


def test_the_size_one_key_splits_exactly_on_which_dims_are_one():
    """Helion's buckets, split by the kernels' key: two argument lists of the same ranks share a key exactly
    when the same dims of the same tensors equal one (sizes 0 and >= 2 are Helion's own concern), whatever
    the scalars and sizes otherwise."""
    shapes = [(4096, 2048), (1, 2048), (4096, 1), (1, 1), (0, 2048), (2, 3)]
    for first in shapes:
        for second in shapes:
            a = (torch.empty(first), 0.5, torch.empty(7), 3)
            b = (torch.empty(second), 0.25, torch.empty(9), 4)
            same_ones = [d == 1 for d in first] == [d == 1 for d in second]
            assert (prefill._size_one_key(*a) == prefill._size_one_key(*b)) == same_ones, (first, second)
    one_long = (torch.empty(1), torch.empty(5))
    assert prefill._size_one_key(*one_long) != prefill._size_one_key(*reversed(one_long))


def test_size_one_first_then_longer_in_one_process():
    """T = 1 with one head and one sequence is compiled first (fresh kernels: every flattened dim is 1),
    then T = 3, T = 70 and a two-sequence batch reuse nothing poisoned by the size-one trace."""
    prefill.reset()
    for lens, seed in (([1], 1), ([3], 2), ([70], 3), ([1, 70], 4)):
        x = make(lens, H=1, HV=1, seed=seed)
        out, v, pool = run(x)
        assert out.data_ptr() == v.data_ptr(), "o must be written into v's storage"
        check(x, out, pool, lower_bound=-5.0)


def test_weak_decay_carries_the_state_through_every_chunk():
    """With the default gate's strong decay (lower bound -5) a chunk's state forgets the chunks before it
    within a few tokens, so the state transition between chunks barely shows in the outputs. A gate bounded
    at -0.05 keeps most of the state over a chunk: outputs, final states and a track snapshot of sequences
    of 3 to 5 chunks, against the fp64 reference."""
    lens = [200, 320, 130]
    x = make(lens, seed=7)
    track_idx = torch.tensor([2, 4, 1])
    track = torch.full((len(lens), 2, V, K), float("nan"))
    out, v, pool = run(x, lower_bound=-0.05, track_state=track, track_chunk_idx=track_idx)
    check(x, out, pool, lower_bound=-0.05, track=(track, track_idx))


@pytest.mark.parametrize("block_v", [16, 32], ids=["state-v16", "state-v32"])
def test_mixed_lengths_varlen_with_track_state(block_v):
    """Lengths 17, 1, 63, 64, 65, 130 in one varlen batch, called as SGLang's KDA backend calls it with
    radix-cache tracking on (output_intermediate_states and track_state together): output, final pool and
    the track snapshots (fp32 state at the start of chunk track_chunk_idx[n]; -1: untouched) against the
    fp64 reference, and no per-chunk state tensor (the backend never reads it). The state pass at its
    default V tile and at a widened one (on a GPU, the program count picks it)."""
    lens = [17, 1, 63, 64, 65, 130]
    x = make(lens, seed=4)
    track_idx = torch.tensor([0, -1, 0, 0, 1, 2])
    track = torch.full((len(lens), 2, V, K), float("nan"))
    state = {**prefill.DEFAULT_CONFIGS["state"], "block_sizes": [block_v]}
    prefill.configure({"state": state})
    try:
        (out, h), v, pool = run(
            x, output_intermediate_states=True, track_state=track, track_chunk_idx=track_idx
        )
    finally:
        prefill.configure({})
    assert out.data_ptr() == v.data_ptr()
    assert h is None, "per-chunk states were materialised although nothing reads them"
    check(x, out, pool, lower_bound=-5.0, track=(track, track_idx))


def test_state_pass_v_tile_widens_to_one_wave_else_to_the_widest():
    """The V tile doubles while the state pass's programs outnumber the SMs (H200: 132) and a wider tile
    fits them in one wave; where none does, the widest tile (64), whose lanes run the most sequences side by
    side."""
    assert prefill.widened_block_v(16, 16, 128, 132) == 16  # 1 sequence x 16 heads: 128 programs
    assert prefill.widened_block_v(16, 32, 128, 132) == 32  # 2 sequences: 256 -> 128
    assert prefill.widened_block_v(16, 64, 128, 132) == 64  # 4 sequences: 512 -> 128
    assert prefill.widened_block_v(16, 8, 128, 132) == 16  # TP8, 1 sequence: 64 programs
    assert prefill.widened_block_v(16, 160, 128, 132) == 64  # 10 sequences: no tile fits one wave
    assert prefill.widened_block_v(32, 16, 32, 4) == 32  # already V wide
    assert prefill.widened_block_v(16, 2048, 128, 132) == 64, "never past MAX_STATE_TILE"


def test_state_plan_partitions_the_sequence_counts_by_tile_width():
    """A prefill graph's 128 sequence slots at 16 heads (H200): one sequence runs 16 wide in one lane, two
    32 wide in two lanes, three or more 64 wide in four; at 8 heads each width holds twice the sequences.
    One slot (an eager single-sequence call) is one launch; each range's lanes fit one wave."""
    assert prefill.state_plan(128, 16, 128, 16, 132) == [(16, 1, 0, 1), (32, 2, 2, 2), (64, 4, 3, 128)]
    assert prefill.state_plan(128, 8, 128, 16, 132) == [(16, 2, 0, 2), (32, 4, 3, 4), (64, 8, 5, 128)]
    assert prefill.state_plan(1, 16, 128, 16, 132) == [(16, 1, 0, 1)]
    assert prefill.state_plan(2, 16, 128, 16, 132) == [(16, 1, 0, 1), (32, 2, 2, 2)]
    assert prefill.state_plan(3, 16, 128, 32, 132) == [(32, 2, 0, 2), (64, 3, 3, 3)]
    for width, lanes, *_ in prefill.state_plan(128, 16, 128, 16, 132):
        assert lanes * 16 * (128 // width) <= 132


def test_state_launches_for_a_gpu_call_are_planned_once_then_looked_up(monkeypatch):
    """What chunk_kda launches on a GPU (132 SMs) for two sequence slots at 16 heads: the configured kernel
    for a count of 0 or 1 and a 32-wide variant (same warps and stages) for 2, each with its lanes and count
    range; the same objects again on the next call (no new config or compile); the 64-wide variant at two
    stages (three overflow the H200's shared memory). Without SMs (the CPU interpreter) or with the tile
    fixed by configure(widen_state=False): one launch over every count."""
    monkeypatch.setattr(helion.runtime, "get_num_sm", lambda device: 132)
    monkeypatch.setattr(prefill, "_state_plans", {})
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(prefill, "_lane_ids", lambda lanes, device: ("lanes", lanes))
    monkeypatch.setattr(prefill, "_count_range", lambda lo, hi, device: ("range", lo, hi))
    configured = prefill._kernels["state"]
    (narrow, narrow_lanes, narrow_range), (wide, wide_lanes, wide_range) = launches = prefill._state_launches(
        configured, 2, 16, 128, gpu
    )
    assert narrow is configured and narrow_lanes == ("lanes", 1) and narrow_range == ("range", 0, 1)
    assert wide.configs[0]["block_sizes"] == [32]
    assert wide_lanes == ("lanes", 2) and wide_range == ("range", 2, 2)
    assert {k: v for k, v in wide.configs[0].config.items() if k != "block_sizes"} == {
        k: v for k, v in configured.configs[0].config.items() if k != "block_sizes"
    }
    make_variant = prefill._state_variant
    monkeypatch.setattr(prefill, "_state_variant", lambda *_, **__: pytest.fail("state kernel rebuilt"))
    assert prefill._state_launches(configured, 2, 16, 128, gpu) is launches
    monkeypatch.setattr(prefill, "_state_variant", make_variant)
    widest = prefill._state_launches(configured, 8, 16, 128, gpu)[-1][0]
    assert widest.configs[0]["block_sizes"] == [64] and widest.configs[0]["num_stages"] == 2
    assert prefill._state_launches(configured, 3, 16, 128, torch.device("cpu")) == (
        (configured, ("lanes", 2), ("range", 0, 3)),
    )
    monkeypatch.setattr(prefill, "_widen_state", False)
    assert prefill._state_launches(configured, 5, 16, 128, torch.device("cuda", 1)) == (
        (configured, ("lanes", 1), ("range", 0, 5)),
    )


def test_state_lanes_fill_one_wave_and_stop_at_the_sequences():
    """Sequences in parallel while one wave holds them all; else as many lanes as one wave holds. A prefill
    graph's 128 sequence slots at 16 heads run in one lane per (head, V tile), 8 heads in two."""
    assert prefill.state_lanes(1, 16, 8, 132) == 1
    assert prefill.state_lanes(2, 16, 4, 132) == 2  # widened: 2 x 16 x 4 = 128 programs
    assert prefill.state_lanes(128, 16, 8, 132) == 1
    assert prefill.state_lanes(128, 8, 8, 132) == 2
    assert prefill.state_lanes(16, 1, 1, 132) == 16
    assert prefill.state_lanes(3, 16, 8, 2) == 1  # fewer SMs than programs per lane: one lane


def test_state_pass_launches_per_count_range_run_only_the_batchs_own(monkeypatch):
    """With SMs to fill (a stand-in count under the interpreter), a table of 6 sequence slots gets one
    state-pass launch per tile width; whatever the batch's real sequence count (2: the first range's two
    lanes; 5, an empty sequence inside: the second range, a lane running two; the rest empty slots),
    exactly the launch whose range holds it writes outputs and states: every result matches the fp64
    reference and no slot outside the batch is written."""
    monkeypatch.setattr(prefill, "_sm_count", lambda device: 8)
    monkeypatch.setattr(prefill, "_state_plans", {})
    assert prefill.state_plan(6, 2, V, 16, 8) == [(16, 2, 0, 2), (32, 4, 3, 6)]  # count 5: a lane runs two
    for real in ([17, 65], [5, 64, 0, 30, 66]):
        lens = real + [0] * (6 - len(real))
        x = make(lens, seed=len(real))
        x["idx"] = torch.tensor([2 * i + 1 if i < len(real) else -1 for i in range(6)])
        out, _, pool = run(x)
        check(x, out, pool, lower_bound=-5.0)


def test_chunk_tables_count_real_chunks_and_stop_at_the_last_sequence_with_tokens():
    """One kernel launch gives every later kernel its chunk map: the chunk ends per sequence, the real
    chunks, the index after the last sequence with tokens (empty ones inside count, the table's empty
    slots after it do not), and each real chunk's token span (empty sequences own no chunk); more sequences
    than one 128-wide tile carry the running sums across tiles, and a sequence of more than 16 chunks has
    its spans mapped 16 at a time."""

    def tables(lengths):
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        out_rows = torch.ones(int(cu[-1]), 4, dtype=torch.bfloat16)
        ends, counts, spans, slots = prefill._chunk_tables(cu, 1, int(cu[-1]), cu.device, out_rows)
        assert bool((out_rows == 1).all()), "no row is past the batch: none is zeroed"
        assert spans.shape == (slots, 2) and slots >= counts[0]
        bounds = cu.tolist()
        expected = [[s, e] for b, e in zip(bounds[:-1], bounds[1:], strict=True) for s in range(b, e, 64)]
        assert spans[: int(counts[0])].tolist() == expected
        return ends.tolist(), counts.tolist()

    assert tables([5, 0, 4, 0, 0]) == ([1, 1, 2, 2, 2], [2, 3])
    assert tables([70, 0, 130]) == ([2, 2, 5], [5, 3])
    assert tables([0, 0]) == ([0, 0], [0, 0])
    ends, counts = tables([65] * 300)
    assert ends == [2 * (i + 1) for i in range(300)] and counts == [600, 300]
    assert tables([1100, 3]) == ([18, 19], [19, 2])


def test_fixed_length_tables_give_every_chunk_its_span():
    """Without cu_seqlens, B sequences of T tokens: constant tables, with the same spans the kernel gives."""
    ends, counts, spans, slots = prefill._chunk_tables(None, 3, 130, torch.device("cpu"), None)
    assert ends.tolist() == [3, 6, 9] and counts.tolist() == [9, 3] and slots == 9
    assert spans.tolist() == [[s, 130 * (b + 1)] for b in range(3) for s in range(130 * b, 130 * (b + 1), 64)]


def test_state_pass_out_of_shared_memory_runs_with_fewer_stages(monkeypatch):
    """A state-pass specialization whose pipeline stages need more shared memory than the GPU has (Triton's
    OutOfResources at its first launch; seen on the H200 at 3 stages) runs with fewer stages, gives the
    reference's results, and the next call goes straight to the remembered fallback."""
    import sys

    from triton.runtime.errors import OutOfResources

    bound_cls = sys.modules["helion.runtime.kernel"].BoundKernel
    real_call = bound_cls.__call__
    refused = []

    def call(self, *args):
        cfg = self.kernel.configs[0]
        if self.kernel.fn is prefill._state_pass_fn and cfg["num_stages"] > 1:
            refused.append(cfg["num_stages"])
            raise OutOfResources(253952, 232448, "shared memory")
        return real_call(self, *args)

    monkeypatch.setattr(bound_cls, "__call__", call)
    state = {**prefill.DEFAULT_CONFIGS["state"], "num_stages": 3}
    prefill.configure({"state": state})
    prefill._fewer_stages.clear()
    try:
        x = make([17, 70], seed=7)
        out, v, pool = run(x)
        check(x, out, pool, lower_bound=-5.0)
        assert refused == [3, 2], "each refused stage count is tried once, down to one stage"
        x = make([17, 70], seed=8)
        out, v, pool = run(x)
        check(x, out, pool, lower_bound=-5.0)
        assert refused == [3, 2], "the second call goes straight to the one-stage kernel"
    finally:
        prefill.configure({})
        prefill._fewer_stages.clear()


def test_fixed_length_batch_softplus_gate_padded_rows_gva_packed_qkv():
    """B = 2 fixed length, unbounded (softplus) gate, g/beta with CUDA Graph padding rows, HV = 2 H,
    q/k/v as strided views of one packed buffer (o lands in v's slice of it, q/k stay untouched)."""
    x = make([65], B=2, H=1, HV=2, pad=5, seed=5)
    x["g"][:, 65:] = float("nan")  # padding rows must never be read
    x["beta"][:, 65:] = float("nan")
    (out, h), v, pool = run(x, lower_bound=None, packed=True, output_intermediate_states=True)
    assert h is None
    assert out.data_ptr() == v.data_ptr() and out.stride() == v.stride()
    assert v.stride(1) == 2 * K + 2 * V  # really a strided view of the packed buffer
    qk = torch.cat([x["q"].reshape(130, -1), x["k"].reshape(130, -1)], 1)
    assert torch.equal(x["qkv"][:, : 2 * K], qk), "q/k columns of the packed buffer were written"
    check(x, out, pool, lower_bound=None)


def test_preactivated_gate_post_sigmoid_beta_bf16_pool_negative_slot():
    """A_log None (g is the log decay), beta already in (0, 1), q/k normalized by the caller (no L2 norm
    in the kernel), a bf16 state pool, and a -1 slot: that sequence starts from zeros and writes no state."""
    x = make([70, 20], seed=6, indices=[3, -1])
    x["pool"] = x["pool"].to(torch.bfloat16)
    x["beta"] = torch.sigmoid(x["beta"].float()).to(torch.bfloat16)
    x["q"] = R.l2_normalize(x["q"]).to(torch.bfloat16)
    x["k"] = R.l2_normalize(x["k"]).to(torch.bfloat16)
    out, _, pool = run(x, gate_in_kernel=False, beta_is_raw=False, l2norm=False)
    check(x, out, pool, lower_bound=-5.0, beta_is_raw=False, l2norm=False)


@pytest.mark.parametrize("key_dim, value_dim", [(32, 64), (64, 32)])
def test_key_and_value_widths_that_differ(monkeypatch, key_dim, value_dim):
    """K != V: `recompute`'s column tiles run to max(K, V) and mask the columns past K or past V (K == V
    needs no masks); packed q/k/v, so a write past a head's columns would land in its neighbour's."""
    monkeypatch.setitem(globals(), "K", key_dim)
    monkeypatch.setitem(globals(), "V", value_dim)
    x = make([70, 17], seed=8)
    out, _, pool = run(x, packed=True)
    qk = torch.cat([x["q"].reshape(87, -1), x["k"].reshape(87, -1)], 1)
    assert torch.equal(x["qkv"][:, : qk.shape[1]], qk), "q/k columns of the packed buffer were written"
    check(x, out, pool, lower_bound=-5.0)


def _converted_from(stored: torch.Tensor, fp32: torch.Tensor) -> bool:
    """Whether `stored` is `fp32` in its dtype, rounded to nearest (the GPU's conversion) or truncated (the
    CPU interpreter's conversion to bf16)."""
    if stored.dtype == torch.float32:
        return torch.equal(stored, fp32)
    truncated = (fp32.contiguous().view(torch.int32) & ~0xFFFF).view(torch.float32).to(stored.dtype)
    return torch.equal(stored, fp32.to(stored.dtype)) or torch.equal(stored, truncated)


@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.bfloat16], ids=["fp32-pool", "bf16-pool"])
def test_track_slots_get_the_final_or_the_chunk_state_in_the_pools_dtype(pool_dtype):
    """SGLang's prefill graph, with kdakit's patch, hands the state pass its radix-cache track slots instead
    of a snapshot buffer (`writes_track_slots`): mode 1 stores the sequence's final state into its slot,
    mode 2 the state at the start of chunk track_chunk_idx, mode 0 nothing; the values the snapshot run
    gives, in the pool's dtype, and no other slot changes."""
    x = make([130, 70, 200, 5], seed=9, slots=12)  # the sequences' own slots: 1, 3, 5, 7
    x["pool"] = x["pool"].to(pool_dtype)
    chunk = torch.tensor([1, -1, 2, -1])
    mode = torch.tensor([2, 1, 2, 0])
    dst = torch.tensor([9, 10, 11, 0])
    snapshots = torch.full((4, 2, V, K), float("nan"))
    out_a, _, pool_a = run(x, track_state=snapshots, track_chunk_idx=chunk)
    out_b, _, pool_b = run(x, track_chunk_idx=chunk, track_mode=mode, track_dst=dst)
    assert torch.equal(out_a, out_b) and torch.equal(pool_a[:9], pool_b[:9])
    assert torch.equal(pool_a[9:], x["pool"][9:])  # the snapshot run leaves the track slots alone
    assert _converted_from(pool_b[9], snapshots[0])
    assert torch.equal(pool_b[10], pool_b[3])  # sequence 1's final state
    assert _converted_from(pool_b[11], snapshots[2])
    assert torch.equal(pool_b[0], x["pool"][0])  # mode 0 writes nothing to its slot
    with pytest.raises(ValueError, match="not both"):
        run(x, track_state=snapshots, track_chunk_idx=chunk, track_mode=mode, track_dst=dst)
    with pytest.raises(ValueError, match="track_mode and track_dst must be passed together"):
        run(x, track_chunk_idx=chunk, track_mode=mode)


def test_short_g_or_beta_rejected():
    x = make([10])
    x["g"] = x["g"][:, :9]
    with pytest.raises(ValueError, match="g and beta must cover every q token"):
        run(x)
    x = make([10])
    x["beta"] = x["beta"][:, :9]
    with pytest.raises(ValueError, match="g and beta must cover every q token"):
        run(x)


def test_contract_errors():
    x = make([10])
    with pytest.raises(ValueError, match="indexed initial-state pool"):
        prefill.chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=x["cu"])
    x = make([10], B=2)
    with pytest.raises(ValueError, match="varlen KDA requires batch size 1"):
        run(dict(x, cu=torch.tensor([0, 5, 10], dtype=torch.int32)))
    x = make([10])
    with pytest.raises(ValueError, match="powers of two"):
        q = torch.zeros(1, 10, 2, 24, dtype=torch.bfloat16)
        prefill.chunk_kda(q, q, x["v"], x["g"], x["beta"], initial_state=x["pool"],
                          initial_state_indices=x["idx"], cu_seqlens=x["cu"])  # fmt: skip


def test_graph_tables_run_programs_for_the_real_chunks_only(monkeypatch):
    """SGLang's prefill graph calls with the bucket's tables: tokens padded to the bucket and 30 empty
    sequence slots (PAD_SLOT_ID -1) after the batch. The chunk kernels get one lane per 64 tokens of the
    bucket (3), not one program per chunk slot of the tables (192 // 64 + 32 = 35), the results match
    the same batch called without the tables, and the output rows past the batch come back zero (what
    `zeroes_padded_rows` promises SGLang's graph, which then skips its own masking pass)."""
    lens, bucket = [17, 70], 192
    real = make(lens, seed=9)
    x = graph_padded(real, bucket, empty=30, seed=10)
    sizes = []
    lane_ids = prefill._lane_ids

    def recording(lanes, device):
        sizes.append(lanes)
        return lane_ids(lanes, device)

    monkeypatch.setattr(prefill, "_lane_ids", recording)
    out, _, pool = run(x)
    assert sizes[0] == bucket // 64, f"chunk lanes {sizes[0]}: sized by the tables, not by the tokens"
    check(real, out[:, : sum(lens)], pool, lower_bound=-5.0)
    assert bool(x["v"][:, sum(lens) :].abs().gt(0).any()), "the padded input rows are not zero"
    assert prefill.chunk_kda.zeroes_padded_rows
    assert bool((out[:, sum(lens) :] == 0).all()), "output rows past the batch are not zeroed"


def test_output_buffer_gets_o_with_its_padded_rows_zeroed():
    """SGLang's prefill graph, with kdakit's patch, hands over the layer's output buffer
    (`writes_into_output`) so that nothing copies the extend's output into it: o lands there, the call returns
    that very buffer, its rows past the batch come back zero, and the values are those o has in v's storage
    without it. q, k, v are views of one packed buffer, as SGLang's conv output."""
    lens = [17, 70]
    x = graph_padded(make(lens, seed=11), bucket=128, empty=6, seed=12)
    in_v, _, pool_in_v = run(x, packed=True)
    buffer = torch.full_like(x["v"], float("nan"))
    out, _, pool = run(x, packed=True, output=buffer)
    assert prefill.chunk_kda.writes_into_output
    assert out.data_ptr() == buffer.data_ptr(), "the output is not the buffer handed over"
    assert torch.equal(out, in_v) and torch.equal(pool, pool_in_v)
    assert bool((out[:, sum(lens) :] == 0).all()), "the buffer's rows past the batch are not zeroed"
    with pytest.raises(ValueError, match="output must be a"):
        run(x, output=buffer[..., ::2])
    with pytest.raises(ValueError, match="output must be a"):
        run(x, output=buffer.float())


@pytest.mark.parametrize("a_log", [3.0, 6.0])
def test_extreme_decay_softplus_gate_is_finite_and_exact(a_log):
    """A softplus gate with a large A_log (per-token log decays of about -80 and -1600 nats) and keys of
    norm ~6 before the L2 norm: the diagonal blocks' factorised form overflows fp32 there (it gave NaN), so
    those blocks run column by column; output and state match the fp64 reference."""
    x = make([80], seed=11)
    x["A_log"] = torch.full_like(x["A_log"], a_log)
    x["k"] = (x["k"].float() * 6).to(torch.bfloat16)
    out, _, pool = run(x, lower_bound=None)
    assert torch.isfinite(out).all() and torch.isfinite(pool).all()
    check(x, out, pool, lower_bound=None)
