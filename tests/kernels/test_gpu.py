"""kdakit's Helion decode and verify on a real GPU at real shapes (run with `pytest -m gpu`).

Parity with the fp64 reference and with SGLang 0.5.23's Triton kernels (`kdakit.kernels.tools.upstream`),
CUDA Graph capture and replay, batch 1 compiled first, and the two-round verify case: verify, commit a
partially accepted prefix, change inputs and slot indices, verify again by replaying the same CUDA graph.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

H = HV = 16
K = V = 128
STEPS = 6


@pytest.fixture(scope="module")
def up():
    if not torch.cuda.is_available():
        pytest.fail("the gpu tests need a CUDA device")
    from kdakit.kernels.tools import upstream

    return upstream.load()


def _close(x, ref, tol):
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    assert not torch.isnan(x).any()
    err = (x - ref).abs().max().item()
    assert torch.allclose(x, ref, atol=tol, rtol=tol), err
    return err


def _decode(case, l2norm=True, lower_bound=-5.0):
    from kdakit.kernels.decode import helion_fused_recurrent_kda_packed_decode

    return helion_fused_recurrent_kda_packed_decode(
        **case, scale=K**-0.5, use_qk_l2norm_in_kernel=l2norm, lower_bound=lower_bound
    )


def _decode_reference(case, l2norm=True, lower_bound=-5.0):
    from kdakit.kernels.reference import packed_decode_reference

    c = {k: v.cpu() for k, v in case.items()}
    return packed_decode_reference(
        c["mixed_qkv"], c["a"], c["b"], c["A_log"], c["dt_bias"], K**-0.5, c["initial_state"],
        c["ssm_state_indices"], l2norm, lower_bound,
    )  # fmt: skip


def _triton_decode(up, case, lower_bound=-5.0):
    """SGLang's non-packed Triton decode (the server's Triton path) on the same packed inputs, in place."""
    B = case["mixed_qkv"].shape[0]
    mixed = case["mixed_qkv"]
    valid = case["ssm_state_indices"] >= 0
    rows = valid.nonzero().flatten()
    sel = mixed[rows]
    n = rows.numel()
    o = up.triton_recurrent(
        A_log=case["A_log"], a=case["a"][rows], dt_bias=case["dt_bias"], softplus_beta=1.0,
        softplus_threshold=20.0, q=sel[:, : H * K].reshape(1, n, H, K),
        k=sel[:, H * K : 2 * H * K].reshape(1, n, H, K), v=sel[:, 2 * H * K :].reshape(1, n, HV, V),
        b=case["b"][rows], initial_state_source=case["initial_state"],
        initial_state_indices=case["ssm_state_indices"][rows],
        cu_seqlens=torch.arange(n + 1, dtype=torch.int32, device="cuda"), use_qk_l2norm_in_kernel=True,
        is_kda=True, lower_bound=lower_bound,
    )  # fmt: skip
    out = torch.zeros(B, 1, HV, V, dtype=o.dtype, device="cuda")
    out[rows, 0] = o.reshape(n, HV, V)
    return out


@pytest.mark.parametrize(
    "state_dtype,lower_bound,heads",
    [
        (torch.float32, -5.0, H),
        (torch.float32, None, H),
        (torch.bfloat16, -5.0, H),
        (torch.bfloat16, None, H // 2),
        (torch.float32, -5.0, H // 4),
    ],
)
def test_decode_matches_reference(state_dtype, lower_bound, heads):
    from kdakit.kernels.tools.testing import decode_case

    case = decode_case(6, heads, HV, K, V, 16, indices=[3, -1, 9, 0, 15, 7], state_dtype=state_dtype,
                       device="cuda", seed=11)  # fmt: skip
    before = case["initial_state"].clone()
    ref_out, ref_pool = _decode_reference(case, lower_bound=lower_bound)
    out, pool = _decode(case, lower_bound=lower_bound)
    tol_state = 1e-5 if state_dtype == torch.float32 else 8e-3
    _close(out, ref_out, 8e-3)
    _close(pool, ref_pool, tol_state)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    untouched = [s for s in range(16) if s not in (3, 9, 0, 15, 7)]
    assert torch.equal(pool[untouched], before[untouched])


def test_decode_matches_triton_at_b48(up):
    from kdakit.kernels.tools.testing import decode_case

    case = decode_case(48, H, HV, K, V, 128, device="cuda", seed=12)
    case["ssm_state_indices"][5] = -1
    tri_pool = case["initial_state"].clone()
    tri_case = dict(case, initial_state=tri_pool)
    tri_out = _triton_decode(up, tri_case)
    out, pool = _decode(case)
    _close(out, tri_out, 8e-3)
    _close(pool, tri_pool, 2e-6)


def test_decode_batch_one_first_then_larger_batches():
    from kdakit.kernels import decode as kd
    from kdakit.kernels.tools.testing import decode_case

    for cfg in kd.DECODE_CONFIGS.values():
        kd.make_decode_kernel(cfg).reset()
    for B, seed in ((1, 20), (16, 21), (48, 22), (1, 23)):
        case = decode_case(B, H, HV, K, V, 64, device="cuda", seed=seed)
        ref_out, ref_pool = _decode_reference(case)
        out, pool = _decode(case)
        _close(out, ref_out, 8e-3)
        _close(pool, ref_pool, 1e-5)


def test_decode_cuda_graph_replay_with_new_inputs():
    from kdakit.kernels.tools.testing import decode_case

    static = decode_case(16, H, HV, K, V, 64, device="cuda", seed=30)
    _decode(static)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _decode(static)
    for seed in (31, 32):
        fresh = decode_case(16, H, HV, K, V, 64, device="cuda", seed=seed)
        fresh["ssm_state_indices"][3] = -1
        for name in ("mixed_qkv", "a", "b", "A_log", "dt_bias", "initial_state", "ssm_state_indices"):
            static[name].copy_(fresh[name])
        static["out"].fill_(float("nan"))
        ref_out, ref_pool = _decode_reference(fresh)
        graph.replay()
        torch.cuda.synchronize()
        _close(static["out"], ref_out, 8e-3)
        _close(static["initial_state"], ref_pool, 1e-5)


# ------------------------------------------------------------------------------------------------ verify
def _verify(case, lower_bound=-5.0):
    from kdakit.kernels.verify import helion_kda_verify

    return helion_kda_verify(**case, lower_bound=lower_bound)


def _verify_reference(case, lower_bound=-5.0):
    from kdakit.kernels.reference import verify_reference

    c = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in case.items()}
    return verify_reference(
        c["q"], c["k"], c["v"], c["a"], c["b"], c["A_log"], c["dt_bias"], c["ssm_states"], c["cache_indices"],
        c["query_start_loc"], c["intermediate_states_buffer"], c["intermediate_state_indices"],
        c["retrieve_parent_token"], lower_bound,
    )  # fmt: skip


def _triton_verify(up, case, snapshots, lower_bound=-5.0):
    o = up.triton_recurrent(
        A_log=case["A_log"], a=case["a"], dt_bias=case["dt_bias"], softplus_beta=1.0, softplus_threshold=20.0,
        q=case["q"], k=case["k"], v=case["v"], b=case["b"], initial_state_source=case["ssm_states"],
        initial_state_indices=case["cache_indices"], cu_seqlens=case["query_start_loc"],
        use_qk_l2norm_in_kernel=True, is_kda=True, lower_bound=lower_bound, disable_state_update=True,
        intermediate_states_buffer=snapshots, intermediate_state_indices=case["intermediate_state_indices"],
        cache_steps=case["cache_steps"], retrieve_parent_token=case["retrieve_parent_token"],
    )  # fmt: skip
    return o.reshape(case["v"].shape)


def _written(snaps, rows, lengths):
    """The snapshot entries a verify call must write: [(row, step)]."""
    return [(r, s) for r, n in zip(rows, lengths, strict=True) if r >= 0 for s in range(n)]


TREE = [0, 0, 0, 1, 1, 2]  # step -> parent step: a small draft tree


@pytest.mark.parametrize("tree,lower_bound", [(False, -5.0), (False, None), (True, -5.0), (True, None)])
def test_verify_matches_reference(tree, lower_bound):
    from kdakit.kernels.tools.testing import verify_case

    lengths = [STEPS, STEPS, STEPS, STEPS]
    case = verify_case(
        lengths, H, HV, K, V, 12, cache_indices=[4, -1, 11, 2], rows=[3, 1, -1, 0], num_rows=5,
        parents=[TREE] * 4 if tree else None, pad_tokens=2, device="cuda", seed=40,
    )  # fmt: skip
    pool_before = case["ssm_states"].clone()
    ref_out, ref_snaps = _verify_reference(case, lower_bound)
    out = _verify(case, lower_bound)
    assert out.dtype == case["v"].dtype and out.shape == case["v"].shape
    _close(out, ref_out, 8e-3)
    snaps = case["intermediate_states_buffer"]
    for r, s in _written(snaps, [3, 1, -1, 0], lengths):
        _close(snaps[r, s], ref_snaps[r, s], 2e-5)
    assert torch.isnan(snaps[2]).all() and torch.isnan(snaps[4]).all()  # rows nobody owns stay untouched
    assert torch.equal(case["ssm_states"], pool_before)
    assert torch.equal(out[0, sum(lengths) :], torch.zeros_like(out[0, sum(lengths) :]))


@pytest.mark.parametrize("tree", [False, True])
def test_verify_matches_triton(up, tree):
    from kdakit.kernels.tools.testing import verify_case

    N = 16
    case = verify_case(
        [STEPS] * N, H, HV, K, V, 64, cache_indices=list(range(0, 64, 4)), rows=list(range(N - 1)) + [-1],
        num_rows=N, parents=[TREE] * N if tree else None, device="cuda", seed=41,
    )  # fmt: skip
    tri_snaps = case["intermediate_states_buffer"].clone()
    tri_out = _triton_verify(up, case, tri_snaps)
    out = _verify(case)
    _close(out, tri_out, 8e-3)
    _close(case["intermediate_states_buffer"][: N - 1], tri_snaps[: N - 1], 2e-6)


def test_verify_single_request_first_then_larger():
    from kdakit.kernels import verify as kv
    from kdakit.kernels.tools.testing import verify_case

    for cfg in kv.VERIFY_CONFIGS.values():
        kv.make_verify_kernel(cfg).reset()
    for lengths, seed in (([1], 50), ([STEPS] * 3, 51), ([2, 5, 1], 52)):
        n = len(lengths)
        case = verify_case(lengths, H, HV, K, V, 8, cache_indices=list(range(n)), rows=list(range(n)),
                           num_rows=n, cache_steps=STEPS, device="cuda", seed=seed)  # fmt: skip
        ref_out, ref_snaps = _verify_reference(case)
        out = _verify(case)
        _close(out, ref_out, 8e-3)
        for r, s in _written(None, list(range(n)), lengths):
            _close(case["intermediate_states_buffer"][r, s], ref_snaps[r, s], 2e-5)


@pytest.mark.parametrize("tree", [False, True])
def test_two_round_verify_under_one_cuda_graph(up, tree):
    """Verify, commit a partially accepted prefix, change inputs and slots, replay: outputs and snapshots
    match Triton run eagerly on the same inputs both rounds."""
    from kdakit.kernels.tools.testing import verify_case

    N, slots, rows = 8, 32, 8
    parents = [TREE] * N if tree else None

    def fresh(seed, cache_indices, row_ids):
        return verify_case([STEPS] * N, H, HV, K, V, slots, cache_indices=cache_indices, rows=row_ids,
                           num_rows=rows, parents=parents, device="cuda", seed=seed)  # fmt: skip

    static = fresh(60, list(range(N)), list(range(N)))
    static["intermediate_states_buffer"].zero_()
    pool = static["ssm_states"]
    tri_pool = pool.clone()

    def check_round():
        tri_snaps = torch.zeros_like(static["intermediate_states_buffer"])
        tri_out = _triton_verify(up, dict(static, ssm_states=tri_pool), tri_snaps)
        static["intermediate_states_buffer"].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _close(holder["out"], tri_out, 8e-3)
        used = static["intermediate_state_indices"].long()
        _close(static["intermediate_states_buffer"][used], tri_snaps[used], 2e-6)
        return tri_snaps

    holder = {"out": _verify(static)}  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        holder["out"] = _verify(static)
    snaps_round1 = check_round()

    # commit: request n accepted accepted[n] candidates -> its slot takes the snapshot of its last accepted
    # step (what SGLang's scheduler copies back); then new drafts arrive in new slots and snapshot rows
    accepted = [1, 3, 6, 2, 5, 4, 1, 6]
    for n, acc in enumerate(accepted):
        step = acc - 1
        slot = int(static["cache_indices"][n])
        row = int(static["intermediate_state_indices"][n])
        pool[slot] = snaps_round1[row, step]
        tri_pool[slot] = snaps_round1[row, step]
    new_slots = list(range(N - 1, -1, -1))  # requests permuted over the committed slots
    new_rows = [(r + 3) % rows for r in range(N)]
    nxt = fresh(61, new_slots, new_rows)
    for name in ("q", "k", "v", "a", "b", "cache_indices", "intermediate_state_indices"):
        static[name].copy_(nxt[name])
    check_round()
