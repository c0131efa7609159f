"""Make Helion kernels runnable on a CPU under Triton's interpreter (`TRITON_INTERPRET=1`).

Under `TRITON_INTERPRET=1` Helion still generates Triton code, and Triton's interpreter runs it with numpy, so
CPU tests exercise the same code, block sizes and masks as the GPU. Four interpreter gaps break that, and
`install()` closes them (it changes nothing on a GPU run):

1. `libdevice.*` math (what Helion emits for `torch.exp`, `torch.log`, `torch.sqrt`, ...) are stubs that
   return None in the interpreter; they are forwarded to `tl.math`, which the interpreter implements.
2. `tl.dot` on bf16 operands multiplies the raw uint16 bit patterns; bf16 operands are decoded to fp32 first.
3. `triton.autotune` benchmarks through a GPU driver; in the interpreter the first surviving config is used.
4. Inline PTX is not run at all; the one form the kernels use (`mul.rn.f32` by a constant) runs in numpy.

Also, `@triton.jit` helpers decorated before TRITON_INTERPRET was set (Inductor's `triton_helpers`, which the
generated code calls) are swapped for interpreted twins, so the variable need not precede every import.

Usage, before any Triton or Helion import runs a kernel:

    import os
    os.environ["TRITON_INTERPRET"] = "1"     # must be set before triton is imported
    from kdakit.kernels.tools import interpret
    interpret.install()

`install()` is idempotent and returns True when it patched anything; `uninstall()` restores Triton (use it
when the same process later runs kernels on a GPU, e.g. a pytest session with both CPU and GPU tests).
"""

from __future__ import annotations

import contextlib
import os
import re

_installed = False
_users = 0  # install() calls not yet matched by uninstall(): nested users keep the shim in place
_restore: list[tuple[object, str, object]] = []


def _patch(owner, name: str, value) -> None:
    _restore.append((owner, name, getattr(owner, name, None)))
    setattr(owner, name, value)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _forward_libdevice() -> None:
    import triton.language as tl
    from triton.language.extra import libdevice

    def forward(name: str):
        def fn(*args, _semantic=None, **_kwargs):
            # resolved at call time: the interpreter swaps tl.math's builtins for its own while it runs
            return getattr(tl.math, name)(*args)

        fn.__name__ = name
        return fn

    for name in dir(libdevice):
        if name.startswith("_") or not callable(getattr(libdevice, name)):
            continue
        if hasattr(tl.math, name):
            _patch(libdevice, name, forward(name))

    # A few libdevice functions have no tl.math twin; compose them from ones that do.
    def log1p(x, _semantic=None):
        return tl.math.log(x + 1.0)

    def expm1(x, _semantic=None):
        return tl.math.exp(x) - 1.0

    def tanh(x, _semantic=None):
        return 2.0 * tl.sigmoid(2.0 * x) - 1.0

    def pow(x, y, _semantic=None):
        return tl.math.exp2(y * tl.math.log2(x))

    def fast_dividef(x, y, _semantic=None):  # the GPU's div.approx; here a correctly rounded divide
        return x / y

    for fn in (log1p, expm1, tanh, pow, fast_dividef):
        _patch(libdevice, fn.__name__, fn)


def _decode_bf16_dot() -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def as_fp32(handle):
        if handle.dtype.scalar == tl.bfloat16:
            bits = handle.data.astype(np.uint32) << 16
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
        return handle

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, as_fp32(a), as_fp32(b), d, input_precision, max_num_imprecise_acc)

    _patch(interpreter.InterpreterBuilder, "create_dot", create_dot)


# Inline PTX the kit's kernels use, as numpy: mul.rn.f32 by a constant (a multiply rounded on its own, which
# LLVM may not contract into an fma) and ex2.approx.ftz.f32 (exp2, subnormal results flushed to zero). Any
# other asm still fails, as in plain Triton.
_MUL_RN_F32 = re.compile(r"\s*mul\.rn\.f32 \$0, \$1, 0f([0-9A-Fa-f]{8});\s*")
_EX2_FTZ_F32 = re.compile(r"\s*ex2\.approx\.ftz\.f32 \$0, \$1;\s*")


def _known_inline_asm() -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    class _Results:
        def __init__(self, handles):
            self.handles = handles

        def get_result(self, i):
            return self.handles[i]

    def create_inline_asm(self, asm, constraints, values, types, is_pure, pack):
        if len(values) == 1 and _EX2_FTZ_F32.fullmatch(asm):
            power = np.exp2(values[0].data.astype(np.float32))
            flushed = np.where(np.abs(power) < np.finfo(np.float32).tiny, np.float32(0), power)
            return _Results([interpreter.TensorHandle(flushed.astype(np.float32), tl.float32)])
        match = _MUL_RN_F32.fullmatch(asm)
        if match is None or len(values) != 1:
            raise NotImplementedError(f"inline asm the interpreter shim does not know: {asm!r}")
        constant = np.frombuffer(bytes.fromhex(match.group(1))[::-1], dtype=np.float32)[0]
        product = values[0].data.astype(np.float32) * constant
        return _Results([interpreter.TensorHandle(product.astype(np.float32), tl.float32)])

    _patch(interpreter.InterpreterBuilder, "create_inline_asm", create_inline_asm)


def _first_autotune_config() -> None:
    from triton.runtime import autotuner

    original = autotuner.Autotuner.prune_configs

    def prune_configs(self, kwargs):
        return original(self, kwargs)[:1]

    _patch(autotuner.Autotuner, "prune_configs", prune_configs)


def _interpret_jit_helpers() -> None:
    import sys

    from torch._inductor.runtime import triton_helpers  # noqa: F401  (imported so it is patched too)
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    twins: dict[int, InterpretedFunction] = {}
    prefixes = ("triton.language", "torch._inductor.runtime.triton_helpers")
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith(prefixes):
            continue
        for name, obj in list(vars(module).items()):
            if isinstance(obj, JITFunction):
                twin = twins.setdefault(id(obj), InterpretedFunction(obj.fn))
                _patch(module, name, twin)


def _language_objects() -> list:
    """What Triton's interpreter patches when it runs a kernel (`_patch_lang`): the language modules, the
    tensor, dtype and descriptor classes."""
    import triton.language as tl

    return [tl, tl.core, tl.math, tl.core.tensor, tl.core.dtype, tl.core.tensor_descriptor_base]


_language_snapshot: list[tuple[object, dict]] = []


def _snapshot_language() -> None:
    _language_snapshot[:] = [(obj, dict(vars(obj))) for obj in _language_objects()]


def _restore_language() -> None:
    """Undo what the interpreter left patched. Triton restores its patches after a launch, but not after a
    device-function call (`InterpretedFunction.__call__`, e.g. Inductor's `triton_helpers` twins above):
    those stay, and a later real compile in the same process then fails inside `triton.language`."""
    for obj, saved in _language_snapshot:
        for name in [n for n in vars(obj) if n not in saved]:
            delattr(obj, name)
        for name, value in saved.items():
            if vars(obj).get(name) is not value and name not in ("__dict__", "__weakref__"):
                setattr(obj, name, value)
    _language_snapshot.clear()


def install() -> bool:
    """Patch Triton's interpreter (only when TRITON_INTERPRET is set). Returns True if patched."""
    global _installed, _users
    if not interpreting():
        return _installed
    _users += 1
    if _installed:
        return True
    _snapshot_language()
    _forward_libdevice()
    _decode_bf16_dot()
    _known_inline_asm()
    _first_autotune_config()
    _interpret_jit_helpers()
    _installed = True
    return True


def uninstall() -> None:
    """Undo `install()` once every install() has been matched by an uninstall()."""
    global _installed, _users
    _users = max(0, _users - 1)
    if _users:
        return
    while _restore:
        owner, name, value = _restore.pop()
        setattr(owner, name, value)
    _restore_language()
    _installed = False


@contextlib.contextmanager
def sglang_builtin_aliases(prefixes: tuple[str, ...] = ("sglang.kernels",)):
    """Under Triton's interpreter, kernel modules that bound a Triton builtin to a global at import
    (`exp = tl.exp` in SGLang's fla `op.py`, then `from ...op import exp`) call the compiled-mode builtin,
    which raises; the aliases forward to `tl.math` at call time instead, which the interpreter swaps. The
    interpreter also lacks bf16 scalar constants (`get_bf16`), which SGLang's Triton KDA output kernel
    makes. `prefixes`: the module names patched (FLA's `fla.` has the same aliases)."""
    import sys

    import torch
    import triton.language as tl

    builtins = {}
    for name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid"):
        for owner in (tl, tl.math):
            if hasattr(owner, name):
                builtins[id(getattr(owner, name))] = name

    def forward(name):
        def fn(*args, **kwargs):
            kwargs.pop("_semantic", None)
            return getattr(tl.math, name)(*args, **kwargs)

        return fn

    patched = []
    from triton.runtime import interpreter

    def get_bf16(self, value):  # bf16 constants, which the interpreter stores as uint16 bit patterns
        bits = torch.tensor([value], dtype=torch.float32).bfloat16().view(torch.int16).numpy().view("uint16")
        return interpreter.TensorHandle(bits, tl.bfloat16)

    if not hasattr(interpreter.InterpreterBuilder, "get_bf16"):
        interpreter.InterpreterBuilder.get_bf16 = get_bf16
        patched.append((interpreter.InterpreterBuilder, "get_bf16", None))
    for mod_name, module in list(sys.modules.items()):
        if not mod_name.startswith(prefixes) or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if id(value) in builtins and not attr.startswith("__"):
                patched.append((module, attr, value))
                setattr(module, attr, forward(builtins[id(value)]))
    try:
        yield
    finally:
        for owner, attr, value in patched:
            if value is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, value)
