"""The tuned config files shipped in kernels/configs/ (package data, baked into the image): each one loads and
validates, was tuned for the kernel source that is installed now (so editing decode.py or verify.py without
re-tuning fails here), for the pinned helion, is covered by the package-data glob, and is what the kernels
select on its SKU."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

import pytest
from kdakit.kernels import tuned

from kdakit.facts import pins

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(tuned.CONFIG_DIR.glob("*/*.json"))


@pytest.fixture(autouse=True)
def _package_configs(monkeypatch):
    """Select from the package's own folder, whatever the environment says."""
    monkeypatch.delenv(tuned.ENV_DIR, raising=False)
    monkeypatch.delenv(tuned.ENV_MODE, raising=False)
    monkeypatch.setattr(tuned, "_mode", None)
    tuned.reset()
    yield
    tuned.reset()


def test_configs_are_shipped():
    # the per-file tests below must not pass by having nothing to check
    assert SHIPPED, f"no tuned config under {tuned.CONFIG_DIR}"
    assert tuned.CONFIG_DIR == ROOT / "kernels" / "configs"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_shipped_config_validates_against_the_installed_kernel_source_and_pinned_helion(path):
    record = tuned.load_file(path)  # schema, fields, file name = kernel + bucket
    assert record.sku == path.parent.name
    assert tuned.sku_of(record.gpu_name) == record.sku
    assert record.source_sha256 == tuned.source_sha256(record.kernel), (
        f"{path.name} was tuned for another {tuned.KERNEL_FUNCTIONS[record.kernel]}: re-tune it with "
        f"{tuned.tune_command(record.kernel, record.sku, record.bucket)} (or delete it)"
    )
    assert record.versions["helion"] == pins.package("helion")
    assert record.helion_config().config  # a helion.Config can be built from it
    tuning = record.tuning
    assert tuning["default_per_call_us"] > 0
    # shipped as tuned only where it was measured faster than the default (and every other candidate)
    seeds = {seed["name"]: seed for seed in tuning.get("seeds", [])}
    times = {name: seed["per_call_us"] for name, seed in seeds.items() if seed["per_call_us"] is not None}
    times["default"] = tuning["default_per_call_us"]
    if tuning["autotuned_per_call_us"] is not None:
        times["autotuned"] = tuning["autotuned_per_call_us"]
    assert tuning["chosen"] == min(times, key=times.get), times
    if tuning["chosen"] == "autotuned":
        assert record.config == tuning["autotuned_config"]
    elif tuning["chosen"] in seeds:
        assert record.config == seeds[tuning["chosen"]]["config"]
    [row] = [r for r in tuned.inventory(record.sku) if r["path"] == str(path)]
    assert row["problems"] == []  # the installed source and helion accept it


def test_the_package_data_glob_covers_every_shipped_config():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    kernels = ROOT / "kernels"
    covered = {p for pattern in data["kdakit.kernels"] for p in kernels.glob(pattern)}
    assert set(tuned.CONFIG_DIR.rglob("*.json")) <= covered


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_kernels_select_a_shipped_config_on_its_sku(path, monkeypatch):
    record = tuned.load_file(path)
    monkeypatch.setenv(tuned.ENV_SKU, record.sku)
    sentinel = object()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = tuned.select(record.kernel, record.bucket, sentinel)
    assert chosen == record.helion_config()
    [active] = tuned.active()
    assert active["source"] == "shipped" and active["path"] == str(path)
    flags = tuned.version_flags(record, tuned.installed_versions())
    # tuned with other triton/torch than installed: used, and said once; else silent
    assert len(caught) == (1 if flags else 0)
    if flags:
        assert "Re-tune in the image" in str(caught[0].message) and all(
            f in str(caught[0].message) for f in flags
        )
