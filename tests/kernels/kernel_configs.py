"""Builders shared by the tuned-config tests (decode/verify and prefill)."""

from __future__ import annotations

import warnings

from kdakit.kernels import tuned
from kdakit.kernels.tuned import Bucket, KernelConfigWarning, TunedConfig


def tuned_record(kernel: str, bucket: Bucket, config: dict, **override) -> TunedConfig:
    """A valid config record for the installed kernel source and versions; `override` replaces fields (sku
    must be one of them)."""
    fields = {
        "kernel": kernel,
        "gpu_name": "NVIDIA TestGPU",
        "bucket": bucket,
        "config": config,
        "source_sha256": tuned.source_sha256(kernel),
        "versions": tuned.installed_versions(),
        "tuning": {"chosen": "autotuned", "default_per_call_us": 10.0, "autotuned_per_call_us": 8.0},
    }
    fields.update(override)
    return TunedConfig(**fields)


def config_warnings(fn):
    """(fn(), the KernelConfigWarnings it raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [w for w in caught if issubclass(w.category, KernelConfigWarning)]


def apply_cuda_config_rules(monkeypatch) -> None:
    """Helion's CUDA-only config rules (a register cap only on a persistent grid, the register file) on the
    CPU, with an H200's 64 K registers a block: Helion applies them only where CUDA is available."""
    import helion._compat
    import helion.autotuner.config_spec

    monkeypatch.setattr(helion._compat, "_supports_maxnreg", lambda: True)
    monkeypatch.setattr(helion.autotuner.config_spec, "_regs_per_block", lambda: 65536)
