"""Register and spill counts of kdakit's prefill kernels for Hopper, on a machine without a GPU.

Helion generates each kernel's Triton code for the configured block sizes; Triton compiles it for sm_90a and
the bundled ptxas reports registers, spills and shared memory, so a config that spills (or fits two CTAs on
an SM) shows here before any GPU time is spent on it. It says nothing about time: `kdakit kernels bench`
and `kdakit kernels autotune` measure that on a GPU.

    python -m kdakit.kernels.tools.ptxas [--configs '{"state": {...}}'] [--loops]

`--loops` adds each kernel's SASS size and its innermost tensor-core loop: a step's instructions, its dots
(how many take their A operand from registers), the waits on them, its async and tensor-memory copies,
its special-function ops (MUFU: exp2, rsqrt).
`compile_for_hopper`, `report` and `loop_report` take a `module`, so a variant of kernels/prefill.py (same
kernel registry) compiles the same way; Helion's tensor descriptors are compiled as on a Hopper GPU.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile

import helion
import torch
import triton
from helion import _compat as helion_compat
from helion.autotuner import config_spec as helion_config_spec
from kdakit.kernels import prefill, shapes
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

# H100 SXM and H200: the SMs a persistent grid's constexpr `_NUM_SM` is sized for; the register file a
# register cap is checked against
HOPPER_SMS = 132
HOPPER_REGISTERS_PER_SM = 65536

_PTR = {torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.int32: "*i32", torch.int64: "*i64"}


def example_args(T=130, M=3) -> dict[str, tuple]:
    """Arguments of each kernel at the PR's head sizes (only dtypes, and sizes for specialization, matter)."""
    H = HV = shapes.get("model", "heads")
    K = V = shapes.get("model", "head_dim")
    lower_bound = shapes.get("model", "lower_bound")
    bf, e = torch.bfloat16, torch.empty
    rows = T * HV
    cu, ends = torch.zeros(2, dtype=torch.int32), torch.ones(1, dtype=torch.int64)
    q, k, v = e(T, H * K, dtype=bf), e(T, H * K, dtype=bf), e(T, HV * V, dtype=bf)
    gcum, act64, beta = e(rows, K), e(rows, 64, dtype=bf), e(rows, dtype=bf)
    rn, spans, scale = e(rows), torch.zeros(M, 2, dtype=torch.int64), 0.088
    chunk_count, chunk_lanes = torch.full((1,), M, dtype=torch.int64), torch.zeros(M, dtype=torch.int32)
    wkq = [e(rows, K, dtype=bf) for _ in range(3)]
    chunk = (spans, chunk_count, chunk_lanes)
    # the state pass's one sequence (its pool slot, tracked chunk, track mode and slot, and count: five
    # tensors, since Helion passes one tensor given twice as one argument) in one sequence lane
    slot, tracked, mode, dst, seqs = (torch.ones(1, dtype=torch.int64) for _ in range(5))
    count_range = torch.tensor([0, 1], dtype=torch.int64)
    lane = torch.zeros(1, dtype=torch.int32)
    # fmt: off
    return {
        "gate": (e(rows, K, dtype=bf), e(HV), e(HV * K), *chunk, gcum, lower_bound, 2, True, HV),
        "intra": (q, k, gcum, beta, rn, rn, *chunk, e(rows, 64), act64, scale, True, True, HV, HV // H),
        "solve": (e(rows, 64), *chunk, act64, HV),
        "recompute": (q, k, v, gcum, beta, rn, rn, *chunk, act64, *wkq, e(M * HV, K), scale, True, HV,
                      HV // H),
        # (the output in a buffer of its own, as SGLang's prefill graph hands it over)
        "state": (wkq[0], v, e(T, HV * V, dtype=bf), *wkq[1:], act64, e(M * HV * K), e(3 * HV * V, K), slot,
                  cu, ends, e(1, K), tracked, mode, dst, lane, seqs, count_range, 0, HV),
    }
    # fmt: on


def _launch_specialization(arg_names, tensors: dict, values: dict) -> tuple[dict, dict]:
    """What Triton's launcher specializes on a GPU: integer arguments equal to 1 become constants, pointers
    (the caching allocator aligns them) and integers divisible by 16 get `tt.divisibility` 16. Without these
    the compile is of another kernel: unvectorized loads that the pipeliner does not stage (the state pass
    then reports 62 KiB of shared memory at any num_stages instead of 178 KiB at 3)."""
    constants, attrs = {}, {}
    for i, arg in enumerate(arg_names):
        if arg in tensors:
            attrs[(i,)] = [["tt.divisibility", 16]]
            continue
        match = re.fullmatch(r"(\w+)_(stride|size)_(\d+)", arg)
        if match and match.group(1) in tensors:
            tensor, dim = tensors[match.group(1)], int(match.group(3))
            value = tensor.stride(dim) if match.group(2) == "stride" else tensor.size(dim)
        else:
            value = values.get(arg)
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        if value == 1:
            constants[arg] = 1
        elif value % 16 == 0:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return constants, attrs


def _host_constexprs(jit, code: str) -> dict[str, int]:
    """The kernel's `tl.constexpr` parameters (reduction sizes such as `_RDIM_SIZE_8`) with the values
    Helion's host code assigns them before the launch."""
    values = {}
    for param in (p for p in jit.params if p.is_constexpr):
        if param.name == "_NUM_SM":  # a persistent grid's size: the host asks the GPU
            values[param.name] = HOPPER_SMS
            continue
        match = re.search(rf"^\s+{param.name} = (\d+)$", code, re.M)
        if match is None:
            raise ValueError(f"no value for the constexpr {param.name} in the host code")
        values[param.name] = int(match.group(1))
    return values


@contextlib.contextmanager
def _as_on_hopper():
    """Helion decides two things by the GPU present: it offers tensor descriptors (TMA) only with a GPU of
    capability 9 or newer (otherwise `indexing="tensor_descriptor"` lowers to pointer loads), and it
    validates `maxnreg` only where CUDA is available (it takes a persistent `pid_type` there). On this
    machine both would compile, or accept, another kernel than a Hopper GPU runs."""
    saved = (helion_compat._supports_tensor_descriptor, helion_compat._supports_maxnreg,
             helion_config_spec._regs_per_block)  # fmt: skip
    helion_compat._supports_tensor_descriptor = lambda: True
    helion_compat._supports_maxnreg = lambda: True
    helion_config_spec._regs_per_block = lambda: HOPPER_REGISTERS_PER_SM
    try:
        yield
    finally:
        (helion_compat._supports_tensor_descriptor, helion_compat._supports_maxnreg,
         helion_config_spec._regs_per_block) = saved  # fmt: skip


def compile_for_hopper(name: str, args: tuple, workdir: str, module=None):
    """Helion's Triton code for the kernel's configured block sizes, compiled for sm_90a with the launcher's
    specializations. `module`: a prefill module with kdakit's kernel registry (default: kdakit's own; a
    variant module of the same layout compiles the same way). Returns Triton's compiled kernel."""
    module = module or prefill
    config = module._kernels[name].configs[0]
    # a kernel object of its own: a bound kernel traced here without descriptors would be reused otherwise
    kernel = helion.kernel(module._FNS[name], static_shapes=False, config=config,
                           ignore_warnings=module._IGNORED)  # fmt: skip
    with _as_on_hopper():
        code = kernel.bind(args).to_triton_code(config)
    path = os.path.join(workdir, f"{name}.py")
    with open(path, "w") as f:
        f.write(code)
    spec = importlib.util.spec_from_file_location(f"kdakit_ptxas_{name}", path)
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)
    jit = next(v for k, v in vars(generated).items() if k.startswith("_helion_") and hasattr(v, "arg_names"))
    params = list(inspect.signature(module._FNS[name]).parameters)
    tensors = {p: a for p, a in zip(params, args, strict=False) if isinstance(a, torch.Tensor)}
    floats = {p for p, a in zip(params, args, strict=False) if isinstance(a, float)}
    signature = {
        a: _PTR[tensors[a].dtype] if a in tensors else ("fp32" if a in floats else "i32")
        for a in jit.arg_names
    }
    constants, attrs = _launch_specialization(jit.arg_names, tensors, dict(zip(params, args, strict=False)))
    constants.update(_host_constexprs(jit, code))
    for arg in constants:
        signature[arg] = "constexpr"
    options = {
        "num_warps": config.config.get("num_warps", 4),
        "num_stages": config.config.get("num_stages", 1),
    }
    if config.config.get("maxnreg"):  # the register cap Helion passes to the launch
        options["maxnreg"] = config.config["maxnreg"]
    return triton.compile(ASTSource(jit, signature, constants, attrs), target=GPUTarget("cuda", 90, 32),
                          options=options)  # fmt: skip


def _tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def report(name: str, args: tuple, workdir: str, module=None, compiled=None) -> str:
    """ptxas's registers, spills and shared memory. `compiled`: a compile_for_hopper result to reuse."""
    compiled = compiled or compile_for_hopper(name, args, workdir, module)
    ptx = os.path.join(workdir, f"{name}.ptx")
    with open(ptx, "w") as f:
        f.write(compiled.asm["ptx"])
    command = [_tool("ptxas"), "-arch=sm_90a", "-v", ptx, "-o", os.devnull]
    out = subprocess.run(command, capture_output=True, text=True)
    usage = " ".join(
        line.split("info    :")[-1].strip()
        for line in out.stderr.splitlines()
        if "registers" in line or "spill" in line
    )
    warps, stages = compiled.metadata.num_warps, compiled.metadata.num_stages
    return f"{name:10s} warps={warps} stages={stages} smem={compiled.metadata.shared} | {usage}"


def sass(name: str, args: tuple, workdir: str, module=None, compiled=None) -> str:
    """The kernel's SASS for sm_90a, as nvdisasm prints it (`compiled` as in `report`)."""
    compiled = compiled or compile_for_hopper(name, args, workdir, module)
    cubin = os.path.join(workdir, f"{name}.cubin")
    with open(cubin, "wb") as f:
        f.write(compiled.asm["cubin"])
    return subprocess.run([_tool("nvdisasm"), "-c", cubin], capture_output=True, text=True, check=True).stdout


def dot_loop(listing: str) -> tuple[list[str] | None, int]:
    """The innermost loop of a SASS listing that issues tensor-core instructions (HGMMA, or HMMA for
    mma.sync; None if no loop does) and the listing's instruction count. A loop is a label and a later
    branch back to it; what a step of a kernel's main loop costs is read off its body."""
    labels: dict[str, int] = {}
    instructions: list[str] = []
    for line in listing.splitlines():
        label = re.match(r"\s*\.L_x_(\d+):", line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        instruction = re.search(r"/\*[0-9a-f]+\*/\s+(.*?)\s*;", line)
        if instruction:
            instructions.append(instruction.group(1))
    loops = []
    for end, text in enumerate(instructions):
        branch = re.search(r"\bBRA\b.*\.L_x_(\d+)", text)
        if branch and labels.get(branch.group(1), end + 1) <= end:
            body = instructions[labels[branch.group(1)] : end + 1]
            if any(re.search(r"\b(HGMMA|HMMA)\.", i) for i in body):
                loops.append(body)
    return min(loops, key=len, default=None), len(instructions)


def opcodes(instructions: list[str]) -> collections.Counter:
    """Opcode counts (the mnemonic before its first dot; predicates dropped)."""
    return collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", i).split()[0].split(".")[0] for i in instructions)


def loop_report(name: str, args: tuple, workdir: str, module=None, compiled=None) -> str:
    body, total = dot_loop(sass(name, args, workdir, module, compiled))
    if body is None:
        return f"{name:10s} {total} instructions; no loop with tensor-core instructions"
    counts = opcodes(body)
    waits = sum(1 for i in body if i.startswith("WARPGROUP.DEPBAR"))
    # a wgmma takes A from shared memory (a descriptor) or from registers, which something had to fill
    a_from_registers = sum(1 for i in body if re.match(r"HGMMA\.\S+ R\d+, R\d+", i))
    return (
        f"{name:10s} {total} instructions; dot loop {len(body)}: HGMMA {counts['HGMMA']} "
        f"({a_from_registers} with A from registers), HMMA {counts['HMMA']}, wgmma waits {waits}, "
        f"LDGSTS {counts['LDGSTS']}, TMA copies {counts['UTMALDG']}, LDSM {counts['LDSM']}, "
        f"MUFU {counts['MUFU']}, spills {counts['LDL'] + counts['STL']}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="{}", help="JSON {kernel: config} overriding the defaults")
    ap.add_argument("--loops", action="store_true", help="also each kernel's SASS and its dot loop's counts")
    args = ap.parse_args(argv)
    prefill.configure(json.loads(args.configs))
    with tempfile.TemporaryDirectory() as workdir:
        for name, kernel_args in example_args().items():
            compiled = compile_for_hopper(name, kernel_args, workdir)
            print(report(name, kernel_args, workdir, compiled=compiled), flush=True)
            if args.loops:
                print(loop_report(name, kernel_args, workdir, compiled=compiled), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
