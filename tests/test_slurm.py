"""The Slurm path without a cluster: settings, the generated job scripts (both runtimes; the pyxis one is
proved only here, by its flags and bash's own syntax check), and how Slurm's answers become one-line causes
and per-node outcomes. tests/test_playbooks_cluster.py runs it on a real slurmctld and slurmd."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from kdakit.slurm import allocation, jobs, run, script, settings, timing

from kdakit.facts.errors import UsageError

REPO = Path(__file__).resolve().parent.parent


def _visit(tmp_path, **kw) -> script.Visit:
    """The A/B's allocation (no steps) unless steps are given (a held server: deploy, hold)."""
    base = dict(run_id="r1", arm="triton", sku="h200", run_dir=tmp_path / "results" / "r1",
                arms=("triton", "helion"))  # fmt: skip
    return script.Visit(**{**base, **kw})


def _bash_syntax_ok(text: str, tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# Settings


def test_a_visit_names_its_files_below_the_runs_slurm_folder(tmp_path):
    visit = _visit(tmp_path)
    assert visit.slurm_dir == tmp_path / "results" / "r1" / "slurm"
    assert visit.env_file == visit.slurm_dir / "state" / "server.env"
    assert visit.wait_ready == visit.slurm_dir / "wait_ready.py"
    assert visit.access == visit.slurm_dir / "access.py"
    with pytest.raises(AttributeError):
        visit.env_file = tmp_path  # a derived path, not a field


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
    s = settings.load(None, ["partition=gpu", "account=ops", "nodes=2", "nodelist=h[1-2]",
                             "bench_dataset=random",
                             "schedule_memory=true"])  # fmt: skip
    text = script.render(s, _visit(tmp_path))
    lines = text.splitlines()
    sbatch = [line.removeprefix("#SBATCH ") for line in lines if line.startswith("#SBATCH ")]
    assert sbatch[:6] == ["--job-name=kdakit-r1-ab", "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=4",
                          "--exclusive", "--mem=0"]  # fmt: skip
    for want in (
        "--partition=gpu",
        "--account=ops",
        "--nodelist=h[1-2]",
        "--no-requeue",
        "--signal=B:TERM@180",
    ):
        assert want in sbatch
    assert f"--output={tmp_path}/results/r1/slurm/kdakit-r1-ab-%j.out" in sbatch
    # the batch step only holds the allocation until the controller releases it; its TERM trap stops the steps
    assert "trap on_batch_signal TERM INT HUP" in text and 'scancel --signal=TERM "$SLURM_JOB_ID"' in text
    assert "exec srun" not in text
    # the server: kdakit serve for the SKU and the step's arm, at the profile's port, on the allocated GPUs
    assert "SERVER_ARGS=(serve --sku h200 --arm '{arm}' --port 30000 --results /results)" in lines
    assert 'SERVER_ARGS=("${SERVER_ARGS[@]//\\{arm\\}/$ARM}")' in text
    assert "URL=http://127.0.0.1:30000" in lines and "GPU_COUNT=4" in lines
    assert "ALLOCATED_GPUS=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}" in lines
    assert 'GPU_FLAGS=(--gpus "\\"device=$ALLOCATED_GPUS\\"")' in text and "--gpus all" not in text
    assert '"$DOCKER" run -d --name "$SERVER"' in text and "--container-image" not in text
    # graceful stop, then the log and inspect through the key filter
    assert '"$DOCKER" stop --time "$STOP_GRACE_S" "$SERVER"' in text
    assert '"$DOCKER" logs --timestamps "$SERVER" 2>&1 | scrubbed >' in text
    assert '"$DOCKER" container inspect "$SERVER" 2>/dev/null | scrubbed >' in text
    assert "trap on_exit EXIT" in text and "umask 027" in lines
    assert "BENCH_ARGS=(--protocol pr --dataset random-ids)" in lines
    _bash_syntax_ok(text, tmp_path)


def test_nodes_and_nodelist_must_agree():
    for overrides in (["nodelist=gpu[01-02]"], ["extra_sbatch=--nodelist=gpu[01-03]", "nodes=2"]):
        with pytest.raises(UsageError, match=r"slurm: nodes = \d but nodelist gpu\[01-0\d\] names \d node"):
            timing.check_nodes(settings.load(None, overrides))
    timing.check_nodes(settings.load(None, ["nodes=3", "nodelist=gpu[01-02],cpu7"]))
    assert timing.expand_nodelist("gpu[08-10,12],cpu7") == ["gpu08", "gpu09", "gpu10", "gpu12", "cpu7"]


def test_time_limit_is_the_expected_duration_with_margin_lead_and_cap(tmp_path):
    """Every visit of both arms at the site's rates (GSM8K on the first visit only), x (1 + margin), plus the
    signal lead; capped at max_time; time_limit replaces it; a partition whose MaxTime is smaller refuses."""
    from kdakit.facts.gsm8k_protocols import load_protocols as gsm8k_protocols
    from kdakit.facts.protocols import PROTOCOLS_FILE, load_protocols

    s = settings.SlurmSettings()
    bench, gsm8k = load_protocols()["rigorous"], gsm8k_protocols()[1]["pr"]
    visits = tomllib.loads(PROTOCOLS_FILE.read_text())["protocol"]["rigorous"]["repeats"]
    per_run = sum(
        -(-p.num_prompts // p.concurrency)
        * (p.concurrency * p.input_len / s.expected_prefill_tok_s + p.output_len / s.expected_decode_tok_s)
        for p in bench.points
    )
    visit_s = s.expected_ready_s + s.stop_grace_s + (bench.runs + 1) * per_run
    gsm8k_s = gsm8k.runs * -(-gsm8k.limit // gsm8k.num_concurrent) * s.expected_answer_tokens / 40.0
    expected = 2 * visits * visit_s + 2 * gsm8k_s
    want = timing.slurm_time(expected * 1.5 + 180)
    visit = _visit(tmp_path, visits=visits, bench_protocol="rigorous")
    text = script.render(s, visit)
    assert f"#SBATCH --time={want}" in text
    assert (
        f"x 2 arms (rigorous) expected {timing.slurm_time(expected)} + 50% margin + 180 s signal lead" in text
    )
    capped = script.render(settings.load(None, ["max_time=12:00:00"]), visit)
    assert "#SBATCH --time=0-12:00:00" in capped and "capped at the site's max_time 12:00:00" in capped
    assert "#SBATCH --time=0:30:00" in script.render(settings.load(None, ["time_limit=0:30:00"]), visit)
    timing.check_partition_limit("0-20:00:00", "gpu", "1-00:00:00")  # fits
    with pytest.raises(
        UsageError, match=r"asks --time=2-00:00:00 but partition gpu allows at most 1-00:00:00: "
    ):
        timing.check_partition_limit("2-00:00:00", "gpu", "1-00:00:00")
    with pytest.raises(UsageError, match="allows at most 4:00:00"):
        timing.check_partition_limit("0-20:00:00", "gpu", "4:00:00")
    timing.check_partition_limit("9-00:00:00", "gpu", "UNLIMITED")
    assert script.slurm_time(61) == "0-00:02:00" and script.slurm_time(86400) == "1-00:00:00"
    assert timing.parse_slurm_time("1-02:03:04") == 93784 and timing.parse_slurm_time("30") == 1800


def test_pyxis_script_runs_the_node_part_inside_the_squashfs(tmp_path):
    """The pyxis path cannot run here: its script is checked for pyxis's srun flags and bash syntax."""
    s = settings.load(None, ["runtime=pyxis", "squashfs=/shared/kdakit-h200.sqsh", "mounts=/scratch:/scratch",
                             "cache_dir=/local/kdakit-cache"])  # fmt: skip
    visit = _visit(tmp_path, steps=("deploy", "hold"), arm="helion")
    text = script.render(s, visit)
    (srun,) = [line for line in text.splitlines() if line.strip().startswith("exec srun")]
    assert "--container-image=/shared/kdakit-h200.sqsh" in srun and "--container-writable" in srun
    assert srun.split("--container-mounts=")[1].split()[0].split(",") == [
        f"{visit.run_dir}:{visit.run_dir}",
        "/data/models/GLM-5.3-Flash:/models/GLM-5.3-Flash:ro",
        "/data/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:/data/sharegpt.json:ro",
        "/local/kdakit-cache:/kdakit-cache",
        "/scratch:/scratch",
    ]
    assert "--container-name=kdakit-$SLURM_JOB_ID" in srun
    assert srun.endswith(f"bash {visit.script_path} node helion 1 deploy hold")
    assert "$DOCKER" not in text and "docker run" not in text
    # inside the image: kdakit serve as a process beside the steps, its log through the key filter
    assert "SERVER_ARGS=(serve --sku h200 --arm '{arm}' --port 30000 --results '$OUT')" in text
    server = 'env "${SERVER_ENV[@]}" "${SERVER_ENTRYPOINT[@]}" "${SERVER_ARGS[@]}" \\\n    > >(scrubbed >>'
    assert server in text
    assert '--pid "$(cat "$SERVER_PID_FILE")"' in text
    assert "CACHE_DIR=/kdakit-cache" in text and "HELION_CACHE_DIR=$CACHE_DIR/helion" in text
    assert 'kill -TERM "$pid"' in text and 'kill -KILL "$pid"' in text
    _bash_syntax_ok(text, tmp_path)
    with pytest.raises(UsageError, match="pyxis needs a writable Triton/Helion cache"):
        settings.load(None, ["runtime=pyxis", "squashfs=/s.sqsh", "container_writable=false"])


def test_pyxis_server_results_path_expands_on_the_node(tmp_path):
    """'$OUT' is single-quoted in the array: it must expand when the server starts, not when rendered."""
    s = settings.load(None, ["runtime=pyxis", "squashfs=/s.sqsh"])
    text = script.render(s, _visit(tmp_path))
    assert "SERVER_ARGS=(serve --sku h200 --arm '{arm}' --port 30000 --results '$OUT')" in text
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
    visit = _visit(tmp_path, run_dir=tmp_path / "r1", arm="helion", steps=("deploy", "hold"))
    ok = run.finish_visit(ctx, visit, "7", end, ("collect", "teardown"))
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
    run.held_path(ctx, "helion").write_text('{"job_id": "7"}\n')
    assert run.step(ctx, "helion", "bench", "pr")
    (srun,) = said
    assert srun.startswith("srun --jobid=7 --overlap --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=0 ")
    assert "--container-image=/shared/k.sqsh" in srun and "--container-name=kdakit-7" in srun
    assert srun.endswith(f"bash {tmp_path}/r1/slurm/kdakit-r1-helion-held.sbatch node helion 1 bench")
    # no held job: one line that says what to run first
    with pytest.raises(
        UsageError, match="no held job for arm triton in run r1 .*: run make deploy-<sku> first"
    ):
        run.step(ctx, "triton", "bench", "pr")


REAL_RUN = subprocess.run


class FakeCluster(FakeSlurm):
    """sbatch hands out job ids 11, 12, ...; every job runs on h[1-2] until released; a job step (srun) of
    it runs the node part's steps as `ok` on both nodes."""

    def __init__(self, results: Path):
        super().__init__([])
        self.next_id, self.submitted, self.sruns, self.results = 11, [], [], results

    def __call__(self, argv):
        if argv[0] == "sbatch":
            self.calls.append(argv)
        if argv[0] == "sbatch" and "--parsable" in argv:
            self.submitted.append(argv[-1])
            self.next_id += 1
            return subprocess.CompletedProcess(argv, 0, f"{self.next_id - 1}\n", "")
        if argv[0] == "sbatch":
            return subprocess.CompletedProcess(argv, 0, "slurm 22.05.8\n", "sbatch: Job 3 to start at now")
        if argv[:3] == ["scontrol", "show", "partition"]:
            return subprocess.CompletedProcess(
                argv, 0, "PartitionName=gpu Default=YES MaxTime=3-00:00:00\n", ""
            )
        if argv[:3] == ["scontrol", "show", "job"]:
            job = argv[-1]
            released = (self.results / "r1" / "slurm" / "state" / f"release-{job}").exists()
            self.job_lines = [_job("COMPLETED" if released else "RUNNING", JobId=job)]
        return super().__call__(argv)

    def srun(self, argv, **kw):
        if argv[0] != "srun":
            return REAL_RUN(argv, **kw)
        self.sruns.append(argv)
        job, steps = argv[1].removeprefix("--jobid="), argv[argv.index("node") + 3 :]
        for node in ("h1", "h2"):
            status = self.results / "r1" / "slurm" / "steps" / job / f"{node}.tsv"
            status.parent.mkdir(parents=True, exist_ok=True)
            (self.results / "r1" / node / argv[argv.index("node") + 1]).mkdir(parents=True, exist_ok=True)
            with status.open("a") as f:
                for step in steps:
                    f.write(f"{step}\tstarted\t\n" + (f"{step}\tok\t\n"))
                f.write("server\tstopped\t\n")
        return subprocess.CompletedProcess(argv, 0)


def test_an_ab_is_one_allocation_and_every_visit_a_job_step_on_its_nodes(tmp_path, monkeypatch):
    """rigorous: one sbatch; each arm's visit a job step of it (triton, helion, triton, ...) on the same
    nodes, GSM8K on the first visit only; then the allocation is released and everything recorded ok."""
    from kdakit.records.paths import RunContext
    from kdakit.run import loop

    fake = FakeCluster(tmp_path)
    monkeypatch.setattr(subprocess, "run", fake.srun)
    ctx = run.Context(settings.SlurmSettings(), _slurm(fake), tmp_path, "r1", "h200", say=lambda _: None)
    plan = loop.plan_of("rigorous")
    rc = loop.run_ab(RunContext(tmp_path, "r1", sku="h200"), ["triton", "helion"], plan,
                     allocation.SlurmAllocation(ctx), say=lambda _: None)  # fmt: skip
    assert rc == 0
    assert [Path(p).name for p in fake.submitted] == ["kdakit-r1-ab.sbatch"]
    assert ["sbatch", "--test-only", fake.submitted[0]] in fake.calls
    visits = [(a[a.index("node") + 1], a[a.index("node") + 2], a[a.index("node") + 3 :]) for a in fake.sruns]
    assert visits == [
        (arm, str(k), ["deploy", "eval-gsm8k", "bench"] if k == 1 else ["deploy", "bench"])
        for k in range(1, plan.visits + 1)
        for arm in ("triton", "helion")
    ]
    assert all(a[1:4] == ["--jobid=11", "--overlap", "--nodes=2"] for a in fake.sruns)
    assert (tmp_path / "r1" / "slurm" / "state" / "release-11").exists()  # the allocation was released
    rows, all_ok = run.provenance.rollup(tmp_path / "r1")
    assert all_ok and {(r[0], r[1]) for r in rows} == {
        (n, a) for n in ("h1", "h2") for a in ("triton", "helion")
    }
    prov = __import__("json").loads((tmp_path / "r1" / "h1" / "helion" / "provenance.json").read_text())
    assert [j["job_id"] for j in prov["slurm_jobs"]] == ["11"] and prov["slurm"]["visit"] == plan.visits


def test_an_ab_on_a_partition_too_short_is_refused_before_sbatch(tmp_path):
    from kdakit.facts.errors import UsageError as Usage
    from kdakit.records.paths import RunContext
    from kdakit.run import loop

    class Short(FakeCluster):
        def __call__(self, argv):
            if argv[:3] == ["scontrol", "show", "partition"]:
                return subprocess.CompletedProcess(
                    argv, 0, "PartitionName=gpu Default=YES MaxTime=04:00:00\n", ""
                )
            return super().__call__(argv)

    fake = Short(tmp_path)
    ctx = run.Context(settings.SlurmSettings(), _slurm(fake), tmp_path, "r1", "h200", say=lambda _: None)
    with pytest.raises(
        Usage, match=r"^slurm: the run asks --time=\S+ but partition gpu allows at most 04:00:00"
    ):
        loop.run_ab(RunContext(tmp_path, "r1", sku="h200"), ["triton", "helion"], loop.plan_of("rigorous"),
                    allocation.SlurmAllocation(ctx), say=lambda _: None)  # fmt: skip
    assert fake.submitted == []


def test_the_readiness_wait_follows_a_process_on_pyxis():
    """wait_ready.py --pid: a server process that exits fails the wait at once, with its one line."""
    wait_ready = REPO / "kdakit" / "launch" / "wait_ready.py"
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


def _node_part_ready(tmp_path, s, visit) -> list[str]:
    """A visit's node part as the controller leaves it on shared storage (run folder, keys, job script),
    with a readiness wait that answers at once; returns the run's keys."""
    ctx = run.Context(s, _slurm(FakeSlurm([_job("RUNNING")])), tmp_path / "results", "r1", "h200")
    run.prepare(ctx)
    keys = run.run_secrets(ctx)
    visit.script_path.write_text(script.render(s, visit))
    visit.wait_ready.write_text("print('ready')\n")  # stands in for the readiness wait
    return keys


def _assert_no_run_key(run_dir, keys) -> None:
    """No file of the run outside its state folder (where the keys live) holds a key."""
    for path in run_dir.rglob("*"):
        if path.is_file() and "state" not in path.parts:
            assert not any(k.encode() in path.read_bytes() for k in keys), f"a run key leaked into {path}"


FAKE_DOCKER = """#!/bin/bash
echo "$*" >> "$(dirname "$0")/docker.log"
case "$1 $2" in "image inspect") echo sha256:fake ;; esac
[ "$1" = logs ] && { sleep 1; echo "server log, started with --api-key $PLANTED_KEY"; }
[ "$1 $2" = "container inspect" ] && echo "[{\\"Config\\": {\\"Env\\": [\\"OPENAI_API_KEY=$PLANTED_KEY\\"]}}]"
exit 0
"""


def test_the_node_trap_stops_the_server_even_when_slurm_signals_twice(tmp_path):
    """Slurm sends SIGTERM to a step more than once (slurmstepd, then srun): the second one lands during the
    cleanup, which must still stop the server gracefully and keep its log and inspect, the run's keys
    replaced before they reach a file (0640, in a 0700 folder)."""
    import os
    import signal
    import time

    from kdakit.launch import access

    docker = tmp_path / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    s = settings.load(None, [f"docker_cli={docker}", "nvidia_smi=true", "server_command=--port,30000",
                             "use_gpus=false"])  # fmt: skip
    visit = _visit(tmp_path, steps=("deploy", "hold"), arm="helion")
    keys = _node_part_ready(tmp_path, s, visit)
    env = {**os.environ, "SLURM_JOB_ID": "5", "SLURMD_NODENAME": "n1", "PLANTED_KEY": keys[0]}
    proc = subprocess.Popen(
        ["bash", str(visit.script_path), "node", "helion", "1", "deploy", "hold"], env=env
    )
    status = visit.run_dir / "slurm" / "steps" / "5" / "n1.tsv"
    deadline = time.monotonic() + 20
    while "hold\tstarted" not in (status.read_text() if status.exists() else ""):
        assert time.monotonic() < deadline and proc.poll() is None, "the node part never reached hold"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the cleanup is fetching the server's log now
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    calls = (tmp_path / "docker.log").read_text().splitlines()
    assert "stop --time 60 kdakit-sglang-5" in calls and "rm -f kdakit-sglang-5" in calls, calls
    assert calls.index("stop --time 60 kdakit-sglang-5") < len(calls) - 1 - calls[::-1].index(
        "rm -f kdakit-sglang-5"
    )
    assert status.read_text().splitlines()[-1] == "server\tstopped\t"
    diag = visit.run_dir / "n1" / "helion" / "diag"
    log = (diag / "kdakit-sglang.log").read_text()
    assert "server log, started with --api-key " + access.REDACTED in log
    assert access.REDACTED in (diag / "kdakit-sglang.inspect.json").read_text()
    _assert_no_run_key(visit.run_dir, keys)
    assert diag.stat().st_mode & 0o777 == 0o700
    assert (diag / "kdakit-sglang.log").stat().st_mode & 0o777 == 0o640


FAKE_SERVER = """#!/bin/bash
# stands in for `kdakit serve` inside the pyxis container: a log line with a key, a graceful stop on TERM
echo "server log, started with --api-key $PLANTED_KEY"
trap 'echo "server stopping"; exit 0' TERM
while true; do sleep 0.1; done
"""


def test_the_pyxis_node_part_stops_its_server_and_leaves_only_the_scrubbed_log(tmp_path):
    """pyxis: the server is a process beside the node part. Its exit trap stops it gracefully; the server's
    output reaches its log through the key filter; nothing else is left in the diag folder and nothing fails
    on the way (bash reports an unknown command on stderr and goes on)."""
    import os
    import time

    from kdakit.launch import access

    server = tmp_path / "server"
    server.write_text(FAKE_SERVER)
    server.chmod(0o755)
    s = settings.load(None, ["runtime=pyxis", "squashfs=/s.sqsh", f"server_entrypoint={server}",
                             "server_command=--port,30000", "nvidia_smi=true"])  # fmt: skip
    visit = _visit(tmp_path, steps=("deploy",), arm="helion")
    keys = _node_part_ready(tmp_path, s, visit)
    env = {**os.environ, "SLURM_JOB_ID": "5", "SLURMD_NODENAME": "n1", "SLURM_STEP_GPUS": "0,1,2,3",
           "PLANTED_KEY": keys[0]}  # fmt: skip
    node = ["bash", str(visit.script_path), "node", "helion", "1", "deploy"]
    done = subprocess.run(node, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "command not found" not in done.stderr, done.stderr
    status = (visit.run_dir / "slurm" / "steps" / "5" / "n1.tsv").read_text().splitlines()
    assert status[-2:] == ["deploy\tok\t", "server\tstopped\t"], status
    assert not (visit.run_dir / "slurm" / "state" / "server-5-n1.pid").exists()
    diag = visit.run_dir / "n1" / "helion" / "diag"
    log = diag / "kdakit-sglang.log"
    deadline = time.monotonic() + 10  # the filter ends once the stopped server's output closes
    while "server stopping" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    assert "server log, started with --api-key " + access.REDACTED in log.read_text()
    left = sorted(p.name for p in diag.iterdir())
    assert left == ["kdakit-sglang.log", "nvidia-smi-q.txt", "slurm-deploy.log"], left
    _assert_no_run_key(visit.run_dir, keys)
    assert log.stat().st_mode & 0o777 == 0o640


FAKE_SLURM_BIN = {
    "scancel": 'echo "scancel $*" >> "$CALLS"\n',
    "squeue": 'echo "squeue $*" >> "$CALLS"\necho "$SLURM_JOB_ID.batch"\n',
    "srun": 'echo "srun $*" >> "$CALLS"\n',
    "timeout": 'shift\nexec "$@"\n',
}


def _allocation_batch(tmp_path, s):
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKE_SLURM_BIN.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    visit = _visit(tmp_path)
    (visit.slurm_dir / "state").mkdir(parents=True, exist_ok=True)
    visit.script_path.write_text(script.render(s, visit))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "9",
           "SLURM_JOB_NODELIST": "h[1-2]", "SLURM_JOB_NUM_NODES": "2",
           "CALLS": str(tmp_path / "calls")}  # fmt: skip
    return visit, subprocess.Popen(["bash", str(visit.script_path)], env=env)


def test_the_allocation_holds_until_released_and_its_term_trap_stops_every_node(tmp_path):
    """The batch step of an A/B holds the nodes until the controller's release file appears (the job then
    COMPLETES); at the signal lead it passes TERM to the visit steps and removes what is left on each node."""
    import signal
    import time

    s = settings.load(None, ["stop_grace_s=1", "signal_lead_s=40"])
    visit, proc = _allocation_batch(tmp_path, s)
    time.sleep(1)
    assert proc.poll() is None, "the batch step must hold the allocation"
    visit.release_file("9").touch()
    assert proc.wait(timeout=10) == 0 and not visit.release_file("9").exists()

    (tmp_path / "bin").rename(tmp_path / "bin-1")
    (tmp_path / "calls").unlink(missing_ok=True)
    visit, proc = _allocation_batch(tmp_path, s)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0] == "scancel --signal=TERM 9"
    assert calls[-1].startswith("srun --overlap --nodes=2 --ntasks-per-node=1 ") and calls[-1].endswith(
        " stop"
    )


def test_a_published_ab_on_slurm_runs_its_protocols_and_its_servers_environment(tmp_path):
    """The CuTe-verify PR's A/B (arms triton, cutedsl) on Slurm: GSM8K as that PR ran it (`full`), its serving
    protocol, and the protocol's server environment (the simulated accept length) handed to the server's
    container by the node part's deploy."""
    import os

    script_out = subprocess.run(
        [sys.executable, "-m", "kdakit", "slurm", "script", "--sku", "h200", "--run-id", "r1",
         "--results", str(tmp_path / "results"), "--arms", "triton cutedsl"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert script_out.returncode == 0, script_out.stderr
    assert "GSM8K_ARGS=(--protocol full)" in script_out.stdout
    assert "BENCH_ARGS=(--protocol cutedsl-pr " in script_out.stdout
    assert "SERVER_ENV=(SGLANG_SIMULATE_ACC_LEN=5)" in script_out.stdout

    docker = tmp_path / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    s = settings.load(None, [f"docker_cli={docker}", "nvidia_smi=true", "use_gpus=false"])
    visit = _visit(tmp_path, steps=("deploy",), arm="triton", bench_protocol="cutedsl-pr")
    _node_part_ready(tmp_path, s, visit)
    env = {**os.environ, "SLURM_JOB_ID": "5", "SLURMD_NODENAME": "n1", "PLANTED_KEY": "none"}
    node = ["bash", str(visit.script_path), "node", "triton", "1", "deploy"]
    done = subprocess.run(node, env=env, timeout=60)
    assert done.returncode == 0
    (server_run,) = [c for c in (tmp_path / "docker.log").read_text().splitlines() if c.startswith("run -d ")]
    assert " --env=SGLANG_SIMULATE_ACC_LEN=5 " in server_run, server_run
    plain = script.render(s, _visit(tmp_path, steps=("deploy",), arm="triton", bench_protocol="pr"))
    assert "SERVER_ENV=()" in plain


def test_a_preflight_away_from_a_cluster_says_where_to_run_it_and_which_file_to_make(
    tmp_path, monkeypatch, capsys
):
    from kdakit import cli

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "srun", "squeue", "scancel"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    # what Debian's scontrol says on a machine with no slurm.conf
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\necho 'scontrol: fatal: Could not establish a configuration source' >&2\nexit 1\n"
    )
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert cli.main(["slurm", "preflight", "--results", str(tmp_path / "results"), "--run-id", "p1"]) != 0
    rows = capsys.readouterr().out.splitlines()
    (row,) = [r for r in rows if r.startswith("FAIL slurmctld: ")]
    assert row.startswith(
        "FAIL slurmctld: scontrol: fatal: Could not establish a configuration source. Fix: "
    )
    assert "login node" in row and "slurm/site.toml, made from slurm/site.example.toml" in row
