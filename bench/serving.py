"""`kdakit bench serving`: the PR's serving-throughput protocol through SGLang's own benchmark client.

For every point of the protocol: an optional warm-up run, then `runs` runs of
`python -m sglang.benchmark.serving`, each into a fresh JSONL file (the client appends), each checked for
`completed == num_prompts`. With `flush_cache` (the protocols' default) every client run passes
`--flush-cache`: the client flushes the server's prefix cache after its own warm-up request and before the
measured requests, and since SGLang resets its speculative-decoding counters on a flush, the accept length
the client reads afterwards covers that run's requests only. Every client run has the protocol's request
and run limits (kdakit.measure.bounded); a hung point is recorded as such, the points before it are kept
and the rest are marked not run. GPU telemetry is sampled throughout (kdakit.measure.telemetry), the
measured runs marked.

The median output throughput of the runs is the point's number (`pr`, as the PR did); the record also keeps
mean, spread and every run, and the report pools every record (repeat) of a point (kdakit.records.stats).
Raw files (JSONL lines and console logs) stay beside the record `<arm>-<protocol>.result.json`; a re-run gets
`<arm>-<protocol>-2.result.json` and counts as the next repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kdakit.facts.errors import UsageError
from kdakit.facts.protocols import (
    DATASETS,
    Point,
    Protocol,
    load_protocols,
    protocol_definition,
    protocols_file,
    server_env_lines,
)
from kdakit.launch import access
from kdakit.measure import bounded, context, integrity, telemetry
from kdakit.measure.session import Session, pick_protocol
from kdakit.records import results

# SGLang's client, its flush carrying the admin key (bench/sglang_client.py says why).
CLIENT = [sys.executable, "-m", "kdakit.bench.sglang_client"]
# The client's own warm-up requests before each run's measured ones (it sends them to the server too).
CLIENT_WARMUP_REQUESTS = 1
RANDOM_IDS_NOTE = (
    "dataset random-ids (random token ids, ShareGPT not staged): EAGLE acceptance length, and so throughput, "
    "differ from the PR's ShareGPT-text runs; compare arms with each other, not with the published numbers"
)


def client_argv(
    protocol: Protocol,
    point: Point,
    *,
    base_url: str,
    tokenizer: str,
    dataset: str,
    dataset_path: str | None,
    output_file: Path,
    num_prompts: int,
    tag: str,
    model: str | None = None,
) -> list[str]:
    argv = ["--backend", protocol.backend, "--base-url", base_url, "--tokenizer", tokenizer]
    if model:
        argv += ["--model", model]
    if dataset == "sharegpt":
        argv += ["--dataset-name", "random", "--dataset-path", str(dataset_path)]
    else:
        argv += ["--dataset-name", "random-ids"]
    argv += [
        "--random-input-len", str(point.input_len),
        "--random-output-len", str(point.output_len),
        "--random-range-ratio", str(protocol.random_range_ratio),
        "--num-prompts", str(num_prompts),
        "--max-concurrency", str(point.concurrency),
        "--request-rate", "inf",
        "--seed", str(protocol.seed),
        "--temperature", str(protocol.temperature),
        "--output-file", str(output_file),
        "--tag", tag,
        "--output-details",  # per-request errors (with their HTTP reasons) in the JSONL line
        "--warmup-requests", str(CLIENT_WARMUP_REQUESTS),
    ]  # fmt: skip
    if protocol.flush_cache:
        argv.append("--flush-cache")  # after the client's warm-up request, before the measured ones
    return argv


class RunFailed(Exception):
    def __init__(self, message: str, http_errors: dict | None = None):
        super().__init__(message)
        self.http_errors = http_errors or {}


def parse_client_output(path: Path, num_prompts: int) -> dict:
    """One run's numbers from the client's JSONL (exactly one line expected: the file is fresh per run)."""
    try:
        lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        raise RunFailed(
            "the client wrote no output file (it exits without one when every request failed)"
        ) from None
    if len(lines) != 1:
        raise RunFailed(f"{path.name}: expected one result line, found {len(lines)}")
    try:
        row = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise RunFailed(f"{path.name}: not JSON ({exc.msg})") from None
    missing = [k for k in ("completed", "output_throughput", "total_throughput", "duration") if k not in row]
    if missing:
        raise RunFailed(f"{path.name}: no {', '.join(missing)} in the client's output")
    errors = [e for e in row.get("errors") or [] if e]
    http_errors = bounded.http_error_counts(errors)
    if row["completed"] != num_prompts:
        codes = ", ".join(f"HTTP {c} x{n}" for c, n in sorted(http_errors.items()))
        raise RunFailed(
            f"completed {row['completed']} of {num_prompts} requests" + (f" ({codes})" if codes else ""),
            http_errors,
        )
    return {
        "completed": int(row["completed"]),
        "num_prompts": num_prompts,
        "output_throughput": float(row["output_throughput"]),
        "total_throughput": float(row["total_throughput"]),
        "duration_s": float(row["duration"]),
        "accept_length": row.get("accept_length"),
        "median_ttft_ms": row.get("median_ttft_ms"),
        "median_tpot_ms": row.get("median_tpot_ms"),
        "median_itl_ms": row.get("median_itl_ms"),
        "server_info": row.get("server_info"),
        "http_errors": http_errors,
    }


def summarize_point(
    point: Point, runs: list[dict], expected_runs: int, error: str | None, status: str | None = None
) -> dict:
    """The point's record: ok only when every run succeeded; medians (and mean, spread) over the runs."""
    ok = error is None and len(runs) == expected_runs
    accept = [r["accept_length"] for r in runs if isinstance(r.get("accept_length"), int | float)]
    values = [r["output_throughput"] for r in runs]
    summary = {
        "input_len": point.input_len,
        "output_len": point.output_len,
        "concurrency": point.concurrency,
        "num_prompts": point.num_prompts,
        "status": "ok" if ok else (status or "failed"),
        "runs": runs,
        "median_output_throughput": results.median(values) if ok else None,
        "median_total_throughput": results.median([r["total_throughput"] for r in runs]) if ok else None,
        "mean_output_throughput": statistics.fmean(values) if ok else None,
        "stdev_output_throughput": statistics.stdev(values) if ok and len(values) > 1 else None,
        "accept_length": results.median(accept),
    }
    if error:
        summary["error"] = error
    return summary


def warmup_http_errors(folder: Path) -> dict:
    """HTTP statuses of a failed warm-up: from its JSONL's per-request errors, else from its console log."""
    texts: list[str] = []
    jsonl = folder / "warmup.jsonl"
    if jsonl.is_file():
        for line in jsonl.read_text(errors="replace").splitlines():
            try:
                texts += [str(e) for e in json.loads(line).get("errors") or [] if e]
            except (json.JSONDecodeError, AttributeError):
                continue
    if not texts and (folder / "warmup.log").is_file():
        texts = (folder / "warmup.log").read_text(errors="replace").splitlines()[1:]  # not the command line
    return bounded.http_error_counts(texts)


def _client_env(tokenizer: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # progress reaches the stall watchdog as it happens
    if Path(tokenizer).is_dir():
        # Everything the client reads is local; without this it asks the Hub for the served model name's
        # config, twice, with retries (about 50 s a run on a host without internet).
        env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def _run_client(cmd: list[str], argv: list[str], log: Path, protocol: Protocol, env: dict) -> bounded.Outcome:
    log.write_text("$ " + shlex.join(cmd + argv) + "\n")
    return bounded.run_bounded(
        cmd + argv, log, stall_s=protocol.request_timeout_s, total_s=protocol.run_timeout_s, env=env
    )


def _tokenizer(args: argparse.Namespace, info: dict | None) -> str:
    if args.tokenizer:
        return args.tokenizer
    for key in ("tokenizer_path", "model_path"):
        candidate = (info or {}).get(key)
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise UsageError("no tokenizer: pass --tokenizer (the model folder, or any local tokenizer folder)")


def first_failure(protocol: Protocol, points: list[dict], failed: list[int]) -> str:
    """'; point 2/3 (64/8, C4): run 2: <cause>' for the closing line (the one a rollout's summary shows)."""
    if not failed:
        return ""
    i = failed[0]
    point, error = protocol.points[i - 1], points[i - 1].get("error") or points[i - 1]["status"]
    where = f"point {i}/{len(points)} ({point.input_len}/{point.output_len}, C{point.concurrency})"
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"; {where}: {' '.join(str(error).split())}{more}"


@dataclass(frozen=True)
class Inputs:
    """What the command line asks for, checked before the server is reached."""

    protocols_file: Path
    protocol: Protocol
    runs: int  # per point
    dataset: str
    dataset_path: str | None  # the ShareGPT file (dataset sharegpt)


def checked_inputs(args: argparse.Namespace) -> Inputs:
    path = protocols_file(args.protocols)
    protocol = pick_protocol(load_protocols(path), args.protocol)
    runs = args.runs if args.runs is not None else protocol.runs
    if runs < 1:
        raise UsageError("--runs must be at least 1")
    dataset = args.dataset or protocol.dataset
    dataset_path = args.dataset_path or os.environ.get("KDAKIT_SHAREGPT")
    if dataset == "sharegpt":
        if not dataset_path:
            raise UsageError(
                "ShareGPT is not staged: pass --dataset-path FILE, or choose --dataset random-ids"
            )
        if not Path(dataset_path).is_file():
            raise UsageError(f"--dataset-path: no such file {dataset_path}")
    return Inputs(path, protocol, runs, dataset, dataset_path)


class Steps:
    """The bench's progress over its client runs: rich's live bar on a terminal. Logs (docker, ansible) get no
    bar, whose last frame would run into the next line, but one plain line per step."""

    def __init__(self, total: int):
        self.console = Console(stderr=True)
        self.total = total
        self.started = time.monotonic()
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        disable = not self.console.is_terminal
        self.progress = Progress(*columns, console=self.console, transient=False, disable=disable)
        self.task = None

    def __enter__(self) -> Steps:
        self.progress.__enter__()
        self.task = self.progress.add_task("serving benchmark", total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def step(self, text: str) -> None:
        self.progress.update(self.task, description=text)
        if not self.console.is_terminal:
            done = self.progress.tasks[0].completed
            elapsed = time.monotonic() - self.started
            eta = f"{elapsed / done * (self.total - done):.0f} s" if done else "unknown"
            self.console.print(
                f"[bench] {text}: elapsed {elapsed:.0f} s, ETA {eta}", markup=False, soft_wrap=True
            )

    def advance(self, runs: int = 1) -> None:
        self.progress.advance(self.task, runs)

    def print(self, text: str, **style) -> None:
        self.progress.console.print(text, markup=False, soft_wrap=True, **style)


class PointStopped(Exception):
    """A point's measurement ended before its last run: why, the status a limit gave it, the HTTP errors."""

    def __init__(self, error: str, status: str | None = None, http_errors: dict | None = None):
        super().__init__(error)
        self.error, self.status, self.http_errors = error, status, http_errors or {}


@dataclass
class Bench:
    """One `kdakit bench serving` under way: what its client runs share, and what its points found so far."""

    args: argparse.Namespace
    inputs: Inputs
    session: Session
    tokenizer: str
    stem: str
    raw: Path
    cmd: list[str]  # the client
    env: dict  # its environment
    recorder: telemetry.Recorder
    hung: str | None = None  # the limit line of the point that hung: the later points are not run
    unchecked: bool = False  # a measured run whose server counter could not be read
    server_args: dict | None = None  # the server's, as the first run that read them saw them

    def client(
        self, point: Point, output_file: Path, num_prompts: int, what: str, log: Path
    ) -> bounded.Outcome:
        """One bounded client run of the point, into output_file (its console: log)."""
        protocol, inputs = self.inputs.protocol, self.inputs
        argv = client_argv(
            protocol, point, base_url=self.session.base_url, tokenizer=self.tokenizer, dataset=inputs.dataset,
            dataset_path=inputs.dataset_path, output_file=output_file, num_prompts=num_prompts,
            tag=f"kdakit:{self.stem}:{point.label}:{what}", model=self.args.model,
        )  # fmt: skip
        return _run_client(self.cmd, argv, log, protocol, self.env)

    def check_limits(self, outcome: bounded.Outcome, what: str, point: Point) -> None:
        """A limit stopped the client: the point stops, and so does the bench."""
        if outcome.status == "exited":
            return
        protocol = self.inputs.protocol
        self.hung = self.session.limit_line(
            f"bench {point.label} {what}", outcome, protocol.request_timeout_s, protocol.run_timeout_s
        )
        raise PointStopped(self.hung, "hung" if outcome.status == "stalled" else "timed out")


def warm_up(bench: Bench, point: Point, folder: Path) -> None:
    """The point's discarded client run of `concurrency` prompts."""
    with access.private_output(folder / "warmup.jsonl") as written:
        outcome = bench.client(point, written, point.concurrency, "warmup", folder / "warmup.log")
    bench.check_limits(outcome, "warm-up", point)
    if not outcome.ok:
        http_errors = warmup_http_errors(folder)
        codes = ", ".join(f"HTTP {c} x{n}" for c, n in sorted(http_errors.items()))
        error = f"warm-up failed{f' ({codes})' if codes else ''} (see {point.label}/warmup.log)"
        raise PointStopped(error, http_errors=http_errors)


def measured_run(bench: Bench, point: Point, folder: Path, j: int) -> dict:
    """The point's measured run j, checked (limits, foreign requests, completions): its numbers."""
    session, jsonl = bench.session, folder / f"run{j}.jsonl"
    # the client's JSONL copies /server_info, keys included: written privately, lands scrubbed
    with access.private_output(jsonl) as written:
        with session.measured(bench.recorder, f"{point.label} run {j}") as window:
            outcome = bench.client(point, written, point.num_prompts, f"run{j}", folder / f"run{j}.log")
    session.scrub(folder)  # (its log, should the client ever print them)
    bench.check_limits(outcome, f"run {j}", point)  # (a hung server's counter would only keep it waiting)
    requests_seen = window.check(point.num_prompts + CLIENT_WARMUP_REQUESTS)
    if requests_seen["foreign"]:
        error = session.foreign_line(
            f"{point.input_len}/{point.output_len} C{point.concurrency} run {j}", requests_seen["foreign"]
        )
        print(f"[bench] {error}", file=sys.stderr, flush=True)
        raise PointStopped(error)
    bench.unchecked = bench.unchecked or requests_seen["server"] is None
    try:
        parsed = parse_client_output(jsonl, point.num_prompts)
        if outcome.code != 0:
            raise RunFailed(f"client exited {outcome.code}", parsed["http_errors"])
    except RunFailed as exc:
        raise PointStopped(
            f"run {j}: {exc} (see {point.label}/run{j}.log)", http_errors=exc.http_errors
        ) from None
    server_info = access.redact(parsed.pop("server_info"))
    parsed["requests"] = requests_seen
    if bench.server_args is None and isinstance(server_info, dict):
        bench.server_args = server_info
    parsed["index"] = j
    parsed["raw_file"] = f"{bench.stem}/{point.label}/run{j}.jsonl"
    parsed["flushed"] = bench.inputs.protocol.flush_cache
    return parsed


def measure_point(bench: Bench, steps: Steps, i: int, point: Point) -> dict:
    """Protocol point i: its warm-up, then its measured runs; its summary (missing once a point hung)."""
    protocol, runs = bench.inputs.protocol, bench.inputs.runs
    folder = bench.raw / point.label
    folder.mkdir()
    where = f"point {i}/{len(protocol.points)} ({point.input_len}/{point.output_len}, C{point.concurrency})"
    if bench.hung:
        summary = summarize_point(point, [], runs, f"not run: {bench.hung}", status="missing")
        steps.advance(runs)
        return summary
    error, status, http_errors = None, None, {}
    point_runs: list[dict] = []
    try:
        if protocol.warmup:
            steps.step(f"{where} warm-up")
            warm_up(bench, point, folder)
        for j in range(1, runs + 1):
            steps.step(f"{where} run {j}/{runs}")
            point_runs.append(measured_run(bench, point, folder, j))
            steps.advance()
    except PointStopped as stopped:
        error, status, http_errors = stopped.error, stopped.status, stopped.http_errors
    summary = summarize_point(point, point_runs, runs, error, status)
    summary["flush_cache"] = protocol.flush_cache
    if http_errors:
        summary["http_errors"] = http_errors
    steps.advance(runs - len(point_runs))
    if summary["status"] == "ok":
        values = ", ".join(f"{r['output_throughput']:.2f}" for r in point_runs)
        accept = summary["accept_length"]
        accept_text = f", accept length {accept:.3f}" if accept is not None else ""
        median = summary["median_output_throughput"]
        steps.print(f"{where}: {median:.2f} output tok/s (median of {values}){accept_text}")
    else:
        steps.print(f"{where}: {summary['status'].upper()}: {error}", style="red")
    return summary


def record_of(bench: Bench, points: list[dict], tel: dict) -> tuple[dict, list[str]]:
    """The record's (metrics, notes)."""
    inputs, protocol, session = bench.inputs, bench.inputs.protocol, bench.session
    notes = [
        f"client python -m sglang.benchmark.serving, backend {protocol.backend}, source {protocol.source}"
    ]
    if any(run.get("flushed") for p in points for run in p["runs"]):
        notes.append("prefix cache flushed after each client warm-up, before every measured run")
    if protocol.server_env:
        settings = ", ".join(server_env_lines(protocol.name, inputs.protocols_file))
        notes.append(f"server environment of the protocol: {settings} (passed to the server by the deploy)")
    if inputs.dataset == "random-ids":
        notes.append(RANDOM_IDS_NOTE)
    if bench.unchecked:
        notes.append(integrity.UNCHECKED_NOTE)
    if bench.hung:
        notes.append(f"partial: {bench.hung}; later points not run")
    notes += tel.get("warnings", [])
    mine = re.compile(rf"{re.escape(session.arm)}-{re.escape(protocol.name)}(-\d+)?\.result\.json")
    previous = sum(1 for f in session.out.iterdir() if mine.fullmatch(f.name))
    metrics = {
        "dataset": inputs.dataset
        if inputs.dataset == "random-ids"
        else f"random (ShareGPT text: {Path(inputs.dataset_path).name})",
        "backend": protocol.backend,
        "runs_per_point": inputs.runs,
        "repeat_index": previous + 1,  # the records of this arm and protocol already in this folder, plus one
        **({"visit": bench.args.visit} if bench.args.visit else {}),
        "protocol_definition": protocol_definition(protocol, inputs.protocols_file),
        "repeats_planned": protocol.repeats,
        "flush_cache": protocol.flush_cache,
        "server_env": dict(protocol.server_env),
        "request_timeout_s": protocol.request_timeout_s,
        "run_timeout_s": protocol.run_timeout_s,
        "partial": bench.hung is not None,
        "server_args": bench.server_args if bench.server_args is not None else session.info,
        "points": points,
        "telemetry": tel,
    }
    return metrics, notes


def run_serving(args: argparse.Namespace) -> int:
    inputs = checked_inputs(args)
    protocol = inputs.protocol
    session = Session.open(args, "serving", ("/v1/models",))
    tokenizer = _tokenizer(args, session.info)
    stem, raw = session.run_folder(f"{session.arm}-{protocol.name}")
    cmd = shlex.split(args.client_cmd) if args.client_cmd else CLIENT
    env = _client_env(tokenizer)
    steps = Steps(len(protocol.points) * inputs.runs)
    recorder = telemetry.Recorder(raw / "telemetry.csv").start()
    bench = Bench(args, inputs, session, tokenizer, stem, raw, cmd, env, recorder)
    with steps:
        points = [measure_point(bench, steps, i, point) for i, point in enumerate(protocol.points, 1)]
    tel = recorder.stop()
    if bench.hung:
        print(f"[bench] {bench.hung}", file=sys.stderr)
    for line in tel.get("warnings", []):
        print(f"[bench] telemetry warning: {line}", file=sys.stderr)
    metrics, notes = record_of(bench, points, tel)
    artifacts = [stem] + ([f"{stem}/{tel['file']}"] if tel.get("file") else [])
    path = session.write(stem, protocol.name, metrics, notes, artifacts)
    failed = [i for i, p in enumerate(points, 1) if p["status"] != "ok"]
    n = len(points)
    print(f"[bench] {n - len(failed)}/{n} points ok{first_failure(protocol, points, failed)} -> {path}")
    return 1 if failed else 0


def register(subparsers) -> None:
    s = context.add_server_command(
        subparsers,
        "bench",
        "serving benchmarks against a running server",
        "serving",
        run_serving,
        help="the PR's serving throughput protocol with SGLang's benchmark client",
        description="Exit 0: every point completed; 1: a point failed (recorded as failed, never dropped).",
    )
    s.add_argument("--protocol", default="pr")
    s.add_argument("--dataset", choices=DATASETS, default=None, help="default: the protocol's (sharegpt)")
    s.add_argument("--dataset-path", default=None, help="ShareGPT JSON (default: $KDAKIT_SHAREGPT)")
    s.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the server's model path)")
    s.add_argument("--model", default=None, help="model name for the client (default: asked from the server)")
    s.add_argument("--runs", type=int, default=None, help="override the protocol's runs per point")
    s.add_argument("--protocols", default=None, help="another protocols.toml (custom sweeps, tests)")
    s.add_argument(
        "--visit", type=int, default=int(os.environ.get("KDAKIT_VISIT") or 0) or None,
        help="this visit's number in an A/B loop (default: $KDAKIT_VISIT); the report pairs the arms by it",
    )  # fmt: skip
    s.add_argument("--client-cmd", default=None, help=argparse.SUPPRESS)  # tests: a stand-in client


if __name__ == "__main__":  # the deploy: python -m kdakit.bench.serving server-env PROTOCOL [PROTOCOLS_FILE]
    if sys.argv[1:2] != ["server-env"] or len(sys.argv) not in (3, 4):
        sys.exit("usage: python -m kdakit.bench.serving server-env PROTOCOL [PROTOCOLS_FILE]")
    try:
        print(json.dumps(server_env_lines(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)))
    except UsageError as exc:
        sys.exit(f"kdakit bench: error: {exc}")
