"""GSM8K: the real lm-eval 0.4.13 against the test-double server, offline, scored exactly as expected."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from kdakit.evals import gsm8k

from kdakit import cli, results

FAKE_PATH = Path(__file__).parent / "fakes" / "openai_server.py"
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
        ["eval", "gsm8k", "--base-url", server, "--protocol", "pr", "--runs", "1", "--limit", str(LIMIT),
         "--out", str(out), "--run-id", "t1", "--host", "node-1", "--sku", "H200", "--arm", "helion"]
    )  # fmt: skip
    assert code == 1  # 0.75 < 0.93: the verdict fails, and the exit code says so
    record = results.read_result(out / "helion-pr-run1.result.json")
    m = record["metrics"]
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
    samples_file = next((out / "helion-pr-run1" / "lm-eval").rglob("samples_gsm8k_kdakit_*.jsonl"))
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
    log = (out / "helion-pr-run1" / "lm-eval.log").read_text()
    assert '"think_end_token": "</think>"' in log
    assert '"reasoning_effort": "low"' in log and '"num_concurrent": 8' in log and "--num_fewshot 5" in log


def test_argv_follows_the_protocols():
    _, protocols = gsm8k.load_protocols()
    pr = gsm8k.lm_eval_argv(protocols["pr"], "http://h:30000", "llm", Path("/i"), Path("/o"))
    text = " ".join(pr)
    assert "--limit 100" in text and "--num_fewshot 5" in text and "--apply_chat_template" in text
    assert json.loads(pr[pr.index("--gen_kwargs") + 1]) == {
        "temperature": 0.0, "max_gen_toks": 4096, "do_sample": False, "reasoning_effort": "low"
    }  # fmt: skip
    model_args = json.loads(pr[pr.index("--model_args") + 1])
    assert model_args["base_url"] == "http://h:30000/v1/chat/completions"
    assert model_args["num_concurrent"] == 8 and model_args["tokenized_requests"] is False
    assert protocols["pr"].runs == 2 and protocols["pr"].threshold == 0.93
    full = gsm8k.lm_eval_argv(protocols["full"], "http://h:30000", "llm", Path("/i"), Path("/o"))
    assert "--limit" not in full
    assert json.loads(full[full.index("--gen_kwargs") + 1]) == {
        "temperature": 1.0, "max_gen_toks": 16384, "do_sample": True, "top_p": 0.95
    }  # fmt: skip


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
    assert "unknown protocol 'nope'; known: full, pr" in capsys.readouterr().err
