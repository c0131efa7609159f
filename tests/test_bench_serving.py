"""Serving benchmark: the real SGLang client against the test-double server, then the orchestration
(warm-up, fresh file per run, completed check, median of 3, failures kept) with a client that replays the
real client's output line."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import statistics
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kdakit.bench import serving

from kdakit import cli
from kdakit.facts.protocols import load_protocols
from kdakit.launch import access
from kdakit.records import results

HERE = Path(__file__).parent
spec = importlib.util.spec_from_file_location("kdakit_test_fake_openai", HERE / "fakes" / "openai_server.py")
fake = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = fake
spec.loader.exec_module(fake)
tok_spec = importlib.util.spec_from_file_location(
    "kdakit_test_tiny_tokenizer", HERE / "fakes" / "tiny_tokenizer.py"
)
tiny_tokenizer = importlib.util.module_from_spec(tok_spec)
tok_spec.loader.exec_module(tiny_tokenizer)

ONE_POINT = """
[protocol.tiny]
source = "test"
backend = "sglang"
dataset = "random-ids"
random_range_ratio = 1.0
seed = 42
temperature = 0.0
runs = {runs}
warmup = {warmup}
metric = "output_throughput"
{extra}
points = [{points}]
"""


def bench_against_a_fake_server(tmp_path, client, protocols, *args, server_args=()) -> tuple[int, str]:
    """`kdakit bench serving` (arm triton, protocol tiny, the client script `client`, more arguments `args`)
    against a fake server started for it with `server_args`: its exit code and the server's URL."""
    proc, url = fake.start_background(*server_args)
    try:
        code = cli.main(
            ["bench", "serving", "--base-url", url, "--protocol", "tiny", "--protocols", str(protocols),
             "--tokenizer", str(tmp_path), "--out", str(tmp_path / "o"), "--arm", "triton", *args,
             "--client-cmd", f"{sys.executable} {client}"]
        )  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return code, url


def write_protocols(folder: Path, points: list[str], runs: int, warmup: bool, extra: str = "") -> Path:
    path = folder / "protocols.toml"
    text = ONE_POINT.format(runs=runs, warmup=str(warmup).lower(), points=", ".join(points), extra=extra)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """Two runs of `python -m sglang.benchmark.serving` via `kdakit bench serving` (about 20 s each: imports).

    The double's accept length drifts by 0.125 per request, so a run's accept length tells which requests
    it covers; its request log shows every generation request and every flush in order. The double holds
    the run's keys as the kit serves (api and admin key) and counts requests on /metrics."""
    tmp = tmp_path_factory.mktemp("bench-real")
    tokenizer = tiny_tokenizer.build(tmp / "tok")
    args = ["--accept-length", "3.25", "--accept-drift", "0.125", "--enable-metrics"]
    args += ["--api-key", RUN_KEYS[access.API_KEY_ENV], "--admin-api-key", RUN_KEYS[access.ADMIN_API_KEY_ENV]]
    args += ["--request-log", str(tmp / "requests.jsonl")]
    for phase in ("prefill", "decode", "verify"):
        args += ["--server-arg", f"linear_attn_{phase}_backend=helion"]
    proc, url = fake.start_background(*args)
    saved = {k: os.environ.get(k) for k in RUN_KEYS}
    os.environ.update(RUN_KEYS)  # as the env file gives them to the bench container
    try:
        protocols = write_protocols(
            tmp,
            ["{ input_len = 48, output_len = 12, concurrency = 2, num_prompts = 4 }"],
            runs=2,
            warmup=False,
        )
        code = cli.main(
            ["bench", "serving", "--base-url", url, "--protocol", "tiny", "--protocols", str(protocols),
             "--tokenizer", str(tokenizer), "--out", str(tmp / "serving"), "--run-id", "t1", "--host", "n1",
             "--sku", "H200"]
        )  # fmt: skip
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        proc.terminate()
        proc.wait(timeout=10)
    return code, tmp / "serving", tmp / "requests.jsonl"


RUN_KEYS = {
    access.API_KEY_ENV: "bench-api-key-" + "q" * 30,
    access.ADMIN_API_KEY_ENV: "bench-admin-" + "z" * 30,
}


def test_with_the_run_keys_only_the_kit_reached_the_server_and_no_key_was_written(real_run):
    code, out, _ = real_run
    assert code == 0
    record = results.read_result(out / "helion-tiny.result.json")
    (point,) = record["metrics"]["points"]
    # Its warm-up request and 4 measured ones, by the client's count and by the server's counter.
    assert [r["requests"] for r in point["runs"]] == [{"sent": 5, "server": 5, "foreign": 0}] * 2
    assert not any("not readable" in note for note in record["notes"])
    for path in out.rglob("*"):
        if path.is_file():
            for key in RUN_KEYS.values():
                assert key.encode() not in path.read_bytes(), path


def test_each_run_flushes_and_its_accept_length_covers_only_its_own_requests(real_run):
    code, out, request_log = real_run
    assert code == 0
    record = results.read_result(out / "helion-tiny.result.json")
    (point,) = record["metrics"]["points"]
    log = [json.loads(line) for line in request_log.read_text().splitlines()]
    # Per client run: its own warm-up request, the flush, then the measured requests.
    kinds = ["flush" if e.get("event") == "flush" else "gen" for e in log]
    assert kinds == ["gen", "flush", "gen", "gen", "gen", "gen"] * 2
    lifetime = statistics.fmean(e["accept_length"] for e in log if "n" in e)
    for j, run in enumerate(point["runs"]):
        measured = log[6 * j + 2 : 6 * j + 6]
        assert run["accept_length"] == pytest.approx(statistics.fmean(e["accept_length"] for e in measured))
        assert run["accept_length"] != pytest.approx(lifetime) and run["flushed"] is True
    assert point["runs"][1]["accept_length"] - point["runs"][0]["accept_length"] == pytest.approx(5 * 0.125)
    assert point["flush_cache"] is True and record["metrics"]["flush_cache"] is True
    run_log = (out / "helion-tiny" / "i48-o12-c2" / "run2.log").read_text()
    assert "--flush-cache" in run_log.splitlines()[0]
    # A local tokenizer keeps the client off the Hub (no request retried against huggingface.co).
    assert "thrown while requesting" not in run_log
    assert any("prefix cache flushed" in note for note in record["notes"])


def test_real_client_output_is_parsed_and_recorded(real_run):
    code, out, _ = real_run
    assert code == 0
    record = results.read_result(out / "helion-tiny.result.json")  # arm detected from the server's KDA flags
    assert record["arm"] == "helion"
    (point,) = record["metrics"]["points"]
    assert point["status"] == "ok"
    run, run2 = point["runs"]
    assert run["completed"] == run["num_prompts"] == 4
    raw = out / run["raw_file"]
    lines = raw.read_text().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    # Written by the real client: its own keys, our settings echoed back, the fake's server info.
    assert line["backend"] == "sglang" and line["dataset_name"] == "random-ids"
    assert (line["random_input_len"], line["random_output_len"], line["random_range_ratio"]) == (48, 12, 1.0)
    assert line["max_concurrency"] == 2 and line["total_output_tokens"] == 4 * 12
    assert line["output_throughput"] == run["output_throughput"] > 0
    assert point["median_output_throughput"] == (run["output_throughput"] + run2["output_throughput"]) / 2
    assert record["metrics"]["server_args"]["linear_attn_decode_backend"] == "helion"
    assert record["metrics"]["server_args"]["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(
        run["accept_length"]
    )
    assert any("random-ids" in note and "acceptance length" in note for note in record["notes"])
    log = (out / "helion-tiny" / "i48-o12-c2" / "run1.log").read_text()
    assert "sglang_client" in log.splitlines()[0] and "--seed 42" in log.splitlines()[0]


REPLAY_CLIENT = """
import json, sys, time
print("replay client", flush=True)
argv = sys.argv[1:]
opt = lambda name: argv[argv.index(name) + 1]
template = json.loads(open({template!r}).read())
plan = json.loads(open({plan!r}).read())
tag = opt("--tag")
with open({calls!r}, "a") as f:
    f.write(tag + "\\n")
step = plan.get(tag.split(":", 2)[2], "ok")
if step == "crash":
    sys.exit(5)
if step == "hang":  # a request that never returns
    time.sleep(120)
row = dict(template, tag=tag, max_concurrency=int(opt("--max-concurrency")))
row["completed"] = int(opt("--num-prompts")) - (1 if step in ("short", "http500") else 0)
if step == "http500":  # what the real client keeps with --output-details: aiohttp's reason, then the body
    row["errors"] = ["", "Internal Server Error: boom"]
if step == "http503":  # every request refused
    row["completed"], row["errors"] = 0, ["Service Unavailable: overloaded"] * int(opt("--num-prompts"))
if isinstance(step, (int, float)):
    row["output_throughput"] = step
with open(opt("--output-file"), "a") as f:  # the real client appends
    f.write(json.dumps(row) + "\\n")
sys.exit(1 if step == "http503" else 0)
"""


def test_median_of_three_warmups_and_failures_kept(real_run, tmp_path, capsys):
    _, out, _ = real_run
    plan = {"i32-o16-c1:run1": 100.0, "i32-o16-c1:run2": 300.0, "i32-o16-c1:run3": 200.0,
            "i64-o8-c4:run2": "short", "i64-o8-c8:warmup": "crash"}  # fmt: skip
    client, calls = _replay_client(tmp_path, out, plan)
    protocols = write_protocols(
        tmp_path,
        ["{ input_len = 32, output_len = 16, concurrency = 1, num_prompts = 2 }",
         "{ input_len = 64, output_len = 8, concurrency = 4, num_prompts = 8 }",
         "{ input_len = 64, output_len = 8, concurrency = 8, num_prompts = 8 }"],
        runs=3, warmup=True,
    )  # fmt: skip
    code, _ = bench_against_a_fake_server(tmp_path, client, protocols)
    assert code == 1
    record = results.read_result(tmp_path / "o" / "triton-tiny.result.json")
    p1, p2, p3 = record["metrics"]["points"]
    assert p1["status"] == "ok" and p1["median_output_throughput"] == 200.0
    assert [r["output_throughput"] for r in p1["runs"]] == [100.0, 300.0, 200.0]
    assert p2["status"] == "failed" and p2["median_output_throughput"] is None and len(p2["runs"]) == 1
    assert p2["error"].startswith("run 2: completed 7 of 8 requests")
    assert p3["status"] == "failed" and p3["runs"] == [] and p3["error"].startswith("warm-up failed")
    tags = [t.split(":", 2)[2] for t in calls.read_text().split()]
    assert tags == ["i32-o16-c1:warmup", "i32-o16-c1:run1", "i32-o16-c1:run2", "i32-o16-c1:run3",
                    "i64-o8-c4:warmup", "i64-o8-c4:run1", "i64-o8-c4:run2", "i64-o8-c8:warmup"]  # fmt: skip
    for j in (1, 2, 3):  # a fresh file per run: the appending client wrote one line into each
        assert (
            len((tmp_path / "o" / "triton-tiny" / "i32-o16-c1" / f"run{j}.jsonl").read_text().splitlines())
            == 1
        )
    captured = capsys.readouterr()
    assert "point 1/3 (32/16, C1): 200.00 output tok/s (median of 100.00, 300.00, 200.00)" in captured.err
    assert "point 2/3 (64/8, C4): FAILED: run 2: completed 7 of 8 requests" in captured.err
    # the closing line (the rollout's summary shows it): the first failed point, its run, cause and record
    (closing,) = [line for line in captured.out.splitlines() if "points ok" in line]
    assert closing.startswith("[bench] 1/3 points ok; point 2/3 (64/8, C4): run 2: completed 7 of 8 requests")
    assert closing.endswith(f" (and 1 more) -> {tmp_path / 'o' / 'triton-tiny.result.json'}"), closing
    assert "━" not in captured.err + captured.out  # not a terminal: no progress bar
    # Not a terminal: one plain progress line per step, with point, run, elapsed and ETA.
    assert "[bench] point 1/3 (32/16, C1) run 2/3: elapsed " in captured.err
    assert "[bench] point 3/3 (64/8, C8) warm-up: elapsed " in captured.err and ", ETA " in captured.err


def _replay_client(tmp_path: Path, real_out: Path, plan: dict) -> tuple[Path, Path]:
    template = tmp_path / "line.json"
    template.write_text((real_out / "helion-tiny" / "i48-o12-c2" / "run1.jsonl").read_text().splitlines()[0])
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    client, calls = tmp_path / "client.py", tmp_path / "calls.txt"
    client.write_text(
        textwrap.dedent(REPLAY_CLIENT).format(
            template=str(template), plan=str(tmp_path / "plan.json"), calls=str(calls)
        )
    )
    return client, calls


def test_a_failed_warm_up_records_its_http_status_and_no_flush_is_claimed_without_a_run(real_run, tmp_path):
    _, out, _ = real_run
    client, _calls = _replay_client(tmp_path, out, {"i32-o16-c1:warmup": "http503"})
    protocols = write_protocols(
        tmp_path, ["{ input_len = 32, output_len = 16, concurrency = 1, num_prompts = 2 }"], runs=2,
        warmup=True, extra="band_pct = 2.5",
    )  # fmt: skip
    code, _ = bench_against_a_fake_server(tmp_path, client, protocols, "--visit", "3")
    assert code == 1
    record = results.read_result(tmp_path / "o" / "triton-tiny.result.json")
    (point,) = record["metrics"]["points"]
    assert point["status"] == "failed" and point["runs"] == [] and point["http_errors"] == {"503": 1}
    assert point["error"].startswith("warm-up failed (HTTP 503 x1)")
    assert not any("flushed" in note for note in record["notes"])  # no measured run: nothing was flushed
    # the protocol as the run's own file defined it, and the visit the A/B loop named
    kept = record["metrics"]["protocol_definition"]
    assert kept["band_pct"] == 2.5 and kept["source_file"] == str(protocols) and len(kept["points"]) == 1
    assert record["metrics"]["visit"] == 3


def test_hung_point_stops_the_bench_within_its_limit_keeps_earlier_points_and_http_status(
    real_run, tmp_path, capsys
):
    _, out, _ = real_run
    client, calls = _replay_client(tmp_path, out, {"i32-o16-c1:run1": "http500", "i64-o8-c8:run1": "hang"})
    protocols = write_protocols(
        tmp_path,
        ["{ input_len = 32, output_len = 16, concurrency = 1, num_prompts = 2 }",
         "{ input_len = 64, output_len = 8, concurrency = 4, num_prompts = 8 }",
         "{ input_len = 64, output_len = 8, concurrency = 8, num_prompts = 8 }",
         "{ input_len = 64, output_len = 8, concurrency = 16, num_prompts = 16 }"],
        runs=1, warmup=False, extra="request_timeout_s = 2",
    )  # fmt: skip
    started = time.monotonic()
    code, url = bench_against_a_fake_server(tmp_path, client, protocols, "--host", "h7")
    assert code == 1 and time.monotonic() - started < 30  # the hung client sleeps 120 s
    record = results.read_result(tmp_path / "o" / "triton-tiny.result.json")
    p1, p2, p3, p4 = record["metrics"]["points"]
    assert p1["status"] == "failed" and p1["http_errors"] == {"500": 1}
    assert p1["error"].startswith("run 1: completed 1 of 2 requests (HTTP 500 x1)")
    assert p2["status"] == "ok" and len(p2["runs"]) == 1  # kept
    assert p3["status"] == "hung" and p3["runs"] == []
    assert p4["status"] == "missing" and p4["error"].startswith("not run: bench i64-o8-c8 run 1 on host h7")
    assert record["metrics"]["partial"] is True
    hung = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[bench] bench i64-o8-c8 run 1")]
    assert len(hung) == 1 and re.fullmatch(
        r"\[bench\] bench i64-o8-c8 run 1 on host h7: no request finished for 2 s \(request_timeout_s\); "
        rf"server {re.escape(url)} hung; stopped after [2-9] s",
        hung[0],
    )
    assert [t.split(":", 2)[2] for t in calls.read_text().split()] == [
        "i32-o16-c1:run1", "i64-o8-c4:run1", "i64-o8-c8:run1"
    ]  # fmt: skip


def test_a_server_that_accepts_and_never_answers_is_one_line_within_the_probe_limit(capsys):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the backlog; nothing ever reads or answers them
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    started = time.monotonic()
    try:
        code = cli.main(["bench", "serving", "--base-url", url, "--dataset", "random-ids", "--host", "h9"])
    finally:
        silent.close()
    assert code == 2 and time.monotonic() - started < 15
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"no server answers at {url} (from host h9): GET /v1/models: no answer within 5 s")


def test_pr_protocol_client_flags():
    protocol = load_protocols()["pr"]
    assert [(p.input_len, p.concurrency, p.num_prompts) for p in protocol.points] == [
        (4096, 1, 8), (4096, 16, 64), (4096, 48, 192), (32768, 1, 8), (32768, 16, 64), (32768, 48, 192)
    ]  # fmt: skip
    argv = serving.client_argv(
        protocol, protocol.points[2], base_url="http://h:30000", tokenizer="/m", dataset="sharegpt",
        dataset_path="/d/sg.json", output_file=Path("/o/run1.jsonl"), num_prompts=192, tag="t",
    )  # fmt: skip
    text = " ".join(argv)
    for flag in ("--backend sglang", "--dataset-name random --dataset-path /d/sg.json",
                 "--random-input-len 4096", "--random-output-len 1024", "--random-range-ratio 1.0",
                 "--num-prompts 192",
                 "--max-concurrency 48", "--request-rate inf", "--seed 42", "--temperature 0.0",
                 "--output-file /o/run1.jsonl", "--output-details", "--flush-cache",
                 "--warmup-requests 1"):  # fmt: skip
        assert flag in text
    assert "--disable-ignore-eos" not in text  # EOS ignored, the client's default
    assert protocol.runs == 3 and protocol.warmup


def test_sharegpt_needs_a_staged_file(capsys, monkeypatch):
    monkeypatch.delenv("KDAKIT_SHAREGPT", raising=False)
    assert cli.main(["bench", "serving", "--base-url", "http://127.0.0.1:9", "--protocol", "pr"]) == 2
    assert (
        "ShareGPT is not staged: pass --dataset-path FILE, or choose --dataset random-ids"
        in capsys.readouterr().err
    )


def test_parser_rejects_incomplete_or_appended_output(tmp_path):
    path = tmp_path / "run.jsonl"
    with pytest.raises(serving.RunFailed, match="no output file"):
        serving.parse_client_output(path, 8)
    row = {"completed": 8, "output_throughput": 1.0, "total_throughput": 2.0, "duration": 3.0}
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(serving.RunFailed, match="expected one result line, found 2"):
        serving.parse_client_output(path, 8)
    path.write_text(json.dumps({**row, "completed": 6}) + "\n")
    with pytest.raises(serving.RunFailed, match="completed 6 of 8 requests"):
        serving.parse_client_output(path, 8)


COUNTING_CLIENT = """
import json, sys, urllib.request
argv = sys.argv[1:]
opt = lambda name: argv[argv.index(name) + 1]
url, tag, n = opt("--base-url"), opt("--tag"), int(opt("--num-prompts")) + int(opt("--warmup-requests"))
def send():
    body = json.dumps({{"text": "hello", "sampling_params": {{"max_new_tokens": 2}}}}).encode()
    urllib.request.urlopen(urllib.request.Request(url + "/generate", data=body), timeout=10).read()
for i in range(n):  # the client's own requests: its warm-up, then the measured ones
    send()
    if i == 2 and tag.endswith({inject!r}):  # someone else's requests land inside the measured window
        for _ in range(3):
            send()
row = dict(json.loads(open({template!r}).read()), tag=tag, completed=int(opt("--num-prompts")))
with open(opt("--output-file"), "a") as f:
    f.write(json.dumps(row) + "\\n")
"""


def test_a_foreign_request_during_a_measured_run_fails_the_point_with_one_line(real_run, tmp_path, capsys):
    """An open server (kdakit_server_open): 3 requests the kit did not send arrive during run 2."""
    _, out, _ = real_run
    template = tmp_path / "line.json"
    template.write_text((out / "helion-tiny" / "i48-o12-c2" / "run1.jsonl").read_text().splitlines()[0])
    client = tmp_path / "client.py"
    client.write_text(COUNTING_CLIENT.format(inject=":run2", template=str(template)))
    protocols = write_protocols(
        tmp_path, ["{ input_len = 4096, output_len = 1024, concurrency = 16, num_prompts = 6 }"], 3, False
    )
    code, _ = bench_against_a_fake_server(
        tmp_path, client, protocols, "--host", "h1", server_args=("--enable-metrics",)
    )
    assert code == 1
    line = "h1: 4096/1024 C16 run 2: 3 requests not sent by the kit reached the server during the run"
    record = results.read_result(tmp_path / "o" / "triton-tiny.result.json")
    (point,) = record["metrics"]["points"]
    assert (
        point["status"] == "failed" and point["error"] == line and point["median_output_throughput"] is None
    )
    assert [r["requests"] for r in point["runs"]] == [{"sent": 7, "server": 7, "foreign": 0}]
    assert f"[bench] {line}" in capsys.readouterr().err.splitlines()
