#!/usr/bin/env python3
"""Wait until a server's /health answers 200, failing at once when its container (or, with --pid, its
process: Slurm's pyxis runtime) stops running.

Standard library only: it runs on the GPU host with the host's python3. The container state comes from
the Docker Engine API on a unix socket (no docker CLI needed). The last line printed is the verdict.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 10.0):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def docker_get(docker_host: str, path: str) -> tuple[int, bytes]:
    if not docker_host.startswith("unix://"):
        raise SystemExit(f"only unix:// Docker hosts are supported, got {docker_host}")
    conn = UnixHTTPConnection(docker_host[len("unix://") :])
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def container_state(docker_host: str, name: str) -> dict | None:
    status, body = docker_get(docker_host, f"/containers/{name}/json")
    return json.loads(body)["State"] if status == 200 else None


def last_log_line(docker_host: str, name: str) -> str:
    status, body = docker_get(docker_host, f"/containers/{name}/logs?stdout=1&stderr=1&tail=20")
    if status != 200:
        return ""
    # Multiplexed stream: 8-byte frame headers before each chunk (no TTY).
    text, i = [], 0
    while i + 8 <= len(body):
        size = int.from_bytes(body[i + 4 : i + 8], "big")
        text.append(body[i + 8 : i + 8 + size].decode(errors="replace"))
        i += 8 + size
    lines = [line.strip() for line in "".join(text).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def scrubbed(line: str, env_file: str | None) -> str:
    """line without the env file's values (SGLang logs its keys with its server args at start)."""
    try:
        text = Path(env_file).read_text() if env_file else ""
    except OSError:
        return line
    for value in (row.partition("=")[2].strip() for row in text.splitlines() if "=" in row):
        if len(value) >= 16:  # shorter ones would redact ordinary text; the kit's keys are 43 characters
            line = line.replace(value, "<redacted>")
    return line


def process_state(pid: int) -> dict:
    """The container_state fields for a plain process (a zombie counts as exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return {"Running": False, "ExitCode": "?"}
    return {"Running": fields[0] != "Z", "ExitCode": "?"}


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--docker-host")
    p.add_argument("--container")
    p.add_argument("--pid", type=int, help="the server's process, instead of --docker-host and --container")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--env-file", help="the server's secrets file: its values never reach the printed line")
    args = p.parse_args(argv)
    start = time.monotonic()
    while True:
        waited = time.monotonic() - start
        if args.pid:
            state = process_state(args.pid)
        elif args.container:
            state = container_state(args.docker_host, args.container)
        else:
            state = {"Running": True}  # only the URL to watch
        if state is None:
            print(f"container {args.container} does not exist")
            return 1
        if not state.get("Running"):
            if args.pid:
                print(
                    f"server process {args.pid} exited after {waited:.0f} s before {args.url} answered. "
                    "Fix: read diag/kdakit-sglang.log in the results"
                )
                return 1
            cause = scrubbed(last_log_line(args.docker_host, args.container), args.env_file)
            print(
                f"container {args.container} exited with code {state.get('ExitCode')} after {waited:.0f} s "
                f"before {args.url} answered; last log line: {cause or '(empty)'}. Fix: read "
                f"diag/{args.container}.log in the collected results"
            )
            return 1
        if healthy(args.url):
            print(f"{args.url} answered 200 after {waited:.0f} s")
            return 0
        if waited > args.timeout:
            print(
                f"{args.url} did not answer within {args.timeout:.0f} s while "
                f"{args.container or 'the server'} kept running. "
                f"Fix: read diag/{args.container}.log; raise kdakit_server_ready_timeout for slow model loads"
            )
            return 1
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
