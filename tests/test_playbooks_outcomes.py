"""True per-host outcomes through the real playbooks, without Docker or SSH hosts: one host on the local
connection whose preflight fails (no nvidia-smi) and one that cannot be reached (a closed port). Each step's
summary line, what provenance.json keeps (first cause; never upgraded by a later step or `make collect`),
skipped later steps and the A/B roll-up table with its exit status. The same on real SSH hosts with Docker:
tests/test_playbooks_cluster.py and tests/test_faults_cluster.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kdakit.records import provenance
from kdakit.run import facts

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


def play(rig, step: str, run_id: str = "r1", arm: str = "helion", *extra: str) -> subprocess.CompletedProcess:
    playbook = REPO / "playbooks" / f"{step}.yml"
    facts_file = facts.write(facts.extra_vars(rig / "results", run_id, arm, hosts="h200"), rig)
    cmd = [str(BIN / "ansible-playbook"), "-i", str(rig / "inventory.yml"), str(playbook),
           "-e", f"@{facts_file}", *extra]  # fmt: skip
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
