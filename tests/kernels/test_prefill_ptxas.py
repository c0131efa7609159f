"""kdakit.kernels.tools.ptxas on CPU: the compile for sm_90a sees the launcher's specializations, so its
shared-memory and register counts are those of the kernel a GPU runs."""

from __future__ import annotations

import inspect
import os
import tempfile
import types

import helion
import helion.language as hl
import pytest
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


def _report_with(name: str, **changes) -> str:
    """ptxas's report of one kernel at its module default with `changes` to its config."""
    prefill.configure({name: {**prefill.DEFAULT_CONFIGS[name], **changes}})
    try:
        with tempfile.TemporaryDirectory() as workdir:
            return P.report(name, P.example_args()[name], workdir)
    finally:
        prefill.configure({})


def _state_shared_memory(stages: int) -> int:
    line = _report_with("state", num_stages=stages)
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


def test_a_register_cap_in_the_config_reaches_the_compile():
    """A config's `maxnreg` is a launch option on the GPU; compiled without it, intra reports its 255."""
    line = _report_with("intra", maxnreg=128, pid_type="persistent_blocked")
    assert int(line.split("Used ")[1].split(" registers")[0]) <= 128, line


def test_the_compile_refuses_a_register_cap_where_a_gpu_refuses_it():
    """On a GPU, Helion takes `maxnreg` only with a persistent grid; it checks only where CUDA is available,
    so without the tool's care a CPU compile reports a kernel no GPU would launch."""
    with pytest.raises(helion.exc.InvalidConfig, match="maxnreg=128 can only be used with persistent"):
        _report_with("intra", maxnreg=128)


def test_each_exp2_factor_of_intras_k_step_is_computed_once():
    """Triton's layout pass computes a pure elementwise op again in every layout its consumers want; intra's
    exp2 factors feed a dot operand and a blocked layout, and computed twice they would nearly double the
    step's MUFU work. One [16, K slice] factor on one warp is 16 * K slice / 32 exp2 a thread."""
    config = prefill.DEFAULT_CONFIGS["intra"]
    assert config["num_warps"] == 1
    per_factor = 16 * config["block_sizes"][0] // 32
    with tempfile.TemporaryDirectory() as workdir:
        compiled = P.compile_for_hopper("intra", P.example_args()["intra"], workdir)
        with open(os.path.join(workdir, "intra.py")) as f:
            factors = f.read().count("ex2.approx.ftz.f32")
        body, _ = P.dot_loop(P.sass("intra", P.example_args()["intra"], workdir, compiled=compiled))
    exps = sum(1 for instruction in body if instruction.startswith("MUFU.EX2"))
    assert factors == 6, "intra's K step forms six exp2 factors (diagonal 2, left 1, three blocks j < i)"
    assert exps == factors * per_factor, f"{exps} MUFU.EX2 in the K step for {factors} factors"


_LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64] ;
.L_x_1:
        /*0020*/                   WARPGROUP.ARRIVE ;
        /*0030*/                   HGMMA.64x16x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/              @P0  BRA `(.L_x_1) ;
        /*0060*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0070*/              @P1  BRA `(.L_x_0) ;
.L_x_2:
        /*0080*/                   FADD R5, R5, R6 ;
        /*0090*/              @P2  BRA `(.L_x_2) ;
        /*00a0*/                   BRA `(.L_x_3) ;
.L_x_3:
        /*00b0*/                   EXIT ;
"""


def test_dot_loop_is_the_innermost_loop_that_issues_tensor_core_instructions():
    body, total = P.dot_loop(_LISTING)
    assert total == 12
    assert body == ["WARPGROUP.ARRIVE", "HGMMA.64x16x16.F32.BF16 R24, gdesc[UR8], R24",
                    "WARPGROUP.DEPBAR.LE gsb0, 0x0", "@P0  BRA `(.L_x_1)"]  # fmt: skip
    assert P.opcodes(body) == {"WARPGROUP": 2, "HGMMA": 1, "BRA": 1}
    assert P.dot_loop(_LISTING.replace("HGMMA", "FFMA"))[0] is None, "a loop without dots is no dot loop"


def test_loop_report_counts_dots_that_take_a_from_registers(monkeypatch):
    monkeypatch.setattr(P, "sass", lambda *args, **kw: _LISTING)
    assert "HGMMA 1 (0 with A from registers)" in P.loop_report("x", (), "")
    from_registers = _LISTING.replace("R24, gdesc[UR8], R24", "R24, R40, gdesc[UR8].tnspB, R24")
    monkeypatch.setattr(P, "sass", lambda *args, **kw: from_registers)
    assert "HGMMA 1 (1 with A from registers)" in P.loop_report("x", (), "")


def _scale_rows_fn(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    hl.specialize((src.size(1), src.stride(0), dst.stride(0)))
    for tile_m, tile_n in hl.tile(src.size()):
        dst[tile_m, tile_n] = src[tile_m, tile_n] * 2
    return dst


def test_tensor_descriptor_indexing_compiles_to_tensor_memory_copies_as_on_hopper():
    """Helion offers tensor descriptors only with a Hopper GPU present; the compile here must still give the
    kernel such a GPU runs (the tuned configs ask for descriptors on some loads)."""
    rows = (torch.empty(128, 64, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16))
    copies = {}
    for indexing in ("pointer", "tensor_descriptor"):
        config = helion.Config(block_sizes=[64, 64], indexing=indexing)
        kernel = helion.kernel(_scale_rows_fn, static_shapes=False, config=config)
        registry = {"_FNS": {"scale": _scale_rows_fn}, "_IGNORED": [], "_kernels": {"scale": kernel}}
        module = types.SimpleNamespace(**registry)
        with tempfile.TemporaryDirectory() as workdir:
            listing = P.sass("scale", rows, workdir, module)
        copies[indexing] = (listing.count("UTMALDG"), listing.count("UTMASTG"))
    assert copies == {"pointer": (0, 0), "tensor_descriptor": (1, 1)}


def test_state_pass_step_waits_once_on_each_of_its_dots():
    """The state pass's token loop issues its dots as wgmma and waits on each once; a wait per k-step or a
    dot left outside the loop shows here as another count."""
    dots = inspect.getsource(prefill._state_pass_fn).count("_dot32(")
    with tempfile.TemporaryDirectory() as workdir:
        line = P.loop_report("state", P.example_args()["state"], workdir)
    assert f"wgmma waits {dots}," in line and "spills 0" in line, line
