"""The request lifecycle through SGLang 0.5.23's own KDA backend on a GPU, at served shapes, per arm.

The PR's 16 heads (TP4) with an fp32 state pool and chain verify, and 8 heads (TP8) with a bf16 pool
(`--mamba-ssm-dtype bfloat16`) and tree verify; head dim 128, bounded gate -5, bf16 activations; prompts of
1, 37 and 300 tokens (tracked: unaligned); verify and decode also replayed from CUDA graphs of the server's
largest decode bucket (48 rows, most of them padding). Tolerances: `lifecycle.TOLERANCES["cuda"]`.
"""

from __future__ import annotations

import pytest
import torch
from kdakit.kernels.tools import lifecycle

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

GRAPH_BS = 48  # --cuda-graph-max-bs-decode of the PR's launch
CASES = {
    "tp4-fp32-chain": (16, "float32", 1),
    "tp8-bf16-tree": (8, "bfloat16", 2),
}
ARMS = ("triton", "helion", "helion-upstream")
# prefill graph token buckets (SGLang's breakable prefill CUDA graph, captured and replayed per bucket)
BUCKETS = (16, 128, 512)
ROUTE = {"triton": "in graph", "helion": "in graph", "helion-upstream": "eager break"}
_reports: dict[tuple[str, str], lifecycle.LifecycleReport] = {}


def report(arm: str, case: str) -> lifecycle.LifecycleReport:
    if (arm, case) not in _reports:
        heads, state, topk = CASES[case]
        shape = lifecycle.served_shape(heads, state_dtype=state, graph_bs=GRAPH_BS, prefill_buckets=BUCKETS)
        _reports[arm, case] = lifecycle.run(arm, shape, topk=topk, device="cuda")
        print(lifecycle.summary(_reports[arm, case]))
        for e in _reports[arm, case].errors:
            print(f"  {arm} {case} {e.phase}: output {e.out:.2e} state {e.state:.2e}")
    return _reports[arm, case]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("arm", ARMS)
def test_lifecycle_with_cuda_graphs_matches_fp64(arm, case):
    r = report(arm, case)
    assert {"verify graph 1", "verify graph 2", "decode graph", *lifecycle.PREFILL_GRAPH_PHASES} <= set(
        r.phases
    )
    assert lifecycle.problems(r, device="cuda") == []
    *graph_phases, too_many = lifecycle.PREFILL_GRAPH_PHASES
    assert [r.routes[p] for p in graph_phases] == [ROUTE[arm]] * len(graph_phases)
    assert r.routes[too_many].startswith("eager")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("arm", ARMS[1:])
def test_helion_arms_agree_with_the_triton_arm(arm, case):
    assert lifecycle.problems(report(arm, case), report("triton", case), device="cuda") == []
