"""GSM8K: SGLang's run_eval (protocol pr) and the real lm-eval 0.4.13 against the test-double server,
offline, scored exactly as expected; the double's request log shows what each tool really sent."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from kdakit.evals import gsm8k

from kdakit import cli, report
from kdakit.launch import access
from kdakit.records import results

FAKE_PATH = Path(__file__).parent / "fakes" / "openai_server.py"
FAKE_NVIDIA_SMI = Path(__file__).parent / "fakes" / "nvidia_smi.py"
spec = importlib.util.spec_from_file_location("kdakit_test_fake_openai", FAKE_PATH)
fake = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = fake
spec.loader.exec_module(fake)

# How lm-eval's GSM8K filters score each answer format of the fake, when the number in it is right:
# strict-match needs "#### " directly followed by the number; flexible-extract takes the last number, and
# exact_match then ignores commas, "$" and a trailing period.
SCORED = {
    "hash": (True, True),  # "...\n#### 18"
    "hash_commas": (True, True),  # "#### 70,000"
    "dollar_period": (False, True),  # "The answer is $57,500."
    "hash_dollar": (False, True),  # "#### $18": "$" is outside the strict pattern's class
    "reasoning_plain": (False, True),  # numbers in the reasoning, the answer last
    "think_block": (True, True),  # "<think>... #### 21 ...</think>\n#### 18": scored after </think>
}
LIMIT, ERROR_RATE, SEED = 20, 0.25, 27  # seed 27: every format among the right answers, two with commas


@pytest.fixture
def server():
    proc, url = fake.start_background("--error-rate", str(ERROR_RATE), "--seed", str(SEED))
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_error_pattern_gives_exact_counts_for_any_prefix():
    for rate in (0.1, 0.2, 0.25, 0.5):
        for seed in range(5):
            for n in (4, 20, 40, 100):
                wrong = sum(fake.is_wrong(i, rate, seed) for i in range(n))
                assert wrong == math.floor(n * rate + fake.random.Random(f"phase:{seed}").random())
                if (n * rate).is_integer():
                    assert wrong == n * rate


def test_real_lm_eval_scores_the_fake_exactly(server, tmp_path):
    out = tmp_path / "gsm8k"
    code = cli.main(
        ["eval", "gsm8k", "--base-url", server, "--protocol", "lm-eval", "--runs", "1", "--limit", str(LIMIT),
         "--out", str(out), "--run-id", "t1", "--host", "node-1", "--sku", "H200", "--arm", "helion"]
    )  # fmt: skip
    assert code == 1  # 0.75 < 0.93: the verdict fails, and the exit code says so
    record = results.read_result(out / "helion-lm-eval-run1.result.json")
    m = record["metrics"]
    assert m["limited"] is True and m["protocol_questions"] == 100
    assert m["tool"]["name"] == "lm-eval" and m["tool"]["version"] == "0.4.13"
    assert m["rows"]["questions"] == {"split": "test", "first": 0, "count": LIMIT}
    assert any(note.startswith("limited run: 20 of the protocol's 100 questions") for note in record["notes"])
    # lm-eval's shots are train rows drawn per question; the record names them, read back from its prompts.
    shots = m["rows"]["shots"]["rows_per_question"]
    assert sorted(shots, key=int) == [str(i) for i in range(LIMIT)]
    train = [json.loads(line)["question"] for line in (gsm8k.HERE / "data/gsm8k/train.jsonl").open()]
    for doc, rows in shots.items():
        assert len(rows) == 5 and len(set(rows)) == 5 and None not in rows, (doc, rows)
    prompts = (out / "helion-lm-eval-run1" / "lm-eval").rglob("samples_*.jsonl")
    first = json.loads(next(prompts).read_text().splitlines()[0])
    assert (
        train[shots[str(first["doc_id"])][0]].split()[:8]
        == (json.loads(first["arguments"]["gen_args_0"]["arg_0"][0])[0]["content"].split()[1:9])
    )  # the first shot of that question's prompt is that train row
    wrong = [fake.is_wrong(i, ERROR_RATE, SEED) for i in range(LIMIT)]
    formats = [fake.answer_format(i, SEED) for i in range(LIMIT)]
    expected_strict = sum(not w and SCORED[f][0] for w, f in zip(wrong, formats, strict=True)) / LIMIT
    assert sum(wrong) == 5
    assert m["accuracy_flexible"] == 0.75
    assert m["accuracy_strict"] == expected_strict
    assert 0 < expected_strict < 0.75  # the formats really differ in how they score
    assert (m["n_questions"], m["threshold"], m["verdict"], m["verdict_metric"]) == (
        LIMIT,
        0.93,
        "fail",
        "flexible",
    )
    assert (record["run_id"], record["host"], record["sku"], record["arm"]) == (
        "t1",
        "node-1",
        "H200",
        "helion",
    )

    # Per question, lm-eval's raw samples (kept beside the record) agree with the table above.
    samples_file = next((out / "helion-lm-eval-run1" / "lm-eval").rglob("samples_gsm8k_kdakit_*.jsonl"))
    by_filter = {}
    for line in samples_file.read_text().splitlines():
        sample = json.loads(line)
        by_filter[(sample["doc_id"], sample["filter"])] = sample["exact_match"]
    assert len(by_filter) == 2 * LIMIT
    for i in range(LIMIT):
        strict_ok, flexible_ok = SCORED[formats[i]]
        assert by_filter[(i, "strict-match")] == float(strict_ok and not wrong[i]), (i, formats[i])
        assert by_filter[(i, "flexible-extract")] == float(flexible_ok and not wrong[i]), (i, formats[i])
    assert {formats[i] for i in range(LIMIT) if not wrong[i]} == set(fake.FORMATS)
    values = [fake.parse_number(json.loads(line)["answer"]) for line in fake.DEFAULT_DATA.open()][:LIMIT]
    assert {"hash_commas", "dollar_period"} <= {formats[i] for i in range(LIMIT) if values[i] >= 1000}

    # The request really carried the protocol: 5 shots as chat turns, reasoning_effort, temperature 0.
    log = (out / "helion-lm-eval-run1" / "lm-eval.log").read_text()
    assert '"think_end_token": "</think>"' in log
    assert '"reasoning_effort": "low"' in log and '"num_concurrent": 8' in log and "--num_fewshot 5" in log


def test_pr_protocol_is_sglang_run_eval_with_the_prs_rows_shots_and_flags(tmp_path, monkeypatch):
    """`pr` runs `python -m sglang.test.run_eval` from the pinned wheel twice; the double logs requests."""
    request_log = tmp_path / "requests.jsonl"
    smi_state = tmp_path / "smi.json"
    smi_state.write_text(json.dumps({"gpus": 2, "throttle_from_call": 3, "reasons": "0x4"}))
    monkeypatch.setenv("KDAKIT_NVIDIA_SMI", str(FAKE_NVIDIA_SMI))
    monkeypatch.setenv("FAKE_NVIDIA_SMI", str(smi_state))
    rate, seed = 0.05, 3
    keys = {
        access.API_KEY_ENV: "gsm8k-api-key-" + "r" * 30,
        access.ADMIN_API_KEY_ENV: "gsm8k-admin-" + "s" * 30,
    }
    for name, value in keys.items():  # as the env file gives them to the eval container
        monkeypatch.setenv(name, value)
    proc, url = fake.start_background("--error-rate", str(rate), "--seed", str(seed), "--token-delay-ms", "2",
                                      "--request-log", str(request_log), "--enable-metrics",
                                      "--api-key", keys[access.API_KEY_ENV],
                                      "--admin-api-key", keys[access.ADMIN_API_KEY_ENV])  # fmt: skip
    try:
        code = cli.main(
            ["eval", "gsm8k", "--base-url", url, "--protocol", "pr", "--out", str(tmp_path / "g"),
             "--run-id", "t2", "--host", "node-2", "--sku", "h200", "--arm", "triton"]
        )  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    scored = range(5, 105)  # run_eval: test rows 0-4 are the shots, the next 100 are scored
    expected = sum(not fake.is_wrong(i, rate, seed) for i in scored) / 100
    assert code == (0 if expected >= 0.93 else 1)

    log = [json.loads(line) for line in request_log.read_text().splitlines()]
    requests = [r for r in log if "event" not in r]
    assert len(requests) == 200  # two runs of 100 questions, nothing else generated
    assert [i for i, r in enumerate(log) if "event" in r] == [0, 101]  # a flush before each run
    for run in (requests[:100], requests[100:]):
        assert sorted(r["question_row"] for r in run) == list(scored)
    for r in requests:
        assert r["endpoint"] == "/v1/chat/completions" and r["messages"] == ["user"]  # shots in one message
        assert r["shot_rows"] == [0, 1, 2, 3, 4]
        assert (r["temperature"], r["max_tokens"], r["reasoning_effort"]) == (0.0, 4096, "low")
        assert r["model"] == "llm" and r["stream"] is False
    assert max(r["in_flight"] for r in requests) <= 8 < 100  # --num-threads 8 (one run at a time)

    for j in (1, 2):
        record = results.read_result(tmp_path / "g" / f"triton-pr-run{j}.result.json")
        m = record["metrics"]
        assert m["status"] == "ok" and m["accuracy_numeric"] == expected and m["verdict_metric"] == "numeric"
        # run_eval reached the keyed server through the key the kit gave it, and nobody else did
        assert m["requests"] == {"sent": 100, "server": 100, "foreign": 0}
        assert m["tool"]["name"] == "sglang-run-eval" and m["tool"]["version"] == "0.5.23"
        argv = " ".join(m["tool"]["argv"])
        assert argv.startswith("-m sglang.test.run_eval ") and "--num-threads 8 --max-tokens 4096" in argv
        assert m["rows"]["questions"] == {"split": "test", "first": 5, "count": 100}
        assert m["rows"]["shots"]["rows"] == [0, 1, 2, 3, 4] and m["limited"] is False
        assert m["data_sha256"] == gsm8k.load_protocols()[0]["test_sha256"]
        assert record["sku"] == "H200"  # normalised where the record's SKU is defined
        # run_eval's own outputs kept beside the record, its report out of the shared /tmp
        raw = tmp_path / "g" / m["raw_dir"]
        assert (raw / "run-eval-report.html").is_file()
        assert "Score: " in (raw / "sglang-run-eval.log").read_text()
        tel = m["telemetry"]
        assert tel["source"] == "nvidia-smi" and tel["samples"] >= 2 * 2 and set(tel["gpus"]) == {"0", "1"}
        assert (raw / "telemetry.csv").read_text().startswith("t_s,time,gpu,sm_mhz")
    # The fake GPU 0 hits its power cap from the third sample on: warned in the records and in the report.
    assert "GPU 0 throttled during run 2: software power cap" in m["telemetry"]["warnings"]
    md_path, _ = report.write_report(tmp_path / "g", tmp_path / "report")
    md = md_path.read_text()
    assert "Warnings (measured runs only): triton-pr-run1.result.json: GPU 0 throttled during run 1" in md
    assert len(list((tmp_path / "report" / "report-plots").glob("telemetry-triton-pr-run*.png"))) == 2
    assert "| not published (pr, H200, triton) |" in md  # matched on GPU and arm, SKU normalised
    for path in (tmp_path / "g").rglob("*"):
        if path.is_file():
            assert not any(k.encode() in path.read_bytes() for k in keys.values()), path


def test_a_foreign_request_during_a_gsm8k_run_fails_it_with_one_line(tmp_path, capsys):
    """An open server: 3 requests the kit did not send arrive while run_eval runs."""
    proc, url = fake.start_background("--token-delay-ms", "20", "--enable-metrics")

    def inject():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url + "/fake/stats", timeout=5) as r:
                if json.loads(r.read()).get("generation_requests", 0) >= 1:
                    break
            time.sleep(0.05)
        for _ in range(3):
            body = json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 1}}).encode()
            urllib.request.urlopen(urllib.request.Request(url + "/generate", data=body), timeout=10).read()

    injector = threading.Thread(target=inject)
    try:
        injector.start()
        code = cli.main(
            ["eval", "gsm8k", "--base-url", url, "--protocol", "pr", "--limit", "10", "--runs", "1",
             "--out", str(tmp_path / "g"), "--host", "h1", "--sku", "h200", "--arm", "helion"]
        )  # fmt: skip
    finally:
        injector.join(timeout=60)
        proc.terminate()
        proc.wait(timeout=10)
    line = "h1: gsm8k pr run 1: 3 requests not sent by the kit reached the server during the run"
    assert code == 3
    m = results.read_result(tmp_path / "g" / "helion-pr-run1.result.json")["metrics"]
    assert m["status"] == "failed" and m["error"] == line and m["verdict"] == "no result"
    assert m["requests"] == {"sent": 10, "server": 13, "foreign": 3}
    assert f"[gsm8k] {line}" in capsys.readouterr().err


def test_hung_server_stops_the_run_within_its_limit_and_keeps_the_record(tmp_path, capsys):
    """A server that accepts requests and never answers: one line naming host, URL and what hung."""
    text = gsm8k.PROTOCOLS_FILE.read_text().replace("request_timeout_s = 900", "request_timeout_s = 8", 1)
    protocols = tmp_path / "protocols.toml"
    protocols.write_text(text)  # its data paths stay relative to evals/
    # HTTP 400 (not 5xx): the openai client retries a 5xx by itself and run_eval never sees it.
    proc, url = fake.start_background("--hang-after", "30", "--error-status", "400", "--error-every", "7")
    started = time.monotonic()
    try:
        code = cli.main(
            ["eval", "gsm8k", "--base-url", url, "--protocol", "pr", "--protocols", str(protocols),
             "--out", str(tmp_path / "g"), "--host", "node-3", "--sku", "H200", "--arm", "helion"]
        )  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    elapsed = time.monotonic() - started
    assert code == 3 and elapsed < 8 + 30
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "hung" in x)
    assert line.startswith("[gsm8k] gsm8k run 1 on host node-3: no request finished for 8 s")
    assert f"server {url} hung; stopped after " in line
    assert "the server answered some requests with errors: HTTP 400 x4" in err
    record = results.read_result(tmp_path / "g" / "helion-pr-run1.result.json")
    m = record["metrics"]
    assert (m["status"], m["verdict"], m["http_errors"]) == ("hung", "no result", {"400": 4})
    assert "accuracy_numeric" not in m and m["error"] == line.removeprefix("[gsm8k] ").split("; partial")[0]
    assert "Error code: 400" in (tmp_path / "g" / "helion-pr-run1" / "sglang-run-eval.log").read_text()
    assert not (tmp_path / "g" / "helion-pr-run2.result.json").exists()  # no second run on a hung server


def test_argv_follows_the_protocols():
    _, protocols = gsm8k.load_protocols()
    assert protocols["pr"].tool == "sglang-run-eval" and protocols["pr"].runs == 2
    run_eval = gsm8k.run_eval_argv(protocols["pr"], "http://h:30000", "llm", Path("/d/test.jsonl"))
    assert " ".join(run_eval[1:]) == (
        "-m sglang.test.run_eval --base-url http://h:30000 --model llm --eval-name gsm8k --api chat "
        "--num-examples 100 --num-shots 5 --num-threads 8 --max-tokens 4096 --temperature 0.0 "
        "--reasoning-effort low --gsm8k-data-path /d/test.jsonl --repeat 1"
    )
    pr = gsm8k.lm_eval_argv(protocols["lm-eval"], "http://h:30000", "llm", Path("/i"), Path("/o"))
    text = " ".join(pr)
    assert "--limit 100" in text and "--num_fewshot 5" in text and "--apply_chat_template" in text
    assert json.loads(pr[pr.index("--gen_kwargs") + 1]) == {
        "temperature": 0.0, "max_gen_toks": 4096, "do_sample": False, "reasoning_effort": "low"
    }  # fmt: skip
    model_args = json.loads(pr[pr.index("--model_args") + 1])
    assert model_args["base_url"] == "http://h:30000/v1/chat/completions"
    assert model_args["num_concurrent"] == 8 and model_args["tokenized_requests"] is False
    assert protocols["lm-eval"].runs == 2 and protocols["lm-eval"].threshold == 0.93
    full = gsm8k.lm_eval_argv(protocols["full-lm-eval"], "http://h:30000", "llm", Path("/i"), Path("/o"))
    assert "--limit" not in full
    assert json.loads(full[full.index("--gen_kwargs") + 1]) == {
        "temperature": 1.0, "max_gen_toks": 16384, "do_sample": True, "top_p": 0.95
    }  # fmt: skip
    sgl = gsm8k.sgl_eval_argv(protocols["full"], "http://h:30000", "llm", Path("/d"), Path("/r"))
    assert " ".join(sgl[1:]) == (
        "-m kdakit.evals.sgl_eval_client --gsm8k-dir /d --prepared-dir /r/data run gsm8k "
        "--base-url http://h:30000/v1 --model llm --num-threads 64 --max-tokens 16384 --temperature 1.0 "
        "--top-p 0.95 --out-dir /r/sgl-eval"
    )  # every question: no --num-examples; the key never on the command line
    assert protocols["full"].tool == "sgl-eval" and protocols["full-lm-eval"].tool == "lm-eval"


def test_data_is_checked_and_shipped():
    data, _ = gsm8k.load_protocols()
    folder = gsm8k.check_data(data)
    assert len((folder / "test.jsonl").read_text().splitlines()) == data["test_rows"] == 1319
    assert "MIT License" in (folder / "LICENSE").read_text()
    with pytest.raises(gsm8k.UsageError, match="sha256"):
        gsm8k.check_data({**data, "test_sha256": "0" * 64})


def test_usage_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["eval", "gsm8k", "--base-url", "http://127.0.0.1:9", "--protocol", "pr"]) == 2
    assert "no server answers at http://127.0.0.1:9" in capsys.readouterr().err
    assert cli.main(["eval", "gsm8k", "--base-url", "http://127.0.0.1:9", "--protocol", "nope"]) == 2
    assert "unknown protocol 'nope'; known: full, full-lm-eval, lm-eval, pr" in capsys.readouterr().err


def test_full_protocol_is_sgl_eval_on_the_kits_data_with_the_runs_accept_length(tmp_path, monkeypatch):
    """`full` runs the real sgl-eval 0.1.3 on the shipped questions (prepared by its own script, no download;
    the first 300 of 1319 here, for time) with the CuTe-verify PR's settings; the record carries the run's
    accept length, which the flush before the run limits to the run's own requests (the double's accept
    length drifts per request)."""
    request_log = tmp_path / "requests.jsonl"
    rate, seed, accept, drift, n = 0.03, 5, 3.25, 0.0001, 300
    keys = {
        access.API_KEY_ENV: "sgl-eval-api-" + "t" * 30,
        access.ADMIN_API_KEY_ENV: "sgl-eval-admin-" + "u" * 30,
    }
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    proc, url = fake.start_background(
        "--error-rate", str(rate), "--seed", str(seed), "--accept-length", str(accept), "--accept-drift",
        str(drift), "--request-log", str(request_log), "--enable-metrics",
        "--api-key", keys[access.API_KEY_ENV], "--admin-api-key", keys[access.ADMIN_API_KEY_ENV],
    )  # fmt: skip
    try:
        for _ in range(3):  # earlier traffic the run's accept length must not include
            body = json.dumps({"model": "llm", "messages": [{"role": "user", "content": "hi"}]}).encode()
            request = urllib.request.Request(
                f"{url}/v1/chat/completions",
                data=body,
                headers={
                    "Authorization": f"Bearer {keys[access.API_KEY_ENV]}",
                    "Content-Type": "application/json",
                },
            )
            urllib.request.urlopen(request, timeout=10).read()
        code = cli.main(
            ["eval", "gsm8k", "--base-url", url, "--protocol", "full", "--out", str(tmp_path / "g"),
             "--run-id", "t5", "--host", "node-5", "--sku", "b200", "--arm", "cutedsl", "--limit", str(n)]
        )  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert code == 0
    log = [json.loads(line) for line in request_log.read_text().splitlines()]
    assert [e.get("event") for e in log[3:4]] == ["flush"]
    run = log[4:]
    assert sorted(r["question_row"] for r in run) == list(range(n))
    for r in run:
        assert (r["temperature"], r["top_p"], r["max_tokens"]) == (1.0, 0.95, 16384)
        assert r["messages"] == ["user"] and r["shot_rows"] == [] and r["endpoint"] == "/v1/chat/completions"
    assert max(r["in_flight"] for r in run) <= 64
    record = results.read_result(tmp_path / "g" / "cutedsl-full-run1.result.json")
    m = record["metrics"]
    expected = sum(not fake.is_wrong(i, rate, seed) for i in range(n)) / n
    assert (m["status"], m["verdict_metric"], m["n_questions"], m["limited"]) == ("ok", "symbolic", n, True)
    assert m["accuracy_symbolic"] == pytest.approx(expected, abs=1e-12)
    assert m["tool"]["name"] == "sgl-eval" and m["tool"]["version"] == "0.1.3"
    assert m["accept_length"] == pytest.approx(sum(r["accept_length"] for r in run) / len(run))
    assert m["requests"] == {"sent": n, "server": n, "foreign": 0}
    raw = tmp_path / "g" / m["raw_dir"]
    prepared = [json.loads(line) for line in (raw / "data" / "test.jsonl").read_text().splitlines()]
    assert len(prepared) == 1319 and prepared[0]["expected_answer"] == 18  # sgl-eval's own preparation
    assert "--num-examples 300" in " ".join(m["tool"]["argv"])
    md = report.write_report(tmp_path / "g", tmp_path / "report")[0].read_text()
    row = next(line for line in md.splitlines() if "| cutedsl | full | sgl-eval 0.1.3 |" in line)
    assert f"| {expected:.4f} |" in row and f"| {m['accept_length']:.3f} (published 3.477, GB300, 003_" in row
    for path in (tmp_path / "g").rglob("*"):
        if path.is_file():
            assert not any(k.encode() in path.read_bytes() for k in keys.values()), path
