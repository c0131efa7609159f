"""The Slurm path's steps on the login node: write a visit's script, validate and submit it, follow the job,
and turn what every node reported into the same provenance records, summary lines and roll-up as the Ansible
path (kdakit.records.provenance). Results are on shared storage already: collect only records and scrubs.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from kdakit.slurm import jobs
from kdakit.slurm.script import STATE_DIR, Visit, node_argv, render
from kdakit.slurm.settings import SlurmSettings

from kdakit.launch import access, wait_ready
from kdakit.records import paths, provenance

# The node part's helpers, copied into the run's slurm/ folder on shared storage: standard library only
HOST_SCRIPTS = (Path(wait_ready.__file__), Path(access.__file__))
NO_NODE = STATE_DIR  # the provenance "host" of a visit that never got a node (pending past its bound)
# How long a step cut short waits for Slurm to say how its job ended.
STEP_END_WAIT_S = 60
# How long teardown waits for a cancelled job to end (KillWait, the traps, UnkillableStepTimeout).
CANCEL_WAIT_S = 300


@dataclass
class Context:
    settings: SlurmSettings
    slurm: jobs.Slurm
    results: Path
    run_id: str
    sku: str
    dry_run: bool = False
    say: callable = print

    @property
    def run_dir(self) -> Path:
        return paths.run_dir(self.results, self.run_id)

    def visit(self, arm: str, steps: tuple[str, ...], **kw) -> Visit:
        return Visit(run_id=self.run_id, arm=arm, sku=self.sku, run_dir=self.run_dir, steps=steps, **kw)


def prepare(ctx: Context) -> None:
    """The run's slurm/ folder: the readiness wait the nodes run, and the run's keys in a 0600 env file
    (the same ones again for a later step of the run)."""
    state = ctx.run_dir / STATE_DIR / "state"
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o700)
    for source in HOST_SCRIPTS:
        shutil.copyfile(source, ctx.run_dir / STATE_DIR / source.name)
    env_file = state / "server.env"
    previous = env_file.read_text() if env_file.exists() else ""
    keys = "" if ctx.settings.server_open else access.env_file_lines(ctx.run_id, previous)
    tmp = env_file.with_suffix(".tmp")
    tmp.touch(mode=0o600)
    tmp.write_text(keys)
    tmp.replace(env_file)


def run_secrets(ctx: Context) -> list[str]:
    env_file = ctx.run_dir / STATE_DIR / "state" / "server.env"
    values = access.parse_env_text(env_file.read_text()) if env_file.exists() else {}
    return [v for k, v in values.items() if k in (access.API_KEY_ENV, access.ADMIN_API_KEY_ENV) and v]


def write_script(ctx: Context, visit: Visit) -> Path:
    text = render(ctx.settings, visit)
    visit.script_path.parent.mkdir(parents=True, exist_ok=True)
    visit.script_path.write_text(text)
    return visit.script_path


def node_status(run_dir: Path, job_id: str) -> dict[str, list[tuple[str, str, str]]]:
    """node -> [(step, outcome, cause)] as the job's nodes wrote them."""
    out = {}
    for path in sorted((run_dir / STATE_DIR / "steps" / job_id).glob("*.tsv")):
        rows = []
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) >= 2:
                rows.append((parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
        out[path.stem] = rows
    return out


def node_outcomes(steps: tuple[str, ...], rows: list[tuple[str, str, str]], end: jobs.JobEnd | None):
    """[(step, outcome, cause)] of one node for the visit's steps: what the node said; a step it was in when
    the job ended badly failed with the job's cause; the steps after a failure skipped."""
    said = {}
    for step, outcome, cause in rows:
        said[step] = (outcome, cause)
    job_cause = end.cause if end is not None and not end.ok else ""
    out, failed = [], ""
    for step in steps:
        outcome, cause = said.get(step, ("", ""))
        if failed and outcome in ("", "skipped"):
            out.append((step, "skipped", f"after {failed} failed"))
            continue
        if outcome == "ok":
            out.append((step, "ok", ""))
            continue
        if outcome == "skipped":
            out.append((step, "skipped", cause))
            continue
        if outcome in ("started", "interrupted"):
            cause = f"{job_cause or 'the node stopped reporting'} during {step}"
        elif outcome == "failed":
            cause = cause or job_cause or "failed without a message"
        else:  # never reached
            cause = job_cause or "the node never ran this step"
        out.append((step, "failed", cause))
        failed = step
    return out


def server_stopped(rows: list[tuple[str, str, str]]) -> bool:
    return ("server", "stopped", "") in rows or any(r[0] == "server" and r[1] == "stopped" for r in rows)


def record(ctx: Context, arm: str, step: str, hosts: list[dict]) -> list[str]:
    lines = provenance.record_outcomes(ctx.results, ctx.run_id, arm, step, hosts)
    for line in lines:
        ctx.say(line)
    return lines


def record_outcomes(ctx: Context, arm: str, of_node: dict[str, list[tuple[str, str, str]]]) -> bool:
    """Every node's (step, outcome, cause) rows recorded, one record per step over the nodes; True when all
    are ok."""
    per_step: dict[str, list[dict]] = {}
    all_ok = True
    for node, rows in of_node.items():
        for step, outcome, cause in rows:
            per_step.setdefault(step, []).append({"host": node, "outcome": outcome, "cause": cause})
            all_ok &= outcome == "ok"
    for step, hosts in per_step.items():
        record(ctx, arm, step, hosts)
    return all_ok


def collect_outcome(ctx: Context, node: str, arm: str, secrets: list[str]) -> tuple[str, str, str]:
    """The controller's collect of a node's results (on shared storage already): the run's keys scrubbed from
    them; failed when the node wrote none."""
    node_dir = paths.host_dir(ctx.results, ctx.run_id, node, arm)
    access.scrub_tree(node_dir, secrets)
    ok = node_dir.is_dir()
    return ("collect", "ok" if ok else "failed", "" if ok else f"no results under {node_dir}")


def slurm_facts(ctx: Context, visit: Visit, end: jobs.JobEnd | None, job_id: str, visit_no: int = 1) -> dict:
    fields = end.fields if end is not None else {}
    try:
        version = ctx.slurm.version()
    except (jobs.SlurmError, OSError):
        version = None
    return {
        "job_id": job_id,
        "job_name": visit.job_name,
        "visit": visit_no,
        "node_list": fields.get("NodeList"),
        "partition": fields.get("Partition"),
        "state": end.state if end is not None else "RUNNING",
        "time_limit": fields.get("TimeLimit"),
        "slurm_version": version,
        "runtime": ctx.settings.runtime,
        "script": str(visit.script_path),
    }


def add_facts(ctx: Context, node: str, arm: str, facts: dict) -> None:
    """Provenance facts of a node's visit: the latest job as `slurm`, every job of the run in `slurm_jobs`."""
    path = paths.provenance_path(ctx.results, ctx.run_id, node, arm)
    try:
        earlier = json.loads(path.read_text()).get("slurm_jobs") or []
    except (OSError, ValueError):
        earlier = []
    jobs_ = [j for j in earlier if j.get("job_id") != facts["job_id"]] + [facts]
    image = ctx.settings.squashfs if ctx.settings.runtime == "pyxis" else ctx.settings.image
    provenance.record_facts(
        ctx.results, ctx.run_id, node, arm,
        {"sku": ctx.sku, "image": image, "scheduler": "slurm", "slurm": facts, "slurm_jobs": jobs_,
         "server_access": "open: 0.0.0.0, no keys (server_open)" if ctx.settings.server_open
         else "kit only: 127.0.0.1, the run API key and admin key",
         "kdakit_git_sha": provenance.git_sha()[0]},
    )  # fmt: skip


def validate(ctx: Context, script: Path) -> None:
    """sbatch --test-only against this cluster (its partitions, limits, nodes): a bad script stops here."""
    verdict = ctx.slurm.test_only(str(script))
    ctx.say(f"slurm: sbatch --test-only accepts {script.name}: {verdict}")


def submit_visit(ctx: Context, visit: Visit, validate_first: bool = False) -> str | None:
    """Write, (validate,) submit; with dry_run, print the script instead and return None."""
    script = write_script(ctx, visit)
    if ctx.dry_run:
        ctx.say(f"# {script} (DRY_RUN: not submitted)")
        ctx.say(script.read_text())
        return None
    if validate_first:
        validate(ctx, script)
    job_id = ctx.slurm.submit(str(script))
    ctx.say(f"slurm: submitted {visit.job_name} as job {job_id} ({script})")
    return job_id


def finish_visit(ctx: Context, visit: Visit, job_id: str, end: jobs.JobEnd, controller_steps=()) -> bool:
    """Record every node's steps of a finished job (and collect/teardown when asked); True when all ok."""
    status = node_status(ctx.run_dir, job_id)
    nodes = end.nodes or sorted(status) or [NO_NODE]
    steps = tuple(s for s in visit.steps if s != "hold")
    secrets = run_secrets(ctx)
    of_node = {}
    for node in nodes:
        rows = status.get(node, [])
        outcomes = of_node[node] = node_outcomes(steps, rows, end)
        if node == NO_NODE:
            outcomes += [(s, "skipped", "no node was allocated") for s in controller_steps]
        elif "collect" in controller_steps:
            outcomes.append(collect_outcome(ctx, node, visit.arm, secrets))
        if "teardown" in controller_steps and node != NO_NODE:
            started = any(r[0] == "deploy" and r[1] == "started" for r in rows)
            if not started or server_stopped(rows):
                outcomes.append(("teardown", "ok", ""))
            else:
                outcomes.append(("teardown", "failed",
                                 f"no word from {node} that its server stopped after job {job_id} ended "
                                 f"{end.state}: check the node before reusing it"))  # fmt: skip
    all_ok = record_outcomes(ctx, visit.arm, of_node)
    facts = slurm_facts(ctx, visit, end, job_id)
    for node in nodes:
        if node != NO_NODE:
            add_facts(ctx, node, visit.arm, facts)
    if not end.ok:
        ctx.say(f"slurm: {end.cause}")
    return all_ok and end.ok


# Single steps: a held job (deploy + hold) keeps the server up between make targets.
def held_path(ctx: Context, arm: str) -> Path:
    return ctx.run_dir / STATE_DIR / f"held-{arm}.json"


def deploy(ctx: Context, arm: str, bench_protocol: str) -> bool:
    """Submit a job that deploys and then holds the server, and return once every node's deploy ended."""
    prepare(ctx)
    visit = ctx.visit(arm, ("deploy", "hold"), bench_protocol=bench_protocol)
    job_id = submit_visit(ctx, visit, validate_first=True)
    if job_id is None:
        return True
    held_path(ctx, arm).write_text(json.dumps({"job_id": job_id, "script": str(visit.script_path)}) + "\n")

    def deployed(fields: dict) -> bool:
        nodes = ctx.slurm.hostnames(fields.get("NodeList", ""))
        status = node_status(ctx.run_dir, job_id)
        return bool(nodes) and all(
            any(r[0] == "deploy" and r[1] in ("ok", "failed") for r in status.get(n, [])) for n in nodes
        )

    end = ctx.slurm.wait(
        job_id, pending_timeout_s=ctx.settings.pending_timeout_s, poll_s=ctx.settings.poll_s,
        until=deployed, say=ctx.say,
    )  # fmt: skip
    if end is None:  # running, every node past its deploy
        fields = ctx.slurm.state(job_id) or {}
        end_now = jobs.JobEnd(job_id, "RUNNING", "", fields, ctx.slurm.hostnames(fields.get("NodeList", "")))
        return _record_steps(ctx, replace(visit, steps=("deploy",)), job_id, end_now)
    return finish_visit(ctx, replace(visit, steps=("deploy",)), job_id, end)


def _record_steps(ctx: Context, visit: Visit, job_id: str, end: jobs.JobEnd) -> bool:
    status = node_status(ctx.run_dir, job_id)
    of_node = {node: node_outcomes(visit.steps, status.get(node, []), None) for node in end.nodes}
    all_ok = record_outcomes(ctx, visit.arm, of_node)
    facts = slurm_facts(ctx, visit, end, job_id)
    for node in end.nodes:
        add_facts(ctx, node, visit.arm, facts)
    return all_ok


def held_job(ctx: Context, arm: str) -> tuple[str, dict]:
    from kdakit.facts.errors import UsageError

    path = held_path(ctx, arm)
    if not path.exists():
        raise UsageError(
            f"no held job for arm {arm} in run {ctx.run_id} ({path}): run make deploy-<sku> first"
        )
    held = json.loads(path.read_text())
    fields = ctx.slurm.state(held["job_id"])
    return held["job_id"], fields or {}


def step(ctx: Context, arm: str, name: str, bench_protocol: str) -> bool:
    """eval-gsm8k or bench as a job step of the held job (srun --jobid --overlap), on each of its nodes."""
    job_id, fields = held_job(ctx, arm)
    state = jobs.base_state(fields.get("JobState", ""))
    nodes = ctx.slurm.hostnames(fields.get("NodeList", ""))
    if state != "RUNNING":
        cause = (
            jobs.end_cause(job_id, state, fields) if fields else f"job {job_id} is no longer known to Slurm"
        ) + f"; the server is gone: run make deploy-{ctx.sku} again"
        return (
            bool(
                record(
                    ctx,
                    arm,
                    name,
                    [{"host": n, "outcome": "failed", "cause": cause} for n in nodes or [NO_NODE]],
                )
            )
            and False
        )
    if ctx.dry_run:
        ctx.say(" ".join(node_argv(ctx.settings, ctx.visit(arm, ("deploy", "hold")), arm, 1, (name,), job_id,
                                   len(nodes))))  # fmt: skip
        return True
    ctx.say(f"slurm: {name} in job {job_id} on {','.join(nodes)}")
    outcomes, _ = job_step(ctx, job_id, ctx.visit(arm, ("deploy", "hold")), arm, 1, (name,), nodes)
    hosts = [{"host": n, "outcome": rows[0][1], "cause": rows[0][2]} for n, rows in outcomes.items()]
    record(ctx, arm, name, hosts)
    return all(h["outcome"] == "ok" for h in hosts)


def job_step(
    ctx: Context, job_id: str, visit: Visit, arm: str, visit_no: int, steps: tuple[str, ...], nodes: list[str]
) -> tuple[dict[str, list[tuple[str, str, str]]], jobs.JobEnd | None]:
    """Run the node part's steps as one job step of a running job on each of its nodes, and read what every
    node said: {node: [(step, outcome, cause)]}, and the job's end when the step was cut short by it."""
    import subprocess

    argv = node_argv(ctx.settings, visit, arm, visit_no, steps, job_id, len(nodes))
    before = {n: len(r) for n, r in node_status(ctx.run_dir, job_id).items()}
    subprocess.run(argv, env={**os.environ, "SLURM_JOB_ID": job_id}, check=False)
    after = node_status(ctx.run_dir, job_id)
    fields = ctx.slurm.state(job_id) or {}
    state = jobs.base_state(fields.get("JobState", ""))

    def unfinished() -> bool:
        rows = {n: after.get(n, [])[before.get(n, 0) :] for n in nodes}
        return any(
            not any(r[0] == s and r[1] in ("ok", "failed", "skipped") for r in rows[n])
            for n in nodes
            for s in steps
        )

    deadline = ctx.slurm.clock() + STEP_END_WAIT_S
    while unfinished() and state in jobs.ACTIVE and ctx.slurm.clock() < deadline:
        # the step was cut short: Slurm may still be ending the job (node failure, cancel, time limit)
        ctx.slurm.sleep(ctx.settings.poll_s)
        fields = ctx.slurm.state(job_id) or {}
        state = jobs.base_state(fields.get("JobState", ""))
    end = (
        None
        if state in jobs.ACTIVE
        else jobs.JobEnd(job_id, state, ctx.slurm.end_cause(job_id, state, fields, nodes), fields, nodes)
    )
    if end is None and unfinished():
        cut = f"job step of job {job_id} ended before its node part finished"
        end = jobs.JobEnd(job_id, state, cut, fields,
                          nodes)  # fmt: skip
    return {n: node_outcomes(steps, after.get(n, [])[before.get(n, 0) :], end) for n in nodes}, end


def collect(ctx: Context, arm: str) -> bool:
    """Results are on shared storage already: scrub the run's keys from them, record collect per node."""
    secrets = run_secrets(ctx)
    hosts = []
    for node_dir in sorted(p.parent for p in ctx.run_dir.glob(f"*/{arm}")):
        if node_dir.name == STATE_DIR or not node_dir.is_dir():
            continue
        access.scrub_tree(node_dir / arm, secrets)
        hosts.append({"host": node_dir.name, "outcome": "ok", "cause": ""})
    if not hosts:
        ctx.say(f"collect: no node wrote results under {ctx.run_dir}/<node>/{arm}/")
        return False
    record(ctx, arm, "collect", hosts)
    return True


def teardown(ctx: Context, arm: str | None) -> bool:
    """Cancel the run's jobs (the held server of each arm, or every one): each node's trap stops its server;
    wait (bounded) until Slurm has ended them, then record teardown per node."""
    prefix = f"kdakit-{ctx.run_id}-" + (f"{arm}-" if arm else "")
    running = ctx.slurm.jobs_named(prefix)
    if ctx.dry_run:
        ctx.say("\n".join(f"scancel {j} ({n})" for j, n, _ in running) or "teardown: nothing to cancel")
        return True
    for job_id, name, _ in running:
        ctx.say(f"slurm: scancel {job_id} ({name})")
        ctx.slurm.cancel(job_id)
    all_ok = True
    for job_id, name, _ in running:
        end = ctx.slurm.wait(
            job_id,
            pending_timeout_s=float("inf"),
            timeout_s=CANCEL_WAIT_S,
            poll_s=ctx.settings.poll_s,
            say=lambda _: None,
        )
        status = node_status(ctx.run_dir, job_id)
        job_arm = name[len(f"kdakit-{ctx.run_id}-") :].rsplit("-", 1)[0]
        hosts = []
        for node in end.nodes or sorted(status):
            rows = status.get(node, [])
            started = any(r[0] == "deploy" and r[1] == "started" for r in rows)
            ok = not started or server_stopped(rows)
            cause = "" if ok else f"no word from {node} that its server stopped (job {job_id} {end.state})"
            hosts.append({"host": node, "outcome": "ok" if ok else "failed", "cause": cause})
            all_ok &= ok
        if hosts:
            record(ctx, job_arm, "teardown", hosts)
    if not running:
        ctx.say(f"teardown: no job of run {ctx.run_id} is queued or running")
    return all_ok
