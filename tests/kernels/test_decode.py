"""kdakit's Helion packed decode on CPU (Triton interpreter) against the fp64 reference."""

from __future__ import annotations

import inspect

import pytest
import torch
from kdakit.kernels.decode import (
    DECODE_CONFIGS,
    helion_fused_recurrent_kda_packed_decode,
    make_decode_kernel,
)
from kdakit.kernels.reference import packed_decode_reference
from kdakit.kernels.tools.testing import decode_case, interpreter, max_abs


@pytest.fixture(scope="module", autouse=True)
def _cpu_interpreter():
    with interpreter():
        yield


def _run_and_compare(case, *, l2norm, lower_bound, out_tol, state_tol):
    K = case["initial_state"].shape[-1]
    pool_before = case["initial_state"].clone()
    ref_out, ref_pool = packed_decode_reference(
        case["mixed_qkv"], case["a"], case["b"], case["A_log"], case["dt_bias"], K**-0.5,
        pool_before, case["ssm_state_indices"], l2norm, lower_bound,
    )  # fmt: skip
    out, pool = helion_fused_recurrent_kda_packed_decode(
        **case, scale=K**-0.5, use_qk_l2norm_in_kernel=l2norm, lower_bound=lower_bound
    )
    assert out is case["out"] and pool is case["initial_state"]
    # bf16 outputs (and bf16/fp16 pools) are rounded once on store: relative error bound
    assert torch.allclose(out.double(), ref_out, atol=out_tol, rtol=out_tol), max_abs(out, ref_out)
    assert torch.allclose(pool.double(), ref_pool, atol=state_tol, rtol=state_tol), max_abs(pool, ref_pool)
    idx = case["ssm_state_indices"].tolist()
    for row, slot in enumerate(idx):
        if slot < 0:
            assert torch.equal(out[row], torch.zeros_like(out[row]))
    untouched = [s for s in range(pool.shape[0]) if s not in idx]
    assert torch.equal(pool[untouched], pool_before[untouched])


@pytest.mark.parametrize(
    "state_dtype,lower_bound,H,HV,l2norm",
    [
        (torch.float32, -5.0, 2, 2, True),
        (torch.float32, None, 2, 4, True),
        (torch.bfloat16, -5.0, 1, 4, True),
        (torch.bfloat16, None, 2, 2, False),
        (torch.float16, None, 2, 4, True),
    ],
)
def test_decode_matches_reference(state_dtype, lower_bound, H, HV, l2norm):
    case = decode_case(4, H, HV, 32, 32, 7, indices=[5, -1, 2, 0], state_dtype=state_dtype, seed=1)
    # outputs are bf16; a bf16/fp16 state is rounded once on store
    state_tol = {torch.float32: 1e-5, torch.bfloat16: 8e-3, torch.float16: 1e-3}[state_dtype]
    _run_and_compare(case, l2norm=l2norm, lower_bound=lower_bound, out_tol=8e-3, state_tol=state_tol)


def test_batch_one_first_does_not_poison_larger_batches():
    kernel = make_decode_kernel(DECODE_CONFIGS["fp32"])
    kernel.reset()
    for B, seed in ((1, 3), (5, 4), (1, 5)):
        case = decode_case(B, 2, 4, 32, 32, 8, seed=seed)
        _run_and_compare(case, l2norm=True, lower_bound=-5.0, out_tol=8e-3, state_tol=1e-5)


def test_all_padding_batch_leaves_pool_untouched():
    case = decode_case(2, 2, 2, 32, 32, 3, indices=[-1, -1], seed=6)
    _run_and_compare(case, l2norm=True, lower_bound=None, out_tol=0.0, state_tol=0.0)


def _bad(**changes):
    case = decode_case(2, 2, 2, 32, 32, 3, indices=[0, 1], seed=7)
    case.update(changes)
    return case


@pytest.mark.parametrize(
    "case,message",
    [
        (lambda: decode_case(2, 2, 2, 48, 32, 3, indices=[0, 1]), "power-of-two"),
        (lambda: decode_case(2, 2, 2, 32, 24, 3, indices=[0, 1]), "power-of-two"),
        (lambda: _bad(mixed_qkv=torch.randn(256, 2).t().bfloat16()), "contiguous"),
        (lambda: _bad(initial_state=torch.randn(3, 2, 32, 32).transpose(2, 3)), "contiguous"),
        (lambda: _bad(out=torch.empty(2, 1, 2, 16)), "out"),
        (lambda: _bad(a=torch.randn(2, 32).bfloat16()), "`a`"),
        (lambda: _bad(ssm_state_indices=torch.tensor([0, 1, 2], dtype=torch.int32)), "batch"),
        (lambda: _bad(ssm_state_indices=torch.tensor([0.0, 1.0])), "int32"),
        (lambda: _bad(mixed_qkv=torch.randn(2, 200).bfloat16()), "mixed_qkv"),
        (lambda: _bad(initial_state=torch.randn(3, 2, 32, 32, dtype=torch.float64)), "fp32"),
    ],
)
def test_decode_rejects_what_it_cannot_handle(case, message):
    with pytest.raises(ValueError, match=message):
        helion_fused_recurrent_kda_packed_decode(**case(), scale=1.0, use_qk_l2norm_in_kernel=True)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ValueError, match="CUDA device"):
        helion_fused_recurrent_kda_packed_decode(**_bad(), scale=1.0)


def test_signature_matches_sglang():
    params = inspect.signature(helion_fused_recurrent_kda_packed_decode).parameters
    assert list(params) == [
        "mixed_qkv", "a", "b", "A_log", "dt_bias", "scale", "initial_state", "out",
        "ssm_state_indices", "use_qk_l2norm_in_kernel", "lower_bound",
    ]  # fmt: skip
    assert params["use_qk_l2norm_in_kernel"].default is False
    assert params["lower_bound"].default is None
