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
