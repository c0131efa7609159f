"""kdakit's Helion MTP verify on CPU (Triton interpreter) against the fp64 reference."""

from __future__ import annotations

import inspect

import pytest
import torch
from kdakit.kernels import verify as kv
from kdakit.kernels.reference import verify_reference
from kdakit.kernels.tools.testing import interpreter, verify_case

K = V = 32


@pytest.fixture(scope="module", autouse=True)
def _cpu_interpreter():
    with interpreter():
        yield


def _reference(case, lower_bound):
    return verify_reference(
        case["q"], case["k"], case["v"], case["a"], case["b"], case["A_log"], case["dt_bias"],
        case["ssm_states"], case["cache_indices"], case["query_start_loc"],
        case["intermediate_states_buffer"], case["intermediate_state_indices"],
        case["retrieve_parent_token"], lower_bound,
    )  # fmt: skip


def _check(case, lengths, rows, lower_bound, snap_tol=2e-5):
    pool_before = case["ssm_states"].clone()
    untouched_rows = [r for r in range(case["intermediate_states_buffer"].shape[0]) if r not in rows]
    ref_out, ref_snaps = _reference(case, lower_bound)
    out = kv.helion_kda_verify(**case, lower_bound=lower_bound)
    assert out.shape == case["v"].shape and out.dtype == case["v"].dtype
    assert torch.allclose(out.double(), ref_out, atol=8e-3, rtol=8e-3)
    snaps = case["intermediate_states_buffer"]
    for row, n in zip(rows, lengths, strict=True):
        if row >= 0:
            assert torch.allclose(snaps[row, :n].double(), ref_snaps[row, :n], atol=snap_tol, rtol=snap_tol)
            assert torch.isnan(snaps[row, n:]).all()  # steps past the request's length are not written
    assert torch.isnan(snaps[untouched_rows]).all()
    assert torch.equal(case["ssm_states"], pool_before)  # the committed pool is never written
    return out


@pytest.mark.parametrize("lower_bound", [-5.0, None])
def test_chain_verify_matches_reference(lower_bound):
    lengths, rows = [3, 2, 3], [2, -1, 0]
    case = verify_case(lengths, 2, 4, K, V, 5, cache_indices=[4, 1, -1], rows=rows, num_rows=4, seed=1)
    _check(case, lengths, rows, lower_bound)


@pytest.mark.parametrize("lower_bound", [-5.0, None])
def test_tree_verify_reloads_parent_snapshots(lower_bound):
    lengths, rows = [4, 4], [1, 0]
    parents = [[0, 0, 0, 1], [0, 0, 1, 1]]  # branches: the chain result would differ
    case = verify_case(lengths, 2, 2, K, V, 3, cache_indices=[2, 0], rows=rows, num_rows=3, parents=parents,
                       seed=2)  # fmt: skip
    out = _check(case, lengths, rows, lower_bound)
    chain = dict(case, retrieve_parent_token=None)
    chain["intermediate_states_buffer"] = torch.full_like(case["intermediate_states_buffer"], float("nan"))
    chain_out = kv.helion_kda_verify(**chain, lower_bound=lower_bound)
    assert not torch.allclose(out[0, 2:4].float(), chain_out[0, 2:4].float(), atol=1e-2)


def test_chain_verify_takes_the_backends_whole_row_table():
    """SGLang's KDA backend passes intermediate_state_indices as its whole per-pool row table
    (`build_verify_intermediate_state_indices`: pool size plus padding, read by position), not [N]."""
    lengths, rows = [3, 2], [1, 0]
    case = verify_case(lengths, 2, 2, K, V, 4, cache_indices=[3, 0], rows=rows, num_rows=3, seed=8)
    table = torch.full((7,), 2, dtype=case["intermediate_state_indices"].dtype)  # rows past N: padding row
    table[:2] = case["intermediate_state_indices"]
    case["intermediate_state_indices"] = table
    _check(case, lengths, rows, -5.0)


def test_tree_with_chain_parents_equals_chain():
    lengths, rows = [3], [0]
    common = dict(cache_indices=[1], rows=rows, num_rows=1, seed=3)
    tree = verify_case(lengths, 1, 2, K, V, 2, parents=[[0, 0, 1]], **common)
    chain = verify_case(lengths, 1, 2, K, V, 2, **common)
    out_tree = kv.helion_kda_verify(**tree, lower_bound=-5.0)
    out_chain = kv.helion_kda_verify(**chain, lower_bound=-5.0)
    assert torch.equal(out_tree, out_chain)
    assert torch.equal(tree["intermediate_states_buffer"], chain["intermediate_states_buffer"])


def test_padding_rows_are_zero_filled():
    lengths, rows = [2, 2], [0, 1]
    case = verify_case(
        lengths, 2, 2, K, V, 2, cache_indices=[0, 1], rows=rows, num_rows=2, pad_tokens=3, seed=4
    )
    original = kv._new_output
    kv._new_output = lambda v: torch.full_like(v, float("nan"))  # prove every element is written
    try:
        out = _check(case, lengths, rows, -5.0)
    finally:
        kv._new_output = original
    assert torch.equal(out[0, 4:], torch.zeros_like(out[0, 4:]))


def test_single_token_first_does_not_poison_longer_requests():
    for cfg in kv.VERIFY_CONFIGS.values():
        kv.make_verify_kernel(cfg).reset()
    for lengths, seed in (([1], 5), ([3, 1, 2], 6)):
        n = len(lengths)
        ids = list(range(n))
        case = verify_case(
            lengths, 2, 2, K, V, n, cache_indices=ids, rows=ids, num_rows=n, cache_steps=3, seed=seed
        )
        _check(case, lengths, list(range(n)), -5.0)


def _case(**changes):
    case = verify_case([2], 2, 2, K, V, 1, cache_indices=[0], rows=[0], num_rows=1, seed=7)
    case.update(changes)
    return case


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"q": torch.randn(2, 2, 32)}, r"packed \[1, T, H, K\]"),
        ({"k": torch.randn(1, 2, 1, 32)}, "head layout"),
        ({"v": torch.randn(1, 2, 3, 32)}, "head layout"),
        ({"intermediate_states_buffer": None}, "per-candidate state snapshots"),
        ({"cache_steps": 0}, "per-candidate state snapshots"),
        ({"cache_steps": 5}, "smaller than cache_steps"),
        ({"q": torch.randn(1, 2, 2, 24), "k": torch.randn(1, 2, 2, 24)}, "power-of-two|snapshots must be"),
        ({"a": torch.randn(2, 10)}, "T\\*HV\\*K"),
        ({"query_start_loc": torch.tensor([0, 1, 2], dtype=torch.int32)}, "query_start_loc"),
        ({"retrieve_parent_token": torch.zeros(2, 2, dtype=torch.int64)}, "retrieve_parent_token"),
        ({"intermediate_state_indices": torch.zeros(0, dtype=torch.int32)}, "at least N"),
    ],
)
def test_verify_rejects_bad_inputs(changes, message):
    with pytest.raises(ValueError, match=message):
        kv.helion_kda_verify(**_case(**changes))


def test_signature_is_keyword_only_like_sglang():
    params = inspect.signature(kv.helion_kda_verify).parameters
    assert list(params) == [
        "q", "k", "v", "a", "b", "A_log", "dt_bias", "ssm_states", "cache_indices", "query_start_loc",
        "intermediate_states_buffer", "intermediate_state_indices", "cache_steps", "retrieve_parent_token",
        "lower_bound",
    ]  # fmt: skip
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
