"""Slurm's own commands (sbatch, srun, squeue, scontrol, sacct, scancel) and what their answers mean: submit a
job, follow it to its end within bounds, and say in one line why it ended when it did not end well.

Every command goes through `Slurm.run`, so unit tests answer as Slurm does without a cluster.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kdakit.facts.errors import UsageError

COMMAND_TIMEOUT_S = 60
# scontrol show node tries (a second apart): slurmctld is busiest just as it marks a node failed
NODE_QUERY_ATTEMPTS = 3
ACTIVE = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "RESIZING",
    "STAGE_OUT",
    "SIGNALING",
}
REQUEUE_STATES = {"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT"}
# A job unknown to scontrol (purged after MinJobAge) and to sacct (no accounting) this many polls in a row.
UNKNOWN_POLLS = 3
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


class SlurmError(RuntimeError):
    """A Slurm command failed; the message is one line with its own words."""


def parse_fields(text: str) -> dict[str, str]:
    """`scontrol show job -o` / `show node -o`: Key=Value pairs on one line (a value may hold spaces)."""
    fields, matches = {}, list(_FIELD.finditer(text.strip()))
    for m, nxt in zip(matches, matches[1:] + [None], strict=True):
        end = nxt.start() if nxt else len(text.strip())
        fields[m.group(1)] = text.strip()[m.end() : end].strip()
    return fields


def base_state(state: str) -> str:
    """'CANCELLED by 0' / 'NODE_FAIL+' / 'PENDING' -> the state word."""
    return (state or "UNKNOWN").split()[0].rstrip("+").upper()


@dataclass
class JobEnd:
    job_id: str
    state: str  # Slurm's final state, or PENDING (cancelled by the kit past the bound), REQUEUED, UNKNOWN
    cause: str  # one line; empty when the job completed
    fields: dict = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED"


@dataclass
class Slurm:
    run: Callable[[list[str]], subprocess.CompletedProcess] | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def _cmd(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        if self.run is not None:
            proc = self.run(argv)
        else:
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            except FileNotFoundError:
                raise UsageError(
                    f"{argv[0]} is not on PATH: run the Slurm path on a login node of the cluster"
                ) from None
            except subprocess.TimeoutExpired:
                raise SlurmError(f"{shlex.join(argv)} did not answer within {COMMAND_TIMEOUT_S} s") from None
        if check and proc.returncode != 0:
            text = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise SlurmError(f"{argv[0]}: {text[-1] if text else f'exit {proc.returncode}'}")
        return proc

    def version(self) -> str:
        """'22.05.8' (sbatch --version says 'slurm 22.05.8')."""
        out = self._cmd(["sbatch", "--version"]).stdout.split()
        return out[-1] if out else "unknown"

    def test_only(self, script: str) -> str:
        """sbatch --test-only: Slurm's verdict on the script against this cluster (raises with its error)."""
        proc = self._cmd(["sbatch", "--test-only", script], check=False)
        text = " ".join((proc.stderr + proc.stdout).split())
        if proc.returncode != 0:
            raise SlurmError(f"sbatch --test-only rejects {script}: {text.removeprefix('sbatch: error: ')}")
        return text

    def submit(self, script: str, extra: list[str] = ()) -> str:
        out = self._cmd(["sbatch", "--parsable", *extra, script]).stdout.strip()
        job_id = out.split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed {out!r}, not a job id")
        return job_id

    def show(self, job_id: str) -> dict | None:
        proc = self._cmd(["scontrol", "show", "job", "-o", job_id], check=False)
        if proc.returncode != 0 or "JobState=" not in proc.stdout:
            return None
        return parse_fields(proc.stdout.splitlines()[0])

    def accounting(self, job_id: str) -> dict | None:
        """sacct's record once scontrol has forgotten the job (None without accounting)."""
        fmt = "JobID,State,ExitCode,NodeList,Partition,Reason,Timelimit"
        proc = self._cmd(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", fmt], check=False)
        rows = [r.split("|") for r in proc.stdout.splitlines() if r.strip()] if proc.returncode == 0 else []
        if not rows:
            return None
        values = dict(zip(fmt.split(","), rows[-1], strict=False))
        return {"JobId": job_id, "JobState": values.get("State", ""), "ExitCode": values.get("ExitCode", ""),
                "NodeList": values.get("NodeList", ""), "Partition": values.get("Partition", ""),
                "Reason": values.get("Reason", ""), "TimeLimit": values.get("Timelimit", "")}  # fmt: skip

    def hostnames(self, nodelist: str) -> list[str]:
        if not nodelist or nodelist in ("(null)", "None assigned"):
            return []
        proc = self._cmd(["scontrol", "show", "hostnames", nodelist], check=False)
        return proc.stdout.split() if proc.returncode == 0 else [nodelist]

    def node(self, name: str, attempts: int = NODE_QUERY_ATTEMPTS) -> dict:
        """The node's scontrol record; {} when slurmctld did not answer in `attempts` tries a second apart (it
        is busiest just when a node fails, the moment this is asked)."""
        for attempt in range(attempts):
            proc = self._cmd(["scontrol", "show", "node", "-o", name], check=False)
            if proc.returncode == 0 and proc.stdout:
                return parse_fields(proc.stdout.splitlines()[0])
            if attempt + 1 < attempts:
                self.sleep(1)
        return {}

    def partition(self, name: str) -> dict:
        """The partition's scontrol record (the default partition when name is empty); {} when unknown."""
        proc = self._cmd(["scontrol", "show", "partition", "-o", *([name] if name else [])], check=False)
        records = [parse_fields(line) for line in proc.stdout.splitlines() if "PartitionName=" in line]
        if name:
            return records[0] if records else {}
        default = [r for r in records if r.get("Default") == "YES"]
        return default[0] if default else {}

    def cancel(self, job_id: str) -> None:
        self._cmd(["scancel", job_id], check=False)

    def jobs_named(self, prefix: str) -> list[tuple[str, str, str]]:
        """(job id, name, state) of this user's queued or running jobs whose name starts with prefix."""
        proc = self._cmd(["squeue", "-h", "--me", "-o", "%i|%j|%T"], check=False)
        rows = [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 2]
        return [(i, n, s) for i, n, s in rows if n.startswith(prefix)]

    def state(self, job_id: str) -> dict | None:
        return self.show(job_id) or self.accounting(job_id)

    def wait(
        self,
        job_id: str,
        *,
        pending_timeout_s: float,
        poll_s: float,
        until: Callable[[dict], bool] | None = None,
        say: Callable[[str], None] = print,
        timeout_s: float = float("inf"),
    ) -> JobEnd | None:
        """Follow the job to its end (a JobEnd), or until `until(fields)` holds while it runs (None).

        Past pending_timeout_s still pending, or once requeued, the kit cancels it: the end says so. Past
        timeout_s (the caller's bound) it returns the job's current state as its end."""
        start, unknown, last = self.clock(), 0, ""
        while True:
            fields = self.state(job_id)
            if fields is None:
                unknown += 1
                if unknown >= UNKNOWN_POLLS:
                    return JobEnd(
                        job_id, "UNKNOWN", f"job {job_id} is no longer known to Slurm (scontrol, sacct)"
                    )
                self.sleep(poll_s)
                continue
            unknown = 0
            state = base_state(fields.get("JobState", ""))
            if state != last:
                say(
                    f"slurm: job {job_id} {state}"
                    + (f" on {fields['NodeList']}" if state == "RUNNING" else "")
                )
                last = state
            if state in REQUEUE_STATES or (state in ACTIVE and int(fields.get("Restarts", "0") or 0) > 0):
                self.cancel(job_id)
                return JobEnd(job_id, "REQUEUED", requeue_cause(job_id, fields), fields, self._nodes(fields))
            if state == "PENDING":
                waited = self.clock() - start
                if waited > pending_timeout_s:
                    self.cancel(job_id)
                    return JobEnd(job_id, "PENDING", pending_cause(job_id, fields, waited), fields)
            elif state in ACTIVE:
                if until is not None and state == "RUNNING" and until(fields):
                    return None
                if self.clock() - start > timeout_s:
                    return JobEnd(
                        job_id, state, f"job {job_id} still {state} after {timeout_s:.0f} s", fields
                    )
            else:
                nodes = self._nodes(fields)
                return JobEnd(job_id, state, self.end_cause(job_id, state, fields, nodes), fields, nodes)
            self.sleep(poll_s)

    def _nodes(self, fields: dict) -> list[str]:
        return self.hostnames(fields.get("NodeList", ""))

    def end_cause(self, job_id: str, state: str, fields: dict, nodes: list[str]) -> str:
        if state == "COMPLETED":
            return ""
        if state == "NODE_FAIL":
            down, unanswered = [], []
            for name in nodes:
                node = self.node(name)
                if not node:
                    unanswered.append(name)
                node_state = node.get("State", "")
                if any(
                    w in node_state for w in ("DOWN", "FAIL", "DRAIN", "NOT_RESPONDING")
                ) or node_state.endswith("*"):
                    reason = node.get("Reason", "").split(" [")[0]
                    down.append(f"{name} {node_state.lower()}" + (f", reason: {reason}" if reason else ""))
            which = "; ".join(down) or "a node of " + ",".join(nodes)
            if not down and unanswered:
                which += f"; scontrol show node did not answer for {','.join(unanswered)}"
            return f"job {job_id} ended NODE_FAIL: node failure ({which})"
        return end_cause(job_id, state, fields)


def end_cause(job_id: str, state: str, fields: dict) -> str:
    """One line for a job that ended otherwise than COMPLETED (NODE_FAIL: Slurm.end_cause adds the node)."""
    reason = fields.get("Reason", "")
    reason = "" if reason in ("", "None", "(null)") else reason
    if state == "CANCELLED":
        return f"job {job_id} was cancelled (scancel or an administrator)"
    if state == "TIMEOUT":
        return (
            f"job {job_id} hit its time limit of {fields.get('TimeLimit', '?')}. Fix: raise time_limit in "
            "the Slurm settings (empty: the expected duration with its margin)"
        )
    if state == "FAILED":
        return f"job {job_id} failed (exit code {fields.get('ExitCode', '?')})"
    if state == "NODE_FAIL":
        return f"job {job_id} ended NODE_FAIL: node failure on {fields.get('NodeList', '?')}"
    return f"job {job_id} ended {state}" + (f" ({reason})" if reason else "")


def pending_cause(job_id: str, fields: dict, waited: float) -> str:
    reason = fields.get("Reason", "") or "none given"
    return (
        f"job {job_id} still pending after {waited:.0f} s (Slurm's reason: {reason}); cancelled. Fix: free "
        "or add nodes, check the partition and --nodelist, or raise pending_timeout_s"
    )


def requeue_cause(job_id: str, fields: dict) -> str:
    reason = fields.get("Reason", "")
    reason = "" if reason in ("", "None", "(null)") else f" ({reason})"
    return (
        f"job {job_id} was requeued by Slurm{reason}; cancelled: a visit is never repeated silently "
        "(the steps it finished are kept)"
    )
