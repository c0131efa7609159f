"""The Ansible scheduler backend: one playbook step on the SKU's hosts over SSH, its outcome per host.

Each call gets the controller's facts file (`-e @FILE`, kdakit/run/facts.py) and a file to write its
outcomes to (`kdakit_step_output`, written by playbooks/tasks/summary.yml); the outcome comes from that file,
never from Ansible's log. playbooks/run-step.sh stops the step and removes its containers on SIGINT/SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kdakit.records.paths import RunContext
from kdakit.run import facts

REPO = Path(__file__).resolve().parents[2]  # the checkout the playbooks come from (make runs from there)
PLAYBOOKS = REPO / "playbooks"


def wait_forwarding(proc: subprocess.Popen) -> int:
    """Wait for the step, passing SIGINT/SIGTERM on to it (run-step.sh then removes what the step started
    on every host) instead of dying first and leaving that undone."""

    def forward(signum, frame):
        proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@dataclass
class Ansible:
    inventory: str
    ansible_playbook: str = str(Path(sys.executable).parent / "ansible-playbook")
    extra: list[str] = field(default_factory=list)  # EXTRA= of make: more ansible-playbook arguments
    dry_run: bool = False
    bench_protocol: str = ""
    gsm8k_protocol: str = ""  # empty: the gsm8k role's default
    purge: bool = False  # teardown: the staged image tarballs too
    hosts: str = ""  # the inventory group(s); empty: the run's SKU
    say: callable = print

    def step(self, run: RunContext, step: str) -> tuple[bool, list[dict]]:
        """Run playbooks/<step>.yml for run.arm (and run.visit); (all ok, [{host, outcome, cause}])."""
        values = facts.extra_vars(
            run.results, run.run_id, run.arm, hosts=self.hosts or run.sku, visit=run.visit or None,
            bench_protocol=self.bench_protocol, gsm8k_protocol=self.gsm8k_protocol,
            purge=True if self.purge and step == "teardown" else None,
        )  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="kdakit-step-") as scratch:
            output = Path(scratch) / "outcomes.json"
            values["kdakit_step_output"] = str(output)
            facts_file = facts.write(values, scratch)
            check = ["--check", "--diff"] if self.dry_run else []
            argv = [str(PLAYBOOKS / "run-step.sh"), str(PLAYBOOKS / f"{step}.yml"), self.ansible_playbook,
                    "-i", self.inventory, "-e", f"@{facts_file}", *check, *self.extra]  # fmt: skip
            env = dict(os.environ, ANSIBLE_CONFIG=str(PLAYBOOKS / "ansible.cfg"))
            rc = wait_forwarding(subprocess.Popen(argv, env=env))
            try:
                hosts = json.loads(output.read_text())["hosts"]
            except (OSError, ValueError, KeyError):
                hosts = []
        if rc in (130, 143):
            raise KeyboardInterrupt
        ok = rc == 0 and bool(hosts) and all(h["outcome"] == "ok" for h in hosts)
        return ok or (rc == 0 and self.dry_run), hosts

    # The visit loop's backend (kdakit/run/loop.py): every step of an arm's visit as its own playbook.
    def start(self, run: RunContext, arms: list[str], plan) -> bool:
        return True

    def visit(self, run: RunContext, steps: tuple[str, ...]) -> bool:
        ok = True
        for step in steps:
            self.say(f"== {run.sku} {run.arm} {step} (run {run.run_id}, visit {run.visit})")
            ok &= self.step(run, step)[0]
        return ok

    def finish(self, run: RunContext) -> bool:
        return True
