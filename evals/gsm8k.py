"""`kdakit eval gsm8k`: GSM8K against the server's OpenAI chat API, offline, protocols as data, two tools.

- `tool = "sglang-run-eval"` (protocol `pr`): SGLang's own `python -m sglang.test.run_eval --eval-name gsm8k`
  from the pinned SGLang, the tool whose flags the PR quotes. It takes test rows 0..shots-1 as the shots (all
  in one user message) and scores the next `limit` test rows by the last number of the answer.
- `tool = "lm-eval"` (protocols `lm-eval`, `full`): lm-eval 0.4.13, test rows 0..limit-1, shots from the
  train split as chat turns, lm-eval's strict and flexible filters.

The protocols are data: kdakit/facts/gsm8k_protocols.toml, read by kdakit.facts.gsm8k_protocols. Both tools
read the kit's GSM8K copy (sha256-checked); each run is one tool invocation with the protocol's request and
run limits (kdakit.measure.bounded), GPU telemetry beside it (kdakit.measure.telemetry), and one record
naming the tool, its version, the scored rows and the shots.

Why lm-eval's `local-chat-completions`: the served models are chat reasoning models (GLM-5.3-Flash) and the
PR's protocol sets `reasoning_effort=low`, a chat-template parameter the server applies only to chat
requests; the chat model also needs no client-side tokenizer (nothing to download). Few-shot examples go
as chat turns.

Each run writes `<arm>-<protocol>-run<j>.result.json` (schema kdakit.result.v1) and keeps the tool's own
output (its console log; lm-eval's results_*.json and samples_*.jsonl, run_eval's metrics JSONL and HTML
report) in the folder of the same name.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kdakit.facts.errors import UsageError
from kdakit.facts.gsm8k_protocols import METRICS, PROTOCOLS_FILE, TOOLS, Protocol, load_protocols
from kdakit.measure import bounded, context, integrity, telemetry
from kdakit.measure.session import Session, pick_protocol

HERE = Path(__file__).parent
TASK_TEMPLATE = HERE / "gsm8k_kdakit.yaml"
TASK_NAME = "gsm8k_kdakit"
LM_EVAL_MODEL = "local-chat-completions"
ACCEPT_UNREAD_NOTE = (
    "no accept length: the server refused the cache flush that starts the run's count (SGLang's counters "
    "would cover earlier requests too)"
)
SGL_EVAL_CLIENT = [sys.executable, "-m", "kdakit.evals.sgl_eval_client"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_data(data: dict, base: Path = HERE) -> Path:
    """The data folder, after checking both splits against their recorded sha256."""
    for split in ("test", "train"):
        path = base / data[split]
        if not path.is_file():
            raise UsageError(f"GSM8K {split} split missing: {path}")
        digest = sha256(path)
        if digest != data[f"{split}_sha256"]:
            raise UsageError(
                f"GSM8K {split} split {path} has sha256 {digest}, gsm8k_protocols.toml says otherwise"
            )
    return (base / data["test"]).parent.resolve()


def write_task(include_dir: Path, data_dir: Path) -> Path:
    include_dir.mkdir(parents=True, exist_ok=True)
    task = include_dir / f"{TASK_NAME}.yaml"
    task.write_text(TASK_TEMPLATE.read_text().replace("__DATA_DIR__", str(data_dir)))
    return task


def lm_eval_argv(protocol: Protocol, base_url: str, model: str, include_dir: Path, output: Path) -> list[str]:
    model_args = {
        "model": model,
        "base_url": f"{base_url}/v1/chat/completions",
        "num_concurrent": protocol.num_concurrent,
        "tokenized_requests": False,
        "max_retries": 3,
        "timeout": 3600,
        # Without a server-side reasoning parser the thinking stays in the content: score what follows it.
        "think_end_token": "</think>",
    }
    argv = [sys.executable, "-m", "lm_eval", "run", "--model", LM_EVAL_MODEL]
    argv += ["--model_args", json.dumps(model_args), "--tasks", TASK_NAME, "--include_path", str(include_dir)]
    argv += ["--apply_chat_template", "--fewshot_as_multiturn", "true"]
    argv += ["--num_fewshot", str(protocol.num_fewshot), "--gen_kwargs", json.dumps(protocol.gen_kwargs())]
    if protocol.limit:
        argv += ["--limit", str(protocol.limit)]
    argv += ["--output_path", str(output), "--log_samples"]
    return argv


def run_eval_argv(protocol: Protocol, base_url: str, model: str, test_file: Path) -> list[str]:
    """SGLang's run_eval with the protocol's flags; one invocation is one run (`--repeat 1`)."""
    argv = [sys.executable, "-m", "sglang.test.run_eval", "--base-url", base_url, "--model", model]
    argv += ["--eval-name", "gsm8k", "--api", "chat", "--num-examples", str(protocol.limit)]
    argv += ["--num-shots", str(protocol.num_fewshot), "--num-threads", str(protocol.num_concurrent)]
    argv += ["--max-tokens", str(protocol.max_gen_toks), "--temperature", str(protocol.temperature)]
    if protocol.top_p is not None:
        argv += ["--top-p", str(protocol.top_p)]
    if protocol.extra_gen_kwargs.get("reasoning_effort"):
        argv += ["--reasoning-effort", str(protocol.extra_gen_kwargs["reasoning_effort"])]
    unknown = sorted(set(protocol.extra_gen_kwargs) - {"reasoning_effort"})
    if unknown:
        raise UsageError(f"protocol {protocol.name!r}: run_eval takes no {', '.join(unknown)}")
    argv += ["--gsm8k-data-path", str(test_file), "--repeat", "1"]
    return argv


def sgl_eval_argv(protocol: Protocol, base_url: str, model: str, data_dir: Path, raw: Path) -> list[str]:
    """sgl-eval's GSM8K with the protocol's settings, on the kit's data (kdakit.evals.sgl_eval_client)."""
    if protocol.num_fewshot:
        raise UsageError(f"protocol {protocol.name!r}: sgl-eval's GSM8K is zero-shot (num_fewshot = 0)")
    if protocol.extra_gen_kwargs:
        extra = ", ".join(protocol.extra_gen_kwargs)
        raise UsageError(f"protocol {protocol.name!r}: sgl-eval takes no {extra}")
    argv = [*SGL_EVAL_CLIENT, "--gsm8k-dir", str(data_dir), "--prepared-dir", str(raw / "data")]
    argv += ["run", "gsm8k", "--base-url", f"{base_url}/v1", "--model", model]
    argv += ["--num-threads", str(protocol.num_concurrent), "--max-tokens", str(protocol.max_gen_toks)]
    argv += ["--temperature", str(protocol.temperature)]
    if protocol.top_p is not None:
        argv += ["--top-p", str(protocol.top_p)]
    if protocol.limit:
        argv += ["--num-examples", str(protocol.limit)]
    argv += ["--out-dir", str(raw / "sgl-eval")]
    return argv


def parse_sgl_eval(raw: Path) -> dict:
    """The score sgl-eval wrote to its metrics.json (a partial run is no result)."""
    found = sorted((raw / "sgl-eval").glob("sgl_eval_gsm8k_*/metrics.json"))
    if not found:
        raise RuntimeError(f"sgl-eval wrote no metrics.json under {raw / 'sgl-eval'}")
    doc = json.loads(found[-1].read_text())
    if doc.get("partial"):
        raise RuntimeError(f"sgl-eval's run is partial ({found[-1].relative_to(raw)})")
    return {
        "accuracy_symbolic": float(doc["aggregate"]["score"]),
        "n_questions": int(doc["num_examples"]),
        "tool_latency_s": doc.get("latency_seconds"),
        "results_file": str(found[-1].relative_to(raw)),
    }


def rows_scored(protocol: Protocol, test_rows: int) -> dict:
    """Which GSM8K rows a run scores and which it shows as shots, as each tool picks them."""
    if protocol.tool == "sglang-run-eval":
        # run_eval: the first `shots` test rows are the shots, the scored set starts after them.
        first = protocol.num_fewshot
        count = min(protocol.limit or test_rows - first, test_rows - first)
        return {
            "questions": {"split": "test", "first": first, "count": count},
            "shots": {"split": "test", "rows": list(range(protocol.num_fewshot)), "as": "one user message"},
        }
    count = min(protocol.limit or test_rows, test_rows)
    if protocol.tool == "sgl-eval":
        return {
            "questions": {"split": "test", "first": 0, "count": count},
            "shots": {"split": "none", "rows": [], "as": "zero-shot: sgl-eval's math prompt"},
        }
    return {
        "questions": {"split": "test", "first": 0, "count": count},
        "shots": {"split": "train", "rows": None, "as": "chat turns",
                  "selection": "lm-eval's few-shot sampler (seed 1234) per question; see samples_*.jsonl"},
    }  # fmt: skip


def parse_run_eval(raw: Path) -> dict:
    """The score run_eval reported through its metrics file (SGLANG_TEST_METRICS_OUTPUT)."""
    values = {}
    for path in sorted(raw.glob("run-eval-metrics*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                values[row.get("metric_name")] = row.get("value")
    if not isinstance(values.get("gsm8k_score"), int | float):
        raise RuntimeError(f"run_eval reported no gsm8k_score under {raw}")
    return {"accuracy_numeric": float(values["gsm8k_score"]), "tool_latency_s": values.get("gsm8k_latency")}


def _question_key(text: str) -> str:
    return " ".join(text.split())


def lm_eval_shot_rows(raw_dir: Path, train_file: Path) -> dict[str, list[int | None]]:
    """The train rows lm-eval showed as shots, per scored test row, read back from its samples file."""
    found = sorted(raw_dir.rglob("samples_*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not found:
        return {}
    index = {}
    for i, line in enumerate(train_file.read_text(encoding="utf-8").splitlines()):
        if line.strip():
            index.setdefault(_question_key(json.loads(line)["question"]), i)
    shots: dict[str, list[int | None]] = {}
    for line in found[-1].read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        doc = str(sample["doc_id"])
        if doc in shots:
            continue  # one line per filter
        try:
            messages = json.loads(sample["arguments"]["gen_args_0"]["arg_0"][0])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        users = [m["content"] for m in messages if m.get("role") == "user"][:-1]  # the last one is scored
        rows = []
        for content in users:
            question = content.split("Question:", 1)[-1].rsplit("\nAnswer:", 1)[0]
            rows.append(index.get(_question_key(question)))
        shots[doc] = rows
    return shots


def tool_version(tool: str) -> str | None:
    try:
        return importlib.metadata.version(TOOLS[tool])
    except importlib.metadata.PackageNotFoundError:
        return None


def parse_lm_eval_results(raw_dir: Path) -> dict:
    """Accuracies and counts from lm-eval's results_*.json under raw_dir (the newest one)."""
    found = sorted(raw_dir.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"lm-eval wrote no results_*.json under {raw_dir}")
    doc = json.loads(found[-1].read_text())
    task = doc["results"][TASK_NAME]
    n = doc.get("n-samples", {}).get(TASK_NAME, {}).get("effective")

    def stderr(key: str) -> float | None:
        value = task.get(key)
        return value if isinstance(value, int | float) else None

    return {
        "accuracy_strict": float(task["exact_match,strict-match"]),
        "accuracy_flexible": float(task["exact_match,flexible-extract"]),
        "stderr_strict": stderr("exact_match_stderr,strict-match"),
        "stderr_flexible": stderr("exact_match_stderr,flexible-extract"),
        "n_questions": int(n if n is not None else task.get("sample_len")),
        "results_file": str(found[-1].relative_to(raw_dir)),
    }


def verdict(metrics: dict, protocol: Protocol) -> str:
    value = metrics[f"accuracy_{protocol.verdict_metric}"]
    return "pass" if value >= protocol.threshold else "fail"


def _tool_run(protocol: Protocol, argv: list[str], raw: Path, env: dict, model: str) -> bounded.Outcome:
    """One bounded tool invocation in raw/ (its console log: raw/<tool>.log)."""
    log = raw / f"{protocol.tool}.log"
    log.write_text("$ " + " ".join(argv) + "\n")
    run_env = dict(env)
    if protocol.tool == "sglang-run-eval":
        run_env["SGLANG_TEST_METRICS_OUTPUT"] = str(raw / "run-eval-metrics")
    started = time.time()
    outcome = bounded.run_bounded(
        argv, log, stall_s=protocol.request_timeout_s, total_s=protocol.run_timeout_s, env=run_env, cwd=raw,
        echo=f"  {protocol.tool} | ",
    )  # fmt: skip
    if protocol.tool == "sglang-run-eval":  # run_eval writes its report to fixed /tmp names: keep a copy
        stem = f"gsm8k_{model.replace('/', '_')}"
        for suffix, name in ((".html", "run-eval-report.html"), (".json", "run-eval-result.json")):
            found = Path("/tmp") / f"{stem}{suffix}"
            if found.is_file() and found.stat().st_mtime >= started - 1:
                shutil.copy(found, raw / name)
    return outcome


@dataclass(frozen=True)
class Inputs:
    """The protocol with the command line's overrides and the data it scores, checked before the server is
    reached."""

    protocol: Protocol
    data: dict  # the protocols file's [data] table
    data_dir: Path
    rows: dict  # rows_scored
    full_rows: int  # the questions the protocol scores without overrides
    limited: bool


def checked_inputs(args: argparse.Namespace) -> Inputs:
    data, protocols = load_protocols(Path(args.protocols) if args.protocols else PROTOCOLS_FILE)
    protocol = pick_protocol(protocols, args.protocol)
    overrides = {}
    if args.runs is not None:
        overrides["runs"] = args.runs
    if args.limit is not None:
        overrides["limit"] = args.limit
    if args.threshold is not None:
        overrides["threshold"] = args.threshold
    if overrides:
        protocol = Protocol(**{**protocol.__dict__, **overrides})
    if protocol.runs < 1:
        raise UsageError("--runs must be at least 1")
    data_dir = check_data(data)
    test_rows = int(data.get("test_rows", 0)) or len((data_dir / "test.jsonl").read_text().splitlines())
    full_rows = rows_scored(protocols[args.protocol], test_rows)["questions"]["count"]
    rows = rows_scored(protocol, test_rows)
    return Inputs(protocol, data, data_dir, rows, full_rows, rows["questions"]["count"] < full_rows)


@dataclass
class Eval:
    """One `kdakit eval gsm8k` under way: what its runs share."""

    inputs: Inputs
    session: Session
    model: str
    version: str | None  # the tool's
    env: dict  # the tool's environment


@dataclass
class Run:
    """One run as measured: its folder, the tool's command line and outcome, what the server counted."""

    j: int
    stem: str
    raw: Path
    argv: list[str]
    outcome: bounded.Outcome
    flushed: bool  # the cache flush that starts the server's accept-length count
    accept: float | None
    counted: dict  # the server's request count (integrity.Window.check)
    telemetry: dict  # the recorder's summary


def tool_argv(ev: Eval, raw: Path) -> list[str]:
    protocol, data_dir, base_url = ev.inputs.protocol, ev.inputs.data_dir, ev.session.base_url
    if protocol.tool == "lm-eval":
        include_dir = raw / "task"
        write_task(include_dir, data_dir)
        return lm_eval_argv(protocol, base_url, ev.model, include_dir, raw / "lm-eval")
    if protocol.tool == "sgl-eval":
        return sgl_eval_argv(protocol, base_url, ev.model, data_dir, raw)
    return run_eval_argv(protocol, base_url, ev.model, data_dir / "test.jsonl")


def measure_run(ev: Eval, j: int) -> Run:
    """Run j: the tool once against the server, its accept length and the server's request count."""
    protocol, session, q = ev.inputs.protocol, ev.session, ev.inputs.rows["questions"]
    stem, raw = session.run_folder(f"{session.arm}-{protocol.name}-run{j}")
    argv = tool_argv(ev, raw)
    print(
        f"[gsm8k] run {j}/{protocol.runs} with {protocol.tool} {ev.version or '(version unknown)'}: "
        f"test rows {q['first']}..{q['first'] + q['count'] - 1}{' (limited)' if ev.inputs.limited else ''}, "
        f"{protocol.num_fewshot}-shot, {protocol.num_concurrent} concurrent, model {ev.model!r} "
        f"at {session.base_url}",
        file=sys.stderr,
    )
    flushed = session.flush_cache()  # the accept length read after the run is the run's
    recorder = telemetry.Recorder(raw / "telemetry.csv")
    with recorder, session.measured(recorder, f"run {j}") as window:
        outcome = _tool_run(protocol, argv, raw, ev.env, ev.model)
    accept = session.accept_length() if outcome.ok else None
    # the kit's own count is known once the results are read; a run that hung or failed has no
    # result to protect, and a hung server's counter would only keep it waiting
    counted = window.check(0) if outcome.ok else integrity.NOT_READ
    session.scrub(raw)
    return Run(j, stem, raw, argv, outcome, flushed, accept, counted, recorder.summary)


def parse_tool_output(ev: Eval, run: Run, metrics: dict, artifacts: list[str]) -> None:
    """The tool's scores (and, for lm-eval, the shots it showed) into metrics; its results file into
    artifacts."""
    tool, raw, stem = ev.inputs.protocol.tool, run.raw, run.stem
    if tool == "lm-eval":
        parsed = parse_lm_eval_results(raw / "lm-eval")
        metrics["n_questions"] = parsed.pop("n_questions")
        per_question = lm_eval_shot_rows(raw / "lm-eval", ev.inputs.data_dir / "train.jsonl")
        rows = ev.inputs.rows
        metrics["rows"] = {**rows, "shots": {**rows["shots"], "rows_per_question": per_question}}
        artifacts.append(f"{stem}/lm-eval/{parsed.pop('results_file')}")
    elif tool == "sgl-eval":
        parsed = parse_sgl_eval(raw)
        metrics["n_questions"] = parsed.pop("n_questions")
        artifacts.append(f"{stem}/{parsed.pop('results_file')}")
    else:
        parsed = parse_run_eval(raw)
        artifacts += [f"{stem}/{p.name}" for p in sorted(raw.glob("run-eval-*"))]
    metrics.update(parsed)


def run_metrics(ev: Eval, run: Run) -> tuple[dict, list[str], str | None]:
    """The run's record metrics, its artifacts, and what stopped it (None: it has a verdict)."""
    protocol, inputs, outcome, j = ev.inputs.protocol, ev.inputs, run.outcome, run.j
    log_name = f"{protocol.tool}.log"
    metrics = {
        "run_index": j,
        "status": "ok",
        "n_questions": inputs.rows["questions"]["count"],
        "threshold": protocol.threshold,
        "verdict_metric": protocol.verdict_metric,
        "num_fewshot": protocol.num_fewshot,
        "model": ev.model,
        "duration_s": round(outcome.elapsed_s, 3),
        "raw_dir": run.stem,
        "tool": {"name": protocol.tool, "version": ev.version, "argv": run.argv[1:]},
        "rows": inputs.rows,
        "data_sha256": inputs.data["test_sha256"],
        "limited": inputs.limited,
        "protocol_questions": inputs.full_rows,
        "request_timeout_s": protocol.request_timeout_s,
        "run_timeout_s": protocol.run_timeout_s,
        "http_errors": bounded.http_error_counts([(run.raw / log_name).read_text(errors="replace")]),
        "accept_length": run.accept if run.flushed else None,
        "telemetry": run.telemetry,
    }
    artifacts = [f"{run.stem}/{log_name}"]
    failure = None
    if not outcome.ok:
        if outcome.status == "exited":
            failure = f"{protocol.tool} exited {outcome.code}; log kept in {run.raw / log_name}"
            metrics["status"] = "failed"
        else:
            failure = ev.session.limit_line(
                f"gsm8k run {j}", outcome, protocol.request_timeout_s, protocol.run_timeout_s
            )
            metrics["status"] = "hung" if outcome.status == "stalled" else "timed out"
    else:
        try:
            parse_tool_output(ev, run, metrics, artifacts)
        except (RuntimeError, KeyError, ValueError) as exc:
            failure = f"{protocol.tool} output unreadable: {exc}"
            metrics["status"] = "failed"
    if run.counted["server"] is not None:
        sent = metrics["n_questions"]  # one request per question, whichever tool
        metrics["requests"] = {"sent": sent, "server": run.counted["server"],
                               "foreign": max(0, run.counted["server"] - sent)}  # fmt: skip
        if metrics["requests"]["foreign"] and not failure:
            failure = ev.session.foreign_line(
                f"gsm8k {protocol.name} run {j}", metrics["requests"]["foreign"]
            )
            metrics["status"] = "failed"
    if metrics["http_errors"]:
        codes = ", ".join(f"HTTP {c} x{n}" for c, n in sorted(metrics["http_errors"].items()))
        print(f"[gsm8k] run {j}: the server answered some requests with errors: {codes}",
              file=sys.stderr)  # fmt: skip
    if failure:
        metrics["error"] = failure
        metrics["verdict"] = "no result"
    else:
        metrics["verdict"] = verdict(metrics, protocol)
    if run.telemetry.get("file"):
        artifacts.append(f"{run.stem}/{run.telemetry['file']}")
    return metrics, artifacts, failure


def run_notes(ev: Eval, run: Run) -> list[str]:
    protocol, inputs = ev.inputs.protocol, ev.inputs
    notes = [f"{protocol.tool} {ev.version}, protocol source {protocol.source}"]
    if protocol.tool == "lm-eval":
        notes[0] += f", model {LM_EVAL_MODEL}, task {TASK_NAME}"
    if inputs.limited:
        count = inputs.rows["questions"]["count"]
        notes.append(
            f"limited run: {count} of the protocol's {inputs.full_rows} questions; not comparable with "
            "the protocol's published number"
        )
    if not run.flushed:
        notes.append(ACCEPT_UNREAD_NOTE)
    elif run.accept is None and run.outcome.ok:
        notes.append("no accept length: the server reports none (no speculative decoding)")
    notes += run.telemetry.get("warnings", [])
    if run.counted["server"] is None:
        notes.append(integrity.UNCHECKED_NOTE)
    return notes


def record_run(ev: Eval, run: Run) -> int:
    """Writes run j's record and says how it went: 0 passed, 1 failed the threshold, 3 stop (no result)."""
    protocol = ev.inputs.protocol
    metrics, artifacts, failure = run_metrics(ev, run)
    path = ev.session.write(run.stem, protocol.name, metrics, run_notes(ev, run), artifacts)
    if failure:
        print(f"[gsm8k] {failure}; partial record -> {path}", file=sys.stderr)
        return 3  # the server (or the tool) is not fit for the remaining runs
    chosen = metrics[f"accuracy_{protocol.verdict_metric}"]
    scores = ", ".join(f"{k} {metrics[f'accuracy_{k}']:.4f}" for k in METRICS[protocol.tool])
    measured = metrics["accept_length"]
    accept_text = "" if measured is None else f", accept length {measured:.3f}"
    print(
        f"[gsm8k] run {run.j}/{protocol.runs}: {scores} on {metrics['n_questions']} questions"
        f"{accept_text}; "
        f"{protocol.verdict_metric} {chosen:.4f} vs threshold {protocol.threshold}: "
        f"{metrics['verdict'].upper()} ({run.outcome.elapsed_s:.0f} s) -> {path}"
    )
    for line in run.telemetry.get("warnings", []):
        print(f"[gsm8k] telemetry warning: {line}", file=sys.stderr)
    return 0 if metrics["verdict"] == "pass" else 1


def run_gsm8k(args: argparse.Namespace) -> int:
    inputs = checked_inputs(args)
    session = Session.open(args, "gsm8k", ("/v1/models", "/health"))
    model = args.model or context.served_model(session.base_url) or "default"
    version = tool_version(inputs.protocol.tool)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONUNBUFFERED"] = "1"  # progress reaches the stall watchdog as it happens
    env.setdefault("OPENAI_API_KEY", "EMPTY")
    ev = Eval(inputs, session, model, version, env)
    worst = 0
    with tempfile.TemporaryDirectory(prefix="kdakit-hf-") as hf_home:
        env["HF_HOME"] = hf_home  # the JSON dataset cache is per run and thrown away
        for j in range(1, inputs.protocol.runs + 1):
            outcome = record_run(ev, measure_run(ev, j))
            if outcome == 3:
                return 3
            worst = max(worst, outcome)
    return worst


def register(subparsers) -> None:
    g = context.add_server_command(
        subparsers,
        "eval",
        "accuracy evaluations against a running server",
        "gsm8k",
        run_gsm8k,
        help="GSM8K with SGLang's run_eval or lm-eval (offline) against an OpenAI-compatible server",
        description="Exit 0: every run passed the threshold; 1: a run failed it; 3: the tool failed, or the "
        "server hung past the protocol's limits (the record says which; its log is kept).",
    )
    g.add_argument(
        "--protocol",
        default="pr",
        help="pr (the Helion PR's test: SGLang's run_eval), lm-eval (its settings in lm-eval), full (the "
        "CuTe-verify PR's 1319 questions with sgl-eval), full-lm-eval (the same in lm-eval)",
    )
    g.add_argument("--runs", type=int, default=None, help="override the protocol's number of runs")
    g.add_argument("--model", default=None, help="served model name (default: the server's /v1/models)")
    g.add_argument(
        "--limit", type=int, default=None, help="override: score only N questions (the record says limited)"
    )
    g.add_argument("--threshold", type=float, default=None, help="override the protocol's pass threshold")
    g.add_argument("--protocols", default=None, help="another gsm8k_protocols.toml (custom runs, tests)")
