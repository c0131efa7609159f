"""`kdakit run`'s visit loop on a backend that records what it is asked: fixed and sequential protocols, the
first-visit-only GSM8K, the roll-up and LATEST; the Ansible backend's facts file and step output."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from kdakit.facts.errors import UsageError
from kdakit.records import paths, provenance
from kdakit.records.paths import RunContext
from kdakit.records.visits import Plan, plan_of
from kdakit.run import facts, loop

REPO = Path(__file__).resolve().parent.parent


class Recorder:
    """A backend whose every step is ok on one host, recorded as the real ones do."""

    def __init__(self, start_ok: bool = True):
        self.visits, self.start_ok, self.finished = [], start_ok, False

    def start(self, run, arms, plan):
        return self.start_ok

    def visit(self, run, steps):
        self.visits.append((run.arm, run.visit, steps))
        provenance.record_outcomes(
            run.results, run.run_id, run.arm, steps[0], [{"host": "h1", "outcome": "ok"}]
        )
        return True

    def finish(self, run):
        self.finished = True
        return True


def test_a_fixed_protocol_interleaves_the_arms_and_runs_gsm8k_on_the_first_visit_only(tmp_path):
    backend, said = Recorder(), []
    run = RunContext(tmp_path, "r1", sku="h200")
    rc = loop.run_ab(run, ["triton", "helion"], Plan("rigorous", 3), backend, say=said.append)
    assert rc == 0 and backend.finished
    assert backend.visits == [
        ("triton", 1, ("deploy", "eval-gsm8k", "bench", "collect", "teardown")),
        ("helion", 1, ("deploy", "eval-gsm8k", "bench", "collect", "teardown")),
        ("triton", 2, ("deploy", "bench", "collect", "teardown")),
        ("helion", 2, ("deploy", "bench", "collect", "teardown")),
        ("triton", 3, ("deploy", "bench", "collect", "teardown")),
        ("helion", 3, ("deploy", "bench", "collect", "teardown")),
    ]
    assert paths.read_latest(tmp_path) == "r1"
    assert "rollout: all 2 steps ok" in said


@dataclass(frozen=True)
class Decision:
    stop: bool
    visits: int
    reason: str


def test_a_sequential_protocol_stops_when_decide_says_so(tmp_path, monkeypatch):
    asked = []

    def decide(run_dir, protocol, *, elapsed_s=None):
        asked.append((run_dir, protocol, elapsed_s))
        done = len(asked) == 2
        return Decision(done, len(asked), "settled: within ±1 %" if done else "cannot tell yet")

    import sys
    import types

    monkeypatch.setitem(sys.modules, "kdakit.records.sequential", types.SimpleNamespace(decide=decide))
    clock = iter(range(0, 1000, 100))
    backend, said = Recorder(), []
    run = RunContext(tmp_path, "r1", sku="h200")
    plan = Plan("adaptive", 10, sequential=True)
    assert (
        loop.run_ab(run, ["triton", "helion"], plan, backend, say=said.append, clock=lambda: next(clock)) == 0
    )
    assert [(a, k) for a, k, _ in backend.visits] == [
        ("triton", 1),
        ("helion", 1),
        ("triton", 2),
        ("helion", 2),
    ]
    assert [a[:2] for a in asked] == [(tmp_path / "r1", "adaptive")] * 2 and asked[0][2] > 0
    assert "== adaptive after visit 2: settled: within ±1 %" in said


def test_a_fixed_protocol_never_imports_the_sequential_rule(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "kdakit.records.sequential", None)  # importing it would fail
    assert loop.run_ab(RunContext(tmp_path, "r1", sku="h200"), ["triton", "helion"], Plan("pr", 1),
                       Recorder(), say=lambda _: None) == 0  # fmt: skip


def test_no_allocation_no_visit_and_a_failed_run(tmp_path):
    backend = Recorder(start_ok=False)
    rc = loop.run_ab(RunContext(tmp_path, "r1", sku="h200"), ["triton", "helion"], Plan("pr", 1), backend,
                     say=lambda _: None)  # fmt: skip
    assert rc == 1 and backend.visits == [] and backend.finished


def test_the_protocols_plan_their_visits(tmp_path):
    """The run plans visits from what the bench's reader accepts: a sequential protocol without max_visits
    (max_hours alone) is refused at planning, as the bench would refuse it, not planned as 10**6 visits."""
    bench = REPO / "kdakit" / "facts" / "protocols.toml"
    assert plan_of("pr", bench) == Plan("pr", 1) and plan_of("rigorous", bench).visits == 5
    assert plan_of("decisive", bench) == Plan("decisive", 20, True, 48.0)
    built_in = bench.read_text()

    def site(name: str, text: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        return path

    with pytest.raises(UsageError, match="unknown bench protocol 'nope'.*known: pr, rigorous, decisive"):
        plan_of("nope", site("known", built_in))
    hours_only = site("hours", built_in.replace("max_visits = 20\n", ""))
    with pytest.raises(UsageError, match="protocol 'decisive': a sequential protocol needs max_visits"):
        plan_of("decisive", hours_only)
    repeats = site("repeats", built_in.replace("max_visits = 20\n", "max_visits = 20\nrepeats = 2\n"))
    with pytest.raises(UsageError, match="'decisive': a sequential protocol gives max_visits, not repeats"):
        plan_of("decisive", repeats)
    odd = site("dataset", built_in.replace('dataset = "sharegpt"', 'dataset = "mystery"', 1))
    with pytest.raises(UsageError, match="dataset must be one of"):
        plan_of("pr", odd)


def test_the_ansible_facts_file_holds_the_registry_and_the_paths(tmp_path):
    values = facts.extra_vars(tmp_path, "r1", "helion", hosts="h200", visit=2)
    f = values["kdakit_facts"]
    assert f["skus"] == sorted(f["registry"]) and f["registry"]["h200"]["gpu_model"] == "NVIDIA H200"
    assert f["paths"]["provenance"] == str(
        tmp_path.resolve() / "r1" / "{host}" / "helion" / "provenance.json"
    )
    assert f["paths"]["host_run_dir"] == "{root}/r1/helion"
    assert (values["kdakit_run_id"], values["kdakit_hosts"], values["kdakit_visit"]) == ("r1", "h200", 2)
    assert f["controller"]["lock"]["pid"] > 0
    written = facts.write(values, tmp_path)
    assert json.loads(written.read_text()) == values and written.stat().st_mode & 0o777 == 0o600


def test_the_roles_ask_python_nothing():
    """No pipe lookup into Python in any role default: the facts come from the controller's file."""
    for path in (REPO / "playbooks" / "roles").glob("*/defaults/main.yml"):
        assert "ansible.builtin.pipe" not in path.read_text(), path


def test_an_interrupted_run_still_releases_its_backend(tmp_path):
    """Ctrl-C during a visit: the loop stops, and the backend's finish (Slurm: release the allocation)
    still runs."""

    class Interrupted(Recorder):
        def visit(self, run, steps):
            raise KeyboardInterrupt

    backend = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        loop.run_ab(RunContext(tmp_path, "r1", sku="h200"), ["triton", "helion"], Plan("pr", 1), backend,
                    say=lambda _: None)  # fmt: skip
    assert backend.finished


def test_the_ansible_backend_reads_each_steps_outcome_file(tmp_path):
    """A step's outcome comes from the JSON file its summary writes (kdakit_step_output), not from Ansible's
    log; the facts file carries the run, arm, visit and protocol."""
    import sys

    from kdakit.run.ansible import Ansible

    fake = tmp_path / "ansible-playbook"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\nargs = sys.argv[1:]\n"
        "values = json.load(open([args[i + 1][1:] for i, a in enumerate(args) if a == '-e'][0]))\n"
        "hosts = [{'host': 'h1', 'outcome': 'ok', 'cause': ''},\n"
        "         {'host': 'h2', 'outcome': 'failed', 'cause': values['kdakit_arm'] + ' visit '"
        " + str(values['kdakit_visit']) + ' ' + values['kdakit_bench_protocol']}]\n"
        "open(values['kdakit_step_output'], 'w').write(json.dumps({'hosts': hosts}))\n"
        "print('TASK [a task whose name nobody reads]')\n"
    )
    fake.chmod(0o755)
    backend = Ansible(inventory="inv.yml", ansible_playbook=str(fake), bench_protocol="rigorous")
    ok, hosts = backend.step(RunContext(tmp_path, "r1", sku="h200", arm="helion", visit=2), "bench")
    assert not ok
    assert hosts[1] == {"host": "h2", "outcome": "failed", "cause": "helion visit 2 rigorous"}


def test_preflight_reads_each_hosts_output_file(tmp_path):
    from kdakit.checks import preflight

    (tmp_path / "h1.json").write_text(
        json.dumps({"host": "h1", "rc": 1, "stdout": "FAIL h1: gpu-count: 2 | use 4\n"})
    )
    (tmp_path / "h2.json").write_text(
        json.dumps({"host": "h2", "unreachable": 'Data could not be sent to remote host "h2". Make sure this '
                    "host can be reached over ssh: ssh: connect to host h2 port 22: Connection refused"})
    )  # fmt: skip
    out = preflight.step_outputs(tmp_path)
    assert out["h2"] == {"unreachable": "ssh: connect to host h2 port 22: Connection refused"}
    assert [v.check for v in out["h1"]["verdicts"]] == ["gpu-count"] and not out["h1"]["verdicts"][0].ok


def test_a_slurm_ab_plans_its_visits_from_the_sites_own_protocols_file(tmp_path):
    """A site's protocols file (Slurm's bench_protocols setting) names a protocol the built-in file lacks:
    `kdakit run ab` plans its visits from that file, as the bench on the nodes reads it."""
    import subprocess
    import sys

    built_in = (REPO / "kdakit/facts/protocols.toml").read_text()
    site = built_in.replace("[protocol.rigorous]", "[protocol.site-ab]")
    (tmp_path / "site-protocols.toml").write_text(site)
    visits = plan_of("rigorous", REPO / "kdakit/facts/protocols.toml").visits
    assert visits > 1
    ab = [sys.executable, "-m", "kdakit", "run", "ab", "--scheduler", "slurm", "--dry-run", "--results",
          str(tmp_path / "results"), "--protocol", "site-ab", "--run-id", "r1"]  # fmt: skip
    done = subprocess.run(
        [*ab, "--slurm-set", f"bench_protocols={tmp_path / 'site-protocols.toml'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"== h200 helion visit {visits} of {visits} (run r1)" in done.stdout
    refused = subprocess.run(ab, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "unknown bench protocol 'site-ab'" in refused.stderr
