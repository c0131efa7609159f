"""The request lifecycle through SGLang 0.5.23's own KDA backend, per arm, on the CPU (Triton's interpreter).

`kdakit.kernels.tools.lifecycle` builds SGLang's `KDAAttnBackend` from the pinned wheel with kdakit's
patch (in memory), so every kernel call below is the call SGLang's backend makes: extend with radix-cache
tracking, decode, chain and tree verify of 6 draft tokens, SGLang's post-verify commit, a second verify round
in another batch order. Tiny shapes: 2 heads (the TP4 slice's shape, H == HV) or 1 head (TP8), head dim 32,
fp32 and bf16 state pools, bounded gate -5. Tolerances: `lifecycle.TOLERANCES["cpu"]`.
"""

from __future__ import annotations

import pytest
from kdakit.kernels.tools import lifecycle
from kdakit.kernels.tools.testing import interpreter

LENS = (1, 9, 70)  # one token, a short one, longer than a 64-token chunk (tracked: unaligned)
# The chain cases also prefill through SGLang's breakable prefill CUDA graph protocol (`--cuda-graph-backend-
# prefill breakable`; on the CPU the replays run the captured call on the static buffers, uncaptured).
PREFILL_BUCKETS = (16, 128)
# How SGLang 0.5.23 (with kdakit's patch) runs each arm's KDA extend inside the graph: Triton's and kdakit's
# on the bucket's static tables; SGLang's own Helion prefill as an eager break between graph segments.
PREFILL_GRAPH_ROUTE = {"triton": "in graph", "helion": "in graph", "helion-upstream": "eager break"}
CASES = {
    # (arm, top-k, heads, state dtype)
    "triton-chain": ("triton", 1, 2, "float32"),
    "helion-chain": ("helion", 1, 2, "float32"),
    "upstream-chain": ("helion-upstream", 1, 2, "float32"),
    "triton-tree-tp8-bf16": ("triton", 2, 1, "bfloat16"),
    "helion-tree-tp8-bf16": ("helion", 2, 1, "bfloat16"),
}
_reports: dict[str, lifecycle.LifecycleReport] = {}


@pytest.fixture(scope="module", autouse=True)
def _cpu_interpreter():
    with interpreter():
        yield


def report(case: str) -> lifecycle.LifecycleReport:
    if case not in _reports:
        arm, topk, heads, state = CASES[case]
        buckets = PREFILL_BUCKETS if case.endswith("-chain") else ()
        shape = lifecycle.Shape(
            heads=heads, head_dim=32, state_dtype=state, prefill_lens=LENS, prefill_buckets=buckets
        )
        _reports[case] = lifecycle.run(arm, shape, topk=topk, device="cpu")
        print(lifecycle.summary(_reports[case]))
    return _reports[case]


@pytest.mark.parametrize("case", list(CASES))
def test_lifecycle_through_sglangs_backend_matches_fp64(case):
    r = report(case)
    arm, topk = CASES[case][:2]
    backend = "Triton" if arm == "triton" else "Helion"
    assert r.dispatcher.startswith(f"decode={backend}KDAKernel verify={backend}KDAKernel extend={backend}")
    expected = ["extend", "decode", "decode", "verify 1", "verify 2", "decode"]
    if case.endswith("-chain"):
        expected += list(lifecycle.PREFILL_GRAPH_PHASES)
    assert r.phases == expected
    assert {e.phase for e in r.errors} >= {"extend track", "verify 1 commit", "verify 2 commit"}
    assert lifecycle.problems(r) == []


@pytest.mark.parametrize(("case", "baseline"), [
    ("helion-chain", "triton-chain"),
    ("upstream-chain", "triton-chain"),
    ("helion-tree-tp8-bf16", "triton-tree-tp8-bf16"),
])  # fmt: skip
def test_helion_arms_agree_with_the_triton_arm(case, baseline):
    """Same seed, same inputs: outputs and committed pool states of each phase against the triton arm."""
    r, b = report(case), report(baseline)
    assert set(r.outputs) == set(b.outputs) and set(r.states) == set(b.states)
    assert lifecycle.problems(r, b) == []


@pytest.mark.parametrize("case", ["triton-chain", "helion-chain", "upstream-chain"])
def test_prefill_graph_runs_each_arms_extend_where_sglang_puts_it(case):
    """kdakit's patch puts its Helion extend inside the breakable prefill graph (as Triton's); SGLang's own
    Helion extend stays an eager break; a batch of more sequences than the tables hold runs eagerly (no
    graph), where there are tables."""
    r = report(case)
    one_token, mixed, continued, too_many = lifecycle.PREFILL_GRAPH_PHASES
    want = PREFILL_GRAPH_ROUTE[CASES[case][0]]
    assert [r.routes[p] for p in (one_token, mixed, continued)] == [want] * 3
    # the runner's replay vote on the sequence count exists only where the KDA tables do
    tables = want == "in graph"
    assert r.routes[too_many] == ("eager (more sequences than the graph's tables)" if tables else want)


def test_the_verify_kernel_gets_the_backends_row_table_and_the_tree():
    """What SGLang's backend hands kdakit's verify: `intermediate_state_indices` as its whole per-pool table
    (longer than the batch), and for top-k > 1 the parent of every draft node, which SGLang's conv update
    derives from the draft tree's next-token/next-sibling links (lifecycle.TREE_PARENTS)."""
    from kdakit.kernels import verify

    seen = []
    original = verify.helion_kda_verify

    def spy(**kwargs):
        parents = kwargs["retrieve_parent_token"]
        seen.append((kwargs["intermediate_state_indices"].shape[0], kwargs["cache_indices"].shape[0],
                     None if parents is None else parents.tolist()))  # fmt: skip
        return original(**kwargs)

    shape = lifecycle.Shape(heads=1, head_dim=32, prefill_lens=(3, 4), decode_steps=0)
    verify.helion_kda_verify = spy
    try:
        for topk in (1, 2):
            with lifecycle.Lifecycle("helion", shape, topk=topk, device="cpu") as life:
                reqs = [life.new_request() for _ in shape.prefill_lens]
                life.extend(reqs, list(shape.prefill_lens))
                life.verify(reqs, [2, 3])
    finally:
        verify.helion_kda_verify = original
    (chain_rows, chain_n, chain_parents), (tree_rows, tree_n, tree_parents) = seen
    assert chain_rows > chain_n and tree_rows > tree_n
    assert chain_parents is None
    assert [row[1:] for row in tree_parents] == [lifecycle.TREE_PARENTS[1:]] * 2


# one small head and one prefill graph bucket: the graph-entry tests need a capture, not a workload
ONE_GRAPH_BUCKET = lifecycle.Shape(
    heads=1, head_dim=32, prefill_lens=(3,), decode_steps=0, prefill_buckets=(16,)
)


def test_a_dropped_prefill_graph_is_freed_at_once_not_by_the_cycle_collector():
    """`kdakit kernels served` drops each case's captured graphs before the next case's capture. A graph
    entry in a reference cycle outlives that until the cycle collector runs, which may be in the middle of a
    later capture: destroying a CUDA graph there invalidates that capture ("operation failed due to a
    previous error during capture"). Dropped entries must be freed by their reference count alone."""
    import gc
    import weakref

    with lifecycle.Lifecycle("triton", ONE_GRAPH_BUCKET, device="cpu") as life:
        reqs = [life.new_request()]
        life.extend(reqs, [3], graph=True)
        (entry,) = life._prefill_graphs.values()
        dropped = weakref.ref(entry)
        del entry
        gc.disable()
        try:
            life._prefill_graphs.clear()
            assert dropped() is None, "a dropped prefill graph entry waits for the cycle collector"
        finally:
            gc.enable()


def test_kdakits_extend_in_the_graph_writes_into_the_layers_output_buffer(monkeypatch):
    """In SGLang's prefill graph the layer hands its backend an output buffer and copies the extend's result
    into it unless the result is that buffer. kdakit's patch passes the buffer to an extend kernel that
    declares `writes_into_output`: kdakit's `chunk_kda` gets it and returns it, so no copy is captured."""
    from kdakit.kernels import prefill

    calls = []
    original = prefill.chunk_kda

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        given = kwargs.get("output")
        calls.append(given is not None and out.data_ptr() == given.data_ptr())
        return out

    declared = "takes_prefill_graph_tables zeroes_padded_rows writes_track_slots writes_into_output"
    for name in declared.split():  # what SGLang's adapter reads off the entry point
        setattr(spy, name, getattr(original, name))
    monkeypatch.setattr(prefill, "chunk_kda", spy)
    with lifecycle.Lifecycle("helion", ONE_GRAPH_BUCKET, device="cpu") as life:
        reqs = [life.new_request(), life.new_request()]
        life.extend(reqs[:1], [3])
        life.extend(reqs[1:], [5], graph=True)
    assert calls == [False, True], "eager: no buffer; in the graph: o written into the layer's buffer"


def test_unknown_arm_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown arm 'fast'; arms: triton, helion, helion-upstream"):
        lifecycle.arm_settings("fast")
