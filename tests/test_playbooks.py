"""Playbooks: lint-clean (yamllint, ansible-lint --offline, syntax check), and the readiness script's
fail-fast path against a stand-in Docker Engine API on a unix socket (no Docker needed)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLAYBOOKS = REPO / "playbooks"
BIN = Path(sys.executable).parent
STEPS = ("preflight", "deploy", "eval-gsm8k", "bench", "collect", "teardown", "interrupted", "site")


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} not installed (pip install -e '.[controller]')")
    return str(path)


def _env() -> dict[str, str]:
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(PLAYBOOKS / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}:{os.environ['PATH']}",
    )


def test_yamllint_clean():
    proc = subprocess.run(
        [_tool("yamllint"), "-s", "-f", "parsable", "-c", str(PLAYBOOKS / ".yamllint"), str(PLAYBOOKS)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout


def test_ansible_lint_offline_production_profile():
    proc = subprocess.run(
        [_tool("ansible-lint"), "--offline", "--nocolor", "-q"],
        cwd=PLAYBOOKS,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("step", STEPS)
def test_syntax_check(step):
    proc = subprocess.run(
        [_tool("ansible-playbook"), "--syntax-check", str(PLAYBOOKS / f"{step}.yml")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_role_variable_is_documented():
    """Each kdakit_* variable a role's tasks read is defined in some role's defaults/main.yml or, for the
    site's deployment facts, in group_vars/all.yml."""
    import re

    defined = set()
    for defaults in [*PLAYBOOKS.glob("roles/*/defaults/main.yml"), PLAYBOOKS / "group_vars" / "all.yml"]:
        defined |= set(re.findall(r"^(kdakit_\w+):", defaults.read_text(), re.M))
    used = set()
    for tasks in list(PLAYBOOKS.glob("roles/*/tasks/*.yml")) + list(PLAYBOOKS.glob("tasks/*.yml")):
        used |= set(re.findall(r"\b(kdakit_\w+)\b", tasks.read_text()))
    registered = set()
    for tasks in list(PLAYBOOKS.glob("roles/*/tasks/*.yml")) + list(PLAYBOOKS.glob("tasks/*.yml")):
        registered |= set(re.findall(r"register: (kdakit_\w+)", tasks.read_text()))
        registered |= set(re.findall(r"^\s+(kdakit_\w+):", tasks.read_text(), re.M))  # set_fact / vars
        registered |= set(re.findall(r"loop_var: (kdakit_\w+)", tasks.read_text()))
    play_vars = {"kdakit_step", "kdakit_step_roles", "kdakit_hosts"}  # set by each step playbook
    missing = sorted(used - defined - registered - play_vars)
    assert not missing, f"variables without a documented default: {missing}"


class _FakeDocker(http.server.BaseHTTPRequestHandler):
    """Answers GET /containers/NAME/json and /logs like the Docker Engine API (multiplexed log frames)."""

    state = {"Running": False, "ExitCode": 3}

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/containers/srv/json"):
            body = json.dumps({"State": self.state}).encode()
        elif self.path.startswith("/containers/srv/logs"):
            line = b"boot\nCUDA error: no device\n"
            body = b"\x02\x00\x00\x00" + len(line).to_bytes(4, "big") + line
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)


def test_wait_ready_fails_fast_with_the_containers_last_log_line(tmp_path):
    sock = tmp_path / "docker.sock"
    server = _UnixServer(str(sock), _FakeDocker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(PLAYBOOKS / "roles/server/files/wait_ready.py"),
                "--url",
                "http://127.0.0.1:9/health",
                "--docker-host",
                f"unix://{sock}",
                "--container",
                "srv",
                "--timeout",
                "30",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 1
    assert (
        proc.stdout.strip()
        .splitlines()[-1]
        .startswith(
            "container srv exited with code 3 after 0 s before http://127.0.0.1:9/health answered; "
            "last log line: CUDA error: no device. Fix: read diag/srv.log"
        )
    )


def test_playbooks_mk_targets_are_listed_by_make_help():
    if not shutil.which("make"):
        pytest.skip("make missing")
    out = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True
    ).stdout
    for target in (
        "deploy-%",
        "eval-gsm8k",
        "bench",
        "collect",
        "teardown",
        "ab-%",
        "lint-playbooks",
    ):
        assert f"  {target} " in out, target


@pytest.mark.parametrize("role", ["gsm8k", "bench"])
def test_measuring_containers_see_the_gpus_for_telemetry(role):
    """The eval and bench containers sample nvidia-smi every second; without the driver's utility
    capability they would record "no telemetry" on every real host."""
    import yaml

    tasks = yaml.safe_load((PLAYBOOKS / "roles" / role / "tasks" / "main.yml").read_text())
    runs = [
        t["community.docker.docker_container"]
        for t in tasks
        if t.get("community.docker.docker_container", {}).get("state") == "started"
    ]
    assert runs, f"no container started in roles/{role}"
    for run in runs:
        requests = run.get("device_requests", "")
        assert "'utility'" in requests and "kdakit_use_gpus" in requests, run
