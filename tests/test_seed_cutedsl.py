"""The CuTe-verify PR's A/B (seed 003): its serving protocol as data, the server environment it needs on the
way to the server, the A/B's protocols from arms.toml, and its published numbers beside ours in the report."""

import json
import os
import subprocess
import sys
from pathlib import Path

from kdakit.facts import profiles, protocols
from kdakit.records import results
from kdakit.report import model, render, sections

REPO = Path(__file__).resolve().parent.parent
PROVENANCE = {"kdakit_version": "0.1.0", "git_sha": "0" * 40, "image_id": None, "pins": {},
              "gpus": ["NVIDIA B200"] * 4, "driver": None, "server_command": None}  # fmt: skip


def test_the_protocol_is_the_prs_table():
    p = protocols.load_protocols()["cutedsl-pr"]
    assert [(x.input_len, x.output_len, x.concurrency) for x in p.points] == [
        (8192, 1024, 1),
        (8192, 1024, 48),
    ]
    assert p.flush_cache and p.server_env == {"SGLANG_SIMULATE_ACC_LEN": "5"}
    assert p.metrics == ("output_throughput", "median_tpot_ms", "median_itl_ms")
    assert protocols.load_protocols()["pr"].metrics == ("output_throughput",)  # the default: `metric`
    published = model.load_published()
    table = model.serving_ab_table("cutedsl-pr", published)
    assert {r["metric"] for r in table["rows"]} == set(p.metrics)
    assert {(r["input_len"], r["output_len"], r["concurrency"]) for r in table["rows"]} == {
        (x.input_len, x.output_len, x.concurrency) for x in p.points
    }


def test_the_deploy_gets_the_protocols_server_environment():
    run = [sys.executable, "-m", "kdakit.bench.serving", "server-env"]
    out = subprocess.run([*run, "cutedsl-pr"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["SGLANG_SIMULATE_ACC_LEN=5"]
    assert json.loads(subprocess.run([*run, "pr"], capture_output=True, text=True, check=True).stdout) == []
    bad = subprocess.run([*run, "nope"], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("kdakit bench: error: unknown protocol 'nope'")
    defaults = (REPO / "playbooks/roles/server/defaults/main.yml").read_text()
    assert "kdakit_server_protocol_env | default([]) | map('regex_replace', '^', '--env=')" in defaults


def test_the_server_environment_of_a_protocol_from_another_file(tmp_path):
    """A site's (or the test rig's) own protocols file given to the bench: the deploy reads its server_env
    from that file (kdakit_bench_protocols_file), not from the built-in one, where the protocol is unknown."""
    own = tmp_path / "protocols.toml"
    text = protocols.PROTOCOLS_FILE.read_text().replace("[protocol.cutedsl-pr]", "[protocol.site-ab]")
    own.write_text(text)
    run = [sys.executable, "-m", "kdakit.bench.serving", "server-env", "site-ab"]
    assert json.loads(
        subprocess.run([*run, str(own)], capture_output=True, text=True, check=True).stdout
    ) == ["SGLANG_SIMULATE_ACC_LEN=5"]
    assert subprocess.run([*run, ""], capture_output=True, text=True).returncode == 1  # empty: built-in
    tasks = (REPO / "playbooks/roles/server/tasks/main.yml").read_text()
    assert '"{{ kdakit_bench_protocols_file }}"' in tasks


def test_make_ab_with_the_cutedsl_arms_runs_the_prs_protocols(tmp_path):
    assert profiles.ab_protocols(["triton", "cutedsl"]) == {"bench": "cutedsl-pr", "gsm8k": "full"}
    assert profiles.ab_protocols(profiles.ab_arms()) is None
    log, fake = tmp_path / "calls.log", tmp_path / "ansible-playbook"  # logs what each step's facts file says
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\nargs = sys.argv[1:]\n"
        "values = [json.load(open(args[i + 1][1:])) for i, a in enumerate(args) if a == '-e' and"
        " args[i + 1].startswith('@')][0]\n"
        f"open({str(log)!r}, 'a').write(json.dumps([values['kdakit_arm'],"
        " values.get('kdakit_bench_protocol'), values.get('kdakit_gsm8k_protocol')]) + '\\n')\n"
    )
    fake.chmod(0o755)

    def steps(*more: str) -> set[tuple]:
        log.unlink(missing_ok=True)
        make = ["make", "--no-print-directory", "-o", ".venv/.setup-done", "ab-b200", "RUN_ID=r",
                "PREFLIGHT_DONE=1", f"ANSIBLE_PLAYBOOK={fake}", f"RESULTS={tmp_path / 'results'}",
                *more]  # fmt: skip
        proc = subprocess.run(
            make, cwd=REPO, capture_output=True, text=True, env=dict(os.environ), timeout=120
        )
        assert log.exists(), proc.stdout + proc.stderr
        return {tuple(json.loads(line)) for line in log.read_text().splitlines()}

    assert steps("ARMS=triton cutedsl") == {
        ("triton", "cutedsl-pr", "full"),
        ("cutedsl", "cutedsl-pr", "full"),
    }
    chosen = steps("ARMS=triton cutedsl", "GSM8K_PROTOCOL=full-lm-eval")
    assert chosen == {(arm, "cutedsl-pr", "full-lm-eval") for arm in ("triton", "cutedsl")}


def _record(arm: str, runs: dict, created: str) -> dict:
    points = []
    for (i, o, c), values in runs.items():
        run_rows = [
            {"index": j, "completed": 8, "num_prompts": 8, "output_throughput": tok,
             "total_throughput": tok * 9, "duration_s": 10.0, "accept_length": 5.0, "median_tpot_ms": tpot,
             "median_itl_ms": itl, "raw_file": f"x/run{j}.jsonl"}
            for j, (tok, tpot, itl) in enumerate(values, 1)
        ]  # fmt: skip
        points.append(
            {"input_len": i, "output_len": o, "concurrency": c, "num_prompts": 8, "status": "ok",
             "runs": run_rows, "median_output_throughput": results.median([r[0] for r in values]),
             "median_total_throughput": results.median([r[0] * 9 for r in values]), "accept_length": 5.0}
        )  # fmt: skip
    metrics = {"dataset": "random-ids", "backend": "sglang", "runs_per_point": 3, "points": points,
               "protocol_definition": protocols.protocol_definition(protocols.load_protocols()["cutedsl-pr"],
                                                                  protocols.PROTOCOLS_FILE)}  # fmt: skip
    record = results.new_record("serving", run_id="r003", host="b1", sku="b200", arm=arm,
                                protocol="cutedsl-pr", metrics=metrics, provenance=PROVENANCE)  # fmt: skip
    record["created"] = created
    return record


def test_the_report_sets_every_published_metric_beside_ours(tmp_path):
    c1, c48 = (8192, 1024, 1), (8192, 1024, 48)
    triton = {c1: [(540.0, 1.60, 1.61), (545.0, 1.61, 1.60), (542.0, 1.60, 1.62)],
              c48: [(3770.0, 8.29, 5.08), (3760.0, 8.30, 5.10), (3775.0, 8.28, 5.07)]}  # fmt: skip
    cutedsl = {c1: [(551.0, 1.57, 1.57), (549.0, 1.58, 1.56), (550.0, 1.57, 1.57)],
               c48: [(3825.0, 8.07, 4.88), (3820.0, 8.08, 4.87), (3822.0, 8.08, 4.89)]}  # fmt: skip
    base = tmp_path / "r003" / "b1"
    for arm, runs, created in (("triton", triton, "2026-12-02T09:00:00+00:00"),
                               ("cutedsl", cutedsl, "2026-12-02T09:30:00+00:00")):  # fmt: skip
        results.write_result(base / arm / f"{arm}-cutedsl-pr.result.json", _record(arm, runs, created))
    rows = model.serving_ab_rows(model.collect(tmp_path), model.load_published())
    assert [(r["key"][2], r["metric"]) for r in rows] == [
        (c, m) for c in (1, 48) for m in ("output_throughput", "median_tpot_ms", "median_itl_ms")
    ]
    tpot48 = next(r for r in rows if r["key"] == c48 and r["metric"] == "median_tpot_ms")
    assert tpot48["ours"] == {"triton": 8.29, "cutedsl": 8.08}
    assert tpot48["pub"] == {"triton": 8.287, "cutedsl": 8.078} and tpot48["pub_sku"] == "GB300"
    assert tpot48["judged"].ci.ratio < 1  # the CuTe arm's TPOT is lower, with an interval from the runs
    md = render.to_markdown(sections.build(tmp_path, plots=False), "t")
    assert "## Serving A/B of other PRs (every published metric, ours beside theirs)" in md
    assert "| 8192 / 1024 | 48 | median TPOT (ms) | 8.290 | 8.080 | -2.53% |" in md
    assert "| 8.287 | 8.078 | -2.52% |" in md
    assert "| 8192 / 1024 | 1 | output tok/s | 542.000 | 550.000 | +1.48% |" in md
    assert "| 543.100 | 550.400 | +1.34% |" in md
    assert "| 8192 / 1024 | 1 | median ITL (ms) |" in md
    # the seed-000 serving table and its claim are not fed with these arms
    assert not model.serving_rows(model.collect(tmp_path), model.load_published())
    assert "cutedsl: no result" not in md and "helion: no result" not in md
