"""SGLang's own KDA kernels (Triton and upstream Helion), for tests and the microbenchmark.

Where SGLang is installed and importable (the image), its modules are used as they are. Elsewhere (the
lent GPU, CPU CI) the kernel modules are extracted at run time from the pinned SGLang wheel into a
git-ignored folder, next to a handful of tiny stand-ins for the top-level SGLang helpers they import
(`sglang.srt.utils`, `sglang.kernels.jit.utils`). The kernel files themselves are never modified and never
stored in this repository.

    kernels = load()                    # "auto": installed SGLang if it imports, else the extracted tree
    kernels.helion_packed_decode(...)   # SGLang's own signatures (the pinned version's)
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from kdakit.kernels import integration

from kdakit.facts import pins
from kdakit.facts.errors import UsageError

# Kernel modules taken from the wheel (dotted names); their package folders get stand-in __init__ files
# unless listed in REAL_PACKAGES.
KERNEL_MODULES = {
    "triton_recurrent": "sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent",
    "triton_packed": "sglang.kernels.ops.attention.fla.fused_recurrent",
    "triton_cuda_dispatch": "sglang.kernels.ops.attention.kda_packed_decode",
    "triton_chunk": "sglang.kernels.ops.attention.fla.kda",
    # what a layer's verify runs around the recurrence: the conv1d update, and ReplaySSM's commit fold
    "conv1d": "sglang.kernels.ops.mamba.causal_conv1d_triton",
    "replayssm_commit": "sglang.kernels.ops.attention.linear.kda_replayssm_spec_decode",
    # SGLang's Helion entry points: the modules the integration patch switches away from
    **{f"helion_{phase}": module for phase, module in integration.UPSTREAM_MODULES.items()},
}
# Whole folders extracted from the wheel (all their .py files).
WHEEL_FOLDERS = (
    "sglang/kernels/ops/attention/fla/",
    "sglang/kernels/ops/attention/helion/",
    # SGLang's CUDA-JIT toolchain, for the packed decode's CUDA fast path (used when msgspec and tvm_ffi
    # import; see _JIT_UTILS_SHIM).
    "sglang/kernels/jit/utils/",
    "sglang/kernels/jit/include/",
)
WHEEL_FILES = (
    "sglang/kernels/ops/attention/linear/__init__.py",
    "sglang/kernels/ops/attention/linear/fused_sigmoid_gating_recurrent.py",
    "sglang/kernels/ops/attention/linear/kda_replayssm_spec_decode.py",
    "sglang/kernels/ops/mamba/causal_conv1d_triton.py",
    "sglang/kernels/ops/attention/kda_packed_decode.py",
    "sglang/kernels/jit/csrc/attention/kda_packed_decode.cuh",
    "sglang/srt/environ.py",
)
JIT_SOURCE_SUFFIXES = (".py", ".h", ".cuh", ".hpp", ".inc")
# SGLang's own package __init__ files import most of SGLang; these stand in for them.
STUB_PACKAGES = (
    "sglang",
    "sglang/kernels",
    "sglang/kernels/ops",
    "sglang/kernels/ops/attention",
    "sglang/kernels/ops/mamba",
    "sglang/kernels/jit",
    "sglang/srt",
)
MARKER = "kdakit-extract.json"
LAYOUT = 3  # bump when the extracted file set changes, so old trees are extracted again

_SRT_UTILS_STUB = '''"""kdakit stand-in for sglang.srt.utils: only what the KDA kernel modules import."""
import functools

import torch

from sglang.srt.utils.common import torch_release  # noqa: F401


def is_hip():
    return torch.version.hip is not None


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda is not None


def is_npu():
    return False


def is_cpu():
    return False


def cpu_has_amx_support():
    return False


def is_gfx95_supported():
    return False


@functools.lru_cache(maxsize=1)
def get_device_sm():
    if not torch.cuda.is_available():
        return 0
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


@functools.lru_cache(maxsize=1)
def is_sm90_supported():
    return is_cuda() and torch.cuda.get_device_capability()[0] == 9


def cdiv(a, b):
    return -(a // -b)


def next_power_of_2(n):
    return 1 << (int(n) - 1).bit_length() if n > 0 else 1
'''

_SRT_UTILS_COMMON_STUB = '''"""kdakit stand-in for sglang.srt.utils.common."""
import torch
from packaging import version

torch_release = version.parse(torch.__version__).release


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda is not None


def get_cuda_version():
    return tuple(map(int, torch.version.cuda.split("."))) if torch.version.cuda else (0, 0)
'''

_SGLANG_UTILS_STUB = '''"""kdakit stand-in for sglang.utils."""
import os


def is_in_ci():
    return os.environ.get("SGLANG_IS_IN_CI", "false").lower() in ("1", "true")
'''

_JIT_UTILS_SHIM = '''"""kdakit stand-in for sglang.kernels.jit.utils' __init__ (which only re-exports).

SGLang's own JIT toolchain (the modules beside this file) needs msgspec and tvm_ffi; where both import, its
names are re-exported and the CUDA-JIT packed decode builds with nvcc as in SGLang. Elsewhere the fallbacks
below stand in: the architecture and PDL answers the Triton kernels read are real, and `load_jit` raises
CudaJitUnavailable.
"""
import functools
import importlib.util

import torch


class CudaJitUnavailable(RuntimeError):
    pass


TOOLCHAIN = all(importlib.util.find_spec(m) is not None for m in ("msgspec", "tvm_ffi"))

if TOOLCHAIN:
    from sglang.kernels.jit.utils.arch import get_jit_cuda_arch, is_arch_support_pdl  # noqa: F401
    from sglang.kernels.jit.utils.common import cache_once  # noqa: F401
    from sglang.kernels.jit.utils.compile import load_jit, make_cpp_args  # noqa: F401
else:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class ArchInfo:
        major: int
        minor: int
        suffix: str = ""

    def cache_once(fn):
        return functools.lru_cache(maxsize=None)(fn)

    @functools.lru_cache(maxsize=1)
    def get_jit_cuda_arch():
        if not torch.cuda.is_available():
            return ArchInfo(0, 0)
        major, minor = torch.cuda.get_device_capability()
        return ArchInfo(major, minor, "a" if major >= 9 else "")

    def is_arch_support_pdl():
        return torch.version.hip is None and get_jit_cuda_arch().major >= 9

    def make_cpp_args(*args):
        return ", ".join(str(a).lower() if isinstance(a, bool) else str(a) for a in args)

    def load_jit(*args, **kwargs):
        raise CudaJitUnavailable(
            "SGLang's CUDA-JIT kernels need its JIT toolchain's Python packages msgspec and tvm_ffi "
            "(apache-tvm-ffi), absent here"
        )
'''


_STUB_FILES = {
    "sglang/srt/utils/__init__.py": _SRT_UTILS_STUB,
    "sglang/srt/utils/common.py": _SRT_UTILS_COMMON_STUB,
    "sglang/kernels/jit/utils/__init__.py": _JIT_UTILS_SHIM,
    "sglang/utils.py": _SGLANG_UTILS_STUB,
}


def sglang_version() -> str:
    return pins.package("sglang")


def cache_dir() -> Path:
    """Where downloaded wheels and extracted trees live ($KDAKIT_CACHE_DIR, default ~/.cache/kdakit)."""
    env = os.environ.get("KDAKIT_CACHE_DIR")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "kdakit"


def default_extract_dir() -> Path:
    env = os.environ.get("KDAKIT_UPSTREAM_DIR")
    if env:
        return Path(env)
    return cache_dir() / f"sglang-{sglang_version()}"


def wheel_folders() -> list[Path]:
    """Where a pinned wheel may already lie: the cache, and `make setup`'s wheel folder of this checkout and
    of the current directory's."""
    checkout = Path(__file__).resolve().parents[2]
    return [cache_dir() / "wheels", checkout / ".cache" / "wheels", Path.cwd() / ".cache" / "wheels"]


def _wheel_candidates() -> list[Path]:
    pattern = f"sglang-{sglang_version()}-*.whl"
    found: list[Path] = []
    env = os.environ.get("KDAKIT_SGLANG_WHEEL")
    if env:
        found.append(Path(env))
    for folder in wheel_folders():
        if folder.is_dir():
            found.extend(sorted(folder.glob(pattern)))
    return found


def find_wheel(download: bool = True) -> Path:
    """The pinned SGLang wheel: $KDAKIT_SGLANG_WHEEL, one in wheel_folders(), else `pip download` it."""
    for path in _wheel_candidates():
        if path.is_file():
            return path
    if not download:
        raise FileNotFoundError(
            f"no sglang-{sglang_version()} wheel found; run `kdakit kernels fetch-upstream` "
            "or set KDAKIT_SGLANG_WHEEL"
        )
    dest = cache_dir() / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    # Only its .py files are used, so any platform's wheel will do: ask for the one PyPI has.
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--retries", "2",
        "--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux_2_34_x86_64",
        "-d", str(dest), f"sglang=={sglang_version()}",
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip download of sglang=={sglang_version()} failed:\n{result.stderr[-2000:]}")
    wheels = sorted(dest.glob(f"sglang-{sglang_version()}-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download did not leave an sglang-{sglang_version()} wheel in {dest}")
    return wheels[0]


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def wheel_members(wheel: Path) -> list[str]:
    """The wheel files the extracted kernel tree needs."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    members = [n for n in names if n.endswith(JIT_SOURCE_SUFFIXES) and n.startswith(WHEEL_FOLDERS)]
    members += [n for n in WHEEL_FILES if n in names]
    members = [n for n in members if n not in _STUB_FILES]  # replaced by our stand-ins
    missing = [n for n in WHEEL_FILES if n not in names]
    if missing or not members:
        raise RuntimeError(f"{wheel.name} lacks the expected SGLang kernel files: {missing}")
    return sorted(set(members))


def extract(dest: Path | None = None, wheel: Path | None = None, force: bool = False) -> Path:
    """Extract SGLang's KDA kernel modules plus stand-ins into `dest`; returns `dest` (a sys.path root)."""
    dest = Path(dest) if dest is not None else default_extract_dir()
    marker = dest / MARKER
    if marker.is_file() and not force:
        info = json.loads(marker.read_text())
        if info.get("sglang") == sglang_version() and info.get("layout") == LAYOUT:
            return dest
    wheel = Path(wheel) if wheel is not None else find_wheel()
    members = wheel_members(wheel)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        for name in members:
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
    for package in STUB_PACKAGES:
        init = tmp / package / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        dotted = package.replace("/", ".")
        init.write_text(f'"""kdakit stand-in: the real {dotted} imports all of SGLang."""\n')
    for name, text in _STUB_FILES.items():
        target = tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    info = {"sglang": sglang_version(), "layout": LAYOUT, "wheel": wheel.name, "sha256": _sha256(wheel)}
    info["files"] = members
    (tmp / MARKER).write_text(json.dumps(info, indent=1) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def _purge_sglang_modules() -> None:
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]


def _installed_sglang() -> str | None:
    """Version of an installed SGLang whose kernel modules import, else None."""
    try:
        from importlib.metadata import version

        installed = version("sglang")
        # A --no-deps install may lack what the CUDA-JIT dispatch imports (msgspec): then the extracted
        # tree, whose stand-ins degrade that one arm only, is the better source.
        importlib.import_module(KERNEL_MODULES["triton_recurrent"])
        importlib.import_module(KERNEL_MODULES["triton_cuda_dispatch"])
        return installed
    except Exception:
        _purge_sglang_modules()
        return None


@dataclasses.dataclass
class UpstreamKernels:
    """SGLang's KDA kernel callables. A field is None when its module failed to import (see `missing`)."""

    source: str  # "installed" or "extracted:<path>"
    triton_recurrent: Any = None  # fused_sigmoid_gating_delta_rule_update: non-packed decode and verify
    triton_packed_decode_dispatch: Any = None  # fused_recurrent_kda_packed_decode as the server calls it
    triton_chunk_kda: Any = None
    helion_packed_decode: Any = None
    helion_verify: Any = None
    helion_chunk_kda: Any = None
    conv1d_update: Any = None  # causal_conv1d_update: the conv over a verify's draft tokens
    replayssm_commit: Any = None  # commit_kda_replayssm_spec: ReplaySSM's fold of one layer
    modules: dict[str, Any] = dataclasses.field(default_factory=dict)
    missing: dict[str, str] = dataclasses.field(default_factory=dict)

    def triton_packed_decode(self, *args, **kwargs):
        """The pure Triton packed kernel: SGLang's CUDA-JIT fast path (B >= 8, fp32 state) turned off."""
        if self.triton_packed_decode_dispatch is None:
            raise RuntimeError(f"Triton packed decode unavailable: {self.missing.get('triton_packed')}")
        with cuda_jit_dispatch(self, enabled=False):
            return self.triton_packed_decode_dispatch(*args, **kwargs)


@contextlib.contextmanager
def cuda_jit_dispatch(kernels: UpstreamKernels, enabled: bool):
    """Turn SGLang's CUDA-JIT packed-decode dispatch off (or leave it as is) for the calls inside."""
    module = kernels.modules.get("triton_cuda_dispatch")
    if enabled or module is None:
        yield
        return
    covered = module.covered
    module.covered = lambda *args, **kwargs: False
    try:
        yield
    finally:
        module.covered = covered


_LOADED: dict[str, UpstreamKernels] = {}


SOURCES = ("auto", "installed", "extracted")


# UpstreamKernels attribute -> "KERNEL_MODULES key:the SGLang function it is"
ENTRY_POINTS = {
    "triton_recurrent": "triton_recurrent:fused_sigmoid_gating_delta_rule_update",
    "triton_packed_decode_dispatch": "triton_packed:fused_recurrent_kda_packed_decode",
    "triton_chunk_kda": "triton_chunk:chunk_kda",
    "conv1d_update": "conv1d:causal_conv1d_update",
    "replayssm_commit": "replayssm_commit:commit_kda_replayssm_spec",
    **{
        attr: f"helion_{phase}:{integration.ENTRY_POINTS[phase]}"
        for phase, attr in (
            ("decode", "helion_packed_decode"),
            ("verify", "helion_verify"),
            ("prefill", "helion_chunk_kda"),
        )
    },
}


def load(source: str = "auto", extract_dir: Path | None = None) -> UpstreamKernels:
    """Import SGLang's KDA kernels. source: one of SOURCES (auto: installed if it imports, else extracted)."""
    if source not in SOURCES:
        raise UsageError(f"unknown upstream source {source!r}: use auto, installed or extracted")
    key = f"{source}:{extract_dir}"
    if key in _LOADED:
        return _LOADED[key]
    used = None
    if source in ("auto", "installed"):
        installed = _installed_sglang()
        if installed == sglang_version():
            used = "installed"
        elif source == "installed":
            raise RuntimeError(
                f"installed sglang is {installed or 'missing or not importable'}, pinned {sglang_version()}"
            )
    if used is None:
        root = extract(extract_dir)
        _purge_sglang_modules()
        sys.path.insert(0, str(root))
        used = f"extracted:{root}"
    kernels = UpstreamKernels(source=used)
    for key_name, module_name in KERNEL_MODULES.items():
        try:
            kernels.modules[key_name] = importlib.import_module(module_name)
        except Exception as exc:  # e.g. helion missing: the Triton arms still work
            kernels.missing[key_name] = f"{type(exc).__name__}: {exc}"
    for attr, entry in ENTRY_POINTS.items():
        module_key, function = entry.split(":")
        if module_key in kernels.modules:
            setattr(kernels, attr, getattr(kernels.modules[module_key], function))
    _LOADED[key] = kernels
    return kernels
