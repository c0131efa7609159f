"""Playbooks: lint-clean (yamllint, ansible-lint --offline, syntax check), and the readiness script's
fail-fast path against a stand-in Docker Engine API on a unix socket (no Docker needed)."""

from __future__ import annotations

import http.server
import json
import os
import re
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
            line = b"boot\nCUDA error: no device (api_key='sk-run-key-0123456789abcdef')\n"
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
    env_file = tmp_path / "server.env"
    env_file.write_text("OPENAI_API_KEY=sk-run-key-0123456789abcdef\n")
    sock = tmp_path / "docker.sock"
    server = _UnixServer(str(sock), _FakeDocker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / "kdakit" / "launch" / "wait_ready.py"),
                "--url",
                "http://127.0.0.1:9/health",
                "--docker-host",
                f"unix://{sock}",
                "--container",
                "srv",
                "--timeout",
                "30",
                "--env-file",
                str(env_file),
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
            "last log line: CUDA error: no device (api_key='<redacted>'). Fix: read diag/srv.log"
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
    # every variable a help text names is shown with its value
    assert "$(" not in out and "ab-h200, roll-up" in out
    b200 = subprocess.run(["make", "--no-print-directory", "help", "SKU=b200"], cwd=REPO, capture_output=True,
                          text=True).stdout  # fmt: skip
    assert "kernels/configs/b200/" in b200


@pytest.mark.parametrize("role", ["gsm8k", "bench"])
def test_measuring_containers_see_the_gpus_for_telemetry(role):
    """The eval and bench containers sample nvidia-smi every second; without the driver's utility
    capability they would record "no telemetry" on every real host. Both roles run common's measure.yml."""
    import yaml

    (include,) = yaml.safe_load((PLAYBOOKS / "roles" / role / "tasks" / "main.yml").read_text())
    assert include["ansible.builtin.include_role"] == {"name": "common", "tasks_from": "measure"}
    assert include["vars"]["kdakit_measure_name"] == role
    tasks = yaml.safe_load((PLAYBOOKS / "roles" / "common" / "tasks" / "measure.yml").read_text())
    runs = [
        t["community.docker.docker_container"]
        for t in tasks
        if t.get("community.docker.docker_container", {}).get("state") == "started"
    ]
    assert runs, f"no container started in roles/{role}"
    for run in runs:
        requests = run.get("device_requests", "")
        assert "'utility'" in requests and "kdakit_use_gpus" in requests, run


BECOME = "{{ kdakit_become | bool }}"
# Modules that write on the host or use its Docker engine: each such task escalates through kdakit_become.
WRITING_MODULES = ("file", "copy", "script", "shell", "command", "slurp", "stat", "find", "fetch")
HOST_WRITERS = (*(f"ansible.builtin.{m}" for m in WRITING_MODULES), "community.docker.")


def become_problems(playbooks: Path = PLAYBOOKS) -> list[str]:
    """Escalation on anything but the tasks that write system paths, or such a task without it."""
    import yaml

    problems = []

    def walk(tasks, where, inherited=None):
        for task in tasks or []:
            become = task.get("become", inherited)
            name = f"{where}: {task.get('name')}"
            for key, value in task.items():
                if (
                    key.endswith(("_tasks", "_role"))
                    and isinstance(value, dict)
                    and "become" in value.get("apply", {})
                ):
                    problems.append(f"{name}: applies become to everything it includes")
            if "block" in task:
                for part in ("block", "rescue", "always"):
                    walk(task.get(part), where, become)
                continue
            writes = any(k.startswith(HOST_WRITERS) for k in task) and task.get("delegate_to") != "localhost"
            if writes and become != BECOME:
                problems.append(f"{name}: writes on the host without become: kdakit_become")
            if not writes and task.get("become", False) is not False:
                problems.append(f"{name}: escalates but writes nothing on the host")

    for path in sorted([*playbooks.glob("roles/*/tasks/*.yml"), *playbooks.glob("tasks/*.yml")]):
        walk(yaml.safe_load(path.read_text()), path.relative_to(playbooks))
    for path in sorted(playbooks.glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if "become" in play:
                problems.append(f"{path.relative_to(playbooks)}: become on a whole play")
            walk(play.get("tasks"), path.relative_to(playbooks))
    for path in sorted(playbooks.glob("inventories/**/*.yml")):
        if "ansible_become" in path.read_text():
            problems.append(
                f"{path.relative_to(playbooks)}: sets ansible_become (kdakit_become is the switch)"
            )
    return problems


def test_become_only_on_the_tasks_that_write_system_paths():
    assert become_problems() == []


@pytest.mark.parametrize(
    ("file", "old", "new"),
    [
        (
            "tasks/step.yml",
            "        tasks_from: \"{{ kdakit_role.tasks_from | default('main') }}\"\n",
            "        tasks_from: \"{{ kdakit_role.tasks_from | default('main') }}\"\n        apply:\n"
            '          become: "{{ kdakit_become | bool }}"\n',
        ),
        (
            "inventories/examples/h200.yml",
            "    ansible_user: ops\n",
            "    ansible_user: ops\n    ansible_become: true\n",
        ),
        ("roles/teardown/tasks/main.yml", '  become: "{{ kdakit_become | bool }}"\n', ""),
        (
            "roles/common/tasks/measure.yml",
            "  register: kdakit_measure_health\n",
            '  register: kdakit_measure_health\n  become: "{{ kdakit_become | bool }}"\n',
        ),
    ],
)
def test_become_in_the_wrong_place_is_caught(tmp_path, file, old, new):
    root = tmp_path / "playbooks"
    shutil.copytree(PLAYBOOKS, root, ignore=shutil.ignore_patterns("*.retry"))
    path = root / file
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))
    assert become_problems(root)


def _render_measure_failure(output: str) -> str:
    """The measuring step's fail message (roles/common/tasks/measure.yml), rendered by Ansible's templar as
    the playbook renders it, for a container that printed output."""
    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    tasks = yaml.safe_load((PLAYBOOKS / "roles" / "common" / "tasks" / "measure.yml").read_text())
    (task,) = [
        t for t in tasks if "ansible.builtin.fail" in t and "kdakit_measure_closing" in t.get("vars", {})
    ]
    defaults = yaml.safe_load((PLAYBOOKS / "roles" / "common" / "defaults" / "main.yml").read_text())
    variables = {
        "kdakit_measure_name": "bench", "kdakit_measure_command": ["bench", "serving"],
        "kdakit_measure_run": {"status": 1, "container": {"Output": output}},
        "kdakit_measure_lines": trust_as_template(defaults["kdakit_measure_lines"]),
        "kdakit_measure_closing": trust_as_template(task["vars"]["kdakit_measure_closing"]),
        "kdakit_results_dir": "/srv/results", "kdakit_run_id": "r1", "inventory_hostname": "h2",
        "kdakit_arm": "helion",
    }  # fmt: skip
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template(task["ansible.builtin.fail"]["msg"]))


def test_a_failed_bench_point_is_one_line_with_its_cause_and_record():
    # what the bench container printed (stderr and stdout together), a progress bar's last frame included
    output = (
        "[bench] point 1/1 (48/12, C2) run 1/1: elapsed 0 s, ETA unknown\n"
        "serving benchmark ━━━━━━━━━━━━━━━━━━━━ 1/1 elapsed 0:00:34 ETA 0:00:00\n"
        "point 1/1 (48/12, C2): FAILED: run 1: client exited 1 (see i48-o12-c2/run1.log)\n"
        "[bench] 0/1 points ok; point 1/1 (48/12, C2): run 1: client exited 1 (see i48-o12-c2/run1.log)"
        " -> /results/bench/helion-smoke.result.json\n"
    )
    assert _render_measure_failure(output) == (
        "bench: kdakit bench serving exited 1: 0/1 points ok; point 1/1 (48/12, C2): run 1: client exited 1"
        " (see i48-o12-c2/run1.log) -> /srv/results/r1/h2/helion/bench/helion-smoke.result.json."
        " Fix: read that record and the logs beside it"
    )


def _render(text: str, variables: dict) -> str:
    """A template of the playbooks, rendered by Ansible's own templar (its Jinja keeps backslashes as they
    are, unlike plain Jinja)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    trusted = {
        k: trust_as_template(v) if isinstance(v, str) and "{{" in v else v for k, v in variables.items()
    }
    return Templar(loader=DataLoader(), variables=trusted).template(trust_as_template(text))


def test_a_host_whose_record_could_not_be_written_names_its_own_file_only():
    import yaml

    tasks = yaml.safe_load((PLAYBOOKS / "tasks" / "summary.yml").read_text())
    (fail,) = [t for t in tasks if "ansible.builtin.fail" in t]
    stderr = [
        "kdakit provenance: h1: cannot write /r/f-b/h1/helion/provenance.json: No space left on device",
        "kdakit provenance: h10: cannot write /r/f-b/h10/helion/provenance.json: No space left on device",
    ]
    for host, outcome, expected_msg in (
        ("h1", "ok", f"teardown ok; {stderr[0]}"),
        ("h2", "failed", "teardown failed: docker down"),
        ("h2", "ok", None),
    ):
        variables = {
            "kdakit_step": "teardown", "kdakit_outcome": outcome, "inventory_hostname": host,
            "kdakit_cause": "docker down" if outcome == "failed" else "",
            "kdakit_recorded": {"rc": 1, "stderr_lines": stderr},
            "kdakit_record_problem": fail["vars"]["kdakit_record_problem"],
        }  # fmt: skip
        fails = _render("{{ " + fail["when"] + " }}", variables)
        assert fails is (expected_msg is not None), (host, outcome)
        if expected_msg:
            assert _render(fail["ansible.builtin.fail"]["msg"], variables) == expected_msg


def test_every_diagnostic_of_a_container_is_scrubbed_as_it_is_written():
    """The server's log and settings hold the run's keys (SGLang logs them at start): the collect role writes
    each through the scrub filter, never to a file that a later pass cleans (a key on disk meanwhile)."""
    import yaml

    tasks = yaml.safe_load((PLAYBOOKS / "roles" / "collect" / "tasks" / "main.yml").read_text())
    (gather,) = [t for t in tasks if "docker inspect" in t["name"]]
    script = gather["ansible.builtin.shell"]["cmd"].replace("\\\n", " ")
    writes = [line for line in script.splitlines() if re.search(r"\b(logs|container inspect)\b", line)]
    assert len(writes) == 2, writes
    for line in writes:
        assert re.search(
            r"\| \{\{ kdakit_collect_scrub \}\} > \{\{ c \| quote \}\}\.(log|inspect\.json)", line
        ), line
    assert "umask 077" in script
