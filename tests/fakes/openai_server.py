#!/usr/bin/env python3
"""A stand-in for an SGLang server: OpenAI-compatible API that answers GSM8K from the true answers.

Python 3 standard library only (it runs in a bare Debian image with python3 and nothing else).

    python3 openai_server.py [--host 127.0.0.1] [--port 30000] [--data test.jsonl]
                             [--error-rate 0.0] [--seed 0] [--model-name llm]
                             [--accept-length 3.5] [--server-arg KEY=VALUE ...]
                             [--token-delay-ms 0] [--fail-at-start] [--log-requests]
                             [--request-log FILE] [--accept-drift 0.0] [--hang-after N]
                             [--error-status CODE --error-every K] [--enable-metrics]
                             [--api-key KEY] [--admin-api-key KEY]
                             [--api-key-env NAME] [--admin-api-key-env NAME]

  --port 0            pick a free port; the first stdout line is always
                      "kdakit-fake-openai listening on http://HOST:PORT"
  --data FILE         GSM8K jsonl ({"question", "answer"} lines, answer ends in "#### N"); default: the kit's
                      evals/data/gsm8k/test.jsonl when present. Unknown prompts get filler text; a prompt
                      that asks for the answer in \\boxed{} (sgl-eval's) gets it there.
  --error-rate R      fraction of questions answered wrong. Question i (its line in --data) is wrong when
                      floor((i+1)*R + phase) > floor(i*R + phase), phase from --seed: every prefix of n
                      questions has floor(n*R + phase) wrong answers, exactly n*R when that is an integer.
  --seed S            picks the phase above and each answer's format (see FORMATS): "#### 1,234",
                      "The answer is $1234.", "#### $1234", reasoning text ending in the bare number,
                      "<think>...#### wrong...</think>\n#### N" (thinking left in the content).
  --accept-length X   each generation request's EAGLE accept length (meta_info.spec_accept_length);
                      /server_info internal_states[0].avg_spec_accept_length is their mean since the last
                      POST /flush_cache (as SGLang's scheduler resets its counters there), or since start.
  --accept-drift D    request n (1-based, every generation endpoint) gets accept length X + D*n, so the
                      mean since a flush differs from the lifetime mean (/fake/stats has both).
  --request-log FILE  one JSON line per generation request and per flush: endpoint, sampling fields
                      (model, temperature, top_p, max_tokens, reasoning_effort, stream), the GSM8K rows of
                      the prompt's last question and of its earlier "Question:" blocks (the shots), how many
                      requests were in flight, its accept length; {"event": "flush"} lines for flushes.
  --hang-after N      generation requests after the N-th are accepted and never answered (a wedged server
                      whose GET endpoints still answer).
  --error-status CODE with --error-every K: every K-th generation request gets HTTP CODE and a JSON error.
  --server-arg K=V    extra server args reported by /server_info (repeatable; V parsed as JSON if it can be).
  --token-delay-ms MS sleep between streamed tokens (0: as fast as possible).
  --fail-at-start     print an error and exit 3 at once (fault tests: a server container that dies).
  --enable-metrics    serve GET /metrics in Prometheus text with SGLang's request counter,
                      sglang:num_requests_total{model_name=...,is_streaming=...}; without it /metrics is 404.
                      A generation request counts when it arrives (SGLang counts it when it finishes; a
                      client that has all its answers sees the same total either way).
  --api-key K, --admin-api-key K
                      SGLang 0.5.23's header contract (sglang/srt/utils/auth.py), re-implemented here: with a
                      key set, every path except /health*, /ready* and /metrics* needs
                      "Authorization: Bearer <api key>" (401 {"error": "Unauthorized"} otherwise); with the
                      admin key also set, the admin paths (ADMIN_PATHS, e.g. /flush_cache) take only
                      "Bearer <admin key>"; with only the api key they take the api key.
  --api-key-env NAME, --admin-api-key-env NAME
                      read the key from environment variable NAME (the CI cluster starts this double in
                      place of `kdakit serve`, which would pass the env file's keys as flags).

Endpoints: GET /health, /health_generate, /metrics, /v1/models, /server_info (alias /get_server_info),
/fake/stats (request counts, flushes, most requests in flight, accept-length means); POST /flush_cache,
POST /v1/chat/completions, /v1/completions (both streaming or not,
"stream_options": {"include_usage": true} honoured) and SGLang's native /generate (text or input_ids,
streaming with cumulative text and meta_info.completion_tokens). Generated "tokens" are whitespace-separated
words; max_tokens / max_completion_tokens / max_new_tokens cap the answer; filler output (benchmark prompts)
is exactly that many words, as with ignore_eos.
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # a C48 client connects at once; the default backlog (5) resets some


DEFAULT_DATA = Path(__file__).resolve().parents[2] / "evals" / "data" / "gsm8k" / "test.jsonl"
FILLER_WORD = "token "  # one word = one "token"; trailing space so streamed pieces concatenate

# Paths SGLang 0.5.23 marks AuthLevel.ADMIN_OPTIONAL (those the double has, and some it only refuses).
ADMIN_PATHS = (
    "/flush_cache",
    "/start_profile",
    "/stop_profile",
    "/update_weights_from_disk",
    "/abort_request",
    "/pause_generation",
    "/continue_generation",
    "/set_internal_state",
)
# Prefixes SGLang leaves open whatever keys are set (probes and Prometheus scraping).
OPEN_PREFIXES = ("/health", "/ready", "/metrics")
REQUEST_COUNTER = "sglang:num_requests_total"


def bearer_matches(header: str | None, key: str) -> bool:
    scheme, _, token = (header or "").partition(" ")
    return scheme.lower() == "bearer" and bool(token) and hmac.compare_digest(token, key)


def auth_status(method: str, path: str, header: str | None, api_key: str | None, admin_key: str | None):
    """200 when SGLang 0.5.23 would let the request through, else its refusal status (401)."""
    if method == "OPTIONS" or path.startswith(OPEN_PREFIXES):
        return 200
    if path in ADMIN_PATHS and (admin_key or api_key):
        return 200 if bearer_matches(header, admin_key or api_key) else 401
    if api_key:
        return 200 if bearer_matches(header, api_key) else 401
    return 200


# name -> template; {v} is the number as printed by the format's own rule (see render_answer).
FORMATS = ("hash", "hash_commas", "dollar_period", "hash_dollar", "reasoning_plain", "think_block")
# A prompt that asks for the answer in \boxed{} (sgl-eval's math prompt) gets it there, nothing else.
BOXED_ASKED = "\\boxed{"


def is_wrong(index: int, error_rate: float, seed: int) -> bool:
    phase = random.Random(f"phase:{seed}").random()
    return math.floor((index + 1) * error_rate + phase) > math.floor(index * error_rate + phase)


def answer_format(index: int, seed: int) -> str:
    return random.Random(f"format:{seed}:{index}").choice(FORMATS)


def parse_number(answer: str) -> int | float:
    final = answer.rsplit("####", 1)[-1].strip().replace(",", "")
    value = float(final)
    return int(value) if value.is_integer() else value


def render_answer(value: int | float, fmt: str) -> str:
    plain = str(value)
    commas = f"{value:,}"
    if fmt == "hash":
        return f"Let me work through it step by step.\nThe numbers give the result.\n#### {plain}"
    if fmt == "hash_commas":
        return f"Adding up every part gives the total.\n#### {commas}"
    if fmt == "dollar_period":
        return f"First I compute each part, then combine them. The answer is ${commas}."
    if fmt == "hash_dollar":
        return f"Computing the amount.\n#### ${plain}"
    if fmt == "think_block":  # a reasoning model served without a reasoning parser: the thinking stays in
        return f"<think>A first guess: #### {value + 3}. Check it again.</think>\n#### {plain}"
    if fmt == "reasoning_plain":
        return f"Step 1: read the problem. Step 2: combine 2 quantities.\nSo the final answer is {plain}"
    raise ValueError(fmt)


def _normalize(text: str) -> str:
    return " ".join(text.split())


class Gsm8kOracle:
    def __init__(self, path: Path | None, error_rate: float, seed: int):
        self.error_rate, self.seed = error_rate, seed
        self.index: dict[str, int] = {}
        self.values: list[int | float] = []
        if path is not None and path.exists():
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
                if line.strip():
                    row = json.loads(line)
                    self.index.setdefault(_normalize(row["question"]), i)
                    self.values.append(parse_number(row["answer"]))

    def find(self, prompt: str) -> int | None:
        """The test index of the LAST question in a (few-shot) prompt, if it is a known one."""
        if "Question:" in prompt:
            tail = prompt.rsplit("Question:", 1)[1]
            tail = re.split(r"\n\s*Answer:", tail, maxsplit=1)[0]
            hit = self.index.get(_normalize(tail))
            if hit is not None:
                return hit
        flat = _normalize(prompt)
        best, best_pos = None, -1
        for question, i in self.index.items():
            pos = flat.rfind(question)
            if pos > best_pos:
                best, best_pos = i, pos
        return best

    def rows(self, prompt: str) -> list[int | None]:
        """The test row of every "Question:" block in the prompt, in order (None: not a test question)."""
        found = []
        for block in prompt.split("Question:")[1:]:
            question = re.split(r"\n\s*Answer:", block, maxsplit=1)[0]
            found.append(self.index.get(_normalize(question)))
        return found

    def answer(self, prompt: str) -> str | None:
        i = self.find(prompt)
        if i is None:
            return None
        value = self.values[i]
        if is_wrong(i, self.error_rate, self.seed):
            value = value + 1 + i % 7
        if BOXED_ASKED in prompt:  # a model that follows sgl-eval's instruction
            return f"Working through the problem gives {value}.\n\\boxed{{{value}}}"
        return render_answer(value, answer_format(i, self.seed))


class FakeState:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        data = Path(args.data) if args.data else (DEFAULT_DATA if DEFAULT_DATA.exists() else None)
        self.oracle = Gsm8kOracle(data, args.error_rate, args.seed)
        self.lock = threading.Lock()
        self.stats: dict[str, int] = {}
        self.generation_requests = 0
        self.finished_by_stream = {"false": 0, "true": 0}  # /metrics: sglang:num_requests_total
        self.api_key = args.api_key or (os.environ.get(args.api_key_env) if args.api_key_env else None)
        self.admin_key = args.admin_api_key or (
            os.environ.get(args.admin_api_key_env) if args.admin_api_key_env else None
        )
        self.in_flight = 0
        self.max_in_flight = 0
        self.flushes = 0
        self.accept_all: list[float] = []
        self.accept_since_flush: list[float] = []
        self.stop = threading.Event()
        self.server_args = {
            "model_path": f"/models/{args.model_name}",
            "served_model_name": args.model_name,
            "tp_size": 4,
            "speculative_algorithm": "EAGLE",
            "speculative_num_steps": 5,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 6,
            "random_seed": 42,
        }
        for item in args.server_arg:
            key, _, raw = item.partition("=")
            try:
                self.server_args[key] = json.loads(raw)
            except json.JSONDecodeError:
                self.server_args[key] = raw

    def count(self, path: str) -> None:
        with self.lock:
            self.stats[path] = self.stats.get(path, 0) + 1

    def begin(self, endpoint: str, body: dict, prompt: str) -> tuple[int, float]:
        """Count a generation request in: (its number, its accept length); log it when asked."""
        with self.lock:
            self.generation_requests += 1
            self.finished_by_stream[str(bool(body.get("stream"))).lower()] += 1
            n = self.generation_requests
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            accept = self.args.accept_length + self.args.accept_drift * n
            self.accept_all.append(accept)
            self.accept_since_flush.append(accept)
            in_flight = self.in_flight
        if self.args.request_log:
            params = body.get("sampling_params") or body
            rows = self.oracle.rows(prompt)
            entry = {
                "n": n, "endpoint": endpoint, "model": body.get("model"),
                "temperature": params.get("temperature"), "top_p": params.get("top_p"),
                "max_tokens": _max_tokens(params, "max_completion_tokens", "max_tokens", "max_new_tokens"),
                "reasoning_effort": body.get("reasoning_effort"), "stream": bool(body.get("stream")),
                "messages": [m.get("role") for m in body.get("messages", [])],
                "question_row": rows[-1] if rows else self.oracle.find(prompt), "shot_rows": rows[:-1],
                "in_flight": in_flight, "accept_length": accept,
            }  # fmt: skip
            self.log(entry)
        return n, accept

    def end(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def log(self, entry: dict) -> None:
        with self.lock, open(self.args.request_log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def flush(self) -> None:
        with self.lock:
            self.flushes += 1
            self.accept_since_flush = []
        if self.args.request_log:
            self.log({"event": "flush"})

    def avg_accept(self) -> float:
        with self.lock:
            window = self.accept_since_flush
            return sum(window) / len(window) if window else self.args.accept_length

    def completion_words(self, prompt: str, max_tokens: int | None) -> tuple[list[str], str]:
        """(words to emit, finish_reason)."""
        text = self.oracle.answer(prompt)
        if text is None:
            n = max_tokens if max_tokens is not None else 16
            return [FILLER_WORD] * n, "length"
        words = re.findall(r"\S+\s*", text)
        if max_tokens is not None and len(words) > max_tokens:
            return words[:max_tokens], "length"
        return words, "stop"


def _prompt_text(prompt: object) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        if prompt and all(isinstance(p, int) for p in prompt):
            return " ".join(map(str, prompt))
        return _prompt_text(prompt[-1]) if prompt else ""
    return ""


def _chat_text(messages: list) -> str:
    for message in reversed(messages or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
            return content or ""
    return ""


def _max_tokens(body: dict, *keys: str) -> int | None:
    for key in keys:
        if body.get(key) is not None:
            return int(body[key])
    return None


def _join(words: list[str]) -> str:
    return "".join(words).rstrip()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: FakeState

    def log_message(self, fmt, *args):  # quiet unless asked
        if self.state.args.log_requests:
            sys.stderr.write("fake-openai: " + fmt % args + "\n")

    # helpers
    def _json(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        return json.loads(raw or b"{}")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, payload: object) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _pause(self) -> None:
        if self.state.args.token_delay_ms > 0:
            time.sleep(self.state.args.token_delay_ms / 1000.0)

    def _refused(self, path: str) -> bool:
        st = self.state
        status = auth_status(self.command, path, self.headers.get("Authorization"), st.api_key, st.admin_key)
        if status != 200:
            # The body must be read off a kept-alive connection before answering.
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self._json(status, {"error": "Unauthorized" if status == 401 else "Forbidden"})
            st.count(f"refused {path}")
            return True
        return False

    def _metrics(self) -> None:
        st = self.state
        lines = [f"# HELP {REQUEST_COUNTER} Number of requests processed."]
        lines.append(f"# TYPE {REQUEST_COUNTER} counter")
        with st.lock:
            for streaming, n in st.finished_by_stream.items():
                labels = f'model_name="{st.args.model_name}",is_streaming="{streaming}"'
                lines.append(f"{REQUEST_COUNTER}{{{labels}}} {float(n)}")
        data = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # routes
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if self._refused(path):
            return
        self.state.count(path)
        if path in ("/health", "/health_generate"):
            self._json(200, {"status": "ok"})
        elif path == "/metrics" and self.state.args.enable_metrics:
            self._metrics()
        elif path == "/v1/models":
            name = self.state.args.model_name
            self._json(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "fake"}]})
        elif path in ("/server_info", "/get_server_info"):
            info = dict(self.state.server_args)
            info["version"] = "fake"
            info["internal_states"] = [{"avg_spec_accept_length": self.state.avg_accept()}]
            self._json(200, info)
        elif path == "/fake/stats":
            st = self.state
            with st.lock:
                stats = dict(st.stats, flushes=st.flushes, max_in_flight=st.max_in_flight)
                stats["generation_requests"] = st.generation_requests
                lifetime = sum(st.accept_all) / len(st.accept_all) if st.accept_all else None
                stats["accept_lifetime_mean"] = lifetime
            self._json(200, stats)
        else:
            self._json(404, {"error": {"message": f"no route {path}"}})

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        if self._refused(path):
            return
        self.state.count(path)
        try:
            body = self._body()
        except json.JSONDecodeError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        if path == "/flush_cache":
            self.state.flush()
            self._json(200, {"success": True, "message": "Cache flushed."})
        elif path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            self._generation(path, body)
        else:
            self._json(404, {"error": {"message": f"no route {path}"}})

    def _generation(self, path: str, body: dict) -> None:
        chat = path == "/v1/chat/completions"
        if path == "/generate":
            raw = body.get("text") if body.get("text") is not None else body.get("input_ids", "")
            prompt = _prompt_text(raw)
        else:
            prompt = _chat_text(body.get("messages", [])) if chat else _prompt_text(body.get("prompt", ""))
        n, accept = self.state.begin(path, body, prompt)
        try:
            args = self.state.args
            if args.hang_after is not None and n > args.hang_after:
                self.state.stop.wait()  # accepted, never answered
                return
            if args.error_status and args.error_every and n % args.error_every == 0:
                self._json(args.error_status, {"error": {"message": f"fake error on request {n}"}})
                return
            if path == "/generate":
                self._generate(body, accept)
            else:
                self._openai(body, chat, prompt)
        finally:
            self.state.end()

    def _openai(self, body: dict, chat: bool, prompt: str) -> None:
        limit = _max_tokens(body, "max_completion_tokens", "max_tokens")
        words, finish = self.state.completion_words(prompt, limit)
        prompt_tokens = len(prompt.split())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(words)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        rid = f"fake-{uuid.uuid4().hex[:12]}"
        model = body.get("model") or self.state.args.model_name
        kind = "chat.completion" if chat else "text_completion"
        if not body.get("stream"):
            text = _join(words)
            choice = {"index": 0, "finish_reason": finish}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            self._json(200, {"id": rid, "object": kind, "model": model, "choices": [choice], "usage": usage})
            return
        self._start_stream()
        kind += ".chunk" if chat else ""
        for word in words:
            self._pause()
            if chat:
                choice = {"index": 0, "delta": {"content": word}, "finish_reason": None}
            else:
                choice = {"index": 0, "text": word, "finish_reason": None}
            self._event({"id": rid, "object": kind, "model": model, "choices": [choice]})
        last = {"index": 0, "finish_reason": finish}
        last.update({"delta": {}} if chat else {"text": ""})
        self._event({"id": rid, "object": kind, "model": model, "choices": [last]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({"id": rid, "object": kind, "model": model, "choices": [], "usage": usage})
        self._event("[DONE]")

    def _generate(self, body: dict, accept: float) -> None:
        prompt = body.get("text") if body.get("text") is not None else body.get("input_ids", "")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            self._json(400, {"error": {"message": "batched /generate is not supported by the fake"}})
            return
        params = body.get("sampling_params") or {}
        limit = _max_tokens(params, "max_new_tokens")
        words, finish = self.state.completion_words(_prompt_text(prompt), limit)
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        rid = f"fake-{uuid.uuid4().hex[:12]}"

        def meta(done: int, final: bool) -> dict:
            info = {"id": rid, "prompt_tokens": prompt_tokens, "completion_tokens": done, "cached_tokens": 0}
            info["spec_accept_length"] = accept
            info["finish_reason"] = {"type": finish} if final else None
            return info

        if not body.get("stream"):
            self._json(200, {"text": _join(words), "meta_info": meta(len(words), True)})
            return
        self._start_stream()
        for n in range(1, len(words) + 1):
            self._pause()
            self._event({"text": _join(words[:n]), "meta_info": meta(n, n == len(words))})
        self._event("[DONE]")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="OpenAI-compatible test double for an SGLang server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--data", default=None)
    p.add_argument("--error-rate", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-name", default="llm")
    p.add_argument("--accept-length", type=float, default=3.5)
    p.add_argument("--server-arg", action="append", default=[])
    p.add_argument("--token-delay-ms", type=float, default=0.0)
    p.add_argument("--fail-at-start", action="store_true")
    p.add_argument("--log-requests", action="store_true")
    p.add_argument("--request-log", default=None)
    p.add_argument("--accept-drift", type=float, default=0.0)
    p.add_argument("--hang-after", type=int, default=None)
    p.add_argument("--error-status", type=int, default=None)
    p.add_argument("--error-every", type=int, default=None)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--api-key", default=None)
    p.add_argument("--admin-api-key", default=None)
    p.add_argument("--api-key-env", default=None)
    p.add_argument("--admin-api-key-env", default=None)
    args = p.parse_args(argv)
    if not 0.0 <= args.error_rate <= 1.0:
        p.error("--error-rate must be within [0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.fail_at_start:
        print("fake-openai: failing at start as asked (--fail-at-start)", file=sys.stderr, flush=True)
        return 3
    # As PID 1 in a container SIGTERM has no default action; make `docker stop` end us promptly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Handler.state = FakeState(args)
    server = Server((args.host, args.port), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"kdakit-fake-openai listening on http://{host}:{port}", flush=True)
    loaded = len(Handler.state.oracle.values)
    print(f"fake-openai: {loaded} GSM8K questions loaded", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        Handler.state.stop.set()
        server.server_close()
    return 0


def start_background(*args: str, python: str = sys.executable, timeout: float = 20.0):
    """Start this server in a child process on a free port: (Popen, base URL). Stop it with .terminate()."""
    import subprocess
    import tempfile

    errors = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a chatty server never blocks on it
    proc = subprocess.Popen(
        [python, __file__, "--port", "0", *args], stdout=subprocess.PIPE, stderr=errors, text=True
    )
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline() if proc.stdout else ""
    if "listening on " not in line or time.monotonic() > deadline:
        proc.kill()
        proc.wait()
        errors.seek(0)
        raise RuntimeError(f"fake server did not start: {line!r} {errors.read()[-2000:]}")
    return proc, line.strip().rsplit(" ", 1)[1]


if __name__ == "__main__":
    sys.exit(main())
