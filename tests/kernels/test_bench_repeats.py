"""`kdakit kernels bench --repeats N` on CPU: the round loop with fake arms whose times the test sets (the
rotated order, every round recorded, medians over rounds), kdakit / each arm as kdakit.records.stats' interval
paired by round with the serving side's verdicts, and a record without rounds printed as before."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kdakit.kernels.tools import bench, table, timing

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
RUN13 = ROOT / "measurements/kernels-bench/h200-2026-12-01-run13/h200"
VERIFY_ARMS = ["triton", "helion-upstream", "helion-kdakit"]
# Round-to-round drift common to every arm (clocks, temperature): only pairs from the same round cancel it.
DRIFT = [1.00, 1.06, 0.97, 1.04, 0.95, 1.02]


def _run(
    times: dict[str, list[float]], repeats: int, phase: str = "verify", progress=None
) -> tuple[dict, list[str]]:
    """run_arms over fake arms: times[arm][r] is the arm's per-call median in round r (three samples around
    it). Returns the row and the order in which the arms were timed."""
    calls: list[str] = []
    rounds_seen: dict[str, int] = {}

    def observe(arm, fn):
        return {"out": torch.ones(4)}, {}

    def time_arm(arm, fn):
        calls.append(arm)
        r = rounds_seen[arm] = rounds_seen.get(arm, -1) + 1
        t = times[arm][r]
        return {"samples_us": [t * 0.999, t, t * 1.001], "single_samples_us": [t + 2.0]}

    row = {"phase": phase, "shape_label": "16 × 6", "arms": {}}
    arms = {f"{phase}:{a}": object() for a in times}
    bench.run_arms(phase, row, arms, {}, observe, time_arm, repeats, progress=progress)
    return row, calls


def _times(ratio_per_round: list[float], base: float = 40.0) -> dict[str, list[float]]:
    """Triton and upstream at `base` (with the drift), kdakit at base x ratio in each round."""
    drift = DRIFT[: len(ratio_per_round)]
    triton = [base * d for d in drift]
    return {
        "triton": triton,
        "helion-upstream": [t * 1.1 for t in triton],
        "helion-kdakit": [t * q for t, q in zip(triton, ratio_per_round, strict=True)],
    }


def test_progress_follows_each_check_and_each_timed_round_with_the_medians_so_far():
    """A first call compiles, for minutes with some arms: the bench reports after every check and every timed
    round, and the row it hands over holds each arm's per-call medians so far, so a run cut short keeps them
    (the CLI writes that row to kernels-bench.partial.json)."""
    seen = []

    def progress(message, row):
        seen.append((message, {a: list(e.get("timed_rounds_us", [])) for a, e in row["arms"].items()}))

    row, _ = _run(_times([0.5, 0.5]), repeats=2, progress=progress)
    t, u, k = VERIFY_ARMS
    assert [m.split(":")[0] for m, _ in seen] == [
        f"{t} ok", f"{u} ok", f"{k} ok",
        f"{t} timed, round 1 of 2", f"{u} timed, round 1 of 2", f"{k} timed, round 1 of 2",
        f"{u} timed, round 2 of 2", f"{k} timed, round 2 of 2", f"{t} timed, round 2 of 2",
    ]  # fmt: skip
    message, so_far = seen[5]
    assert message.endswith(f"{40 * 0.5:.2f} µs")
    assert so_far == {t: [pytest.approx(40.0)], u: [pytest.approx(44.0)], k: [pytest.approx(20.0)]}
    assert seen[-1][1][k] == [pytest.approx(20.0), pytest.approx(40 * 1.06 * 0.5)]
    assert all("timed_rounds_us" not in entry for entry in row["arms"].values()), "summarized at the end"


def test_every_round_times_every_arm_once_in_a_rotated_order():
    row, calls = _run(_times([1.0] * 4), repeats=4)
    t, u, k = VERIFY_ARMS
    assert calls == [t, u, k, u, k, t, k, t, u, t, u, k]  # ABC, BCA, CAB, ABC
    kdakit = row["arms"]["helion-kdakit"]
    assert [(r["round"], r["position"]) for r in kdakit["rounds"]] == [(0, 2), (1, 1), (2, 0), (3, 2)]
    assert [r["per_call_us"] for r in kdakit["rounds"]] == pytest.approx([40 * d for d in DRIFT[:4]])
    assert kdakit["per_call"]["n"] == 12 and len(kdakit["samples_us"]) == 12  # every sample of every round
    # the table's number: the median over rounds of each round's median
    assert kdakit["per_call"]["median"] == pytest.approx(40 * (1.00 + 1.04) / 2)
    assert kdakit["single_call"]["median"] == pytest.approx(40 * (1.00 + 1.04) / 2 + 2.0)


def test_five_arms_in_five_rounds_take_every_position_once():
    arms = ["triton", "triton-packed", "triton-packed-dispatch", "helion-upstream", "helion-kdakit"]
    row, _ = _run({a: [10.0] * 5 for a in arms}, repeats=5, phase="decode")
    for arm in arms:
        assert sorted(r["position"] for r in row["arms"][arm]["rounds"]) == [0, 1, 2, 3, 4]


def test_a_ten_percent_faster_arm_is_different_and_its_ratio_is_paired_by_round():
    noise = [1.0, 1.002, 0.999, 1.001, 0.998]
    row, _ = _run(_times([0.9 * n for n in noise]), repeats=5)
    vs = row["kdakit_vs"]["triton"]
    ci = vs["ci"]
    assert vs["verdict"] == "different (CI excludes 1)"
    assert ci["n"] == 5 and ci["paired"]
    # tight only if each round's drift cancels within its pair (pairs across rounds would spread ~5 %)
    assert 0.895 < ci["low"] < ci["ratio"] < ci["high"] < 0.905
    assert row["kdakit_vs"]["helion-upstream"]["ci"]["ratio"] == pytest.approx(0.9 / 1.1, rel=2e-3)


def test_identical_arms_with_tiny_noise_are_within_one_percent():
    row, _ = _run(_times([1.0, 1.0005, 0.9996, 1.0002, 0.9998]), repeats=5)
    assert row["kdakit_vs"]["triton"]["verdict"] == "within ±1 % (CI inside the band)"


def test_noisy_few_rounds_are_inconclusive_with_the_repeats_needed():
    row, _ = _run(_times([1.03, 0.98, 1.0]), repeats=3)
    assert row["kdakit_vs"]["triton"]["verdict"] == "inconclusive at n = 3; about 54 repeats needed"


def test_the_ratio_table_shows_each_comparison_and_the_medians_over_rounds():
    row, _ = _run(_times([0.9] * 5), repeats=5)
    row.update(phase="verify", shape="16x6", floor_us=28.0)
    result = {"rows": [row], "config": {"repeats": 5, "band_pct": 1.0}, "copy_bandwidth": {}}
    printed = table.render_table(result)
    assert printed.startswith("Per-call µs, then the median over 5 interleaved rounds.")
    line = next(x for x in printed.splitlines() if x.startswith("| verify | 16 × 6 | triton |"))
    assert line.endswith("| 5 | 0.9000 [0.9000, 0.9000] | different (CI excludes 1) |")
    del row["kdakit_vs"]  # a record written where scipy was missing: the table computes it from the rounds
    assert table.render_table(result) == printed


def test_an_arm_that_fails_in_a_later_round_is_failed_and_not_compared():
    times = _times([0.9] * 3)
    times["helion-upstream"] = times["helion-upstream"][:1]  # its second round raises IndexError
    row, calls = _run(times, repeats=3)
    assert row["arms"]["helion-upstream"]["status"] == "failed"
    assert "helion-upstream" not in row["kdakit_vs"] and "triton" in row["kdakit_vs"]
    assert calls.count("helion-upstream") == 2 and calls.count("triton") == 3


def test_one_round_gives_the_fields_and_table_of_a_record_without_rounds():
    row, _ = _run(_times([0.9]), repeats=1)
    entry = row["arms"]["helion-kdakit"]
    assert "kdakit_vs" not in row
    assert entry["per_call"] == timing.summarize(entry["samples_us"])
    assert entry["single_call"] == timing.summarize(entry["single_samples_us"])
    row.update(phase="verify", shape="16x6", floor_us=28.0)
    old = {**row, "arms": {a: {k: v for k, v in e.items() if k != "rounds"} for a, e in row["arms"].items()}}
    assert table.render_table({"rows": [row]}) == table.render_table({"rows": [old]})


def test_the_newest_record_without_rounds_prints_the_table_its_run_printed():
    result = json.loads((RUN13 / "kernels-bench.json").read_text())
    assert "repeats" not in result["config"]
    rendered = table.render_table(result)
    printed = (RUN13 / "bench.txt").read_text()
    # the one line reworded since that run: its targets' heading (then named after the tracker's entry)
    printed = re.sub(
        r"^\w+ \d+ performance targets \(kdakit Helion\):$",
        "Performance targets (kdakit Helion, kernels/shapes.toml [targets]):",
        printed,
        flags=re.M,
    )
    assert rendered in printed
    assert "kdakit / each arm" not in rendered
