"""kdakit.kernels.tools.interpret: the CPU interpreter shim leaves Triton as it found it."""

from __future__ import annotations

import importlib.util
import sys

import torch
import triton.language as tl
from kdakit.kernels.tools.testing import interpreter

HELPER = """
import triton
import triton.language as tl
from triton.language import core  # noqa: F401  (in the helper's globals, as in Inductor's triton_helpers)


@triton.jit
def plus_one(x):
    return x + 1
"""

KERNEL = """
import triton
import triton.language as tl
from kdakit_interpret_helper import plus_one


@triton.jit
def kernel(ptr):
    tl.store(ptr, plus_one(tl.load(ptr)))
"""


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_uninstall_restores_what_the_interpreter_left_patched(tmp_path):
    """Triton's interpreter patches triton.language for a device function called from a kernel and does not
    undo it where the helper's module sees `triton.language.core` and the kernel's does not (so Inductor's
    triton_helpers, which Helion's code calls); a real compile later in the same process then fails. The
    shim's uninstall puts the language back."""
    before = {name: getattr(tl.core, name) for name in dir(tl.core) if not name.startswith("_")}
    (tmp_path / "kdakit_interpret_helper.py").write_text(HELPER)
    (tmp_path / "kdakit_interpret_kernel.py").write_text(KERNEL)
    try:
        with interpreter():  # imported inside, so their jit functions are interpreted ones
            _load(tmp_path / "kdakit_interpret_helper.py", "kdakit_interpret_helper")
            module = _load(tmp_path / "kdakit_interpret_kernel.py", "kdakit_interpret_kernel")
            data = torch.zeros(1)
            module.kernel[(1,)](data)
    finally:
        sys.modules.pop("kdakit_interpret_helper", None)
        sys.modules.pop("kdakit_interpret_kernel", None)
    assert data.item() == 1.0, "the kernel ran under the interpreter"
    assert [name for name, value in before.items() if getattr(tl.core, name, None) is not value] == []


ASM_KERNEL = """
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def kernel(x_ptr, y_ptr, q_ptr, ASM: tl.constexpr):
    offs = tl.arange(0, 8)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, y)
    tl.store(q_ptr + offs, libdevice.fast_dividef(x, 3.0))
"""


def test_the_shim_runs_the_inline_ptx_the_kernels_use_and_refuses_other_asm(tmp_path):
    """prefill's gate rounds x * log2(e) on its own with inline `mul.rn.f32` and divides with
    `fast_dividef`, intra forms its decay factors with `ex2.approx.ftz.f32`: under the interpreter they run
    in fp32 numpy; asm the shim does not know fails loudly instead of returning nothing."""
    (tmp_path / "kdakit_interpret_asm.py").write_text(ASM_KERNEL)
    x = torch.tensor([0.0, 1.0, -2.5, 3.1, 1e-3, 7.0, -100.0, -130.0])
    y, q = torch.empty(8), torch.empty(8)
    try:
        with interpreter():
            module = _load(tmp_path / "kdakit_interpret_asm.py", "kdakit_interpret_asm")
            module.kernel[(1,)](x, y, q, "mul.rn.f32 $0, $1, 0f3FB8AA3B;")
            power = torch.empty(8)
            module.kernel[(1,)](x, power, q, "ex2.approx.ftz.f32 $0, $1;")
            refused = None
            try:
                module.kernel[(1,)](x, y.clone(), q, "add.rn.f32 $0, $1, $1;")
            except Exception as exc:  # noqa: BLE001 - the interpreter wraps what the shim raises
                refused = str(exc)
    finally:
        sys.modules.pop("kdakit_interpret_asm", None)
    assert torch.equal(y, x * torch.tensor(1.4426950216293335, dtype=torch.float32))
    assert torch.equal(q, x / 3.0)
    # exp2 in fp32 (to an ulp); 2^-130 is subnormal, flushed to zero as the instruction does
    assert torch.allclose(power[:7], torch.exp2(x[:7]), rtol=3e-7, atol=0.0) and power[7] == 0.0
    assert refused is not None and "does not know" in refused and "add.rn.f32" in refused
