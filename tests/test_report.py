"""`kdakit report` on a fixture tree: golden Markdown, self-contained HTML, verdicts, missing points."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest

from kdakit import cli, report
from kdakit.records import results, stats
from kdakit.report import model as report_model
from kdakit.report import render as report_render
from kdakit.report import sections as report_sections

GOLDEN = Path(__file__).parent / "data" / "report" / "report.md"
PROVENANCE = {
    "kdakit_version": "0.1.0",
    "git_sha": "0123456789abcdef0123456789abcdef01234567",
    "image_id": "sha256:feedface",
    "pins": {},
    "gpus": ["NVIDIA H200"] * 4,
    "driver": "580.65.06",  # pins: ignore
    "server_command": None,
}


def _record(kind, arm, metrics, created, host="h200-a", protocol="pr", notes=None):
    prov = copy.deepcopy(PROVENANCE)
    if kind == "serving":
        prov["server_command"] = {
            "argv": [
                "sglang",
                "serve",
                "--linear-attn-decode-backend",
                arm,
                "--linear-attn-verify-backend",
                arm,
            ],
            "env": {},
        }
    record = results.new_record(
        kind, run_id="ab-1", host=host, sku="H200", arm=arm, protocol=protocol, metrics=metrics,
        provenance=prov, notes=notes,
    )  # fmt: skip
    record["created"] = created
    return record


def _point(i, o, c, n, values, status="ok", accept=3.4):
    runs = [
        {"index": j, "completed": n, "num_prompts": n, "output_throughput": v, "total_throughput": v * 5,
         "duration_s": 10.0, "accept_length": accept, "raw_file": f"x/run{j}.jsonl"}
        for j, v in enumerate(values, 1)
    ]  # fmt: skip
    ok = status == "ok"
    return {
        "input_len": i, "output_len": o, "concurrency": c, "num_prompts": n, "status": status, "runs": runs,
        "median_output_throughput": results.median(values) if ok else None,
        "median_total_throughput": results.median([v * 5 for v in values]) if ok else None,
        "accept_length": accept,
        **({} if ok else {"error": "run 2: completed 63 of 64 requests"}),
    }  # fmt: skip


def build_fixture_tree(root: Path) -> Path:
    base = root / "ab-1" / "h200-a"
    triton_points = [
        _point(4096, 1024, 1, 8, [440.0, 436.0, 438.0]),
        _point(4096, 1024, 16, 64, [2520.0, 2530.0, 2526.0]),
        _point(4096, 1024, 48, 192, [3600.0, 3610.0, 3605.0]),
        _point(32768, 1024, 1, 8, [265.0, 264.0, 266.0]),
        _point(32768, 1024, 16, 64, [668.0, 670.0, 669.0]),
    ]  # 32768/1024 C48 never measured: missing
    helion_points = [
        _point(4096, 1024, 1, 8, [443.0, 441.0, 442.0]),
        _point(4096, 1024, 16, 64, [2500.0, 2508.0, 2510.0]),
        _point(4096, 1024, 48, 192, [3598.0, 3601.0, 3590.0]),
        _point(32768, 1024, 1, 8, [264.0, 263.0, 265.0]),
        _point(32768, 1024, 16, 64, [660.0], status="failed"),
    ]
    for arm, points in (("triton", triton_points), ("helion", helion_points)):
        metrics = {"dataset": "random-ids", "backend": "sglang", "runs_per_point": 3, "points": points}
        note = ["client python -m sglang.benchmark.serving", "dataset random-ids: acceptance length differs"]
        results.write_result(
            base / "serving" / f"{arm}-pr.result.json",
            _record("serving", arm, metrics, f"2026-11-29T09:0{len(arm) % 2}:00+00:00", notes=note),
        )
    rows = []
    for phase, shape, t, h in [
        ("prefill", "1x4096", 390.0, 430.0),
        ("decode", "1x1", 7.1, 6.0),
        ("decode", "16x1", 14.9, 11.2),
        ("verify", "16x6", 39.0, 44.0),
    ]:
        common = {"phase": phase, "shape": shape, "samples": 500, "floor_us": None}
        rows += [
            {**common, "arm": "triton", "median_us": t},
            {**common, "arm": "helion", "variant": "helion-upstream", "median_us": h},
            {**common, "arm": "helion", "variant": "helion-kdakit", "median_us": round(h * 0.9, 3)},
        ]
    rows.append({"phase": "decode", "shape": "48x1", "arm": "triton", "median_us": 40.0, "samples": 500})
    # A decode-only variant: "—" in the other phases, "missing" where a decode shape lacks it.
    packed = {"arm": "triton", "variant": "triton-packed", "median_us": 7.0, "samples": 500}
    rows.append({"phase": "decode", "shape": "1x1", **packed})
    rows.append(
        {
            "phase": "decode",
            "shape": "48x1",
            "arm": "helion",
            "median_us": None,
            "samples": 0,
            "status": "failed",
        }
    )
    results.write_result(
        base / "kernels" / "kernels.result.json",
        _record("kernels", "both", {"gpu": "NVIDIA H200", "rows": rows}, "2026-11-29T09:05:00+00:00"),
    )
    for j, (strict, flexible) in enumerate([(0.96, 0.99), (0.95, 0.92)], 1):
        metrics = {
            "run_index": j, "n_questions": 100, "accuracy_strict": strict, "accuracy_flexible": flexible,
            "threshold": 0.93, "verdict_metric": "flexible",
            "verdict": "pass" if flexible >= 0.93 else "fail",
        }  # fmt: skip
        results.write_result(
            base / "gsm8k" / f"helion-pr-run{j}.result.json",
            _record("gsm8k", "helion", metrics, f"2026-11-29T09:1{j}:00+00:00"),
        )
    return root


def _section(sections, title: str):
    return next(s for s in sections if s.title == title)


def test_report_matches_golden_markdown(tmp_path):
    root = build_fixture_tree(tmp_path / "results")
    md_path, html_path = report.write_report(root, tmp_path / "out")
    text = md_path.read_text()
    if os.environ.get("KDAKIT_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), (
        "report.md changed; rerun with KDAKIT_UPDATE_GOLDEN=1 and review the diff"
    )


def test_report_content_missing_and_verdicts(tmp_path):
    root = build_fixture_tree(tmp_path / "results")
    sections = report_sections.build(root, plots=False)
    md = report_render.to_markdown(sections, "t")
    # Our medians, changes and the published values beside them.
    assert "| 4096 / 1024 | 1 | 438.00 | 442.00 | +0.91% | 438.42 | 442.10 | +0.84% | -0.10% | -0.02% |" in md
    # Missing and failed points are shown, not dropped.
    assert "| 32768 / 1024 | 48 | missing | missing | n/a | not published | not published |" in md
    # a failed point says why, in its cell
    assert "| 32768 / 1024 | 16 | 669.00 | failed: run 2: completed 63 of 64 requests | n/a | 668.92 |" in md
    assert "| decode | 48 × 1 | 40.00 | failed | n/a | 40.80 | 29.54 |" in md
    assert "| verify | 1 × 6 | missing | missing | n/a | 18.69 | 12.16 |" in md
    assert (
        "| 390.00 | 430.00 | +10.26% | 386.11 | 428.40 | +10.95% | +1.01% | +0.37% | 387.00 (-0.77%) | — |"
        in md
    )
    assert (
        "| 14.90 | 11.20 | -24.83% | 14.78 | 11.28 | -23.68% | +0.81% | -0.71% | 10.08 (-32.35%) | missing |"
        in md
    )
    # SGLang's Helion (helion-upstream) fills the Helion column; kdakit's own Helion gets its own column.
    assert (
        "| decode | 1 × 1 | 7.10 | 6.00 | -15.49% | 7.20 | 6.05 | -15.97% | -1.39% | -0.83% | 5.40 (-23.94%)"
        in md
    )
    verdicts = {row[0]: (row[2], row[4]) for row in _section(sections, "Verdicts").blocks[0].rows}
    parity = verdicts["Helion throughput is within ±1% of Triton on H200"]
    # One visit per arm measures no visit-to-visit noise: never decisive, and no count of visits guessed
    assert parity[0] == "cannot tell at this noise: one visit per arm (a sequential protocol settles it)"
    assert "4 cannot tell (of 4 measured points); 0 outside at the claim's 99.2 % per point" in parity[1]
    assert "; 2 point(s) missing or failed" in parity[1]
    # the PR's method is shown, labelled, beside the intervals' verdict
    assert "PR's method (medians of runs, no interval): 4 of 4 measured points agree" in parity[1]
    assert (
        verdicts["Helion reduces packed-decode latency on H200 (published 16–28%)"][0]
        == "holds where measured by the PR's method"
    )
    assert (
        verdicts["Helion prefill is slower than Triton on H200 in the tested shapes"][0]
        == "holds where measured by the PR's method"
    )
    assert verdicts["Helion reduces packed-decode latency on B200 (published 18–38%)"][0] == "no data"
    assert verdicts["GSM8K pr run 2 (helion, h200-a) reaches 0.93"][0] == "does not hold"
    assert verdicts["GSM8K pr run 1 (helion, h200-a) reaches 0.93"][0] == "holds"


def test_a_median_outside_the_band_never_decides_the_claim_on_its_own(tmp_path):
    root = build_fixture_tree(tmp_path / "results")
    path = root / "ab-1" / "h200-a" / "serving" / "helion-pr.result.json"
    record = results.read_result(path)
    point = record["metrics"]["points"][1]
    point["runs"][0]["output_throughput"] = point["median_output_throughput"] = 2400.0  # -4.99% vs 2526
    results.write_result(path, record)
    sections = report_sections.build(root, plots=False)
    verdicts = {row[0]: (row[2], row[4]) for row in _section(sections, "Verdicts").blocks[0].rows}
    verdict, evidence = verdicts["Helion throughput is within ±1% of Triton on H200"]
    assert verdict.startswith("cannot tell at this noise")
    assert "PR's method (medians of runs, no interval): 3 of 4 measured points agree" in evidence


def test_html_is_self_contained_with_inline_plots(tmp_path):
    root = build_fixture_tree(tmp_path / "results")
    _, html_path = report.write_report(root, tmp_path / "out")
    page = html_path.read_text()
    # throughput vs concurrency, helion/triton ratio with CIs, kernel latency
    assert page.count('src="data:image/png;base64,') == 3
    assert not re.search(r"(src|href)=\"(https?:)?//", page), "no external resources"
    assert '<td class="nothold">does not hold</td>' in page  # GSM8K run 2 below its threshold
    assert '<td class="tell">cannot tell at this noise: ' in page
    assert (tmp_path / "out" / "report-plots" / "serving-ab-1-h200-a-pr.png").stat().st_size > 1000


def test_cli_names_and_skips_unreadable_records(tmp_path, capsys):
    root = build_fixture_tree(tmp_path / "results")
    gsm = root / "ab-1" / "h200-a" / "gsm8k"
    bad = gsm / "helion-pr-run1.result.json"
    bad.write_text(bad.read_text().replace('"accuracy_strict": 0.96', '"accuracy_strict": "0.96"'))
    (gsm / "helion-pr-run3.result.json").write_text("")  # a disk-full leftover
    (gsm / "helion-pr-run4.result.json").write_text('{"schema": "kdakit.res')  # cut short
    assert cli.main(["report", str(root), "--no-plots"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "kdakit report: skipped unreadable record ab-1/h200-a/gsm8k/helion-pr-run1.result.json: invalid "
        "kdakit.result.v1 record: metrics/accuracy_strict: '0.96' is not of type 'number'",
        "kdakit report: skipped unreadable record ab-1/h200-a/gsm8k/helion-pr-run3.result.json: not JSON "
        "(Expecting value at line 1)",
        "kdakit report: skipped unreadable record ab-1/h200-a/gsm8k/helion-pr-run4.result.json: not JSON "
        "(Unterminated string starting at at line 1)",
    ]
    md = (root / "report.md").read_text()
    assert "3 unreadable record(s) skipped: ab-1/h200-a/gsm8k/helion-pr-run1.result.json, " in md
    assert "| ab-1/h200-a/gsm8k/helion-pr-run3.result.json | not JSON (Expecting value at line 1) |" in md
    assert "GSM8K pr run 2 (helion, h200-a) reaches 0.93" in md  # the readable records are all there
    assert "GSM8K pr run 1 " not in md
    assert cli.main(["report", str(tmp_path / "empty")]) == 2


@pytest.mark.parametrize("missing", ["serving", "kernels", "gsm8k"])
def test_report_works_with_any_kind_absent(tmp_path, missing):
    root = build_fixture_tree(tmp_path / "results")
    for path in (root / "ab-1" / "h200-a" / missing).iterdir():
        path.unlink()
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    assert {"serving": "No serving results.", "kernels": "No kernel results.", "gsm8k": "No GSM8K results."}[
        missing
    ] in md


# ---- repeats, statistics, SKU and GSM8K matching


def _serving(root: Path, arm: str, protocol: str, points: list, created: str, name: str, sku: str = "H200"):
    metrics = {"dataset": "random-ids", "backend": "sglang", "runs_per_point": 2, "points": points}
    record = _record("serving", arm, metrics, created, protocol=protocol)
    record["sku"] = sku
    results.write_result(root / "r1" / "h1" / "serving" / name, record)


def _rigorous_tree(root: Path, interleave: bool = True) -> Path:
    """Five visits per arm; per point a known helion/triton ratio and a known visit-to-visit spread."""
    spread = [0.0, 1.0, -1.0, 0.5, -0.5]  # per visit, in units of the point's noise
    cases = {  # concurrency: (triton tok/s, true ratio, noise)
        1: (400.0, 1.03, 0.003),  # 3 % faster, little noise: different
        16: (2500.0, 1.001, 0.0005),  # 0.1 %, tiny noise: within ±1 %
        48: (3600.0, 1.004, 0.01),  # 0.4 %, 1 % noise: inconclusive at n = 5
    }
    for k in range(5):
        for arm in ARMS:
            points = []
            for c, (base, ratio, noise) in cases.items():
                sign = 1 if arm == "triton" else -1  # the arms' visits vary independently
                value = base * (ratio if arm == "helion" else 1.0) * (1 + sign * spread[k] * noise)
                points.append(_point(4096, 1024, c, 8, [value * 0.999, value * 1.001]))
            minute = (2 * k + (arm == "helion")) if interleave else (k + 5 * (arm == "helion"))
            created = f"2026-11-29T10:{minute:02d}:00+00:00"
            _serving(root, arm, "rigorous", points, created, f"{arm}-rigorous" + (f"-{k + 1}" if k else "")
                     + ".result.json")  # fmt: skip
    return root


ARMS = ("triton", "helion")


def test_rigorous_verdicts_on_synthetic_runs_with_known_differences(tmp_path):
    root = _rigorous_tree(tmp_path / "results")
    rows = report_model.serving_rows(report_model.collect(root), report_model.load_published())
    rows = {r["key"][2]: r for r in rows if r["key"][0] == 4096}
    assert rows[1]["verdict"] == "outside ±1 %"
    assert rows[16]["verdict"] == "within ±1 %"
    judged = rows[48]["judged"]
    assert judged.more_visits > 5
    chance = f"{100 * judged.settle_probability:.0f} %"
    assert rows[48]["verdict"] == (
        f"cannot tell at this noise: {judged.more_visits} more visits would settle it (probability {chance})"
    )
    assert judged.settle_probability >= stats.SETTLE_PROBABILITY
    for c, true_ratio in ((1, 1.03), (16, 1.001), (48, 1.004)):
        ci = rows[c]["ci"]
        assert ci.paired and ci.n == 5 and ci.low < true_ratio < ci.high
        # A/A: visit 2 / visit 1 and visit 4 / visit 3 of each arm (fresh servers), not runs within a visit
        assert rows[c]["aa"].n == 4 and rows[c]["aa_pairs"] == 4
        assert rows[c]["interleaved"]
    assert rows[16]["aa_verdict"] == "within ±1 %"
    assert rows[48]["aa_verdict"].startswith("cannot tell at this noise")
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    assert "visits interleaved (ABAB…)." in md
    assert "| 4096 / 1024 | 16 | 2500.00 | 2502.50 | +0.10% |" in md and "| 5 / 5 | 1.0010 [" in md
    claim = next(line for line in md.splitlines() if "(protocol rigorous)" in line)
    assert (
        "| does not hold | 5 of 5 planned visit(s) | 95 % intervals: 1 within ±1 %, 0 different but inside, "
        "1 outside" in claim
    )
    sections = report_sections.build(root)  # plots: error bars and the ratio plot render
    assert any(isinstance(b, report_model.Plot) and b.filename.startswith("serving-ratio-") for s in sections
               for b in s.blocks)  # fmt: skip


def test_visits_not_interleaved_are_flagged(tmp_path):
    root = _rigorous_tree(tmp_path / "results", interleave=False)
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    assert "visits NOT interleaved." in md


def test_reruns_are_repeats_counted_and_pooled_not_the_latest(tmp_path):
    root = tmp_path / "results"
    for k, (t, h) in enumerate([(100.0, 101.0), (200.0, 202.0), (300.0, 303.0)]):
        for arm, v in (("triton", t), ("helion", h)):
            name = f"{arm}-pr" + (f"-{k + 1}" if k else "") + ".result.json"
            _serving(
                root,
                arm,
                "pr",
                [_point(4096, 1024, 1, 8, [v, v, v])],
                f"2026-11-29T09:0{2 * k}:0{arm == 'helion'}+00:00",
                name,
            )
    rows = report_model.serving_rows(report_model.collect(root), report_model.load_published())
    row = next(r for r in rows if r["key"] == (4096, 1024, 1))
    assert (row["triton"], row["helion"]) == (200.0, 202.0)  # the median of the three repeats, not the last
    assert row["ci_basis"] == "paired by visit id over 3 visit(s), Student t over the paired visits"
    assert report_model.visits_repeats_text(row["visits"]) == "3 / 3"
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    assert "triton: dataset random-ids, 2 runs per point, 3 visit(s)" in md


def test_lowercase_sku_from_the_playbooks_matches_the_published_numbers(tmp_path):
    root = build_fixture_tree(tmp_path / "results")
    for path in root.rglob("*.result.json"):
        record = results.read_result(path)
        record["sku"] = "h200"  # what group_vars' kdakit_sku gives $KDAKIT_SKU
        results.write_result(path, record)
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    assert "| 4096 / 1024 | 1 | 438.00 | 442.00 | +0.91% | 438.42 | 442.10 | +0.84% |" in md
    assert "| Helion throughput is within ±1% of Triton on H200 | 000_73b73c95dc10b4a8 | cannot tell" in md
    assert "| 0.9900 (000_73b73c95dc10b4a8) (+0.00) |" in md


def _gsm8k(root, name, arm, sku, value, run=1, n=100, limited=False, protocol="pr"):
    metrics = {"run_index": run, "status": "ok", "n_questions": n, "accuracy_numeric": value,
               "threshold": 0.93, "verdict_metric": "numeric", "verdict": "pass" if value >= 0.93 else "fail",
               "limited": limited, "protocol_questions": 100}  # fmt: skip
    record = _record("gsm8k", arm, metrics, f"2026-11-29T09:{run:02d}:00+00:00", protocol=protocol)
    record["sku"] = sku
    results.write_result(root / "r1" / "h1" / "gsm8k" / name, record)


def test_gsm8k_published_matched_on_protocol_gpu_and_arm_and_limited_runs_never_compared(tmp_path):
    root = tmp_path / "results"
    _gsm8k(root, "a.result.json", "helion", "H200", 0.98)
    _gsm8k(root, "b.result.json", "triton", "H200", 0.97)
    _gsm8k(root, "c.result.json", "helion", "B200", 0.97)
    _gsm8k(root, "d.result.json", "helion", "H200", 1.0, n=20, limited=True)
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    rows = [line for line in md.splitlines() if line.startswith("| h200-a |") and "(numeric ≥" in line]
    assert len(rows) == 4
    assert "| h200-a | H200 | helion | pr | sglang-run-eval | 1 | 100 | — | — | 0.9800 |" in md
    assert any(
        r.endswith(
            "| 0.9800 | — | pass (numeric ≥ 0.93) | 0.9900 (000_73b73c95dc10b4a8) (-1.00) "
            "| — (not published) |"
        )
        for r in rows
    )
    assert any(
        r.endswith(
            "| 0.9700 | — | pass (numeric ≥ 0.93) | not published (pr, H200, triton) | — (not published) |"
        )
        for r in rows
    )
    assert any("| B200 | helion |" in r and "| not published (pr, B200, helion) |" in r for r in rows)
    assert any("| 20 limited |" in r and "| limited run (20 of 100): not compared |" in r for r in rows)


def test_gsm8k_arm_differences_are_judged_against_run_to_run_noise(tmp_path):
    root = tmp_path / "results"
    for j, (t, h) in enumerate([(0.90, 0.95), (0.91, 0.96)], 1):
        _gsm8k(root, f"t{j}.result.json", "triton", "H200", t, run=j)
        _gsm8k(root, f"h{j}.result.json", "helion", "H200", h, run=j)
    (d,) = report_sections.gsm8k_arm_differences(report_model.collect(root).gsm8k)
    assert d["noise"] == "run-to-run" and d["difference_pts"] == pytest.approx(5.0)
    assert d["verdict"].startswith("different: +5.00 pts, beyond the ±")
    for path in root.rglob("*.result.json"):
        path.unlink()
    for j in (1, 2):  # identical runs measure no noise: the binomial noise of 100 questions stands in
        _gsm8k(root, f"t{j}.result.json", "triton", "H200", 0.905, run=j)
        _gsm8k(root, f"h{j}.result.json", "helion", "H200", 0.92, run=j)
    (d,) = report_sections.gsm8k_arm_differences(report_model.collect(root).gsm8k)
    assert d["noise"] == "binomial (runs identical or single)"
    assert d["verdict"].startswith("no difference beyond the noise: +1.50 pts within ±")


def _visit_tree(root: Path, triton: dict, helion: dict) -> Path:
    """One point, each arm's visits by visit id (None: the visit's point failed; absent: no record)."""
    for arm, values in (("triton", triton), ("helion", helion)):
        for k, (visit, value) in enumerate(sorted(values.items())):
            point = _point(4096, 1024, 1, 8, [value, value * 1.001]) if value else _point(
                4096, 1024, 1, 8, [1.0], status="failed")  # fmt: skip
            metrics = {"dataset": "random-ids", "runs_per_point": 2, "visit": visit, "points": [point]}
            created = f"2026-11-29T10:{2 * visit + (arm == 'helion'):02d}:00+00:00"
            record = _record("serving", arm, metrics, created, protocol="rigorous")
            results.write_result(
                root / "r1" / "h1" / "serving" / f"{arm}-rigorous-{k + 1}.result.json", record
            )
    return root


def test_pairs_are_matched_by_visit_id_and_a_failed_visit_drops_only_its_pair(tmp_path):
    drift = {1: 1000.0, 2: 1100.0, 3: 900.0, 4: 1050.0, 5: 950.0}  # the server's speed per visit
    helion = dict(drift)  # helion == triton in every visit: true ratio 1.000
    triton = {**drift, 2: None}  # triton's visit 2 failed
    root = _visit_tree(tmp_path / "results", triton, helion)
    (row,) = [r for r in report_model.serving_rows(report_model.collect(root), report_model.load_published())
              if r["key"] == (4096, 1024, 1)]  # fmt: skip
    assert row["ci"].n == 4 and row["ci"].ratio == pytest.approx(1.0)
    assert row["ci_basis"] == "paired by visit id over 4 visit(s), Student t over the paired visits"
    # the ±10 % the server's speed drifts between visits is shared by both arms of a visit: the paired
    # ratios cancel it, and nothing made of one arm's own visit-to-visit spread puts it back
    assert row["kind"] == stats.WITHIN and row["ci"].high / row["ci"].low < 1.01
    # a visit with no record at all (the orchestrator's visit ids keep their place)
    root = _visit_tree(tmp_path / "results2", {v: x for v, x in drift.items() if v != 3}, helion)
    (row,) = [r for r in report_model.serving_rows(report_model.collect(root), report_model.load_published())
              if r["key"] == (4096, 1024, 1)]  # fmt: skip
    assert row["ci"].n == 4 and row["ci"].ratio == pytest.approx(1.0)


def test_zero_spread_is_never_certainty(tmp_path):
    same = {1: 1000.0, 2: 1000.0}
    root = _visit_tree(tmp_path / "results", same, {v: x * 1.0577 for v, x in same.items()})
    (row,) = [r for r in report_model.serving_rows(report_model.collect(root), report_model.load_published())
              if r["key"] == (4096, 1024, 1)]  # fmt: skip
    assert row["kind"] == stats.CANNOT_TELL  # two visits: below the minimum, whatever the spread
    judged = stats.judge_pairs([1000.0] * 4, [1002.0] * 4)  # four identical ratios, +0.2 %
    assert judged.ci.low < judged.ci.ratio < judged.ci.high  # the spread floor keeps a width
    assert judged.floor_log == stats.SPREAD_FLOOR_LOG


def test_verdict_styling_follows_meaning():
    assert report_render.cell_class("outside ±1 %") == "nothold"
    assert report_render.cell_class("does not hold") == "nothold"
    assert report_render.cell_class("different but inside ±1 %") == "inside"
    assert report_render.cell_class("within ±1 %") == "holds"
    assert report_render.cell_class("cannot tell at this noise: 3 more visits would settle it") == "tell"
    assert report_render.cell_class("missing") == "missing"


def test_band_and_points_come_from_the_protocols_file_the_runs_used(tmp_path):
    used = {"source_file": "/site/protocols.toml", "band_pct": 3.0, "repeats": 5, "runs": 2,
            "points": [{"input_len": 4096, "output_len": 1024, "concurrency": 1, "num_prompts": 8},
                       {"input_len": 999, "output_len": 9, "concurrency": 3, "num_prompts": 6}]}  # fmt: skip
    root = tmp_path / "results"
    for k in range(5):
        for arm, value in (("triton", 1000.0 + k), ("helion", 1020.0 + k)):
            point = _point(4096, 1024, 1, 8, [value, value])
            metrics = {"dataset": "random-ids", "runs_per_point": 2, "repeat_index": k + 1,
                       "protocol_definition": used, "points": [point]}  # fmt: skip
            created = f"2026-11-29T10:{2 * k + (arm == 'helion'):02d}:00+00:00"
            record = _record("serving", arm, metrics, created, protocol="rigorous")
            results.write_result(root / "r1" / "h1" / "serving" / f"{arm}-{k}.result.json", record)
    rows = report_model.serving_rows(report_model.collect(root), report_model.load_published())
    by_key = {r["key"]: r for r in rows}
    assert set(by_key) == {(4096, 1024, 1), (999, 9, 3)}  # the file's points, not the built-in six
    assert by_key[(4096, 1024, 1)]["band"] == 3.0
    assert by_key[(4096, 1024, 1)]["verdict"] == "different but inside ±3 %"  # +2 %: inside ±3 %, not ±1 %
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    assert "Protocol rigorous as the runs used it (/site/protocols.toml): band ±3 %, 2 points." in md
    # The PR's ±1 % claim is judged at its own limit, not at the site protocol's ±3 %: +2 % is outside it.
    published = report_model.load_published()
    (claim,) = [row for row in report_sections.claim_rows(report_model.collect(root), published, rows, [])
                if row["claim"]["kind"] == "serving" and row["claim"]["sku"] == "H200"]  # fmt: skip
    assert claim["verdict"] == "does not hold", claim
    assert "0 within ±1 %, 0 different but inside, 1 outside" in claim["evidence"], claim["evidence"]
    assert report_sections.visits_text(claim) == "5 of 5 planned visit(s)"


def test_failed_telemetry_is_reported_as_failed_not_healthy(tmp_path):
    from kdakit.measure import telemetry

    root = build_fixture_tree(tmp_path / "results")
    path = root / "ab-1" / "h200-a" / "serving" / "helion-pr.result.json"
    record = results.read_result(path)
    errors = ["nvidia-smi exited 9: no driver"]
    record["metrics"]["telemetry"] = telemetry.summarize([], [], "nvidia-smi", None, 1.0, errors, 5, 5)
    results.write_result(path, record)
    md = report_render.to_markdown(report_sections.build(root, plots=False), "t")
    assert (
        "| ab-1/h200-a/serving/helion-pr.result.json | failed | 0 | 0 | — | — | — | not observed: telemetry"
        in md
    )
    assert "GPU telemetry warnings during measured runs: 1 (see GPU telemetry)." in md


def test_plots_show_every_series_on_a_scale_where_it_is_visible(tmp_path):
    from matplotlib.container import ErrorbarContainer

    from kdakit.report import plots

    root = _rigorous_tree(tmp_path / "rigorous")
    build_fixture_tree(tmp_path / "pr")
    rows = report_model.serving_rows(report_model.collect(tmp_path / "pr"), report_model.load_published())
    fig = plots.throughput_figure("t", rows)
    measured, against = fig.axes
    assert against.get_ylabel() == "measured / published"  # published numbers on their own axis
    series = {c.get_label(): c.lines[0] for c in measured.containers if isinstance(c, ErrorbarContainer)}
    triton, helion = series["triton 4096/1024"], series["helion 4096/1024"]
    # the arms are drawn side by side (never one hidden under the other) with their own markers
    assert all(t < h for t, h in zip(triton.get_xdata(), helion.get_xdata(), strict=True))
    assert triton.get_marker() != helion.get_marker()
    assert max(against.get_ylim()) < 1.5 and min(against.get_ylim()) > 0.5  # ratios near 1, not near zero
    # every interval of the ratio plot (helion/triton and A/A) has its error bar
    rows = report_model.serving_rows(report_model.collect(root), report_model.load_published())
    fig = plots.ratio_figure("t", rows)
    (ax,) = fig.axes
    intervals = [ci for r in rows for ci in (r["ci"], r["aa"]) if ci is not None and ci.low is not None]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer) and c.has_yerr]
    assert len(intervals) == 6 and len(bars) == len(intervals)


def test_plot_text_is_never_cut_or_small_and_series_differ_in_colour_and_marker(tmp_path):
    from matplotlib.container import ErrorbarContainer

    from kdakit.report import plots, sample

    root = sample.write_sample(tmp_path)
    c = report_model.collect(root)
    rows = report_model.serving_rows(c, report_model.load_published())
    figures = []
    for protocol in ("decisive", "pr"):  # intervals of every verdict; one visit's hollow marks
        group = [r for r in rows if r["protocol"] == protocol]
        name = f"H200 h200-sample {protocol}"
        figures.append(plots.throughput_figure(f"{name}: throughput vs concurrency", group))
        figures.append(plots.ratio_figure(f"{name}: helion/triton, 95 % CI", group))
    kernels = report_model.kernel_rows(c, {"kernels": {"rows": []}, "serving": {"rows": []}})
    figures.append(plots.kernel_figure("H200 h200-sample: KDA kernel latency", kernels))
    for fig in figures:
        fig.tight_layout()
        assert plots.texts_outside(fig) == [] and plots.small_texts(fig) == []
        assert fig.get_figwidth() * fig.dpi <= 760  # shown at its own size in an 800 px window
        for ax in fig.axes:
            series = [c.lines[0] for c in ax.containers if isinstance(c, ErrorbarContainer)]
            styles = [(s.get_color(), s.get_marker()) for s in series if s.get_label()[:1] != "_"]
            colours, markers = [c for c, _ in styles], [m for _, m in styles]
            if ax.get_legend() is not None and ax.get_ylabel() != "helion / triton":
                assert len(set(colours)) == len(colours) and len(set(markers)) == len(markers), styles
    # the guard sees a cut title
    long = plots.ratio_figure("a title far too long for its figure " * 4, rows[:2])
    long.tight_layout()
    assert plots.texts_outside(long)


def _identical_arms_tree(root: Path, protocol_name: str, seed: int) -> Path:
    """Both arms served by the same double: every run is the same true throughput times uniform ±30 %
    run-to-run noise (the held-out check's double); the protocol's points, runs and visits; under rigorous
    one visit of each arm fails somewhere."""
    import random

    from kdakit.facts.protocols import PROTOCOLS_FILE, load_protocols, protocol_definition

    protocol = load_protocols()[protocol_name]
    rng = random.Random(seed)
    failed = {("triton", rng.randint(1, protocol.repeats)), ("helion", rng.randint(1, protocol.repeats))}
    for visit in range(1, protocol.repeats + 1):
        for arm in ARMS:
            points = []
            for p in protocol.points:
                values = [1000.0 * rng.uniform(0.7, 1.3) for _ in range(protocol.runs)]
                status = "failed" if protocol.repeats > 1 and (arm, visit) in failed else "ok"
                points.append(_point(p.input_len, p.output_len, p.concurrency, p.num_prompts, values, status))
            kept = protocol_definition(protocol, PROTOCOLS_FILE)
            metrics = {"dataset": "random-ids", "runs_per_point": protocol.runs, "visit": visit,
                       "protocol_definition": kept, "points": points}  # fmt: skip
            created = f"2026-11-29T10:{2 * visit + (arm == 'helion'):02d}:00+00:00"
            record = _record("serving", arm, metrics, created, protocol=protocol_name)
            results.write_result(root / "r1" / "h1" / "serving" / f"{arm}-{visit}.result.json", record)
    return root


def test_identical_arms_on_a_noisy_double_under_pr_never_give_does_not_hold(tmp_path):
    """The held-out check: two arms served by the same ±30 % noisy double under `pr`."""
    claim = next(c for c in report_model.load_published()["claims"] if c["kind"] == "serving")
    for seed in range(30):
        root = _identical_arms_tree(tmp_path / f"s{seed}", "pr", seed)
        rows = report_model.serving_rows(report_model.collect(root), report_model.load_published())
        assert {r["kind"] for r in rows} <= {stats.CANNOT_TELL, stats.WITHIN}, seed
        verdict, _evidence = report_model.judge(claim, rows, [])
        assert verdict.startswith("cannot tell at this noise: "), (seed, verdict)


def test_identical_arms_under_rigorous_rarely_give_does_not_hold(tmp_path):
    """The same double under `rigorous` (a failed visit per arm): at most 5 % of claims "does not hold"."""
    claim = next(c for c in report_model.load_published()["claims"] if c["kind"] == "serving")
    verdicts = []
    for seed in range(20):
        root = _identical_arms_tree(tmp_path / f"s{seed}", "rigorous", seed)
        rows = report_model.serving_rows(report_model.collect(root), report_model.load_published())
        verdicts.append(report_model.judge(claim, rows, [])[0])
    assert sum(v == "does not hold" for v in verdicts) <= 1, verdicts
    assert all(v.startswith(("cannot tell", "does not hold")) for v in verdicts)
