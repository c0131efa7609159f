"""The SGLang integration: a small patch that makes SGLang's Helion KDA backend call kdakit's kernels.

The patch touches three files. SGLang's Helion adapter (`srt/layers/attention/linear/kernels/kda_helion.py`),
instead of importing SGLang's own Helion entry points, imports them from the modules that
`helion_kda_modules()` names, chosen once at import time from `KDAKIT_HELION_KERNELS`:

- `kdakit` (default): decode, verify and prefill from kdakit's kernels;
- `upstream`: SGLang's own Helion kernels, as if unpatched (the `helion-upstream` arm).

SGLang's KDA backend (`srt/layers/attention/linear/kda_backend.py`) also captures in its breakable prefill
CUDA graph an extend kernel that declares `takes_prefill_graph_tables`, and the graph's extend
(`srt/layers/attention/linear/kda_prefill_graph.py`) skips its masking pass over the padded output rows for
one that declares `zeroes_padded_rows`; for one that declares `writes_track_slots` it hands over the
radix-cache track modes and slots instead of a snapshot buffer and skips its own copy into the slots; and
to one that declares `writes_into_output` the backend hands the layer's output buffer, so the layer copies
nothing into it (the adapter copies these declarations from the prefill entry point and passes the slots and
the buffer on: kdakit's `chunk_kda` makes them, SGLang's Helion prefill does not).

The `--linear-attn-{prefill,decode,verify}-backend helion` flags keep working verbatim: the patch changes
which kernels the Helion backend calls, never how it is selected. ReplaySSM decode stays upstream.

This module must stay light (no torch import at its own import): the patched SGLang imports it at start-up,
and `helion_kda_modules()` then imports the chosen kernel modules, so a broken one stops the server there.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from pathlib import Path

from kdakit.kernels.integration.unified_diff import PatchError, apply_hunks, parse

ENV_VAR = "KDAKIT_HELION_KERNELS"
CHOICES = ("kdakit", "upstream")
DEFAULT = "kdakit"
ADAPTER = "sglang/srt/layers/attention/linear/kernels/kda_helion.py"
ADAPTER_MODULE = "sglang.srt.layers.attention.linear.kernels.kda_helion"
UPSTREAM_MODULES = {
    "decode": "sglang.kernels.ops.attention.helion.kda_decode",
    "verify": "sglang.kernels.ops.attention.helion.kda_verify",
    "prefill": "sglang.kernels.ops.attention.helion.kda_prefill",
}
KDAKIT_MODULES = {
    "decode": "kdakit.kernels.decode",
    "verify": "kdakit.kernels.verify",
    "prefill": "kdakit.kernels.prefill",
}
ENTRY_POINTS = {
    "decode": "helion_fused_recurrent_kda_packed_decode",
    "verify": "helion_kda_verify",
    "prefill": "chunk_kda",
}
# The SGLang file that decides whether a breakable prefill CUDA graph captures the KDA extend; the patch makes
# it accept an extend kernel that declares `takes_prefill_graph_tables` (kdakit's prefill does) and pass the
# layer's output buffer on to the graph's extend.
BACKEND = "sglang/srt/layers/attention/linear/kda_backend.py"
# The graph's KDA extend; the patch skips its masking of the padded output rows for an extend kernel that
# declares `zeroes_padded_rows` and its track-slot copy for one that declares `writes_track_slots`, and hands
# the layer's output buffer to one that declares `writes_into_output` (kdakit's prefill declares all three).
PREFILL_GRAPH = "sglang/srt/layers/attention/linear/kda_prefill_graph.py"
PATCH_DIR = Path(__file__).resolve().parent
log = logging.getLogger("kdakit.integration")


def selected_kernels() -> str:
    """The value of KDAKIT_HELION_KERNELS (default kdakit); any other value is an error."""
    value = os.environ.get(ENV_VAR, DEFAULT).strip() or DEFAULT
    if value not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}; got {value!r}")
    return value


class KernelResolutionError(RuntimeError):
    """The patched adapter cannot serve: wrong SGLang, or a Helion entry point that does not import."""


def _check_sglang_version() -> None:
    from importlib import metadata

    from kdakit.facts import pins

    wanted = pins.package("sglang")
    try:
        found = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        found = None
    if found != wanted:
        raise KernelResolutionError(
            f"kdakit: the Helion KDA arm needs SGLang {wanted}, the version its patch and kernel contracts "
            f"are written for; this environment has {found or 'no SGLang'}"
        )


def _check_entry_point(phase: str, module_name: str) -> None:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever breaks the import stops the server here
        raise KernelResolutionError(
            f"kdakit: {phase} kernel module {module_name} (KDAKIT_HELION_KERNELS={selected_kernels()}) "
            f"does not import: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(getattr(module, ENTRY_POINTS[phase], None)):
        raise KernelResolutionError(f"kdakit: {module_name} has no {ENTRY_POINTS[phase]}() for {phase}")


def helion_kda_modules(quiet: bool = False) -> dict[str, str]:
    """Phase -> module holding its Helion entry point, under the current environment (called by the patch).

    Runs where the patched adapter is imported, i.e. when SGLang's KDA dispatcher is built at server
    start-up: a wrong SGLang, an unknown KDAKIT_HELION_KERNELS or an entry point that does not import
    stops the server there with one line (KernelResolutionError), never at the first request."""
    choice = selected_kernels()
    _check_sglang_version()
    modules = dict(UPSTREAM_MODULES if choice == "upstream" else KDAKIT_MODULES)
    for phase, module_name in modules.items():
        _check_entry_point(phase, module_name)
    if not quiet:
        log.warning(
            "kdakit: Helion KDA kernels from %s (%s=%s): decode=%s verify=%s prefill=%s",
            choice, ENV_VAR, choice, modules["decode"], modules["verify"], modules["prefill"],
        )  # fmt: skip
    return modules


# ---------------------------------------------------------------------------------------------------------
# Applying the patch with the strict unified-diff applier of unified_diff.py (no `patch`/`git` in the image).


def patch_file(sglang_version: str | None = None) -> Path:
    from kdakit.facts import pins

    version = sglang_version or pins.package("sglang")
    path = PATCH_DIR / f"sglang-{version}-kdakit.patch"
    if not path.is_file():
        raise PatchError(f"no kdakit patch for sglang {version} ({path.name} missing)")
    return path


def _read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def check(site_packages: str | Path, patch: Path | None = None) -> str:
    """'applies' (clean), 'applied' (already patched) or 'conflict' for the SGLang tree in site_packages."""
    root = Path(site_packages)
    states = set()
    for fp in parse((patch or patch_file()).read_text()):
        target = root / fp.path
        if not target.is_file():
            return "conflict"
        lines = _read_lines(target)
        if apply_hunks(lines, fp.hunks) is not None:
            states.add("applies")
        elif apply_hunks(lines, fp.hunks, reverse=True) is not None:
            states.add("applied")
        else:
            return "conflict"
    return states.pop() if len(states) == 1 else "conflict"


def apply(site_packages: str | Path, patch: Path | None = None) -> list[Path]:
    """Apply the patch to the SGLang tree under site_packages (patch -p1 there); all or nothing.

    Raises PatchError unless every hunk applies exactly; an already patched tree is left as is.
    """
    root = Path(site_packages)
    patch = patch or patch_file()
    state = check(root, patch)
    if state == "applied":
        return []
    if state != "applies":
        raise PatchError(f"{patch.name} does not apply cleanly to {root} (is it SGLang's pinned version?)")
    written = []
    for fp in parse(patch.read_text()):
        target = root / fp.path
        new = apply_hunks(_read_lines(target), fp.hunks)
        assert new is not None
        target.write_text("\n".join(new) + "\n")
        written.append(target)
    for target in written:  # stale bytecode would hide the change
        cache = target.parent / "__pycache__"
        for pyc in cache.glob(target.stem + ".*.pyc") if cache.is_dir() else []:
            pyc.unlink()
    return written


def patched_files(patch: Path | None = None) -> list[str]:
    """The SGLang files the patch changes, relative to site-packages, in the patch's order."""
    return [fp.path for fp in parse((patch or patch_file()).read_text())]


def module_name(path: str) -> str:
    """sglang/a/b.py -> sglang.a.b"""
    return path.removesuffix(".py").replace("/", ".")


def site_packages_of_sglang() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("sglang is not installed here")
    return Path(list(spec.submodule_search_locations)[0]).parent


# ---------------------------------------------------------------------------------------------------------
# What the patched SGLang actually calls.


class _NotCalled:
    def __getattr__(self, name):
        raise RuntimeError("kdakit.kernels.integration.resolve() builds the adapter only to inspect it")


def resolve(instantiate: bool = True) -> dict[str, str]:
    """Phase -> module of the callable SGLang's Helion adapter uses, under the current environment.

    Imports SGLang's adapter (patched or not) in this process; with instantiate, builds the adapter the
    way SGLang's dispatcher does and reads the callables it holds. Keys: decode, verify, prefill,
    kernels ("kdakit", "upstream" or "unpatched"), and with instantiate prefill_graph (joins_prefill_graph).
    """
    adapter = importlib.import_module(ADAPTER_MODULE)
    modules = getattr(adapter, "KDAKIT_HELION_MODULES", None)
    result = {"kernels": selected_kernels() if modules is not None else "unpatched"}
    modules = modules or dict(UPSTREAM_MODULES)
    if instantiate:
        # A stand-in Triton fallback: only the Helion entry points are inspected, never called.
        kernel = adapter.HelionKDAKernel(
            triton_fallback=_NotCalled(), enable_decode=True, enable_prefill=True
        )
        result["decode"] = kernel._packed_decode.__module__
        result["prefill"] = kernel._chunk_kda.__module__
        result["prefill_graph"] = joins_prefill_graph(kernel)
    else:
        result["decode"] = modules["decode"]
        result["prefill"] = modules["prefill"]
    # Verify is imported lazily inside target_verify; import it the same way here.
    verify = getattr(importlib.import_module(modules["verify"]), ENTRY_POINTS["verify"])
    result["verify"] = verify.__module__
    return result


def joins_prefill_graph(extend_kernel) -> bool | str:
    """Whether SGLang's breakable prefill CUDA graph captures this extend kernel, as SGLang's own
    `KDAAttnBackend.supports_prefill_graph_extend` decides it (the environment's
    SGLANG_DISABLE_KDA_PREFILL_GRAPH_EXTEND included); a string says why it cannot be told here."""
    try:
        backend = importlib.import_module(module_name(BACKEND))
    except Exception as exc:  # noqa: BLE001 - a build without SGLang's server code cannot tell
        return f"unknown: {module_name(BACKEND)} does not import ({type(exc).__name__})"
    from types import SimpleNamespace

    # the method reads only these two attributes of the backend
    probe = SimpleNamespace(
        kernel_dispatcher=SimpleNamespace(extend_kernel=extend_kernel), accept_lens_pool=None
    )
    return bool(backend.KDAAttnBackend.supports_prefill_graph_extend(probe))
