"""kernels/BENCH.md's served-prefill section is generated from the record it names (`kdakit kernels
served-table --write RAW`), and the record's verdicts follow its numbers."""

from __future__ import annotations

import copy
import json
import re

import pytest
from kdakit.kernels.tools import bench_table, served

MARKERS = (served.BEGIN, served.END)


def test_bench_md_section_is_generated_from_the_record_it_names():
    section = bench_table.current(markers=MARKERS)
    named = re.search(r"Record `([^`]+)`", section)
    assert named, "BENCH.md's served-prefill section names no record"
    raw = bench_table.REPO / named.group(1)
    assert section == served.section(raw), f"run `kdakit kernels served-table --write {named.group(1)}`"


def test_every_record_renders_and_names_each_arm_and_case():
    for raw in sorted(served.RECORDS.glob(f"*/*/{served.RAW_NAME}")):
        record = served.read(raw)
        table = served.render_table(record)
        for arm in record["config"]["arms"]:
            assert f"| {arm} | prefill graph (as served) |" in table
        for row in record["layer"]:
            assert row["case"] in table


def test_verdicts_follow_the_ratio_of_the_two_arms():
    raw = next(iter(sorted(served.RECORDS.glob(f"*/*/{served.RAW_NAME}"))))
    record = json.loads(raw.read_text())
    faster = copy.deepcopy(record)
    for row in faster["layer"]:
        if row["arm"] == "helion" and "us" in row:
            base = served._find(record["layer"], "triton", row["case"], row["mode"])
            row["us"] = base["us"] * 0.4
    assert all(line.endswith(": met") for line in served.verdicts(faster))
    slower = copy.deepcopy(faster)
    for row in slower["layer"]:
        if row["arm"] == "helion" and "us" in row:
            row["us"] *= 10
    assert all(line.endswith(": MISSED") for line in served.verdicts(slower))


def test_ttft_estimate_scales_the_chunk_case_to_the_input():
    record = {
        "config": {"chunked_prefill_size": 8192, "arms": ["triton"]},
        "stack": [{"arm": "triton", "case": "1x4096", "mode": "graph", "us": 1000.0}],
    }
    (short, long) = served.ttft_estimates(record)
    assert (short["tokens"], short["ms"], short["chunks"]) == (4096, 1.0, 1)
    # 32768 tokens: 4 chunks of 8192, each twice the timed 4096-token prefill
    assert (long["tokens"], long["ms"], long["chunks"]) == (32768, 8.0, 4)


def test_no_estimate_from_a_stack_case_far_below_the_chunk():
    """A run with only a short stack case (a profiling run's 1x16) estimates nothing: scaling 16 tokens to
    4096 would count the prefill's fixed costs 256 times."""
    record = {
        "config": {"chunked_prefill_size": 8192, "arms": ["triton"]},
        "stack": [{"arm": "triton", "case": "1x16", "mode": "graph", "us": 4900.0}],
    }
    assert served.ttft_estimates(record) == []
    record["stack"].append({"arm": "triton", "case": "1x2048", "mode": "graph", "us": 30000.0})
    assert [(e["tokens"], e["case"]) for e in served.ttft_estimates(record)] == [(4096, "1x2048")]


def test_an_arm_without_a_triton_estimate_shows_no_difference():
    # the record the served table shows (the one created last), whose stack has the 4096-token case
    record = json.loads(served.latest_raw().read_text())
    for row in record["stack"]:
        if row["arm"] == "triton" and row["case"] == "1x4096" and row["mode"] == "graph":
            row.pop("us", None)
            row["error"] = "AcceleratorError: capture failed"
    lines = [line for line in served.render_table(record).splitlines() if line.startswith("- helion, 4096 ")]
    assert lines and all(line.endswith("(triton not measured)") for line in lines)


def test_a_run_cut_short_keeps_its_record_of_the_rows_so_far(monkeypatch, tmp_path):
    """`kdakit kernels served` rewrites its record after every row: when the run stops (a device call's time
    limit), served-prefill.json holds each row measured so far, marked incomplete."""
    from kdakit.cli import main

    def measure(arms, layer_cases, stack_cases, cfg, heads=None, log=print, layer_rows=None, stack_rows=None,
                on_row=lambda: None, profile_calls=0):  # fmt: skip
        row = {"arm": arms[0], "case": "1x16", "mode": "graph", "route": "in graph"}
        layer_rows.append({**row, "us": 41.0})
        on_row()
        stack_rows.append({**row, "us": 3700.0})
        on_row()
        raise KeyboardInterrupt  # the call's time limit

    from kdakit.kernels.tools import bench

    monkeypatch.setattr(served, "measure", measure)
    monkeypatch.setattr(bench, "environment", lambda: {"gpu": "NVIDIA H200"})  # (no GPU here)
    try:
        main(["kernels", "served", "--arms", "triton", "--results-dir", str(tmp_path), "--run-id", "cut"])
    except KeyboardInterrupt:
        pass
    (raw,) = tmp_path.glob(f"cut/*/{served.RAW_NAME}")
    record = served.read(raw)
    assert record["complete"] is False
    assert [r["us"] for r in record["layer"]] == [41.0] and [r["us"] for r in record["stack"]] == [3700.0]
    assert served.render_table(record).startswith("The run stopped before its last row")
    assert "stopped" not in served.render_table(dict(record, complete=True))


@pytest.fixture
def timed_on_fakes(monkeypatch):
    """The lifecycle replaced by a fake that times every prefill at 40 µs: returns the list of the timings
    asked for, in order, as (arm, mode, metadata_each, profile_calls)."""
    from kdakit.kernels.tools import bench, lifecycle

    asked = []

    class FakeLifecycle:
        def __init__(self, arm, shape):
            self.arm, self._prefill_graphs = arm, {}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def time_prefill(self, lens, *, mode, reps=20, metadata_each=False, profile_calls=0):
            asked.append((self.arm, mode, metadata_each, profile_calls))
            row = {"us": 40.0, "route": "in graph" if mode == "graph" else "eager"}
            if profile_calls:
                row.update(kernels={"_helion__state_pass_fn": 30.0, "causal_conv1d": 10.0}, kernels_us=40.0)
            return row

    monkeypatch.setattr(lifecycle, "Lifecycle", FakeLifecycle)
    monkeypatch.setattr(lifecycle, "served_shape", lambda *a, **k: None)
    monkeypatch.setattr(served, "_stack_body", lambda life, cfg, tokens: None)
    monkeypatch.setattr(bench, "environment", lambda: {"gpu": "NVIDIA H200"})  # (no GPU here)
    return asked


def test_profile_calls_list_each_layers_kernels_in_its_row(timed_on_fakes, tmp_path, capsys):
    """`--profile-calls N` asks each per-layer timing for its GPU kernels over N more calls (the stack rows
    are not profiled) and the rows keep them; a negative N is refused in one line."""
    from kdakit.cli import main

    args = ["kernels", "served", "--arms", "helion", "--layer-cases", "1x16", "--stack-cases", "1x16"]
    assert main([*args, "--profile-calls", "5", "--results-dir", str(tmp_path), "--run-id", "p"]) == 0
    assert sorted(a[1:] for a in timed_on_fakes) == [
        ("eager", False, 5), ("eager", True, 0), ("graph", False, 5), ("graph", True, 0)
    ]  # fmt: skip
    record = served.read(next(tmp_path.glob(f"p/*/{served.RAW_NAME}")))
    assert record["complete"] is True and record["config"]["profile_calls"] == 5
    assert all(row["kernels_us"] == 40.0 for row in record["layer"])
    assert not any("kernels" in row for row in record["stack"])
    assert main([*args, "--profile-calls", "-1", "--results-dir", str(tmp_path)]) == 2
    assert "--profile-calls must be >= 0 (got -1)" in capsys.readouterr().err


def test_every_arms_layer_rows_come_before_any_stack(timed_on_fakes, tmp_path):
    """The per-layer rows hold the targets; the stacks take longest. A run cut short by a device call's time
    limit must still have both arms' layer rows, so every arm's layer cases run before any stack."""
    from kdakit.cli import main

    args = ["kernels", "served", "--arms", "triton,helion", "--layer-cases", "1x16,1x512", "--stack-cases",
            "1x16", "--results-dir", str(tmp_path), "--run-id", "o"]  # fmt: skip
    assert main(args) == 0
    order = [(arm, "stack" if stack else "layer") for arm, _, stack, _ in timed_on_fakes]
    assert order == [("triton", "layer")] * 4 + [("helion", "layer")] * 4 + [
        ("triton", "stack"), ("triton", "stack"), ("helion", "stack"), ("helion", "stack")
    ]  # fmt: skip


def test_arms_outside_the_kernel_set_arms_are_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """--arms takes the arms that set one kernel backend for every phase; anything else (a typo, an empty
    list) stops before any GPU work, naming the arms it runs."""
    from kdakit.cli import main

    monkeypatch.setattr(served, "measure", lambda *a, **k: pytest.fail("measured with a bad --arms"))
    for bad in ("kdakit", " , ", "triton,helion2"):
        assert main(["kernels", "served", "--arms", bad, "--results-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "--arms: not " in err and "; arms it runs: triton, helion" in err, err
