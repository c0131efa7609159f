"""Register and spill counts of kdakit's prefill kernels for Hopper, on a machine without a GPU.

Helion generates each kernel's Triton code for the configured block sizes; Triton compiles it for sm_90a and
the bundled ptxas reports registers, spills and shared memory, so a config that spills (or fits two CTAs on
an SM) shows here before any GPU time is spent on it. It says nothing about time: `kdakit kernels bench`
and `kdakit kernels autotune` measure that on a GPU.

    python -m kdakit.kernels.tools.ptxas [--configs '{"state": {...}}']
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from kdakit.kernels import prefill, shapes
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

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
    # the state pass's one sequence (its pool slot, tracked chunk and count: three tensors, since Helion
    # passes one tensor given twice as one argument) in one sequence lane
    slot, tracked, seqs = (torch.ones(1, dtype=torch.int64) for _ in range(3))
    count_range = torch.tensor([0, 1], dtype=torch.int64)
    lane = torch.zeros(1, dtype=torch.int32)
    # fmt: off
    return {
        "gate": (e(rows, K, dtype=bf), e(HV), e(HV * K), cu, ends, gcum, spans, chunk_lanes, lower_bound, 2,
                 True, HV),
        "intra": (q, k, gcum, beta, rn, rn, *chunk, e(rows, 64), act64, scale, True, True, HV, HV // H),
        "solve": (e(rows, 64), *chunk, act64, HV),
        "recompute": (q, k, v, gcum, beta, rn, rn, *chunk, act64, *wkq, e(M * HV, K), scale, True, HV,
                      HV // H),
        "state": (wkq[0], v, *wkq[1:], act64, e(M * HV * K), e(3 * HV * V, K), slot, cu, ends, e(1, K),
                  tracked, lane, seqs, count_range, False, HV),
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
    for param in jit.params:
        if param.is_constexpr:
            match = re.search(rf"^\s+{param.name} = (\d+)$", code, re.M)
            if match is None:
                raise ValueError(f"no value for the constexpr {param.name} in the host code")
            values[param.name] = int(match.group(1))
    return values


def report(name: str, args: tuple, workdir: str) -> str:
    kernel = prefill._kernels[name]
    config = kernel.configs[0]
    code = kernel.bind(args).to_triton_code(config)
    path = os.path.join(workdir, f"{name}.py")
    with open(path, "w") as f:
        f.write(code)
    spec = importlib.util.spec_from_file_location(f"kdakit_ptxas_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    jit = next(v for k, v in vars(module).items() if k.startswith("_helion_") and hasattr(v, "arg_names"))
    params = list(inspect.signature(prefill._FNS[name]).parameters)
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
    warps, stages = config.config.get("num_warps", 4), config.config.get("num_stages", 1)
    compiled = triton.compile(
        ASTSource(jit, signature, constants, attrs), target=GPUTarget("cuda", 90, 32),
        options={"num_warps": warps, "num_stages": stages},
    )  # fmt: skip
    ptx = os.path.join(workdir, f"{name}.ptx")
    with open(ptx, "w") as f:
        f.write(compiled.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    out = subprocess.run([ptxas, "-arch=sm_90a", "-v", ptx, "-o", os.devnull], capture_output=True, text=True)
    usage = " ".join(
        line.split("info    :")[-1].strip()
        for line in out.stderr.splitlines()
        if "registers" in line or "spill" in line
    )
    return f"{name:10s} warps={warps} stages={stages} smem={compiled.metadata.shared} | {usage}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="{}", help="JSON {kernel: config} overriding the defaults")
    args = ap.parse_args(argv)
    prefill.configure(json.loads(args.configs))
    with tempfile.TemporaryDirectory() as workdir:
        for name, kernel_args in example_args().items():
            print(report(name, kernel_args, workdir), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
