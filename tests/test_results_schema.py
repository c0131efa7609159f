"""The result schema: what it accepts, what it rejects (with a clear message), and the aggregation helpers."""

from __future__ import annotations

import copy
import json

import pytest

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.records import provenance, results

PROVENANCE = {
    "kdakit_version": "0.1.0",
    "git_sha": "0123456789abcdef0123456789abcdef01234567",
    "image_id": None,
    "pins": {"packages": {"torch": "2.14.1"}},
    "gpus": ["NVIDIA H200", "NVIDIA H200"],
    "driver": "580.1",  # pins: ignore
    "server_command": {"argv": ["sglang", "serve", "--linear-attn-decode-backend", "helion"], "env": {}},
}


def gsm8k_record(**metrics) -> dict:
    m = {
        "run_index": 1,
        "n_questions": 100,
        "accuracy_strict": 0.97,
        "accuracy_flexible": 0.99,
        "threshold": 0.93,
        "verdict_metric": "flexible",
        "verdict": "pass",
    }
    m.update(metrics)
    return results.new_record(
        "gsm8k",
        run_id="r1",
        host="h1",
        sku="H200",
        arm="helion",
        protocol="pr",
        metrics=m,
        provenance=copy.deepcopy(PROVENANCE),
    )


def test_valid_record_round_trips(tmp_path):
    path = results.write_result(tmp_path / "a" / "x.result.json", gsm8k_record())
    assert results.read_result(path)["metrics"]["accuracy_flexible"] == 0.99
    assert [p.name for p, _ in results.iter_results(tmp_path)] == ["x.result.json"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda r: r.pop("provenance"), "'provenance' is a required property"),
        (lambda r: r.update(kind="latency"), "kind: 'latency' is not one of"),
        (lambda r: r.update(arm="flashkda"), "arm: 'flashkda' is not one of"),
        (lambda r: r.update(schema="kdakit.result.v0"), "schema: 'kdakit.result.v1' was expected"),
        (lambda r: r["metrics"].update(accuracy_strict=1.5), "metrics/accuracy_strict: 1.5 is greater than"),
        (lambda r: r["metrics"].pop("verdict"), "metrics: 'verdict' is a required property"),
        (
            lambda r: r["provenance"].update(git_sha="not-a-sha"),
            "provenance/git_sha: 'not-a-sha' does not match",
        ),
        (lambda r: r.update(run_id="../escape"), "run_id: '../escape' does not match"),
        (lambda r: r.update(extra=1), "Additional properties are not allowed ('extra' was unexpected)"),
    ],
)
def test_invalid_records_are_refused_with_the_field_named(tmp_path, mutate, expected):
    record = gsm8k_record()
    mutate(record)
    with pytest.raises(results.ResultError) as err:
        results.write_result(tmp_path / "bad.result.json", record)
    assert expected in str(err.value)
    assert str(tmp_path / "bad.result.json") in str(err.value)
    assert not (tmp_path / "bad.result.json").exists()


def test_kind_specific_metrics_are_checked():
    record = gsm8k_record()
    record["kind"] = "kernels"  # gsm8k metrics under kind kernels: rows missing
    assert any("metrics: 'rows' is a required property" in e for e in results.errors(record))
    record["metrics"] = {
        "rows": [{"phase": "decode", "shape": "1 x 1", "arm": "helion", "median_us": 6.0, "samples": 9}]
    }
    assert results.errors(record) == ["metrics/rows/0/shape: '1 x 1' does not match '^[0-9]+x[0-9]+$'"]
    record["metrics"]["rows"][0]["shape"] = "1x1"
    assert results.errors(record) == []


def test_serving_point_ok_needs_a_median():
    point = {
        "input_len": 4096, "output_len": 1024, "concurrency": 1, "num_prompts": 8,
        "status": "ok", "runs": [], "median_output_throughput": None,
    }  # fmt: skip
    record = gsm8k_record()
    record.update(kind="serving", metrics={"dataset": "random-ids", "points": [point]})
    problems = results.errors(record)
    assert any("median_output_throughput: None is not of type 'number'" in p for p in problems)
    point["status"] = "failed"
    assert results.errors(record) == []


def test_reader_rejects_files_that_are_not_records(tmp_path):
    (tmp_path / "junk.result.json").write_text("{not json")
    with pytest.raises(UsageError, match=r"junk.result.json: not JSON"):
        list(results.iter_results(tmp_path))
    (tmp_path / "junk.result.json").write_text(json.dumps({"schema": "kdakit.result.v1"}))
    with pytest.raises(UsageError, match=r"junk.result.json: invalid kdakit.result.v1 record: .*required"):
        list(results.iter_results(tmp_path))
    with pytest.raises(UsageError, match="must end in .result.json"):
        results.write_result(tmp_path / "x.json", gsm8k_record())


def test_median_and_change():
    assert results.median([3.0, 1.0, 2.0]) == 2.0
    assert results.median([442.10, 438.0, 450.5]) == 442.10
    assert results.median([]) is None
    assert results.change_pct(438.42, 442.10) == pytest.approx(0.8394, abs=1e-4)  # the PR's "+0.84%"
    assert results.change_pct(7.20, 6.05) == pytest.approx(-15.97, abs=0.01)  # the PR's "-16.00%"
    assert results.change_pct(None, 1.0) is None and results.change_pct(0.0, 1.0) is None


def test_provenance_reads_server_command_and_sku(tmp_path, monkeypatch):
    (tmp_path / "server-command.json").write_text(json.dumps({"argv": ["sglang", "serve"], "env": {"A": 1}}))
    assert provenance.server_command(tmp_path) == {"argv": ["sglang", "serve"], "env": {"A": "1"}}
    assert provenance.server_command(tmp_path / "missing") is None
    # a record's SKU: the registry's one GPU -> SKU mapping, as the published tables spell it
    gpus = (["NVIDIA H200", "NVIDIA H200"], ["NVIDIA B200"], ["NVIDIA H200", "NVIDIA B200"], [])
    record_sku = [profiles.canonical_sku(profiles.sku_of_gpus(g)) for g in gpus]
    assert record_sku == ["H200", "B200", "unknown", "unknown"]
    monkeypatch.setenv("KDAKIT_IMAGE_ID", "sha256:abc")
    gathered = provenance.gather(tmp_path)
    assert gathered["image_id"] == "sha256:abc"
    assert gathered["server_command"]["argv"] == ["sglang", "serve"]
    record = copy.deepcopy(gsm8k_record())
    record["provenance"] = gathered
    assert results.errors(record) == []


def test_every_launch_arm_is_a_valid_record_arm(tmp_path):
    from kdakit.facts import profiles
    from kdakit.measure import context

    for arm in profiles.arms():
        assert arm in context.ARMS
        record = gsm8k_record()
        record["arm"] = arm
        path = results.write_result(tmp_path / f"{arm}.result.json", record)
        assert results.read_result(path)["arm"] == arm


def test_git_sha_inside_the_image_comes_from_the_baked_revision(monkeypatch, tmp_path):
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)  # no checkout: as inside the image
    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("KDAKIT_IMAGE_REVISION", sha)
    assert provenance.git_sha() == (sha, False)
    monkeypatch.setenv("KDAKIT_IMAGE_REVISION", sha + "-dirty")
    assert provenance.git_sha() == (sha, True)
    monkeypatch.setenv("KDAKIT_IMAGE_REVISION", "unknown")
    assert provenance.git_sha() == (None, None)
