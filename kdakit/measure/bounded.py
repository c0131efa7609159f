"""Run an external measurement tool (lm-eval, SGLang's run_eval, SGLang's benchmark client) with limits.

Two limits, both from the protocol data: `stall_s`, the longest the tool may go without printing anything
once it has printed its first line (every tool here prints a progress line per finished request, so a silent
stretch that long means a request hung; before the first line the tool is still importing), and `total_s`,
the whole run. Either one stops the tool's whole process group; the log keeps what it
wrote, and the caller records the run as hung or timed out instead of waiting on the tools' own hour-long
HTTP timeouts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

from kdakit.facts.errors import UsageError
from kdakit.launch import access


@dataclass(frozen=True)
class Outcome:
    status: str  # "exited" (see code), "stalled" (no output for stall_s), "timed out" (total_s)
    code: int | None
    elapsed_s: float
    silent_s: float  # the longest silent stretch seen

    @property
    def ok(self) -> bool:
        return self.status == "exited" and self.code == 0


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def run_bounded(
    argv: list[str],
    log_path: Path,
    *,
    stall_s: float,
    total_s: float,
    env: dict | None = None,
    cwd: Path | None = None,
    echo: str | None = None,
) -> Outcome:
    """Run argv with stdout+stderr appended to log_path (and echoed to stderr with the prefix `echo`)."""
    started = time.monotonic()
    last: list[float | None] = [None]  # the time of the latest output; None until the first
    longest = [0.0]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
        assert proc.stdout is not None

        def pump() -> None:
            fd = proc.stdout.fileno()
            while chunk := os.read(fd, 65536):
                now = time.monotonic()
                if last[0] is not None:
                    longest[0] = max(longest[0], now - last[0])
                last[0] = now
                log.write(chunk)
                log.flush()
                if echo is not None:
                    text = chunk.decode(errors="replace").replace("\r", "\n")
                    lines = [line for line in text.split("\n") if line.strip()]
                    sys.stderr.write("".join(f"{echo}{line}\n" for line in lines))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        status = "exited"
        while proc.poll() is None:
            now = time.monotonic()
            if last[0] is not None and now - last[0] > stall_s:
                status = "stalled"
            elif now - started > total_s:
                status = "timed out"
            if status != "exited":
                longest[0] = max(longest[0], now - (last[0] or started))
                _stop(proc)
                break
            time.sleep(0.1)
        reader.join(timeout=5)
    return Outcome(status, proc.returncode if status == "exited" else None, time.monotonic() - started,
                   longest[0])  # fmt: skip


def probe(url: str, timeout: float = 5.0) -> str:
    """What a GET of url gives, in words: 'answers', 'HTTP 503', 'refused ...', 'no answer within 5 s'."""
    try:
        request = urllib.request.Request(url, headers=access.auth_headers())
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return "answers" if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            return f"HTTP 401 (the server wants the run's API key in ${access.API_KEY_ENV})"
        return f"HTTP {exc.code}"
    except (TimeoutError, urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return f"no answer within {timeout:g} s"
        return f"refused ({reason})"


def require_server(base_url: str, paths: tuple[str, ...], host: str, timeout: float = 5.0) -> None:
    """Raise one line (UsageError) unless one of the GETs answers: which host asked, URL, what each gave."""
    found = []
    for path in paths:
        state = probe(f"{base_url}{path}", timeout)
        if state == "answers":
            return
        found.append(f"GET {path}: {state}")
    raise UsageError(f"no server answers at {base_url} (from host {host}): {'; '.join(found)}")


def hung_line(what: str, host: str, url: str, outcome: Outcome, stall_s: float, total_s: float) -> str:
    """The one line a user sees when a tool run is stopped by a limit."""
    if outcome.status == "stalled":
        limit = f"no request finished for {stall_s:g} s (request_timeout_s)"
    else:
        limit = f"the run passed its {total_s:g} s limit (run_timeout_s)"
    return f"{what} on host {host}: {limit}; server {url} hung; stopped after {outcome.elapsed_s:.0f} s"


_STATUS_PATTERNS = (
    re.compile(r"Error code: (\d{3})\b"),  # the openai client (run_eval, lm-eval's chat model)
    re.compile(r"\bstatus(?: code)?[=: ]+(\d{3})\b", re.IGNORECASE),
    re.compile(r"\bHTTP(?:/1\.[01])? (\d{3})\b"),
)
_REASONS = {s.phrase: s.value for s in HTTPStatus if s.value >= 400}
# aiohttp puts the reason phrase first in SGLang's benchmark client errors ("Internal Server Error: ...")
_REASON_PATTERN = re.compile(r"(?:^|\")(" + "|".join(re.escape(p) for p in _REASONS) + r"): ")


def http_error_counts(texts: list[str]) -> dict[str, int]:
    """HTTP error statuses (>= 400) mentioned in tool output or per-request errors: {'500': 3}."""
    counts: dict[str, int] = {}
    for text in texts:
        if not text:
            continue
        for line in str(text).splitlines():
            codes = [m for pattern in _STATUS_PATTERNS for m in pattern.findall(line)]
            codes += [str(_REASONS[m]) for m in _REASON_PATTERN.findall(line)]
            for code in set(codes):  # one error per line, however it is spelled
                if int(code) >= 400:
                    counts[code] = counts.get(code, 0) + 1
    return counts
