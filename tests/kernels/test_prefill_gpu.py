"""GPU tests of kdakit's Helion chunked KDA prefill at real shapes (H = 16, K = V = 128), on the lent H200.

Run: pytest -m gpu tests/kernels/test_prefill_gpu.py
Parity: the fp64 token-by-token reference (on the GPU, fp64) and SGLang 0.5.23's Triton `chunk_kda`
(through kdakit.kernels.tools.upstream; those tests skip, naming the reason, when it cannot be loaded).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kdakit.kernels import prefill
from kdakit.kernels import reference as R

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU (run with -m gpu on the lent H200)")


H = 16
K = V = 128
DEV = "cuda"
# bf16 activations and bf16 intermediates (as in SGLang's Triton and Helion prefills): bounds in absolute
# terms for unit-scale outputs and states.
O_TOL = 2e-2
S_TOL = 5e-2


def make(lens, lower_bound=-5.0, seed=0, slots=None):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)

    def rnd(*shape, s=1.0):
        return (torch.randn(*shape, generator=gen) * s).to(DEV)

    slots = slots or 2 * len(lens) + 1
    return dict(
        q=rnd(1, T, H, K).bfloat16(),
        k=rnd(1, T, H, K).bfloat16(),
        v=rnd(1, T, H, V).bfloat16(),
        g=rnd(1, T, H, K).bfloat16(),
        beta=rnd(1, T, H).bfloat16(),
        A_log=(torch.rand(H, generator=gen) * 0.5).to(DEV),
        dt_bias=rnd(H * K, s=0.1),
        pool=rnd(slots, H, V, K, s=0.1),
        idx=(torch.arange(len(lens)) * 2 + 1).to(DEV),
        cu=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEV),
        lower_bound=lower_bound,
    )


def run(fn, x, **extra):
    v = x["v"].clone()
    pool = x["pool"].clone()
    out = fn(
        x["q"], x["k"], v, x["g"], x["beta"],
        initial_state=pool, initial_state_indices=x["idx"], use_qk_l2norm_in_kernel=True,
        cu_seqlens=x["cu"], A_log=x["A_log"], dt_bias=x["dt_bias"], lower_bound=x["lower_bound"],
        beta_is_raw=True, **extra,
    )  # fmt: skip
    return out, v, pool


def reference(x):
    g = R.kda_gate(x["g"][0], x["A_log"], x["dt_bias"], x["lower_bound"])
    beta = torch.sigmoid(x["beta"][0].double())
    cu = x["cu"].tolist()
    outs, finals, all_states = [], [], []
    for n in range(len(cu) - 1):
        s, e = cu[n], cu[n + 1]
        o, states = R.kda_recurrence(
            x["q"][0, s:e], x["k"][0, s:e], x["v"][0, s:e], g[s:e], beta[s:e],
            x["pool"][x["idx"][n]], K**-0.5, True,
        )  # fmt: skip
        outs.append(o)
        finals.append(states[-1])
        all_states.append(states)
    return torch.cat(outs), finals, all_states


_TRITON = None


def triton_chunk_kda():
    global _TRITON
    if _TRITON is None:
        try:
            from kdakit.kernels.tools import upstream

            root = Path(os.environ.get("KDAKIT_UPSTREAM_DIR", ".carry/sglang-0.5.23"))
            _TRITON = upstream.load("auto", root if root.is_dir() else None).triton_chunk_kda
        except Exception as exc:  # pragma: no cover - depends on what the GPU box has
            pytest.skip(f"SGLang's Triton chunk_kda unavailable: {exc}")
    return _TRITON


@pytest.mark.parametrize(
    "lens",
    [[1], [17], [63], [64], [65], [130], [4097], [1, 17, 4097, 64, 63, 130]],
    ids=lambda lens: "x".join(map(str, lens)),
)
@pytest.mark.parametrize("lower_bound", [-5.0, None], ids=["bounded", "softplus"])
def test_matches_fp64_reference(lens, lower_bound):
    x = make(lens, lower_bound)
    o, v, pool = run(prefill.chunk_kda, x)
    assert o.data_ptr() == v.data_ptr()
    ref_o, finals, _ = reference(x)
    assert (o[0].double() - ref_o).abs().max().item() < O_TOL
    for n, final in enumerate(finals):
        assert (pool[x["idx"][n]].double() - final).abs().max().item() < S_TOL
    untouched = [s for s in range(pool.shape[0]) if s not in x["idx"].tolist()]
    assert torch.equal(pool[untouched], x["pool"][untouched])


@pytest.mark.parametrize("lens", [[4096], [8192], [4096, 4096], [1, 17, 4097, 64, 63, 130]], ids=str)
def test_matches_sglang_triton(lens):
    triton_fn = triton_chunk_kda()
    x = make(lens)
    o_k, _, pool_k = run(prefill.chunk_kda, x)
    o_t, _, pool_t = run(triton_fn, x)
    # both are bf16-intermediate chunked algorithms; they agree far tighter than either with fp64
    assert (o_k.float() - o_t.float()).abs().max().item() < 1e-2
    idx = x["idx"].long()
    assert (pool_k[idx] - pool_t[idx]).abs().max().item() < 2e-2


def test_track_snapshots_match_reference():
    """Radix-cache tracking as SGLang's KDA backend asks for it (output_intermediate_states with an fp32
    track_state): the snapshot is the state at the start of chunk track_chunk_idx[n]; no per-chunk states."""
    x = make([130, 70])
    track = torch.full((2, H, V, K), float("nan"), device="cuda")
    track_idx = torch.tensor([2, 1], dtype=torch.int32, device="cuda")
    (o, h), _, _ = run(
        prefill.chunk_kda, x, output_intermediate_states=True, track_state=track, track_chunk_idx=track_idx
    )
    assert h is None
    _, _, all_states = reference(x)
    for n, states in enumerate(all_states):
        want = states[int(track_idx[n]) * 64 - 1]
        assert (track[n].double() - want.to(track.device)).abs().max().item() < S_TOL


def test_cuda_graph_replay_with_new_lengths():
    """The chunk bookkeeping lives on the device: a captured call replays correctly when cu_seqlens
    changes (same total), unlike a host-side chunk map."""
    x = make([1000, 3096])
    v = x["v"].clone()
    pool = x["pool"].clone()

    def body():
        v.copy_(x["v"])
        pool.copy_(x["pool"])
        prefill.chunk_kda(
            x["q"], x["k"], v, x["g"], x["beta"], initial_state=pool, initial_state_indices=x["idx"],
            use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu"], A_log=x["A_log"], dt_bias=x["dt_bias"],
            lower_bound=x["lower_bound"], beta_is_raw=True,
        )  # fmt: skip

    body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    x["cu"].copy_(torch.tensor([0, 2500, 4096], dtype=torch.int32, device=DEV))
    graph.replay()
    torch.cuda.synchronize()
    o_eager, _, pool_eager = run(prefill.chunk_kda, x)
    assert torch.equal(v, o_eager)
    assert torch.equal(pool, pool_eager)


def test_graph_on_padded_tables_runs_each_replays_state_tile():
    """SGLang's prefill graph shape: captured once on a table of 16 sequence slots (empty slots past the
    batch, state slot -1), replayed with 1, 2 and 6 real sequences of the same 3072 tokens: one batch per
    count range of the state pass at 16 heads (16, 32 and 64 wide, chosen on the device). Each replay equals
    the eager call of its batch bit for bit, and the 6-sequence batch matches the fp64 reference."""
    slots, total = 16, 3072
    batches = ([3072], [1024, 2048], [512] * 6)
    assert [hi for *_, hi in prefill.state_plan(slots, H, V, 16, 132)] == [1, 2, slots]
    x = make([total], slots=2 * slots + 1)
    cu = torch.zeros(slots + 1, dtype=torch.int32, device=DEV)
    idx = torch.full((slots,), -1, dtype=torch.int64, device=DEV)

    def set_batch(lens):
        ends = torch.tensor(lens).cumsum(0).tolist()
        cu.copy_(torch.tensor([0, *ends, *[total] * (slots - len(lens))], dtype=torch.int32))
        idx.copy_(torch.tensor([2 * n + 1 if n < len(lens) else -1 for n in range(slots)]))

    v, pool = x["v"].clone(), x["pool"].clone()

    def body():
        v.copy_(x["v"])
        pool.copy_(x["pool"])
        prefill.chunk_kda(
            x["q"], x["k"], v, x["g"], x["beta"], initial_state=pool, initial_state_indices=idx,
            use_qk_l2norm_in_kernel=True, cu_seqlens=cu, A_log=x["A_log"], dt_bias=x["dt_bias"],
            lower_bound=x["lower_bound"], beta_is_raw=True,
        )  # fmt: skip

    set_batch(batches[0])
    body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    for lens in batches:
        set_batch(lens)
        graph.replay()
        torch.cuda.synchronize()
        o_eager, _, pool_eager = run(prefill.chunk_kda, dict(x, cu=cu.clone(), idx=idx.clone()))
        assert torch.equal(v, o_eager), f"graph replay of {len(lens)} sequences differs from eager"
        assert torch.equal(pool, pool_eager), f"graph replay of {len(lens)} sequences: pool differs"
    real = dict(x, cu=cu[: len(lens) + 1].clone(), idx=idx[: len(lens)].clone())
    ref_o, finals, _ = reference(real)
    assert (v[0].double() - ref_o).abs().max().item() < O_TOL
    for n, final in enumerate(finals):
        assert (pool[real["idx"][n]].double() - final).abs().max().item() < S_TOL


def test_size_one_first_in_fresh_process():
    """T = 1 compiled first must not poison T = 3 and T = 70 (no Triton fallback exists here)."""
    code = r"""
import torch, sys
sys.path.insert(0, @TESTS@)
from test_prefill_gpu import make, run, reference
from kdakit.kernels import prefill
worst = 0.0
for lens in ([1], [3], [70], [1, 70]):
    x = make(lens, seed=len(lens))
    o, _, pool = run(prefill.chunk_kda, x)
    ref_o, finals, _ = reference(x)
    worst = max(worst, (o[0].double() - ref_o).abs().max().item())
    for n, f in enumerate(finals):
        worst = max(worst, (pool[x["idx"][n]].double() - f).abs().max().item())
print("WORST", worst)
""".replace("@TESTS@", repr(str(Path(__file__).resolve().parent)))
    # -P: the kit as installed, not a `kdakit/` source folder where the interpreter happens to start
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    worst = float(out.stdout.split("WORST")[-1])
    assert worst < S_TOL


@pytest.mark.parametrize("a_log", [3.0, 6.0])
def test_extreme_decay_is_finite_and_matches_fp64_where_triton_is_finite(a_log):
    """A softplus gate with a large A_log (per-token log decays of about -80 and -1600 nats) and keys of
    norm ~6 before the L2 norm: the diagonal blocks' factorised form would overflow, so they run column by
    column. Finite, within the fp64 bounds, and within Triton's where Triton's output is finite."""
    x = make([1, 130, 4097], lower_bound=None, seed=3)
    x["A_log"] = torch.full_like(x["A_log"], a_log)
    x["k"] = (x["k"].float() * 6).bfloat16()
    o, _, pool = run(prefill.chunk_kda, x)
    assert torch.isfinite(o).all() and torch.isfinite(pool).all()
    ref_o, finals, _ = reference(x)
    assert (o[0].double() - ref_o).abs().max().item() < O_TOL
    for n, final in enumerate(finals):
        assert (pool[x["idx"][n]].double() - final).abs().max().item() < S_TOL
    o_t, _, _ = run(triton_chunk_kda(), x)
    finite = torch.isfinite(o_t)
    assert (o.float() - o_t.float())[finite].abs().max().item() < 2e-2
