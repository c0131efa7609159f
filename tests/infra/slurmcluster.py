"""A real Slurm cluster on the SSH test hosts (tests/infra/sshhosts.py): Debian's slurmctld in this machine's
network namespace (the login node, where make runs), one slurmd per test host in that host's namespace, one
munged for all of them (its socket is a file: every namespace reaches it). The hosts reach each other through
this machine (a route to the run's /24 in each namespace; the kernel forwards), as srun's node-to-node
traffic needs. GPUs are GRES whose device files are links to /dev/null (slurmd drops a file-less GPU).

Short timeouts, so that a node set DOWN or a cancelled job shows within seconds. Everything runs from
root/<...>; every daemon is stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SLURM_DAEMONS = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel")


def unavailable_reason() -> str | None:
    missing = [p for p in SLURM_DAEMONS if not os.access(p, os.X_OK)]
    missing += [c for c in CLIENTS if shutil.which(c) is None]
    if missing:
        return f"{', '.join(missing)} missing: install slurm-wlm and munge (.ci/apt-packages.txt)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    nodes: list  # sshhosts.TestHost
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client needs to find this cluster (the make targets inherit it)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def cli(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def node_state(self, name: str) -> str:
        out = self.cli("sinfo", "-h", "-N", "-n", name, "-o", "%T", check=False).stdout.split()
        return out[0] if out else "unknown"

    def wait_nodes_idle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = {h.name: self.node_state(h.name) for h in self.nodes}
            if all(s == "idle" for s in states.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"slurm nodes not idle after {timeout:.0f} s: {states}\n" + self.log_tails()
                )
            time.sleep(0.5)

    def resume(self, name: str) -> None:
        self.cli("scontrol", "update", f"nodename={name}", "state=resume", check=False)

    def log_tails(self, lines: int = 15) -> str:
        out = []
        for path in sorted(self.root.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    def down(self) -> None:
        """Jobs cancelled first (a test cut short leaves a held allocation), then the daemons, then whatever
        of this cluster outlived them: slurmstepd and srun processes carry its SLURM_CONF."""
        if "slurmctld" in self.pids:
            try:
                self.cli("scancel", "--partition=gpu", check=False, timeout=15)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and self.cli("squeue", "-h", check=False).stdout:
                    time.sleep(0.5)
            except subprocess.TimeoutExpired:
                pass
        for name, pid in reversed(list(self.pids.items())):
            _stop(pid, name)
        self.pids.clear()
        for pid in _processes_with_env(f"SLURM_CONF={self.conf}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _processes_with_env(entry: str) -> list[int]:
    """PIDs of processes whose environment holds `entry` exactly (this cluster's steps and clients)."""
    want = entry.encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if want in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _stop(pid: int, name: str) -> None:
    try:
        if name.split("-")[0] not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            return  # not ours any more
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _pid(path: Path, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            time.sleep(0.1)
    raise RuntimeError(f"no pid in {path} after {timeout:.0f} s")


def config(root: Path, hosts: list, controller_address: str, port: int, gpus: dict[str, int]) -> str:
    nodes = "\n".join(
        f"NodeName={h.name} NodeAddr={h.address} CPUs=2 RealMemory=1000 Gres=gpu:{gpus[h.name]} State=UNKNOWN"
        for h in hosts
    )
    return f"""# the kit's CI cluster (tests/infra/slurmcluster.py)
ClusterName=kdakitci
SlurmctldHost={socket.gethostname()}({controller_address})
SlurmctldPort={port}
SlurmdPort={port + 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root / "munge.socket"}
CredType=cred/munge
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}/%n
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root / "slurmctld.log"}
SlurmdLogFile={root}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
TCPTimeout=3
KillWait=10
InactiveLimit=0
MinJobAge=600
BatchStartTimeout=20
UnkillableStepTimeout=30
{nodes}
PartitionName=gpu Nodes={",".join(h.name for h in hosts)} Default=YES MaxTime=INFINITE State=UP
"""


def up(root: Path, hosts: list, gpus: dict[str, int] | None = None) -> SlurmCluster:
    """slurmctld here, slurmd in each host's namespace; returns once every node is idle."""
    root = Path(root)
    shutil.rmtree(root, ignore_errors=True)
    (root / "state").mkdir(parents=True)
    (root / "spool").mkdir()
    for h in hosts:
        (root / "spool" / h.name).mkdir()
        # the other hosts of this run, through this machine (it forwards)
        subprocess.run(
            ["ip", "-n", h.netns, "route", "replace", str(h.claim.block), "via", h.peer_address],
            check=True, capture_output=True,
        )  # fmt: skip
    gpus = gpus or {h.name: h.gpus for h in hosts}
    conf = root / "slurm.conf"
    port = _free_port()
    conf.write_text(config(root, hosts, hosts[0].peer_address, port, gpus))
    # slurmd drops a GPU without a device file: stand-ins that are character devices (links to /dev/null)
    lines = []
    for h in hosts:
        devices = root / "dev" / h.name
        devices.mkdir(parents=True)
        for i in range(gpus[h.name]):
            (devices / f"nvidia{i}").symlink_to("/dev/null")
        lines.append(f"NodeName={h.name} Name=gpu File={devices}/nvidia[0-{gpus[h.name] - 1}]\n")
    (root / "gres.conf").write_text("".join(lines))
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    cluster = SlurmCluster(root, conf, hosts)
    try:
        subprocess.run(
            ["/usr/sbin/munged", "--force", f"--socket={root / 'munge.socket'}", f"--key-file={key}",
             f"--pid-file={root / 'munged.pid'}", f"--log-file={root / 'munged.log'}",
             f"--seed-file={root / 'munged.seed'}"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        cluster.pids["munged"] = _pid(root / "munged.pid")
        slurmctld = ["/usr/sbin/slurmctld", "-f", str(conf), "-i"]
        subprocess.run(slurmctld, check=True, capture_output=True, env=cluster.env)
        cluster.pids["slurmctld"] = _pid(root / "slurmctld.pid")
        for h in hosts:
            subprocess.run(
                # nsenter enters only the network namespace (`ip netns exec` would remount /sys without
                # the cgroup file system, which slurmd 22.05 needs)
                ["nsenter", f"--net=/run/netns/{h.netns}", "/usr/sbin/slurmd", "-f", str(conf), "-N", h.name],
                check=True, capture_output=True, env=cluster.env,
            )  # fmt: skip
            cluster.pids[f"slurmd-{h.name}"] = _pid(root / f"slurmd-{h.name}.pid")
        cluster.wait_nodes_idle()
        return cluster
    except BaseException:
        cluster.down()
        raise
