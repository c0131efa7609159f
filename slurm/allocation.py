"""The Slurm scheduler backend of `kdakit run`: an A/B as ONE allocation.

start: one sbatch (kdakit-<run>-ab) whose batch step only holds the nodes; --time from the whole run's
expected duration (slurm/timing.py), checked against the partition's MaxTime and nodes against nodelist
first. visit: each arm's visit is a job step of it on every node (srun --jobid), so every arm runs on the same
nodes with nothing queued between them; its steps' outcomes, then collect (results are on shared storage:
scrub the run's keys, record) and teardown (the node's trap said its server stopped). finish: cancel the
allocation (its trap stops whatever is left) and wait, bounded, for Slurm to end it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kdakit.slurm import jobs, run, timing
from kdakit.slurm.script import node_argv, time_limit

from kdakit.records.paths import RunContext

RELEASE_WAIT_S = 60  # how long the allocation may take to end once released, before it is cancelled
NODE_STEPS = (
    "deploy",
    "eval-gsm8k",
    "bench",
)  # what the node part runs; collect/teardown are the controller's


@dataclass
class SlurmAllocation:
    ctx: run.Context
    job_id: str = ""
    nodes: list[str] = field(default_factory=list)
    end: jobs.JobEnd | None = None  # set once the allocation is over
    visit_script: object = None

    def _fail_all(self, run_: RunContext, steps: tuple[str, ...], cause: str) -> bool:
        for step in steps:
            hosts = [{"host": n, "outcome": "failed", "cause": cause} for n in self.nodes or [run.NO_NODE]]
            run.record(self.ctx, run_.arm, step, hosts)
        return False

    def start(self, run_: RunContext, arms: list[str], plan) -> bool:
        ctx = self.ctx
        timing.check_nodes(ctx.settings)
        run.prepare(ctx)
        visit = ctx.visit(arms[0], (), arms=tuple(arms), visits=plan.visits, bench_protocol=plan.protocol)
        self.visit_script = visit
        limit = time_limit(ctx.settings, visit)[0]
        if not ctx.dry_run:
            partition = ctx.slurm.partition(ctx.settings.partition)
            timing.check_partition_limit(limit, partition.get("PartitionName", ctx.settings.partition),
                                         partition.get("MaxTime"))  # fmt: skip
        job_id = run.submit_visit(ctx, visit, validate_first=True)
        if job_id is None:  # DRY_RUN: the script, and each visit's job step
            return True
        self.job_id = job_id
        end = ctx.slurm.wait(
            job_id, pending_timeout_s=ctx.settings.pending_timeout_s, poll_s=ctx.settings.poll_s,
            until=lambda fields: True, say=ctx.say,
        )  # fmt: skip
        if end is not None:  # never ran, or ended before the first visit
            self.end = end
            ctx.say(f"slurm: {end.cause}")
            for arm in arms:
                self._fail_all(run_.but(arm=arm), ("deploy",), end.cause)
            return False
        fields = ctx.slurm.state(job_id) or {}
        self.nodes = ctx.slurm.hostnames(fields.get("NodeList", ""))
        return True

    def visit(self, run_: RunContext, steps: tuple[str, ...]) -> bool:
        ctx, visit = self.ctx, self.visit_script
        node_steps = tuple(s for s in steps if s in NODE_STEPS)
        if ctx.dry_run:
            ctx.say(" ".join(node_argv(ctx.settings, visit, run_.arm, run_.visit, node_steps, "<job id>")))
            return True
        if self.end is not None:
            return self._fail_all(run_, steps, f"{self.end.cause}; visit {run_.visit} of {run_.arm} not run")
        ctx.say(f"slurm: {run_.arm} visit {run_.visit} in job {self.job_id} on {','.join(self.nodes)}")
        outcomes, end = run.job_step(ctx, self.job_id, visit, run_.arm, run_.visit, node_steps, self.nodes)
        if end is not None and end.state not in jobs.ACTIVE:
            self.end = end
        secrets = run.run_secrets(ctx)
        of_node = {}
        for node in self.nodes:
            rows = of_node[node] = list(outcomes.get(node, []))
            if "collect" in steps:
                rows.append(run.collect_outcome(ctx, node, run_.arm, secrets))
            if "teardown" in steps:
                said = run.node_status(ctx.run_dir, self.job_id).get(node, [])
                started = any(r[0] == "deploy" and r[1] == "started" for r in said)
                stopped = said and said[-1][:2] == ("server", "stopped")
                ok = not started or stopped
                rows.append(("teardown", "ok" if ok else "failed", "" if ok else
                             f"no word from {node} that its server stopped after visit {run_.visit} of "
                             f"{run_.arm}: check the node before reusing it"))  # fmt: skip
        all_ok = run.record_outcomes(ctx, run_.arm, of_node)
        facts = run.slurm_facts(ctx, visit, end or self._running(), self.job_id, run_.visit)
        for node in self.nodes:
            run.add_facts(ctx, node, run_.arm, facts)
        if self.end is not None:
            ctx.say(f"slurm: {self.end.cause}")
        return all_ok

    def _running(self) -> jobs.JobEnd:
        fields = self.ctx.slurm.state(self.job_id) or {}
        return jobs.JobEnd(self.job_id, jobs.base_state(fields.get("JobState", "")), "", fields, self.nodes)

    def finish(self, run_: RunContext) -> bool:
        if not self.job_id or self.end is not None:
            return self.end is None or self.end.ok
        ctx = self.ctx
        ctx.say(f"slurm: releasing allocation {self.job_id}")
        self.visit_script.release_file(self.job_id).touch()
        end = ctx.slurm.wait(self.job_id, pending_timeout_s=float("inf"), timeout_s=RELEASE_WAIT_S,
                             poll_s=ctx.settings.poll_s, say=lambda _: None)  # fmt: skip
        if end.state in jobs.ACTIVE:  # the batch step did not see the file: cancel (its trap cleans up)
            ctx.slurm.cancel(self.job_id)
            ctx.slurm.wait(self.job_id, pending_timeout_s=float("inf"), timeout_s=run.CANCEL_WAIT_S,
                           poll_s=ctx.settings.poll_s, say=lambda _: None)  # fmt: skip
        return True
