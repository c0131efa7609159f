"""GPU half of `kdakit selftest`: each Helion KDA kernel the arm runs, against SGLang's Triton kernel for the
same phase, on one small random case with SGLang's real call conventions (bf16 activations, fp32 state,
K = V = the PR's head size, bounded gate). Only imported when torch sees a GPU.
"""

from __future__ import annotations

import traceback

import torch

from kdakit.kernels import shapes

PASS, FAIL = "PASS", "FAIL"
LOWER_BOUND = shapes.get("model", "lower_bound")
HEAD_DIM = shapes.get("model", "head_dim")
OUT_TOL = 2e-2  # bf16 outputs of O(1) values: a few bf16 ulps
STATE_TOL = 2e-3  # fp32 states


def _helion_kernels(arm: str, upstream) -> dict:
    if arm == "helion-upstream":
        return {"decode": upstream.helion_packed_decode, "verify": upstream.helion_verify,
                "prefill": upstream.helion_chunk_kda}  # fmt: skip
    from kdakit.kernels.decode import helion_fused_recurrent_kda_packed_decode
    from kdakit.kernels.verify import helion_kda_verify

    try:
        from kdakit.kernels.prefill import chunk_kda
    except ImportError:  # the integration routes prefill upstream when kdakit has none
        chunk_kda = upstream.helion_chunk_kda
    return {
        "decode": helion_fused_recurrent_kda_packed_decode,
        "verify": helion_kda_verify,
        "prefill": chunk_kda,
    }


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _verdict(errors: dict[str, float], tolerances: dict[str, float]) -> tuple[str, str]:
    ok = all(errors[name] <= tolerances[name] for name in errors)
    detail = ", ".join(f"max|Δ| {name} {errors[name]:.2e} (tol {tolerances[name]:.0e})" for name in errors)
    return (PASS if ok else FAIL), detail


def decode_parity(helion, triton_packed, device: str = "cuda") -> tuple[str, str]:
    from kdakit.kernels.tools.testing import decode_case, max_abs

    case = decode_case(B=6, H=2, HV=4, K=HEAD_DIM, V=HEAD_DIM, slots=16, device=device, seed=1)
    scale = HEAD_DIM**-0.5
    runs = []
    for fn in (helion, triton_packed):
        c = {k: v.clone() for k, v in case.items()}
        fn(c["mixed_qkv"], c["a"], c["b"], c["A_log"], c["dt_bias"], scale, c["initial_state"], c["out"],
           c["ssm_state_indices"], use_qk_l2norm_in_kernel=True, lower_bound=LOWER_BOUND)  # fmt: skip
        runs.append(c)
    _sync(device)
    errors = {"out": max_abs(runs[0]["out"], runs[1]["out"]),
              "state": max_abs(runs[0]["initial_state"], runs[1]["initial_state"])}  # fmt: skip
    return _verdict(errors, {"out": OUT_TOL, "state": STATE_TOL})


def verify_parity(helion, triton_recurrent, device: str = "cuda") -> tuple[str, str]:
    from kdakit.kernels.tools.testing import max_abs, verify_case

    case = verify_case(
        [4, 6],
        H=2,
        HV=4,
        K=HEAD_DIM,
        V=HEAD_DIM,
        slots=8,
        cache_indices=[5, 2],
        rows=[1, 0],
        num_rows=2,
        device=device,
        seed=2,
    )
    h = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in case.items()}
    t = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in case.items()}
    out_h = helion(**h, lower_bound=LOWER_BOUND)
    out_t = triton_recurrent(
        A_log=t["A_log"], dt_bias=t["dt_bias"], q=t["q"], k=t["k"], v=t["v"], a=t["a"], b=t["b"],
        initial_state_source=t["ssm_states"], initial_state_indices=t["cache_indices"],
        cu_seqlens=t["query_start_loc"], use_qk_l2norm_in_kernel=True, softplus_beta=1.0,
        softplus_threshold=20.0, is_kda=True, disable_state_update=True,
        intermediate_states_buffer=t["intermediate_states_buffer"],
        intermediate_state_indices=t["intermediate_state_indices"], cache_steps=t["cache_steps"],
        retrieve_parent_token=t["retrieve_parent_token"], lower_bound=LOWER_BOUND,
    )  # fmt: skip
    _sync(device)
    # Snapshot rows past a sequence's length are never written (NaN in both): compare the written steps.
    snaps = []
    for buf in (h["intermediate_states_buffer"], t["intermediate_states_buffer"]):
        snaps.append(torch.nan_to_num(buf, nan=0.0))
    errors = {"out": max_abs(out_h.reshape(-1), out_t.reshape(-1)), "snapshots": max_abs(*snaps),
              "committed state": max_abs(h["ssm_states"], case["ssm_states"])}  # fmt: skip
    return _verdict(errors, {"out": OUT_TOL, "snapshots": STATE_TOL, "committed state": 0.0})


def prefill_parity(helion, triton_chunk, device: str = "cuda") -> tuple[str, str]:
    from kdakit.kernels.tools.testing import max_abs

    gen = torch.Generator().manual_seed(3)
    T, H, K, V, slots = 100, 4, HEAD_DIM, HEAD_DIM, 6

    def randn(*shape, dtype=torch.bfloat16, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device, dtype)

    base = {
        "q": randn(1, T, H, K), "k": randn(1, T, H, K), "v": randn(1, T, H, V), "g": randn(1, T, H, K),
        "beta": randn(1, T, H), "A_log": randn(H, dtype=torch.float32, scale=0.5),
        "dt_bias": randn(H * K, dtype=torch.float32, scale=0.5),
        "initial_state": randn(slots, H, V, K, dtype=torch.float32, scale=0.5),
    }  # fmt: skip
    indices = torch.tensor([3, 0], device=device, dtype=torch.int32)
    cu_seqlens = torch.tensor([0, 37, T], device=device, dtype=torch.int32)
    results = []
    for fn in (helion, triton_chunk):
        c = {k: v.clone() for k, v in base.items()}
        out = fn(
            c["q"],
            c["k"],
            c["v"],
            c["g"],
            c["beta"],
            initial_state=c["initial_state"],
            initial_state_indices=indices,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=cu_seqlens,
            A_log=c["A_log"],
            dt_bias=c["dt_bias"],
            lower_bound=LOWER_BOUND,
            beta_is_raw=True,
        )
        out = out[0] if isinstance(out, tuple) else out
        results.append((out, c["initial_state"]))
    _sync(device)
    errors = {"out": max_abs(results[0][0], results[1][0]), "state": max_abs(results[0][1], results[1][1])}
    return _verdict(errors, {"out": OUT_TOL, "state": STATE_TOL})


def parity(arm: str) -> list[tuple[str, str]]:
    """(status, detail) for decode, verify, prefill, in that order."""
    from kdakit.kernels.tools import upstream as upstream_kernels

    try:
        upstream = upstream_kernels.load()
        helion = _helion_kernels(arm, upstream)
    except Exception as exc:
        return [(FAIL, f"loading kernels failed: {type(exc).__name__}: {exc}")] * 3
    checks = (
        (decode_parity, helion["decode"], upstream.triton_packed_decode),
        (verify_parity, helion["verify"], upstream.triton_recurrent),
        (prefill_parity, helion["prefill"], upstream.triton_chunk_kda),
    )
    results = []
    for check, mine, triton in checks:
        if mine is None or triton is None:
            results.append((FAIL, f"kernel missing: {upstream.missing or 'no Helion kernel for this phase'}"))
            continue
        try:
            results.append(check(mine, triton))
        except Exception as exc:
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            results.append((FAIL, f"{check.__name__} raised {last}"))
    return results
