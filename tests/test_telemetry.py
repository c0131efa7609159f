"""GPU telemetry: a fake nvidia-smi, the CSV kept, and warnings only for GPUs held back in measured runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kdakit.measure import telemetry

FAKE = Path(__file__).parent / "fakes" / "nvidia_smi.py"


@pytest.fixture
def smi(tmp_path, monkeypatch):
    def configure(**state):
        path = tmp_path / "smi.json"
        path.write_text(json.dumps(state))
        monkeypatch.setenv("FAKE_NVIDIA_SMI", str(path))
        return str(FAKE)

    return configure


def _recorded(command: str, path: Path, before: int, inside: int) -> dict:
    recorder = telemetry.Recorder(path, command=command)
    for _ in range(before):  # warm-up: not a measured run
        recorder.sample()
    time.sleep(0.01)
    with recorder.window("run 1"):
        for _ in range(inside):
            recorder.sample()
    return recorder.stop()


@pytest.mark.parametrize("old_driver", [False, True])
def test_throttle_and_power_cap_in_a_measured_run_are_warned(smi, tmp_path, old_driver):
    command = smi(gpus=2, throttle_from_call=3, throttle_gpu=1, reasons="0x0000000000000084",
                  old_driver=old_driver)  # fmt: skip
    summary = _recorded(command, tmp_path / "telemetry.csv", before=2, inside=3)
    assert (
        summary["source"] == "nvidia-smi"
        and summary["samples"] == 2 * 5
        and summary["file"] == "telemetry.csv"
    )
    assert summary["warnings"] == [
        "GPU 1 throttled during run 1: hardware thermal slowdown, software power cap",
        "GPU 1 at its power cap during run 1: 700 W of 700 W in 3 of 3 samples",
    ]  # no clock warning: GPU 1 ran at 1400 MHz throughout the measured run
    assert summary["gpus"]["0"]["sm_mhz_min"] == 1980 and summary["gpus"]["1"]["sm_mhz_min"] == 1400
    rows = telemetry.read_csv(tmp_path / "telemetry.csv")
    assert len(rows) == 10 and rows[-1]["gpu"] == 1 and rows[-1]["reasons"] == 0x84


def test_a_clock_drop_inside_the_measured_runs_is_warned_and_warm_up_is_not_judged():
    samples = ((0.0, 900.0, 0x8), (2.0, 1980.0, 0), (3.0, 1700.0, 0), (5.0, 1980.0, 0))
    rows = [{"t_s": t, "gpu": 0, "sm_mhz": mhz, "power_w": 300.0, "power_limit_w": 700.0, "reasons": bits}
            for t, mhz, bits in samples]  # fmt: skip
    windows = [
        {"label": "run 1", "start_s": 1.0, "end_s": 3.5},
        {"label": "run 2", "start_s": 4.5, "end_s": 6.0},
    ]
    assert telemetry.warnings(rows, windows) == [
        "GPU 0 SM clock fell to 1700 MHz during run 1 (highest in the measured runs 1980 MHz)"
    ]  # the hardware slowdown at t = 0 s was in the warm-up


def test_background_sampling_once_a_second_and_no_nvidia_smi(smi, tmp_path):
    command = smi(gpus=1)
    with telemetry.Recorder(tmp_path / "t.csv", interval_s=0.05, command=command) as recorder:
        with recorder.window("run 1"):
            # the loop samples on its own: wait (bounded) for two rows, however slow this machine is
            deadline = time.monotonic() + 30
            while len(recorder.rows) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
    # the loop's samples and the closing one, none failed
    assert recorder.summary["samples"] >= 3 and recorder.summary["warnings"] == []
    assert recorder.summary["windows"][0]["label"] == "run 1"
    none = telemetry.Recorder(tmp_path / "n.csv", command="").start().stop()
    assert none["source"] == "none" and none["samples"] == 0 and not (tmp_path / "n.csv").exists()


def test_nvidia_smi_that_cannot_reach_the_driver_is_reported_as_failed(smi, tmp_path):
    command = smi(gpus=2, fail_always=True)
    summary = _recorded(command, tmp_path / "telemetry.csv", before=1, inside=2)
    assert summary["source"] == "failed" and summary["samples"] == 0 and summary["file"] is None
    assert len(summary["warnings"]) == 1 and summary["warnings"][0].startswith(
        "GPU telemetry failed: 3 nvidia-smi queries, no sample (nvidia-smi exited 9: NVIDIA-SMI has failed"
    )
    assert summary["errors"][0].startswith("nvidia-smi exited 9")


def test_one_failed_query_keeps_the_clock_event_reasons_for_the_rest_of_the_run(smi, tmp_path):
    command = smi(gpus=1, fail_calls=[2, 3, 4], throttle_from_call=5, throttle_gpu=0, reasons="0x8")
    summary = _recorded(command, tmp_path / "telemetry.csv", before=1, inside=3)
    # call 1: warm-up; the next sample fails (exit 9) with every field (calls 2-4); later ones answer
    assert summary["source"] == "nvidia-smi" and summary["samples"] >= 2
    assert any("throttled during run 1: hardware slowdown" in w for w in summary["warnings"])
    assert any(w.startswith("GPU telemetry incomplete: 1 of ") for w in summary["warnings"])
    rows = telemetry.read_csv(tmp_path / "telemetry.csv")
    assert rows[-1]["reasons"] == 0x8
