"""`kdakit kernels bench --configs both` on CPU: kdakit's decode/verify under the shipped configs and under
the module defaults as two arms of one run (helion-kdakit, helion-kdakit-default), the side-by-side table,
the record still valid against kdakit.result.v1, and the performance targets unaffected by the extra arm."""

from __future__ import annotations

import json

import pytest
import torch
from kdakit.kernels import tuned
from kdakit.kernels.tools import bench, bench_record, table, timing

from kdakit.cli import main

BUCKET48 = "h16-hv16-k128-v128-fp32-b48"
BUCKET16 = "h16-hv16-k128-v128-fp32-b16"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv(tuned.ENV_MODE, raising=False)
    monkeypatch.setattr(tuned, "_mode", None)
    tuned.reset()
    yield
    tuned.reset()


def _entry(median: float) -> dict:
    stats = timing.summarize([median] * 60)
    return {"status": "ok", "check": {"ok": True}, "per_call": stats, "single_call": stats, "samples_us": []}


def _result(with_default_arm: bool = True) -> dict:
    decode_arms = {
        "triton": _entry(35.8),
        "triton-packed": _entry(32.6),
        "triton-packed-dispatch": _entry(30.1),
        "helion-upstream": _entry(28.75),
        "helion-kdakit": _entry(28.0),
    }
    verify_arms = {"triton": _entry(39.55), "helion-upstream": _entry(43.9), "helion-kdakit": _entry(36.0)}
    prefill_arms = {"triton": _entry(647.6), "helion-upstream": _entry(653.6), "helion-kdakit": _entry(463.5)}
    if with_default_arm:
        decode_arms["helion-kdakit-default"] = _entry(29.0)
        verify_arms["helion-kdakit-default"] = _entry(36.0)
        prefill_arms["helion-kdakit-default"] = _entry(470.0)
    rows = [
        dict(phase="decode", shape="48x1", shape_label="48 × 1", batch=48, floor_us=23.6, arms=decode_arms),
        dict(phase="verify", shape="16x6", shape_label="16 × 6", batch=16, floor_us=28.0, arms=verify_arms),
        dict(phase="prefill", shape="2x4096", shape_label="2 × 4096", batch=2, tokens=4096, floor_us=40.8,
             arms=prefill_arms),
    ]  # fmt: skip
    path = f"/x/kernels/configs/h200/decode-{BUCKET48}.json"
    return {
        "rows": rows,
        "config": {"heads": 16, "value_heads": 16, "head_dim": 128, "kdakit_configs": "both"},
        "copy_bandwidth": {"bytes_per_s": 4.3e12},
        "environment": {"gpu": "NVIDIA H200", "versions": {"torch": "2.11.0+cu130"}},  # pins: ignore
        "kernel_configs": {
            "mode": "both",
            "active": [
                {
                    "kernel": "decode",
                    "bucket": BUCKET48,
                    "source": "shipped",
                    "path": path,
                    "mode": "shipped",
                    "reason": "tuned on NVIDIA H200; tuned with triton 3.6.0, installed 3.8.0",
                },
                {
                    "kernel": "decode",
                    "bucket": BUCKET48,
                    "source": "default",
                    "path": None,
                    "mode": "default",
                    "reason": "KDAKIT_KERNEL_CONFIGS=default",
                },
                {
                    "kernel": "verify-chain",
                    "bucket": BUCKET16,
                    "source": "default",
                    "path": None,
                    "mode": "shipped",
                    "reason": "no tuned config for h200",
                },
                *[
                    {
                        "kernel": f"prefill-{name}",
                        "bucket": "h16-hv16-k128-v128-fp32-t8192",
                        "source": "shipped" if name != "state" else "default",
                        "path": f"/x/kernels/configs/h200/prefill-{name}-h16-hv16-k128-v128-fp32-t8192.json",
                        "mode": "shipped",
                        "reason": "",
                    }
                    for name in ("gate", "intra", "solve", "recompute", "state")
                ],
            ],
        },  # fmt: skip
        "notes": [],
    }


def _cells(table: str, prefix: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(prefix))
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_table_shows_shipped_and_default_configs_side_by_side():
    printed = table.render_table(_result())
    head = "kdakit Helion, shipped tuned configs vs module defaults"
    assert head in printed
    section = printed[printed.index(head) :]
    assert _cells(section, "| decode | 48 × 1 |") == [
        "decode", "48 × 1", "28.00", "29.00", "-3.4 %",
        f"shipped decode-{BUCKET48}.json (tuned with other triton/torch)",
    ]  # fmt: skip
    assert _cells(section, "| verify | 16 × 6 |") == [
        "verify", "16 × 6", "36.00", "36.00", "+0.0 %", "default (no tuned config for h200)",
    ]  # fmt: skip
    assert _cells(section, "| prefill | 2 × 4096 |") == [
        "prefill", "2 × 4096", "463.50", "470.00", "-1.4 %",
        "shipped 4 of 5 at h16-hv16-k128-v128-fp32-t8192: gate, intra, recompute, solve",
    ]  # fmt: skip
    # the decode paths table carries the default-config arm too, with kdakit's change against it
    assert "| kdakit Helion, default configs | 29.00 (-3.4 %) |" in printed
    assert "helion-kdakit-default |" in printed  # single-call column


def test_without_the_default_arm_nothing_of_it_is_shown():
    printed = table.render_table(_result(with_default_arm=False))
    assert "shipped tuned configs vs module defaults" not in printed
    assert "default configs" not in printed and "helion-kdakit-default" not in printed


def test_the_default_config_arm_is_no_performance_target():
    result = _result()
    result["rows"][0]["arms"]["helion-kdakit-default"] = _entry(20.0)  # faster than kdakit's shipped arm
    verdicts = dict(table.targets(result))
    assert not any("helion-kdakit-default" in what for what in verdicts)
    assert verdicts["decode 48 × 1: 28.00 vs helion-upstream 28.75 µs (target: faster)"] is True


def test_the_record_keeps_both_arms_and_validates(tmp_path):
    results = pytest.importorskip("kdakit.records.results")
    rows = bench_record.normalized_rows(_result())
    default_rows = [r for r in rows if r["variant"] == "helion-kdakit-default"]
    assert [(r["phase"], r["arm"], r["median_us"]) for r in default_rows] == [
        ("decode", "helion", 29.0),
        ("verify", "helion", 36.0),
        ("prefill", "helion", 470.0),
    ]
    raw, record_path = bench_record.write_outputs(_result(), tmp_path, "kernels-both")
    record = results.read_result(record_path)
    assert {r["variant"] for r in record["metrics"]["rows"]} >= {"helion-kdakit", "helion-kdakit-default"}
    assert json.loads(raw.read_text())["kernel_configs"]["mode"] == "both"


def test_the_default_config_arm_selects_defaults_only_inside_its_calls(monkeypatch, tmp_path):
    """helion-kdakit-default wraps kdakit's entry point: inside a call the selection mode is "default" (the
    shipped files are ignored), outside it is whatever the run uses, and selections are cached per mode."""
    seen = []
    wrapped = bench.with_default_configs(lambda x: seen.append((x, tuned.mode())) or x)
    tuned.set_mode("shipped")
    assert wrapped(3) == 3 and seen == [(3, "default")]
    assert tuned.mode() == "shipped"

    record = tuned.TunedConfig(
        kernel="decode", sku="testgpu", gpu_name="NVIDIA TestGPU",
        bucket=tuned.Bucket(2, 4, 32, 32, "fp32", 4), config={"block_sizes": [4], "num_warps": 1},
        source_sha256=tuned.source_sha256("decode"), versions=tuned.installed_versions(),
    )  # fmt: skip
    tuned.write_file(record, tmp_path)
    monkeypatch.setenv(tuned.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(tuned.ENV_SKU, "testgpu")
    default = object()
    pick = bench.with_default_configs(lambda: tuned.select("decode", record.bucket, default))
    assert pick() is default
    assert tuned.select("decode", record.bucket, default) == record.helion_config()
    assert pick() is default  # the shipped selection did not leak into the default arm's cache
    assert {(r["mode"], r["source"]) for r in tuned.active()} == {
        ("default", "default"),
        ("shipped", "shipped"),
    }


def test_load_arms_adds_the_default_config_arms_only_for_both(monkeypatch):
    from kdakit.kernels.tools import upstream

    def no_sglang(*_):
        raise ImportError("no SGLang here")

    monkeypatch.setattr(upstream, "load", no_sglang)
    arms, missing, _ = bench.load_arms("auto", "both")
    assert {f"{phase}:helion-kdakit-default" for phase in bench.ARMS} <= set(arms)
    arms, _, _ = bench.load_arms("auto", "shipped")
    assert not any(k.endswith("helion-kdakit-default") for k in arms)
    assert not any(k.endswith("helion-kdakit-default") for k in missing)


@pytest.mark.parametrize(
    ("configs", "mode"), [("default", "default"), ("both", "shipped"), ("shipped", "shipped")]
)
def test_cli_bench_configs_sets_the_mode_before_needing_the_gpu(configs, mode, capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the bench would run")
    tuned.set_mode("default" if mode == "shipped" else "shipped")
    assert main(["kernels", "bench", "--configs", configs, "--results-dir", str(tmp_path)]) == 2
    assert tuned.mode() == mode
    assert "needs an NVIDIA GPU" in capsys.readouterr().err


def test_without_fla_core_the_fla_prefill_arm_is_a_not_installed_row(monkeypatch):
    from kdakit.kernels.tools import upstream

    monkeypatch.setattr(upstream, "load", lambda *_: (_ for _ in ()).throw(ImportError("no SGLang here")))
    real = bench.importlib.import_module

    def no_fla(name, *a):
        if name == bench.FLA_MODULE:
            raise ModuleNotFoundError("No module named 'fla'")
        return real(name, *a)

    monkeypatch.setattr(bench.importlib, "import_module", no_fla)
    arms, missing, _ = bench.load_arms("auto", "shipped")
    assert "prefill:fla" not in arms
    assert missing["prefill:fla"].startswith("fla-core 0.6.0 not installed (ModuleNotFoundError")
