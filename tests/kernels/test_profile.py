"""`kdakit kernels profile` on the CPU: its case syntax, an arm's row (the restore's copies listed but left
out of the total), and a clear refusal without a GPU."""

from __future__ import annotations

import pytest
from kdakit.kernels.tools import profile

from kdakit.cli import main
from kdakit.facts.errors import UsageError


def test_cases_are_batch_by_tokens_with_their_heads():
    assert profile.parse_cases("1x4096:16, 8x512:8") == [(1, 4096, 16), (8, 512, 8)]
    for bad in ("1x4096", "x4096:16", "1x0:16", "1x4096:0", " , "):
        with pytest.raises(UsageError, match="expected BATCHxTOKENS:HEADS|no profile cases"):
            profile.parse_cases(bad)


def test_an_arms_total_leaves_the_input_restore_out():
    row = profile.summarize(
        {
            "_helion__state_pass_fn": 134.0,
            "Memcpy DtoD (Device -> Device)": 26.7,
            "_helion__intra_chunk_fn": 77.5,
            "void at::native::vectorized_elementwise_kernel<4, at::native::copy": 3.3,
        }
    )
    assert row["total_us"] == 211.5 and row["restore_us"] == 30.0
    assert list(row["kernels"])[:2] == ["_helion__state_pass_fn", "_helion__intra_chunk_fn"]


def test_without_a_gpu_the_command_says_so(capsys, tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["kernels", "profile", "--cases", "1x16:2", "--results-dir", str(tmp_path)]) == 2
    assert "kdakit kernels profile needs an NVIDIA GPU" in capsys.readouterr().err


def test_arms_are_a_subset_of_the_prefill_arms_named_in_one_line(capsys, tmp_path):
    assert profile.parse_arms(None) is None
    assert profile.parse_arms("helion-kdakit, triton") == ["helion-kdakit", "triton"]
    assert profile.profiled_arms()[0] == "triton", "SGLang's Triton is the others' reference"
    for bad in ("kdakit", " , ", "triton,fla2"):
        with pytest.raises(UsageError, match="--arms: not .*; prefill arms: triton, "):
            profile.parse_arms(bad)
    assert main(["kernels", "profile", "--arms", "kdakit", "--results-dir", str(tmp_path)]) == 2
    assert "--arms: not kdakit" in capsys.readouterr().err
