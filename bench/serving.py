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
    PROTOCOLS_FILE,
    Point,
    Protocol,
    load_protocols,
    protocol_definition,
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


def run_serving(args: argparse.Namespace) -> int:
    protocols_file = Path(args.protocols) if args.protocols else PROTOCOLS_FILE
    protocol = pick_protocol(load_protocols(protocols_file), args.protocol)
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

    session = Session.open(args, "serving", ("/v1/models",))
    base_url, info, out = session.base_url, session.info, session.out
    tokenizer = _tokenizer(args, info)
    stem, raw = session.run_folder(f"{session.arm}-{protocol.name}")
    cmd = shlex.split(args.client_cmd) if args.client_cmd else CLIENT
    env = _client_env(tokenizer)

    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    n = len(protocol.points)
    points: list[dict] = []
    server_args = None
    started = time.monotonic()

    def step(progress: Progress, task, text: str) -> None:
        progress.update(task, description=text)
        if not console.is_terminal:  # logs (docker, ansible) get no live bar: one plain line per step
            done = progress.tasks[0].completed
            elapsed = time.monotonic() - started
            eta = f"{elapsed / done * (n * runs - done):.0f} s" if done else "unknown"
            console.print(f"[bench] {text}: elapsed {elapsed:.0f} s, ETA {eta}", markup=False, soft_wrap=True)

    recorder = telemetry.Recorder(raw / "telemetry.csv").start()
    hung: str | None = None
    unchecked = False  # a measured run whose server counter could not be read
    # (logs, docker, ansible: no bar, whose last frame would run into the next line; step() prints instead)
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as progress:
        task = progress.add_task("serving benchmark", total=n * runs)
        for i, point in enumerate(protocol.points, 1):
            folder = raw / point.label
            folder.mkdir()
            where_text = f"point {i}/{n} ({point.input_len}/{point.output_len}, C{point.concurrency})"
            if hung:
                points.append(summarize_point(point, [], runs, f"not run: {hung}", status="missing"))
                progress.advance(task, runs)
                continue
            common = dict(base_url=base_url, tokenizer=tokenizer, dataset=dataset, dataset_path=dataset_path)
            error, status, http_errors = None, None, {}

            def limited(outcome: bounded.Outcome, what: str, label: str = point.label) -> str | None:
                """The point's error when a limit stopped the client (and the bench stops too)."""
                nonlocal status, hung
                if outcome.status == "exited":
                    return None
                status = "hung" if outcome.status == "stalled" else "timed out"
                hung = session.limit_line(
                    f"bench {label} {what}", outcome, protocol.request_timeout_s, protocol.run_timeout_s
                )
                return hung

            if protocol.warmup:
                step(progress, task, f"{where_text} warm-up")
                with access.private_output(folder / "warmup.jsonl") as written:
                    argv = client_argv(
                        protocol, point, **common, output_file=written,
                        num_prompts=point.concurrency, tag=f"kdakit:{stem}:{point.label}:warmup",
                        model=args.model,
                    )  # fmt: skip
                    outcome = _run_client(cmd, argv, folder / "warmup.log", protocol, env)
                error = limited(outcome, "warm-up")
                if error is None and not outcome.ok:
                    http_errors = warmup_http_errors(folder)
                    codes = ", ".join(f"HTTP {c} x{n}" for c, n in sorted(http_errors.items()))
                    error = f"warm-up failed{f' ({codes})' if codes else ''} (see {point.label}/warmup.log)"
            point_runs: list[dict] = []
            for j in range(1, runs + 1):
                if error:
                    break
                step(progress, task, f"{where_text} run {j}/{runs}")
                jsonl = folder / f"run{j}.jsonl"
                # the client's JSONL copies /server_info, keys included: written privately, lands scrubbed
                with access.private_output(jsonl) as written:
                    argv = client_argv(
                        protocol, point, **common, output_file=written, num_prompts=point.num_prompts,
                        tag=f"kdakit:{stem}:{point.label}:run{j}", model=args.model,
                    )  # fmt: skip
                    with session.measured(recorder, f"{point.label} run {j}") as window:
                        outcome = _run_client(cmd, argv, folder / f"run{j}.log", protocol, env)
                session.scrub(folder)  # (its log, should the client ever print them)
                error = limited(outcome, f"run {j}")
                if error:
                    break  # (a hung server's counter would only keep the run waiting)
                requests_seen = window.check(point.num_prompts + CLIENT_WARMUP_REQUESTS)
                if requests_seen["foreign"]:
                    error = session.foreign_line(
                        f"{point.input_len}/{point.output_len} C{point.concurrency} run {j}",
                        requests_seen["foreign"],
                    )
                    print(f"[bench] {error}", file=sys.stderr, flush=True)
                    break
                unchecked = unchecked or requests_seen["server"] is None
                try:
                    parsed = parse_client_output(jsonl, point.num_prompts)
                    if outcome.code != 0:
                        raise RunFailed(f"client exited {outcome.code}", parsed["http_errors"])
                except RunFailed as exc:
                    error = f"run {j}: {exc} (see {point.label}/run{j}.log)"
                    http_errors = exc.http_errors
                    break
                server_info = access.redact(parsed.pop("server_info"))
                parsed["requests"] = requests_seen
                if server_args is None and isinstance(server_info, dict):
                    server_args = server_info
                parsed["index"] = j
                parsed["raw_file"] = f"{stem}/{point.label}/run{j}.jsonl"
                parsed["flushed"] = protocol.flush_cache
                point_runs.append(parsed)
                progress.advance(task)
            summary = summarize_point(point, point_runs, runs, error, status)
            summary["flush_cache"] = protocol.flush_cache
            if http_errors:
                summary["http_errors"] = http_errors
            progress.advance(task, runs - len(point_runs))
            points.append(summary)
            if summary["status"] == "ok":
                values = ", ".join(f"{r['output_throughput']:.2f}" for r in point_runs)
                accept = summary["accept_length"]
                accept_text = f", accept length {accept:.3f}" if accept is not None else ""
                progress.console.print(
                    f"{where_text}: {summary['median_output_throughput']:.2f} output tok/s "
                    f"(median of {values}){accept_text}",
                    markup=False,
                    soft_wrap=True,
                )
            else:
                progress.console.print(
                    f"{where_text}: {summary['status'].upper()}: {error}", style="red", markup=False,
                    soft_wrap=True,
                )  # fmt: skip
    tel = recorder.stop()
    if hung:
        print(f"[bench] {hung}", file=sys.stderr)
    for line in tel.get("warnings", []):
        print(f"[bench] telemetry warning: {line}", file=sys.stderr)

    notes = [
        f"client python -m sglang.benchmark.serving, backend {protocol.backend}, source {protocol.source}"
    ]
    if any(run.get("flushed") for p in points for run in p["runs"]):
        notes.append("prefix cache flushed after each client warm-up, before every measured run")
    if protocol.server_env:
        settings = ", ".join(server_env_lines(protocol.name, protocols_file))
        notes.append(f"server environment of the protocol: {settings} (passed to the server by the deploy)")
    if dataset == "random-ids":
        notes.append(RANDOM_IDS_NOTE)
    if unchecked:
        notes.append(integrity.UNCHECKED_NOTE)
    if hung:
        notes.append(f"partial: {hung}; later points not run")
    notes += tel.get("warnings", [])
    mine = re.compile(rf"{re.escape(session.arm)}-{re.escape(protocol.name)}(-\d+)?\.result\.json")
    previous = sum(1 for f in out.iterdir() if mine.fullmatch(f.name))
    metrics = {
        "dataset": dataset
        if dataset == "random-ids"
        else f"random (ShareGPT text: {Path(dataset_path).name})",
        "backend": protocol.backend,
        "runs_per_point": runs,
        "repeat_index": previous + 1,  # the records of this arm and protocol already in this folder, plus one
        **({"visit": args.visit} if args.visit else {}),
        "protocol_definition": protocol_definition(protocol, protocols_file),
        "repeats_planned": protocol.repeats,
        "flush_cache": protocol.flush_cache,
        "server_env": dict(protocol.server_env),
        "request_timeout_s": protocol.request_timeout_s,
        "run_timeout_s": protocol.run_timeout_s,
        "partial": hung is not None,
        "server_args": server_args if server_args is not None else info,
        "points": points,
        "telemetry": tel,
    }
    artifacts = [stem] + ([f"{stem}/{tel['file']}"] if tel.get("file") else [])
    path = session.write(stem, protocol.name, metrics, notes, artifacts)
    failed = [i for i, p in enumerate(points, 1) if p["status"] != "ok"]
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
        path = Path(sys.argv[3]) if len(sys.argv) == 4 and sys.argv[3] else PROTOCOLS_FILE
        print(json.dumps(server_env_lines(sys.argv[2], path)))
    except UsageError as exc:
        sys.exit(f"kdakit bench: error: {exc}")
