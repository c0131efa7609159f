"""kdakit.kernels.tools.ptxas on CPU: the compile for sm_90a sees the launcher's specializations, so its
shared-memory and register counts are those of the kernel a GPU runs."""

from __future__ import annotations

import inspect
import tempfile

import torch
from kdakit.kernels import prefill
from kdakit.kernels.tools import ptxas as P


def test_launch_specialization_mirrors_tritons_launcher():
    rows = torch.empty(130, 128)
    names = ["rows", "rows_stride_0", "rows_stride_1", "n", "m", "flag"]
    constants, attrs = P._launch_specialization(names, {"rows": rows}, {"n": 1, "m": 48, "flag": True})
    assert constants == {"rows_stride_1": 1, "n": 1}
    divisible = [["tt.divisibility", 16]]
    assert attrs == {(0,): divisible, (1,): divisible, (4,): divisible}


def _state_shared_memory(stages: int) -> int:
    prefill.configure({"state": {**prefill.DEFAULT_CONFIGS["state"], "num_stages": stages}})
    try:
        with tempfile.TemporaryDirectory() as workdir:
            line = P.report("state", P.example_args()["state"], workdir)
    finally:
        prefill.configure({})
    return int(line.split("smem=")[1].split()[0])


def test_state_pass_operand_loads_are_pipelined():
    """With the specializations the pipeliner stages the state pass's operand loads through shared memory,
    one buffer set per stage (without them every stage count compiled to the same 62 KiB kernel)."""
    two, three = _state_shared_memory(2), _state_shared_memory(3)
    assert three > two > 64 * 1024
    assert three <= 227 * 1024, "the default must fit the H200's shared memory at the bench's shapes"


def test_example_args_fit_every_prefill_kernels_signature():
    """The report binds each kernel to these arguments: one left behind by a signature change fails here,
    not in the middle of a register survey."""
    examples = P.example_args()
    assert set(examples) == set(prefill._FNS)
    for name, args in examples.items():
        inspect.signature(prefill._FNS[name]).bind(*args)  # TypeError naming a missing or extra argument


def test_a_kernel_with_reduction_constexprs_compiles_for_hopper():
    """The intra-chunk kernel takes `_RDIM_SIZE_*` constexprs whose values only Helion's host code holds:
    the report passes them to the compile, which otherwise stops on a tensor-valued shape."""
    with tempfile.TemporaryDirectory() as workdir:
        line = P.report("intra", P.example_args()["intra"], workdir)
    assert line.startswith("intra") and "registers" in line and "smem=" in line
