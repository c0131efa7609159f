"""The Slurm path without a cluster: settings, the generated job scripts (both runtimes; the pyxis one is
proved only here, by its flags and bash's own syntax check), and how Slurm's answers become one-line causes
and per-node outcomes. tests/test_playbooks_cluster.py runs it on a real slurmctld and slurmd."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from kdakit.facts.errors import UsageError
from kdakit.slurm import jobs, run, script, settings

REPO = Path(__file__).resolve().parent.parent


def _visit(tmp_path, **kw) -> script.Visit:
    base = dict(run_id="r1", arm="helion", sku="h200", run_dir=tmp_path / "results" / "r1",
                steps=("deploy", "eval-gsm8k", "bench"))  # fmt: skip
    return script.Visit(**{**base, **kw})


def _bash_syntax_ok(text: str, tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# Settings


def test_settings_file_and_overrides(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text('partition = "gpu"\nnodes = 2\nextra_sbatch = ["--constraint=h200"]\n')
    s = settings.load(path, ["account=ops", "exclusive=false", "pending_timeout_s=30"])
    assert (s.partition, s.nodes, s.account, s.exclusive, s.pending_timeout_s) == (
        "gpu",
        2,
        "ops",
        False,
        30.0,
    )
    assert s.extra_sbatch == ["--constraint=h200"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["colour=blue"], "unknown slurm setting(s) colour"),
        (["runtime=podman"], "slurm runtime 'podman': expected one of docker, pyxis"),
        (["runtime=pyxis"], "slurm runtime pyxis needs squashfs"),
        (["nodes=two"], "slurm setting nodes='two': expected int"),
        (["exclusive=maybe"], "expected true or false"),
        (["partition"], "expected KEY=VALUE"),
    ],
)
def test_settings_refuse_bad_input(overrides, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings.load(None, overrides)


def test_settings_example_file_loads_and_names_every_setting():
    example = REPO / "slurm" / "site.example.toml"
    loaded = settings.load(example)
    assert loaded == settings.SlurmSettings()  # the example states the defaults
    text = example.read_text()
    for name in settings.SlurmSettings.__dataclass_fields__:
        assert f"\n# {name} =" in text or f"\n{name} =" in text, f"{name} is not documented in {example}"


# Scripts


def test_docker_script_options_and_syntax(tmp_path):
    s = settings.load(None, ["partition=gpu", "account=ops", "nodes=2", "bench_dataset=random"])
    text = script.render(s, _visit(tmp_path, nodelist="h[1-2]"))
    lines = text.splitlines()
    sbatch = [line.removeprefix("#SBATCH ") for line in lines if line.startswith("#SBATCH ")]
    assert sbatch[:5] == ["--job-name=kdakit-r1-helion-v1", "--nodes=2", "--ntasks-per-node=1",
                          "--gpus-per-node=4", "--exclusive"]  # fmt: skip
    for want in ("--partition=gpu", "--account=ops", "--nodelist=h[1-2]", "--no-requeue"):
        assert want in sbatch
    assert f"--output={tmp_path}/results/r1/slurm/kdakit-r1-helion-v1-%j.out" in sbatch
    # the server: kdakit serve for the SKU and arm, at the profile's port, from the kit's image
    assert "SERVER_ARGS=(serve --sku h200 --arm helion --port 30000 --results /results)" in lines
    assert "URL=http://127.0.0.1:30000" in lines
    assert '"$DOCKER" run -d --name "$SERVER"' in text and "--container-image" not in text
    assert "trap on_exit EXIT" in text and '"$DOCKER" rm -f "$SERVER"' in text
    assert "BENCH_ARGS=(--protocol pr --dataset random-ids)" in lines
    _bash_syntax_ok(text, tmp_path)


def test_time_limit_comes_from_the_protocols_bounds(tmp_path):
    """Readiness wait + every GSM8K run + every bench client run (with warm-up) at their run_timeout_s +
    margin, read here straight from the protocol files."""
    bench = tomllib.loads((REPO / "bench" / "protocols.toml").read_text())["protocol"]["pr"]
    gsm8k = tomllib.loads((REPO / "evals" / "protocols.toml").read_text())["protocol"]["pr"]
    s = settings.SlurmSettings()
    want = (
        s.server_ready_timeout_s
        + gsm8k["runs"] * gsm8k["run_timeout_s"]
        + len(bench["points"]) * (bench["runs"] + int(bench["warmup"])) * bench["run_timeout_s"]
        + script.MARGIN_S
    )
    minutes = int(-(-want // 60))
    text = script.render(s, _visit(tmp_path))
    assert f"#SBATCH --time={minutes // 1440}-{minutes % 1440 // 60:02d}:{minutes % 60:02d}:00" in text
    assert "#SBATCH --time=0:30:00" in script.render(
        settings.load(None, ["time_limit=0:30:00"]), _visit(tmp_path)
    )
    assert script.slurm_time(61) == "0-00:02:00" and script.slurm_time(86400) == "1-00:00:00"


def test_pyxis_script_runs_the_node_part_inside_the_squashfs(tmp_path):
    """The pyxis path cannot run here: its script is checked for pyxis's srun flags and bash syntax."""
    s = settings.load(
        None, ["runtime=pyxis", "squashfs=/shared/kdakit-h200.sqsh", "mounts=/scratch:/scratch"]
    )
    visit = _visit(tmp_path)
    text = script.render(s, visit)
    (srun,) = [line for line in text.splitlines() if line.strip().startswith("exec srun")]
    assert "--container-image=/shared/kdakit-h200.sqsh" in srun
    assert srun.split("--container-mounts=")[1].split()[0].split(",") == [
        f"{visit.run_dir}:{visit.run_dir}",
        "/data/models/GLM-5.3-Flash:/models/GLM-5.3-Flash:ro",
        "/data/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:/data/sharegpt.json:ro",
        "/scratch:/scratch",
    ]
    assert "--container-name=kdakit-$SLURM_JOB_ID" in srun
    assert srun.endswith(f"bash {visit.script_path} node deploy eval-gsm8k bench")
    assert "$DOCKER" not in text and "docker run" not in text
    # inside the image: kdakit serve as a process beside the steps, the same readiness wait by PID
    assert "SERVER_ARGS=(serve --sku h200 --arm helion --port 30000 --results '$OUT')" in text
    assert '"${SERVER_ENTRYPOINT[@]}" "${SERVER_ARGS[@]}"' in text
    assert '--pid "$(cat "$SERVER_PID_FILE")"' in text
    _bash_syntax_ok(text, tmp_path)


def test_pyxis_server_results_path_expands_on_the_node(tmp_path):
    """'$OUT' is single-quoted in the array: it must expand when the server starts, not when rendered."""
    s = settings.load(None, ["runtime=pyxis", "squashfs=/s.sqsh"])
    text = script.render(s, _visit(tmp_path))
    assert "SERVER_ARGS=(serve --sku h200 --arm helion --port 30000 --results '$OUT')" in text
    assert 'SERVER_ARGS=("${SERVER_ARGS[@]//\\$OUT/$OUT}")' in text


def test_enroot_import_command():
    assert script.enroot_import_command(
        "out/images/kdakit-h200.tar.zst", "kdakit:h200-abc", "/shared/k.sqsh"
    ) == (
        "zstd -dc out/images/kdakit-h200.tar.zst | docker load && "
        "enroot import --output /shared/k.sqsh dockerd://kdakit:h200-abc"
    )


def test_unknown_step_is_refused(tmp_path):
    with pytest.raises(UsageError, match="unknown step"):
        script.render(settings.SlurmSettings(), _visit(tmp_path, steps=("deploy", "reboot")))


# Slurm's answers


class FakeSlurm:
    """Answers Slurm's commands from a list of scontrol job lines (one per poll) and node records."""

    def __init__(self, job_lines, nodes=None, sacct=""):
        self.job_lines, self.nodes, self.sacct, self.calls = list(job_lines), nodes or {}, sacct, []

    def __call__(self, argv):
        self.calls.append(argv)
        out, rc = "", 0
        if argv[:3] == ["scontrol", "show", "job"]:
            line = self.job_lines.pop(0) if len(self.job_lines) > 1 else self.job_lines[0]
            out, rc = (line, 0) if line else ("", 1)
        elif argv[:3] == ["scontrol", "show", "hostnames"]:
            out = {"h[1-2]": "h1\nh2\n"}.get(argv[3], argv[3] + "\n")
        elif argv[:3] == ["scontrol", "show", "node"]:
            out = self.nodes.get(argv[4], "")
        elif argv[0] == "sacct":
            out = self.sacct
        return subprocess.CompletedProcess(argv, rc, out, "")


def _slurm(fake) -> jobs.Slurm:
    clock = iter(range(0, 10_000, 10))
    return jobs.Slurm(run=fake, clock=lambda: next(clock), sleep=lambda s: None)


def _job(state, **kw) -> str:
    fields = {"JobId": "7", "JobName": "kdakit-r1-helion-v1", "JobState": state, "Reason": "None",
              "Restarts": "0", "NodeList": "h[1-2]", "Partition": "gpu", "TimeLimit": "00:01:00",
              "ExitCode": "0:0", **kw}  # fmt: skip
    return " ".join(f"{k}={v}" for k, v in fields.items())


def test_parse_fields_keeps_values_with_spaces():
    fields = jobs.parse_fields("JobId=3 Reason=Not responding [slurm@2026-12-02T03:00:00] State=DOWN+DRAIN")
    assert fields == {
        "JobId": "3",
        "Reason": "Not responding [slurm@2026-12-02T03:00:00]",
        "State": "DOWN+DRAIN",
    }


def test_pending_past_the_bound_is_cancelled_with_slurms_reason():
    fake = FakeSlurm([_job("PENDING", Reason="ReqNodeNotAvail,_UnavailableNodes:h2", NodeList="(null)")])
    end = _slurm(fake).wait("7", pending_timeout_s=25, poll_s=1, say=lambda _: None)
    assert end.state == "PENDING"
    assert end.cause.startswith(
        "job 7 still pending after 30 s (Slurm's reason: ReqNodeNotAvail,_UnavailableNodes:h2); cancelled."
    )
    assert ["scancel", "7"] in fake.calls


def test_node_failure_names_the_node_and_its_reason():
    fake = FakeSlurm(
        [_job("RUNNING"), _job("NODE_FAIL", Reason="NodeDown")],
        nodes={
            "h2": "NodeName=h2 State=DOWN+NOT_RESPONDING Reason=kdakit fault test [root@2026-12-02T03:30:00]",
            "h1": "NodeName=h1 State=IDLE Reason=(null)",
        },
    )
    end = _slurm(fake).wait("7", pending_timeout_s=60, poll_s=1, say=lambda _: None)
    assert (end.state, end.nodes) == ("NODE_FAIL", ["h1", "h2"])
    assert end.cause == (
        "job 7 ended NODE_FAIL: node failure (h2 down+not_responding, reason: kdakit fault test)"
    )


def test_node_failure_asks_again_when_slurmctld_is_busy_and_says_when_it_never_answered():
    answers = {"h2": "NodeName=h2 State=DOWN Reason=kdakit fault test [root@2026-12-02T03:30:00]"}

    class BusyAtFirst(FakeSlurm):
        node_queries = 0

        def __call__(self, argv):
            if argv[:3] == ["scontrol", "show", "node"]:
                self.node_queries += 1
                if self.node_queries == 1:  # slurmctld busy with the failure it is reporting
                    self.calls.append(argv)
                    return subprocess.CompletedProcess(argv, 1, "", "Socket timed out on send/recv")
            return super().__call__(argv)

    busy = BusyAtFirst([_job("NODE_FAIL", NodeList="h2")], nodes=answers)
    end = _slurm(busy).wait("7", pending_timeout_s=60, poll_s=1, say=lambda _: None)
    assert end.cause == "job 7 ended NODE_FAIL: node failure (h2 down, reason: kdakit fault test)"

    silent = FakeSlurm([_job("NODE_FAIL", NodeList="h2")], nodes={})
    end = _slurm(silent).wait("7", pending_timeout_s=60, poll_s=1, say=lambda _: None)
    assert end.cause == (
        "job 7 ended NODE_FAIL: node failure (a node of h2; scontrol show node did not answer for h2)"
    )
    assert sum(c[:3] == ["scontrol", "show", "node"] for c in silent.calls) == jobs.NODE_QUERY_ATTEMPTS


@pytest.mark.parametrize(
    "state, cause",
    [
        ("CANCELLED", "job 7 was cancelled (scancel or an administrator)"),
        ("TIMEOUT", "job 7 hit its time limit of 00:01:00. Fix: raise time_limit in the Slurm settings"),
        ("FAILED", "job 7 failed (exit code 0:0)"),
        ("OUT_OF_MEMORY", "job 7 ended OUT_OF_MEMORY"),
        ("COMPLETED", ""),
    ],
)
def test_job_ends(state, cause):
    end = _slurm(FakeSlurm([_job("RUNNING"), _job(state)])).wait("7", pending_timeout_s=60, poll_s=1,
                                                                  say=lambda _: None)  # fmt: skip
    assert end.state == state and end.cause.startswith(cause) and (end.ok == (state == "COMPLETED"))


def test_requeue_is_cancelled_and_said():
    fake = FakeSlurm([_job("RUNNING"), _job("PENDING", Restarts="1", Reason="BeginTime")])
    end = _slurm(fake).wait("7", pending_timeout_s=600, poll_s=1, say=lambda _: None)
    assert end.state == "REQUEUED"
    assert end.cause.startswith("job 7 was requeued by Slurm (BeginTime); cancelled")
    assert ["scancel", "7"] in fake.calls


def test_a_purged_job_is_read_from_sacct_then_unknown():
    fake = FakeSlurm([""], sacct="7|TIMEOUT|0:0|h1|gpu|TimeLimit|00:01:00\n")
    end = _slurm(fake).wait("7", pending_timeout_s=60, poll_s=1, say=lambda _: None)
    assert end.state == "TIMEOUT" and end.nodes == ["h1"]
    gone = _slurm(FakeSlurm([""])).wait("7", pending_timeout_s=60, poll_s=1, say=lambda _: None)
    assert gone.state == "UNKNOWN" and "no longer known" in gone.cause


# Per-node outcomes


def test_node_outcomes_from_the_status_lines():
    steps = ("deploy", "eval-gsm8k", "bench")
    end = jobs.JobEnd("7", "NODE_FAIL", "job 7 ended NODE_FAIL: node failure (h2 down)")
    rows = [
        *[("deploy", "started", ""), ("deploy", "ok", "")],
        *[("eval-gsm8k", "started", ""), ("eval-gsm8k", "ok", "")],
        *[("bench", "started", ""), ("bench", "interrupted", "signal")],
    ]
    assert run.node_outcomes(steps, rows, end) == [
        ("deploy", "ok", ""),
        ("eval-gsm8k", "ok", ""),
        ("bench", "failed", "job 7 ended NODE_FAIL: node failure (h2 down) during bench"),
    ]
    failed = [
        ("deploy", "started", ""),
        ("deploy", "failed", "image kdakit:latest is not in h1's Docker engine"),
    ]
    assert run.node_outcomes(steps, failed, jobs.JobEnd("7", "FAILED", "job 7 failed (exit code 1:0)")) == [
        ("deploy", "failed", "image kdakit:latest is not in h1's Docker engine"),
        ("eval-gsm8k", "skipped", "after deploy failed"),
        ("bench", "skipped", "after deploy failed"),
    ]
    # a node that never reported (its job never started there)
    assert run.node_outcomes(steps, [], jobs.JobEnd("7", "CANCELLED", "job 7 was cancelled"))[0] == (
        "deploy", "failed", "job 7 was cancelled")  # fmt: skip


def test_a_visit_that_never_left_the_queue_is_recorded_for_the_scheduler(tmp_path):
    ctx = run.Context(settings.SlurmSettings(), _slurm(FakeSlurm([_job("PENDING")])), tmp_path, "r1", "h200",
                      say=lambda _: None)  # fmt: skip
    end = jobs.JobEnd("7", "PENDING", "job 7 still pending after 30 s (Slurm's reason: Resources); cancelled")
    ok = run.finish_visit(ctx, _visit(tmp_path, run_dir=tmp_path / "r1"), "7", end, ("collect", "teardown"))
    assert not ok
    rows, all_ok = run.provenance.rollup(tmp_path / "r1")
    assert not all_ok
    assert ("slurm", "helion", "deploy", "failed", end.cause) in rows


def test_a_single_step_joins_the_held_job_and_its_container(tmp_path):
    """make bench SCHEDULER=slurm: a job step of the held job on each of its nodes; on pyxis inside the job's
    named container (the server's file system)."""
    s = settings.load(None, ["runtime=pyxis", "squashfs=/shared/k.sqsh"])
    said = []
    ctx = run.Context(
        s, _slurm(FakeSlurm([_job("RUNNING")])), tmp_path, "r1", "h200", dry_run=True, say=said.append
    )
    run.prepare(ctx)
    run.held_path(ctx, "helion").write_text('{"job_id": "7", "script": "/shared/r1/slurm/held.sbatch"}\n')
    assert run.step(ctx, "helion", "bench", "pr")
    (srun,) = said
    assert srun.startswith("srun --jobid=7 --overlap --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=0 ")
    assert "--container-image=/shared/k.sqsh" in srun and "--container-name=kdakit-7" in srun
    assert srun.endswith("bash /shared/r1/slurm/held.sbatch node bench")
    # no held job: one line that says what to run first
    with pytest.raises(
        UsageError, match="no held job for arm triton in run r1 .*: run make deploy-<sku> first"
    ):
        run.step(ctx, "triton", "bench", "pr")


class FakeCluster(FakeSlurm):
    """sbatch hands out job ids 11, 12, ...; every job runs on h[1-2] and completes."""

    def __init__(self):
        super().__init__([])
        self.next_id, self.submitted = 11, []

    def __call__(self, argv):
        if argv[0] == "sbatch" and "--parsable" in argv:
            self.submitted.append(argv[-1])
            self.next_id += 1
            return subprocess.CompletedProcess(argv, 0, f"{self.next_id - 1}\n", "")
        if argv[0] == "sbatch":
            return subprocess.CompletedProcess(argv, 0, "slurm 22.05.8\n", "sbatch: Job 3 to start at now")
        if argv[:3] == ["scontrol", "show", "job"]:
            self.job_lines = [_job("COMPLETED", JobId=argv[-1])]
        return super().__call__(argv)


def test_rigorous_visits_interleave_on_the_first_allocations_nodes(tmp_path):
    fake = FakeCluster()
    ctx = run.Context(settings.SlurmSettings(), _slurm(fake), tmp_path, "r1", "h200", say=lambda _: None)
    run.ab(ctx, ["triton", "helion"], "rigorous")
    repeats = tomllib.loads((REPO / "bench" / "protocols.toml").read_text())["protocol"]["rigorous"][
        "repeats"
    ]
    names = [Path(p).name for p in fake.submitted]
    assert names == [
        f"kdakit-r1-{arm}-v{k}.sbatch" for k in range(1, repeats + 1) for arm in ("triton", "helion")
    ]
    for i, path in enumerate(map(Path, fake.submitted)):
        text = path.read_text()
        first = path.name.endswith("-v1.sbatch")
        # every job after the first runs on the first allocation's nodes
        assert ("#SBATCH --nodelist=h[1-2]" in text) == (i > 0), path.name
        steps = text.split(f"bash {path} node ", 1)[1].splitlines()[0]
        assert steps == ("deploy eval-gsm8k bench" if first else "deploy bench"), path.name


def test_a_sequential_protocol_visits_until_the_stopping_rule_says_stop(tmp_path, monkeypatch):
    """BENCH_PROTOCOL=decisive as Slurm jobs: after each visit of both arms the stopping rule reads the run's
    records; the jobs stop when it says stop (here after visit 2), not after the protocol's max_visits."""
    from kdakit.records import sequential

    asked = []

    def decide(run_dir, protocol, *, elapsed_s=None):
        asked.append((run_dir, protocol))
        done = len(asked) == 2
        return sequential.Decision(stop=done, visits=len(asked), reason=f"after {len(asked)}: stop={done}")

    monkeypatch.setattr(sequential, "decide", decide)
    fake, said = FakeCluster(), []
    ctx = run.Context(settings.SlurmSettings(), _slurm(fake), tmp_path, "r1", "h200", say=said.append)
    run.ab(ctx, ["triton", "helion"], "decisive")
    names = [Path(p).name for p in fake.submitted]
    assert names == [f"kdakit-r1-{arm}-v{k}.sbatch" for k in (1, 2) for arm in ("triton", "helion")]
    assert asked == [(ctx.run_dir, "decisive")] * 2
    assert "== slurm after visit 2: after 2: stop=True" in said


def test_the_readiness_wait_follows_a_process_on_pyxis():
    """wait_ready.py --pid: a server process that exits fails the wait at once, with its one line."""
    wait_ready = REPO / "playbooks" / "roles" / "server" / "files" / "wait_ready.py"
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    argv = ["python3", str(wait_ready), "--url", "http://127.0.0.1:9/health"]
    proc = subprocess.run([*argv, "--pid", str(dead.pid), "--timeout", "30"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stdout.strip().startswith(
        f"server process {dead.pid} exited after 0 s before http://127.0.0.1:9"
    )
    with subprocess.Popen(["sleep", "30"]) as alive:
        try:
            more = ["--pid", str(alive.pid), "--timeout", "1", "--interval", "0.2"]
            proc = subprocess.run([*argv, *more], capture_output=True, text=True, timeout=30)
        finally:
            alive.kill()
    assert proc.returncode == 1 and "did not answer within 1 s while the server kept running" in proc.stdout


def test_teardown_cancels_the_runs_jobs_and_checks_each_server_stopped(tmp_path):
    class Queue(FakeSlurm):
        def __call__(self, argv):
            if argv[0] == "squeue":
                rows = "7|kdakit-r1-helion-held|RUNNING\n8|someone-else|RUNNING\n"
                return subprocess.CompletedProcess(argv, 0, rows, "")
            return super().__call__(argv)

    fake = Queue([_job("CANCELLED", JobName="kdakit-r1-helion-held")])
    said = []
    ctx = run.Context(settings.SlurmSettings(), _slurm(fake), tmp_path, "r1", "h200", say=said.append)
    steps = tmp_path / "r1" / "slurm" / "steps" / "7"
    steps.mkdir(parents=True)
    (steps / "h1.tsv").write_text("deploy\tstarted\t\ndeploy\tok\t\nhold\tstarted\t\nserver\tstopped\t\n")
    (steps / "h2.tsv").write_text("deploy\tstarted\t\ndeploy\tok\t\nhold\tstarted\t\n")  # its trap never ran
    assert not run.teardown(ctx, None)
    assert ["scancel", "7"] in fake.calls and ["scancel", "8"] not in fake.calls
    assert "h1: teardown ok" in said
    assert "h2: teardown failed (no word from h2 that its server stopped (job 7 CANCELLED))" in said
    rows, _ = run.provenance.rollup(tmp_path / "r1")
    assert (
        "h2",
        "helion",
        "teardown",
        "failed",
        "no word from h2 that its server stopped (job 7 CANCELLED)",
    ) in rows


FAKE_DOCKER = """#!/bin/bash
echo "$*" >> "$(dirname "$0")/docker.log"
case "$1 $2" in "image inspect") echo sha256:fake ;; esac
[ "$1" = logs ] && { sleep 1; echo "server log"; }
exit 0
"""


def _node_part_held(tmp_path, docker_text: str, job_id: str, env_lines: str | None = None):
    """The node part of a deploy + hold visit under a stand-in docker, started and waited for until it
    holds: (process, visit, status file)."""
    import os
    import time

    docker = tmp_path / "docker"
    docker.write_text(docker_text)
    docker.chmod(0o755)
    s = settings.load(None, [f"docker_cli={docker}", "nvidia_smi=true", "server_command=--port,30000"])
    visit = _visit(tmp_path, steps=("deploy", "hold"))
    visit.script_path.parent.mkdir(parents=True)
    visit.script_path.write_text(script.render(s, visit))
    visit.wait_ready.write_text("print('ready')\n")  # stands in for the readiness wait
    if env_lines is not None:
        visit.env_file.parent.mkdir(parents=True, exist_ok=True)
        visit.env_file.write_text(env_lines)
    env = {**os.environ, "SLURM_JOB_ID": job_id, "SLURMD_NODENAME": "n1"}
    proc = subprocess.Popen(["bash", str(visit.script_path), "node", "deploy", "hold"], env=env)
    status = visit.run_dir / "slurm" / "steps" / job_id / "n1.tsv"
    deadline = time.monotonic() + 20
    while "hold\tstarted" not in (status.read_text() if status.exists() else ""):
        assert time.monotonic() < deadline and proc.poll() is None, "the node part never reached hold"
        time.sleep(0.1)
    return proc, visit, status


def test_the_node_trap_stops_the_server_even_when_slurm_signals_twice(tmp_path):
    """Slurm sends SIGTERM to a step more than once (slurmstepd, then srun): the second one lands during the
    cleanup, which must still remove the server (the time-limit case on the real cluster)."""
    import signal
    import time

    proc, visit, status = _node_part_held(tmp_path, FAKE_DOCKER, "5")
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the cleanup is fetching the server's log now
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    calls = (tmp_path / "docker.log").read_text().splitlines()
    assert "rm -f kdakit-sglang-5" in calls, calls
    assert status.read_text().splitlines()[-1] == "server\tstopped\t"
    assert "server log" in (visit.run_dir / "n1" / "helion" / "diag" / "kdakit-sglang.log").read_text()


def test_the_node_trap_writes_the_servers_diagnostics_without_the_run_keys(tmp_path):
    """The exit trap's server log and inspect output (SGLang's start-up log and the container's env hold the
    run's keys) are scrubbed on the way to their files: the keys never reach them, the files are 0640 in a
    0700 diag folder."""
    import signal

    api, admin = "sk-run-key-0123456789", "adm-run-key-9876543210"
    stand_in = FAKE_DOCKER.replace('echo "server log"', f'echo "server log --api-key {api}"').replace(
        "exit 0",
        f'[ "$1 $2" = "container inspect" ] && echo \'{{"Env": ["KDAKIT_ADMIN_API_KEY={admin}"]}}\'\nexit 0',
    )
    keys = f"OPENAI_API_KEY={api}\nKDAKIT_ADMIN_API_KEY={admin}\n"
    proc, visit, _status = _node_part_held(tmp_path, stand_in, "6", env_lines=keys)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    diag = visit.run_dir / "n1" / "helion" / "diag"
    assert diag.stat().st_mode & 0o777 == 0o700
    log, inspect = diag / "kdakit-sglang.log", diag / "kdakit-sglang.inspect.json"
    assert "server log --api-key <redacted>" in log.read_text()
    assert "KDAKIT_ADMIN_API_KEY=<redacted>" in inspect.read_text()
    for path in diag.iterdir():
        assert api not in path.read_text() and admin not in path.read_text(), path
    assert log.stat().st_mode & 0o777 == 0o640 and inspect.stat().st_mode & 0o777 == 0o640
