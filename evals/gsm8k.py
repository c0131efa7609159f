"""`kdakit eval gsm8k`: lm-eval 0.4.13 against the server's OpenAI chat API, offline, protocols as data.

Why `local-chat-completions`: the served models are chat reasoning models (GLM-5.3-Flash) and the PR's
protocol sets `reasoning_effort=low`, a chat-template parameter the server applies only to chat requests; the
chat model also needs no client-side tokenizer (nothing to download). Few-shot examples go as chat turns.

Each run writes `<arm>-<protocol>-run<j>.result.json` (schema kdakit.result.v1) and keeps lm-eval's own
output (results_*.json, samples_*.jsonl, the task YAML used, the console log) in the folder of the same name.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kdakit import context, results
from kdakit.errors import UsageError

HERE = Path(__file__).parent
PROTOCOLS_FILE = HERE / "protocols.toml"
TASK_TEMPLATE = HERE / "gsm8k_kdakit.yaml"
TASK_NAME = "gsm8k_kdakit"
LM_EVAL_MODEL = "local-chat-completions"


@dataclass(frozen=True)
class Protocol:
    name: str
    source: str
    limit: int  # 0 = all questions
    num_fewshot: int
    num_concurrent: int
    runs: int
    max_gen_toks: int
    temperature: float
    threshold: float
    verdict_metric: str
    top_p: float | None = None
    extra_gen_kwargs: dict = field(default_factory=dict)

    def gen_kwargs(self) -> dict:
        kwargs = {"temperature": self.temperature, "max_gen_toks": self.max_gen_toks}
        kwargs["do_sample"] = self.temperature > 0
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        kwargs.update(self.extra_gen_kwargs)
        return kwargs


def load_protocols(path: Path = PROTOCOLS_FILE) -> tuple[dict, dict[str, Protocol]]:
    """(the [data] table, protocols by name)."""
    doc = tomllib.loads(Path(path).read_text())
    protocols = {}
    for name, table in doc.get("protocol", {}).items():
        try:
            protocols[name] = Protocol(name=name, **table)
        except TypeError as exc:
            raise UsageError(f"{path}: protocol {name!r}: {exc}") from None
        if protocols[name].verdict_metric not in ("strict", "flexible"):
            raise UsageError(f"{path}: protocol {name!r}: verdict_metric must be strict or flexible")
    return doc.get("data", {}), protocols


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
            raise UsageError(f"GSM8K {split} split {path} has sha256 {digest}, protocols.toml says otherwise")
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


def _run_lm_eval(argv: list[str], log_path: Path, env: dict) -> int:
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            sys.stderr.write("  lm-eval | " + line)
        return proc.wait()


def run_gsm8k(args: argparse.Namespace) -> int:
    data, protocols = load_protocols(Path(args.protocols) if args.protocols else PROTOCOLS_FILE)
    if args.protocol not in protocols:
        raise UsageError(f"unknown protocol {args.protocol!r}; known: {', '.join(sorted(protocols))}")
    protocol = protocols[args.protocol]
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

    base_url = context.normalize_base_url(args.base_url)
    if context.get_json(f"{base_url}/v1/models") is None and context.get_json(f"{base_url}/health") is None:
        raise UsageError(f"no server answers at {base_url} (tried /v1/models and /health)")
    info = context.server_info(base_url)
    model = args.model or context.served_model(base_url) or "default"
    where = context.resolve(args, "gsm8k", info)
    out: Path = where["out"]
    out.mkdir(parents=True, exist_ok=True)

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.setdefault("OPENAI_API_KEY", "EMPTY")
    worst = 0
    with tempfile.TemporaryDirectory(prefix="kdakit-hf-") as hf_home:
        env["HF_HOME"] = hf_home  # the JSON dataset cache is per run and thrown away
        for j in range(1, protocol.runs + 1):
            stem = context.fresh_stem(out, f"{where['arm']}-{protocol.name}-run{j}")
            raw = out / stem
            include_dir = raw / "task"
            write_task(include_dir, data_dir)
            argv = lm_eval_argv(protocol, base_url, model, include_dir, raw / "lm-eval")
            limit_text = protocol.limit or data.get("test_rows", "all")
            print(
                f"[gsm8k] run {j}/{protocol.runs}: {limit_text} questions, {protocol.num_fewshot}-shot, "
                f"{protocol.num_concurrent} concurrent, model {model!r} at {base_url}",
                file=sys.stderr,
            )
            started = time.monotonic()
            code = _run_lm_eval(argv, raw / "lm-eval.log", env)
            elapsed = time.monotonic() - started
            if code != 0:
                print(
                    f"[gsm8k] run {j}: lm-eval exited {code}; log kept in {raw / 'lm-eval.log'}",
                    file=sys.stderr,
                )
                return 3
            parsed = parse_lm_eval_results(raw / "lm-eval")
            metrics = {
                "run_index": j,
                "n_questions": parsed["n_questions"],
                "accuracy_strict": parsed["accuracy_strict"],
                "accuracy_flexible": parsed["accuracy_flexible"],
                "stderr_strict": parsed["stderr_strict"],
                "stderr_flexible": parsed["stderr_flexible"],
                "threshold": protocol.threshold,
                "verdict_metric": protocol.verdict_metric,
                "num_fewshot": protocol.num_fewshot,
                "model": model,
                "duration_s": round(elapsed, 3),
                "raw_dir": stem,
            }
            metrics["verdict"] = verdict(metrics, protocol)
            record = context.new_record(
                "gsm8k",
                where,
                protocol=protocol.name,
                metrics=metrics,
                notes=[f"lm-eval {LM_EVAL_MODEL}, task {TASK_NAME}, protocol source {protocol.source}"],
                artifacts=[f"{stem}/lm-eval.log", f"{stem}/lm-eval/{parsed['results_file']}"],
            )
            path = results.write_result(out / f"{stem}.result.json", record)
            chosen = metrics[f"accuracy_{protocol.verdict_metric}"]
            print(
                f"[gsm8k] run {j}/{protocol.runs}: strict {metrics['accuracy_strict']:.4f}, flexible "
                f"{metrics['accuracy_flexible']:.4f} on {metrics['n_questions']} questions; "
                f"{protocol.verdict_metric} {chosen:.4f} vs threshold {protocol.threshold}: "
                f"{metrics['verdict'].upper()} ({elapsed:.0f} s) -> {path}"
            )
            if metrics["verdict"] != "pass":
                worst = max(worst, 1)
    return worst


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="accuracy evaluations against a running server")
    sub = parser.add_subparsers(dest="eval_name", required=True, metavar="EVAL")
    g = sub.add_parser(
        "gsm8k",
        help="GSM8K with lm-eval (offline) against an OpenAI-compatible server",
        description="Exit 0: every run passed the threshold; 1: a run failed it; 3: lm-eval failed.",
    )
    g.add_argument("--base-url", required=True, help="server root, e.g. http://127.0.0.1:30000")
    g.add_argument(
        "--protocol", default="pr", help="pr (the PR's accuracy test) or full (all 1319 questions)"
    )
    g.add_argument("--runs", type=int, default=None, help="override the protocol's number of runs")
    g.add_argument("--model", default=None, help="served model name (default: the server's /v1/models)")
    g.add_argument("--limit", type=int, default=None, help="override: score only the first N questions")
    g.add_argument("--threshold", type=float, default=None, help="override the protocol's pass threshold")
    g.add_argument("--protocols", default=None, help="another protocols.toml (custom runs, tests)")
    context.add_record_options(g)
    g.set_defaults(func=run_gsm8k)
