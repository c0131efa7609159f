"""Kernel inputs and the interpreter switch shared by the kernel tests (CPU and GPU), `kdakit kernels
autotune` and the GPU self-test.

Inputs are random normal data (never zeros: zeros hide unwritten outputs and wrong indexing), with
realistic scales: raw gates around 0, A_log so that decays stay in a useful range, a state pool of
moderate magnitude.
"""

from __future__ import annotations

import contextlib
import os

import torch


@contextlib.contextmanager
def interpreter():
    """Run the enclosed kernel calls under Triton's CPU interpreter with kdakit's shim, then undo both."""
    from kdakit.kernels.tools import interpret

    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    interpret.install()
    try:
        yield
    finally:
        interpret.uninstall()
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous


@contextlib.contextmanager
def fresh_upstream():
    """kdakit.kernels.tools.upstream for the block, under the interpreter (Triton binds SGLang's kernels to it
    at import): its load cache and SGLang's modules dropped before the block and after it."""
    from kdakit.kernels.tools import upstream

    with interpreter():
        upstream._LOADED.clear()
        upstream._purge_sglang_modules()
        yield upstream
        upstream._LOADED.clear()
        upstream._purge_sglang_modules()


def _randn(shape, gen, device, dtype, scale=1.0):
    return (torch.randn(shape, generator=gen) * scale).to(device=device, dtype=dtype)


def decode_case(
    B: int, H: int, HV: int, K: int, V: int, slots: int, *, indices: list[int] | None = None,
    state_dtype: torch.dtype = torch.float32, act_dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu", seed: int = 0,
) -> dict:  # fmt: skip
    """Arguments of `helion_fused_recurrent_kda_packed_decode` (except scale/flags) as a dict."""
    gen = torch.Generator().manual_seed(seed)
    if indices is None:
        indices = torch.randperm(slots, generator=gen)[:B].tolist()
    return {
        "mixed_qkv": _randn((B, 2 * H * K + HV * V), gen, device, act_dtype),
        "a": _randn((B, HV * K), gen, device, act_dtype),
        "b": _randn((B, HV), gen, device, act_dtype),
        "A_log": _randn((HV,), gen, device, torch.float32, 0.5),
        "dt_bias": _randn((HV * K,), gen, device, torch.float32, 0.5),
        "initial_state": _randn((slots, HV, V, K), gen, device, state_dtype, 0.5),
        "out": torch.full((B, 1, HV, V), float("nan"), device=device, dtype=act_dtype),
        "ssm_state_indices": torch.tensor(indices, device=device, dtype=torch.int32),
    }


def verify_case(
    lengths: list[int], H: int, HV: int, K: int, V: int, slots: int, *, cache_indices: list[int],
    rows: list[int], num_rows: int, cache_steps: int | None = None, parents: list[list[int]] | None = None,
    pad_tokens: int = 0, snapshot_dtype: torch.dtype = torch.float32, act_dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu", seed: int = 0,
) -> dict:  # fmt: skip
    """Keyword arguments of `helion_kda_verify` (except lower_bound) as a dict."""
    gen = torch.Generator().manual_seed(seed)
    steps = cache_steps or max(lengths)
    T = sum(lengths) + pad_tokens
    qsl = [0]
    for n in lengths:
        qsl.append(qsl[-1] + n)
    case = {
        "q": _randn((1, T, H, K), gen, device, act_dtype),
        "k": _randn((1, T, H, K), gen, device, act_dtype),
        "v": _randn((1, T, HV, V), gen, device, act_dtype),
        "a": _randn((T, HV * K), gen, device, act_dtype),
        "b": _randn((T, HV), gen, device, act_dtype),
        "A_log": _randn((HV,), gen, device, torch.float32, 0.5),
        "dt_bias": _randn((HV * K,), gen, device, torch.float32, 0.5),
        "ssm_states": _randn((slots, HV, V, K), gen, device, torch.float32, 0.5),
        "cache_indices": torch.tensor(cache_indices, device=device, dtype=torch.int32),
        "query_start_loc": torch.tensor(qsl, device=device, dtype=torch.int32),
        "intermediate_states_buffer": torch.full(
            (num_rows, steps, HV, V, K), float("nan"), device=device, dtype=snapshot_dtype
        ),
        "intermediate_state_indices": torch.tensor(rows, device=device, dtype=torch.int32),
        "cache_steps": steps,
        "retrieve_parent_token": None,
    }
    if parents is not None:
        case["retrieve_parent_token"] = torch.tensor(parents, device=device, dtype=torch.int64)
    return case


def max_abs(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| in fp64; NaN anywhere counts as infinite error."""
    diff = (x.detach().double().cpu() - ref.detach().double().cpu()).abs()
    if torch.isnan(diff).any():
        return float("inf")
    return float(diff.max()) if diff.numel() else 0.0


def prefill_case(lens, H, K, V, slots, lower_bound, seed=0, device="cuda") -> dict:
    """Inputs of `chunk_kda` for sequences of `lens` tokens (H = HV, raw g and beta, fp32 pool)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    T = sum(lens)

    def rnd(*shape, s=1.0):
        return (torch.randn(*shape, generator=gen) * s).to(device)

    bf = torch.bfloat16
    return dict(
        q=rnd(1, T, H, K).to(bf),
        k=rnd(1, T, H, K).to(bf),
        v=rnd(1, T, H, V).to(bf),
        g=rnd(1, T, H, K).to(bf),
        beta=rnd(1, T, H).to(bf),
        A_log=(torch.rand(H, generator=gen) * 0.5).to(device),
        dt_bias=rnd(H * K, s=0.1),
        pool=rnd(slots, H, V, K, s=0.1),
        indices=torch.arange(len(lens), dtype=torch.int32, device=device) * 2 + 1,
        cu_seqlens=torch.tensor(
            [0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device
        ),
        lower_bound=lower_bound,
    )


def prefill_call(fn, x: dict, v_buf, pool):
    """`fn` (a `chunk_kda`) on a prefill_case, its output written over `v_buf` and its states into `pool`."""
    return fn(
        x["q"], x["k"], v_buf, x["g"], x["beta"],
        initial_state=pool, initial_state_indices=x["indices"], use_qk_l2norm_in_kernel=True,
        cu_seqlens=x["cu_seqlens"], A_log=x["A_log"], dt_bias=x["dt_bias"], lower_bound=x["lower_bound"],
        beta_is_raw=True,
    )  # fmt: skip
