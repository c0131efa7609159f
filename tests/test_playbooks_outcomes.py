"""True per-host outcomes through the real playbooks, without Docker or SSH hosts: one host on the local
connection whose preflight fails (no nvidia-smi) and one that cannot be reached (a closed port). Each step's
summary line, what provenance.json keeps (first cause; never upgraded by a later step or `make collect`),
skipped later steps and the A/B roll-up table with its exit status. The same on real SSH hosts with Docker:
tests/test_playbooks_cluster.py and tests/test_faults_cluster.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kdakit.records import provenance
from kdakit.run import facts
from tests.infra import tmpfs

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    if not (BIN / "ansible-playbook").exists():
        pytest.skip("ansible-playbook not installed (pip install -e '.[controller]')")
    work = tmp_path_factory.mktemp("outcomes")
    inventory = {
        "h200": {
            "hosts": {
                "local1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                "gone1": {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_user": "root",
                          "ansible_python_interpreter": "/usr/bin/python3"},
            },
            "vars": {"kdakit_nvidia_smi": str(work / "no-nvidia-smi"), "kdakit_docker_cli": "/bin/false",
                     "kdakit_host_results_root": str(work / "host-results"),
                     "kdakit_host_state_dir": str(work / "state"), "ansible_ssh_common_args":
                     "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5"},
        }
    }  # fmt: skip
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory))
    return work


def needs_ssh() -> None:
    """gone1's line is ssh's own refusal: without an ssh client Ansible only loses the connection."""
    if shutil.which("ssh") is None:
        pytest.skip("ssh missing: install openssh-client (.ci/apt-packages.txt)")


def play(rig, step: str, run_id: str = "r1", arm: str = "helion", *extra: str, results: Path | None = None):
    playbook = REPO / "playbooks" / f"{step}.yml"
    facts_file = facts.write(facts.extra_vars(results or rig / "results", run_id, arm, hosts="h200"), rig)
    cmd = [str(BIN / "ansible-playbook"), "-i", str(rig / "inventory.yml"), str(playbook),
           "-e", f"@{facts_file}",
           # the host's folders as extra vars: the playbooks' group_vars/all.yml outranks the inventory's
           "-e", f"kdakit_host_results_root={rig / 'host-results'}",
           "-e", f"kdakit_host_state_dir={rig / 'state'}", *extra]  # fmt: skip
    # one connection attempt (ansible.cfg asks for three): the closed port answers at once anyway
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "playbooks" / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_SSH_ARGS="-o ConnectionAttempts=1")  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=REPO)


def lines(proc) -> dict[str, str]:
    found = re.findall(r'^\s*"msg": "((local1|gone1): [a-z0-9-]+ .*)"$', proc.stdout, re.M)
    return {host: line for line, host in found}


def record(rig, host: str, run_id: str = "r1", arm: str = "helion") -> dict:
    return json.loads((rig / "results" / run_id / host / arm / "provenance.json").read_text())


def test_outcomes_are_true_and_never_upgraded(rig):
    needs_ssh()
    deploy = play(rig, "deploy")
    assert deploy.returncode != 0
    got = lines(deploy)
    assert got["local1"].startswith("local1: deploy failed (preflight: local1: gpus: "), got
    assert "failed or is missing" in got["local1"]
    assert re.fullmatch(
        r"gone1: deploy unreachable \(ssh: connect to host 127\.0\.0\.1 port 9: .+\)", got["gone1"]
    )
    first = record(rig, "local1")
    assert first["outcome"] == "failed" and first["step"] == "deploy" and "gpus" in first["cause"]
    assert record(rig, "gone1")["outcome"] == "unreachable"

    gsm8k = play(rig, "eval-gsm8k")
    assert gsm8k.returncode != 0
    assert lines(gsm8k) == {
        "local1": "local1: eval-gsm8k skipped (after an earlier failure: deploy failed)",
        "gone1": "gone1: eval-gsm8k skipped (after an earlier failure: deploy unreachable)",
    }
    collect = play(rig, "collect")
    assert lines(collect)["local1"] == "local1: collect ok"
    after = record(rig, "local1")
    # collect added its facts, and the host is still failed with the first cause
    assert after["outcome"] == "failed" and after["cause"] == first["cause"] and after["step"] == "deploy"
    assert after["image"] == "kdakit:h200" and after["steps"]["collect"]["outcome"] == "ok"

    cmd = [sys.executable, "-m", "kdakit.records.provenance", "rollup", str(rig / "results" / "r1")]
    rollup = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert rollup.returncode == 1
    rows = [r.split(None, 4) for r in rollup.stdout.splitlines()[1:-1]]
    assert [r[:4] for r in rows] == [
        ["gone1", "helion", "deploy", "unreachable"], ["gone1", "helion", "eval-gsm8k", "skipped"],
        ["gone1", "helion", "collect", "unreachable"],
        ["local1", "helion", "deploy", "failed"], ["local1", "helion", "eval-gsm8k", "skipped"],
        ["local1", "helion", "collect", "ok"],
    ]  # fmt: skip
    assert rollup.stdout.splitlines()[-1] == "rollout: 5 of 6 steps not ok"


def test_check_mode_records_nothing(rig):
    dry = play(rig, "collect", "dry", "helion", "--check")
    assert "local1: collect ok" in dry.stdout
    assert not (rig / "results" / "dry").exists()
    assert not (rig / "host-results" / "dry").exists()


def test_record_step_keeps_the_first_failure():
    r = provenance.record_step({}, "deploy", "ok")
    r = provenance.record_step(r, "bench", "failed", "bench: exited 1")
    r = provenance.record_step(r, "collect", "ok")
    r = provenance.record_step(r, "teardown", "unreachable", "ssh: timeout")
    assert (r["outcome"], r["step"], r["cause"]) == ("failed", "bench", "bench: exited 1")
    assert provenance.earlier_failure(r).startswith("bench failed")
    with pytest.raises(ValueError):
        provenance.record_step(r, "x", "fine")


FAKE_DOCKER = """#!/bin/sh
# docker as the collect role calls it: the server's log and settings echo the env file's keys, as SGLang's do
env_file={env_file}
case "$1" in
  logs) echo "server_args=ServerArgs(api_key='$(sed -n 's/^OPENAI_API_KEY=//p' $env_file)')"
        echo "admin key $(sed -n 's/^KDAKIT_ADMIN_API_KEY=//p' $env_file) in use" ;;
  container) printf '[{{"Args": ["--api-key", "%s"]}}]\\n' "$(sed -n 's/^OPENAI_API_KEY=//p' $env_file)" ;;
  *) exit 1 ;;
esac
"""


def test_collected_diagnostics_are_scrubbed_as_written_and_private(rig):
    """The collect role writes the server's log and settings through the scrub filter, 0600 in 0700 folders,
    on the host and on the controller; no file of the run holds a key (tests/infra/keyscan.py)."""
    from kdakit.launch import access
    from tests.infra import keyscan

    state = rig / "state"
    state.mkdir(exist_ok=True)
    env_file = state / "kdakit-sglang.env"
    env_file.write_text(access.env_file_lines("keys"))
    env_file.chmod(0o600)
    docker = rig / "fake-docker"
    docker.write_text(FAKE_DOCKER.format(env_file=env_file))
    docker.chmod(0o755)
    ledger = keyscan.Ledger()
    ledger.note(state)
    assert len(ledger.secrets) == 2
    collect = play(rig, "collect", "keys", "helion", "-e", f"kdakit_docker_cli={docker}", "--limit", "local1")
    assert lines(collect)["local1"] == "local1: collect ok", collect.stdout[-3000:]
    for root in (rig / "host-results" / "keys" / "helion", rig / "results" / "keys" / "local1" / "helion"):
        log = (root / "diag" / "kdakit-sglang.log").read_text()
        assert log.startswith("server_args=ServerArgs(api_key='<redacted>')"), log
        assert json.loads((root / "diag" / "kdakit-sglang.inspect.json").read_text()) == [
            {"Args": ["--api-key", "<redacted>"]}
        ]
        assert (root / "diag").stat().st_mode & 0o777 == 0o700
        for path in (root / "diag").iterdir():
            assert path.stat().st_mode & 0o777 == 0o600, path
    ledger.assert_clean(rig / "host-results", rig / "results")
    env_file.unlink()


def test_the_key_scan_names_a_file_a_key_was_written_to(tmp_path):
    from kdakit.launch import access
    from tests.infra import keyscan

    state, run = tmp_path / "host" / "state", tmp_path / "results" / "r1" / "h1" / "helion" / "diag"
    state.mkdir(parents=True)
    run.mkdir(parents=True)
    (state / "kdakit-sglang.env").write_text(access.env_file_lines("r1"))
    ledger = keyscan.Ledger()
    ledger.note(state)
    api_key = access.parse_env_text((state / "kdakit-sglang.env").read_text())[access.API_KEY_ENV]
    (run / "kdakit-sglang.log").write_text("api_key=<redacted>\n")
    assert ledger.assert_clean(tmp_path / "results", tmp_path / "host") == 2  # the log and the env file
    (run / "kdakit-sglang.inspect.json").write_text(f'["--api-key", "{api_key}"]')  # an unscrubbed write
    with pytest.raises(
        AssertionError, match=r"kdakit-sglang\.inspect\.json \(mode 0644\) holds the OPENAI_API_KEY"
    ):
        ledger.assert_clean(tmp_path / "results", tmp_path / "host")


def test_a_teardown_that_cannot_reach_a_host_says_what_stays_there(rig):
    needs_ssh()
    down = play(rig, "teardown", "gone")
    assert down.returncode != 0
    line = lines(down)["gone1"]
    assert re.fullmatch(
        # the cause as ssh or Ansible words it (the refusal, or "could not be sent ... over SSH")
        r"gone1: teardown unreachable \("
        r"(ssh: connect to host 127\.0\.0\.1 port 9: |[^;]*'127\.0\.0\.1'[^;]*SSH)[^;]*; "
        r"its server and key file stay on gone1: run make teardown again when it is back\)",
        line,
    ), line


def test_an_interrupted_bench_leaves_a_record_saying_so(rig, tmp_path):
    # what playbooks/run-step.sh runs after SIGINT during `make bench` (a state folder no other run locked)
    signal = ("-e", "kdakit_interrupt_signal=SIGINT", "-e", f"kdakit_host_state_dir={tmp_path}")
    play(rig, "interrupted", "cut", "helion", "-e", "kdakit_step=bench", *signal, "--limit", "local1")
    record = json.loads((rig / "host-results" / "cut" / "helion" / "bench" / "interrupted.json").read_text())
    assert {k: record[k] for k in ("kind", "step", "signal", "run_id", "host", "arm")} == {
        "kind": "interrupted", "step": "bench", "signal": "SIGINT", "run_id": "cut", "host": "local1",
        "arm": "helion",
    }  # fmt: skip
    assert record["note"].startswith(
        "bench was interrupted (SIGINT on the controller) and its containers removed"
    )


def test_staged_image_tarballs_stay_for_a_redeploy_until_their_keep_days_or_purge(tmp_path):
    stage = tmp_path / "images"
    stage.mkdir()
    fresh, old = stage / "kdakit-h200.tar.zst", stage / "kdakit-h200-earlier.tar.zst"
    fresh.write_bytes(b"new")
    old.write_bytes(b"old")
    month_ago = time.time() - 30 * 86400
    os.utime(old, (month_ago, month_ago))
    playbook = tmp_path / "staged.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "roles": ["common"],
        "tasks": [{"ansible.builtin.include_role": {"name": "teardown", "tasks_from": "staged"}}],
    }]))  # fmt: skip
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "playbooks" / "ansible.cfg"),
               ANSIBLE_ROLES_PATH=str(REPO / "playbooks" / "roles"))  # fmt: skip

    def teardown(*extra: str) -> None:
        cmd = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
               "-e", f"kdakit_image_stage_dir={stage}", "-e", "kdakit_become=false",
               "-e", f"ansible_python_interpreter={sys.executable}", *extra]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:]

    teardown()  # the default 14 days: the month-old copy goes, the fresh one stays for a re-deploy
    assert sorted(p.name for p in stage.iterdir()) == ["kdakit-h200.tar.zst"]
    teardown("-e", "kdakit_purge=true")  # make teardown PURGE=1
    assert list(stage.iterdir()) == []


def test_a_read_only_results_folder_stops_collect_with_one_line_per_host(rig, tmp_path):
    with tmpfs.mounted(tmp_path / "results", "size=1m,ro") as results:
        collect = play(rig, "collect", "ro", "helion", "--limit", "local1", results=results)
    assert lines(collect)["local1"] == (
        f"local1: collect failed (collect: cannot write {results}/ro/local1/helion: Read-only file system;"
        f" the host's copies stay in local1:{rig}/host-results/ro/helion. Fix: make the results folder"
        " writable (or pass RESULTS=<another folder>) and run make collect again)"
    )
    assert "Unable to create local directories" not in collect.stdout  # no fetch tried, no error per file


def test_a_clean_key_scan_leaves_its_line_for_the_sessions_summary(tmp_path, monkeypatch):
    from tests.infra import images, keyscan

    monkeypatch.setattr(images, "CACHE", tmp_path / "cache")
    monkeypatch.setenv(images.SESSION_ENV, "s1")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_x_cluster.py::test_y (teardown)")
    run = tmp_path / "results" / "r1"
    run.mkdir(parents=True)
    (run / "bench.log").write_text("api_key=<redacted>\n")
    keyscan.check_run_roots(keyscan.Ledger("k" * 32), tmp_path / "results")
    assert keyscan.session_scans() == tmp_path / "cache" / "sessions" / "s1" / "key-scans.txt"
    assert keyscan.session_scans().read_text().splitlines() == [
        "key scan, tests/test_x_cluster.py: 1 secret(s) of its runs, 1 file(s) of its run directories: none"
    ]
