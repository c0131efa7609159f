"""`python -m kdakit.report.sample OUT`: a synthetic results tree to look at the report with.

Every number is made up, drawn from fixed seeds around the PR's published H200 throughput: the `pr`
protocol (one visit per arm, three runs), the `rigorous` protocol (its visits per arm, interleaved, two
runs each, one failed triton visit) and the sequential `decisive` protocol (visits until the stopping rule,
kdakit.records.sequential, says stop), each visit with a drift shared by both arms, a kernel record and
two GSM8K runs. The run id says it is a sample.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from kdakit.facts import profiles
from kdakit.records import results, sequential
from kdakit.report.model import ARMS

RUN_ID = "sample-synthetic"
SKU = profiles.default_sku()  # the published numbers the sample sits beside
HOST = f"{SKU}-sample"
SYNTHETIC = "synthetic sample: every number is made up"  # every serving record's note
PROVENANCE = {
    "kdakit_version": "sample",
    "git_sha": None,
    "image_id": None,
    "pins": {},
    "gpus": ["NVIDIA H200"] * 4,
    "driver": None,
    "server_command": None,
}
# helion/triton per point of the synthetic runs: most at parity, one 3 % slower
TRUE_RATIO = {
    (4096, 1024, 1): 1.0,
    (4096, 1024, 16): 1.002,
    (4096, 1024, 48): 0.97,
    (32768, 1024, 1): 1.0,
    (32768, 1024, 16): 0.999,
    (32768, 1024, 48): 1.0,
}


DRIFT = 0.01  # per visit, shared by both arms: what pairing the arms of a visit cancels


def _points(protocol, published: dict, arm: str, rng: random.Random, noise: float, failed: set,
            drift: float = 0.0) -> list[dict]:  # fmt: skip
    points = []
    for p in protocol.points:
        key = (p.input_len, p.output_len, p.concurrency)
        base = published.get(key, {"triton": 900.0})["triton"]  # the one point the PR did not publish
        level = base * (TRUE_RATIO[key] if arm == "helion" else 1.0) * (1 + drift) * (1 + rng.gauss(0, noise))
        if key in failed:
            points.append(
                {
                    "input_len": p.input_len,
                    "output_len": p.output_len,
                    "concurrency": p.concurrency,
                    "num_prompts": p.num_prompts,
                    "status": "failed",
                    "runs": [],
                    "median_output_throughput": None,
                    "error": "run 1: completed 63 of 64 requests",
                }
            )
            continue
        runs = []
        for j in range(1, protocol.runs + 1):
            value = level * (1 + rng.gauss(0, noise / 3))
            runs.append(
                {
                    "index": j,
                    "completed": p.num_prompts,
                    "num_prompts": p.num_prompts,
                    "output_throughput": value,
                    "total_throughput": value * (1 + p.input_len / p.output_len),
                    "duration_s": p.num_prompts * p.output_len / value,
                    "accept_length": 3.4 + rng.gauss(0, 0.02),
                    "median_ttft_ms": p.input_len / 40 * (1 + rng.gauss(0, noise)),
                    "median_tpot_ms": 1000 * p.concurrency / value,
                    "raw_file": f"sample/run{j}.jsonl",
                }
            )
        values = [r["output_throughput"] for r in runs]
        points.append(
            {
                "input_len": p.input_len,
                "output_len": p.output_len,
                "concurrency": p.concurrency,
                "num_prompts": p.num_prompts,
                "status": "ok",
                "runs": runs,
                "median_output_throughput": results.median(values),
                "median_total_throughput": results.median([r["total_throughput"] for r in runs]),
                "accept_length": results.median([r["accept_length"] for r in runs]),
            }
        )
    return points


def _record(kind: str, arm: str, protocol: str, metrics: dict, **more) -> dict:
    """A record of the sample's run, host and SKU."""
    return results.new_record(kind, run_id=RUN_ID, host=HOST, sku=SKU, arm=arm, protocol=protocol,
                              metrics=metrics, provenance=PROVENANCE, **more)  # fmt: skip


def write_sample(root: Path) -> Path:
    from kdakit.facts.protocols import PROTOCOLS_FILE, load_protocols, protocol_definition
    from kdakit.report.model import load_published

    protocols = load_protocols()
    published = {
        (r["input_len"], r["output_len"], r["concurrency"]): r
        for r in load_published()["serving"]["rows"]
        if r["sku"].lower() == SKU
    }
    base = Path(root) / RUN_ID / HOST
    rng = random.Random(25)
    minute = 0
    for name, noise in (("pr", 0.01), ("rigorous", 0.004), ("decisive", 0.004)):
        protocol = protocols[name]
        for visit in range(1, protocol.repeats + 1):
            drift = rng.gauss(0, DRIFT)
            for arm in ARMS:
                failed = {(4096, 1024, 16)} if (name, arm, visit) == ("rigorous", ARMS[0], 3) else set()
                metrics = {
                    "dataset": "random-ids",
                    "backend": protocol.backend,
                    "runs_per_point": protocol.runs,
                    "repeat_index": visit,
                    "visit": visit,
                    "repeats_planned": protocol.repeats,
                    "protocol_definition": protocol_definition(protocol, PROTOCOLS_FILE),
                    "points": _points(protocol, published, arm, rng, noise, failed, drift),
                }
                record = _record("serving", arm, name, metrics, notes=[SYNTHETIC])
                record["created"] = f"2026-12-01T{10 + minute // 60:02d}:{minute % 60:02d}:00+00:00"
                minute += 7
                suffix = f"-{visit}" if visit > 1 else ""
                results.write_result(base / "serving" / f"{arm}-{name}{suffix}.result.json", record)
            if protocol.sequential and sequential.decide(base.parent, name).stop:
                break
    rows = []
    for phase, shape, t, h in (
        ("prefill", "1x4096", 390.0, 431.0),
        ("decode", "16x1", 14.9, 11.2),
        ("verify", "16x6", 39.0, 44.0),
    ):
        common = {"phase": phase, "shape": shape, "samples": 500}
        rows += [{**common, "arm": "triton", "median_us": t}, {**common, "arm": "helion", "median_us": h}]
    record = _record("kernels", "both", "pr", {"gpu": profiles.sku(SKU).gpu_model, "rows": rows})
    results.write_result(base / "kernels" / "kernels.result.json", record)
    for j, value in ((1, 0.97), (2, 0.98)):
        metrics = {
            "run_index": j,
            "status": "ok",
            "n_questions": 100,
            "accuracy_numeric": value,
            "threshold": 0.93,
            "verdict_metric": "numeric",
            "verdict": "pass",
        }
        record = _record("gsm8k", "helion", "pr", metrics)
        results.write_result(base / "gsm8k" / f"helion-pr-run{j}.result.json", record)
    return Path(root) / RUN_ID


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kdakit.report.sample", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out", help="folder for the synthetic results tree (results/<run-id>/<host>/...)")
    run = write_sample(Path(parser.parse_args(argv).out))
    print(run)
    print(f"decisive: {sequential.decide(run, 'decisive').reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
