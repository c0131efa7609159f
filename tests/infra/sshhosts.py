"""SSH test hosts for the playbooks: one network namespace per host (veth pair, a /30 that exists only inside
our namespaces), one sshd per namespace, optionally one dockerd per namespace (so that host-network
containers of two hosts never share a network stack), and a stand-in `nvidia-smi` per host that reports N
GPUs of a chosen model.

Two test runs on one machine never touch each other's hosts: each `up()` claims a /24 of 10.80.0.0/12 that no
interface uses and no live run holds (a lock file under /run/kdakit-test-hosts, held while the hosts are up),
and names its namespaces and links after a random per-run token. The claim file lists what the run made;
the next `up()` removes the leftovers of a run that died without `down()` (its lock is free again).

The hosts share the controller's file system; each gets its own folder (root/<name>/) for its sshd, engine,
stand-in binaries, model weights and results. Everything is stopped by PID; `down()` is idempotent.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kdakit.records import paths
from tests.infra import dockerd, images

SSHD = "/usr/sbin/sshd"
# Each run's hosts get one /24 of this pool (4096 of them); host i gets <block>.<4i>/30.
SUBNET_POOL = ipaddress.ip_network("10.80.0.0/12")
CLAIMS = Path(os.environ.get("KDAKIT_TEST_HOSTS_CLAIMS", "/run/kdakit-test-hosts"))
MAX_HOSTS_PER_RUN = 62
# Engines under engine_root/<name>[-k]: a second concurrent run takes the next free slot of a name.
ENGINE_SLOTS = 4

# Prints what the real nvidia-smi prints for the queries the kit makes (fields chosen by --query-gpu).
NVIDIA_SMI_STANDIN = """#!/usr/bin/env python3
import sys
COUNT, MODEL, DRIVER = {count}, {model!r}, {driver!r}
args = sys.argv[1:]
fields = {{"index": None, "name": MODEL, "driver_version": DRIVER, "memory.used": "0",
          "memory.total": "143771", "uuid": None, "vbios_version": "96.00.AF.00.01"}}
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if any(a.startswith("--query-compute-apps") for a in args):
    sys.exit(0)
if query:
    names = query.split(",")
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "csv")
    if "noheader" not in fmt:
        print(", ".join(names))
    for i in range(COUNT):
        row = {{**fields, "index": str(i), "uuid": f"GPU-standin-{{i:04d}}"}}
        print(", ".join(row.get(n) or "[N/A]" for n in names))
    sys.exit(0)
if "-q" in args:
    print(f"==============NVSMI LOG==============\\nDriver Version : {{DRIVER}}\\nAttached GPUs : {{COUNT}}")
    for i in range(COUNT):
        print(f"GPU 00000000:{{i:02X}}:00.0\\n    Product Name : {{MODEL}}")
    sys.exit(0)
if "-L" in args:
    for i in range(COUNT):
        print(f"GPU {{i}}: {{MODEL}} (UUID: GPU-standin-{{i:04d}})")
    sys.exit(0)
print("stand-in nvidia-smi: unsupported arguments", args, file=sys.stderr)
sys.exit(2)
"""


class HostError(RuntimeError):
    pass


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces and sshd need root"
    for tool in (SSHD, shutil.which("ip"), shutil.which("nsenter"), shutil.which("ssh-keygen")):
        if not tool or not os.access(tool, os.X_OK):
            return (
                f"{tool or 'ip/nsenter/ssh-keygen'} missing: install openssh-server openssh-client iproute2"
            )
    return dockerd.unavailable_reason()


@dataclass
class Claim:
    """One run's /24 and name token, held (flock) from up() to down()."""

    token: str
    block: ipaddress.IPv4Network
    path: Path
    fd: int = field(repr=False, default=-1)
    made: dict = field(default_factory=lambda: {"netns": [], "links": [], "pidfiles": [], "engines": []})

    def record(self, kind: str, item: str) -> None:
        self.made[kind].append(item)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"token": self.token, "pid": os.getpid(), **self.made}))
        os.replace(tmp, self.path.with_suffix(".json"))

    def release(self) -> None:
        if self.fd >= 0:
            self.path.with_suffix(".json").unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = -1


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = _run(["ip", "-o", "-4", "addr", "show"], check=False).stdout
    nets = []
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            nets.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    return nets


def _clean_leftovers(record: dict) -> None:
    """Remove what a dead run made (its claim file's list)."""
    for root in record.get("engines", []):
        dockerd.stop_leftover(Path(root))
    for pidfile in record.get("pidfiles", []):
        _kill_pidfile(Path(pidfile))
    for netns in record.get("netns", []):
        _run(["ip", "netns", "del", netns], check=False)
    for link in record.get("links", []):
        _run(["ip", "link", "del", link], check=False)


def sweep_dead_claims() -> list[str]:
    """Clean up after runs that died holding hosts (their lock is free); returns their tokens."""
    CLAIMS.mkdir(parents=True, exist_ok=True)
    swept = []
    for lock in sorted(CLAIMS.glob("*.lock")):
        fd = os.open(lock, os.O_RDWR)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live run holds it
            record_path = lock.with_suffix(".json")
            try:
                record = json.loads(record_path.read_text())
            except (OSError, ValueError):
                record = None
            if record:
                _clean_leftovers(record)
                swept.append(record.get("token", "?"))
            record_path.unlink(missing_ok=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return swept


def claim(rng: random.Random | None = None) -> Claim:
    """A /24 of SUBNET_POOL that no interface uses and no live run holds, and a fresh name token."""
    sweep_dead_claims()
    rng = rng or random.SystemRandom()
    used = _used_networks()
    blocks = list(SUBNET_POOL.subnets(new_prefix=24))
    for block in rng.sample(blocks, 64):
        if any(block.overlaps(net) for net in used):
            continue
        path = CLAIMS / f"{block.network_address}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            same_file = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:  # swept away by another run between open and lock
            os.close(fd)
            continue
        c = Claim(secrets.token_hex(3), block, path, fd)
        c.save()
        return c
    raise HostError(f"no free /24 in {SUBNET_POOL} after 64 tries (see {CLAIMS})")


@dataclass
class TestHost:
    name: str
    index: int
    root: Path
    gpus: int
    gpu_model: str
    claim: Claim | None = field(default=None, repr=False)
    engine: dockerd.Dockerd | None = None

    @property
    def netns(self) -> str:
        return f"kdk-{self.claim.token}-{self.name}"

    @property
    def address(self) -> str:
        return str(self.claim.block.network_address + 4 * self.index + 2)

    @property
    def peer_address(self) -> str:
        return str(self.claim.block.network_address + 4 * self.index + 1)

    @property
    def veth(self) -> str:
        return f"k{self.claim.token}{self.index}"  # plus a/b: interface names are at most 15 characters

    nvidia_smi = paths.path_below("root", "bin", "nvidia-smi")
    model_path = paths.path_below("root", "model")
    sshd_pidfile = paths.path_below("root", "sshd.pid")


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise HostError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def _write_standins(host: TestHost, driver: str) -> None:
    host.nvidia_smi.parent.mkdir(parents=True, exist_ok=True)
    host.nvidia_smi.write_text(
        NVIDIA_SMI_STANDIN.format(count=host.gpus, model=host.gpu_model, driver=driver)
    )
    host.nvidia_smi.chmod(0o755)
    host.model_path.mkdir(parents=True, exist_ok=True)
    (host.model_path / "config.json").write_text('{"model_type": "stand-in"}\n')
    (host.model_path / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 16)


def client_key(root: Path) -> Path:
    key = root / "id_ed25519"
    if not key.exists():
        root.mkdir(parents=True, exist_ok=True)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    shutil.copy(f"{key}.pub", root / "authorized_keys")
    (root / "authorized_keys").chmod(0o600)
    return key


def up(
    root: Path,
    specs: list[tuple[str, int, str]],
    *,
    engine_root: Path | None = None,
    engine_data_from: dict[str, Path] | None = None,
    driver: str = "580.95.05",
) -> list[TestHost]:
    """Start one host per (name, gpu count, gpu model); with engine_root, a dockerd per host under it. A host
    named in engine_data_from starts its engine on that data root (dockerd.copy_images: images it holds
    without loading them)."""
    reason = unavailable_reason()
    if reason:
        raise HostError(reason)
    if len(specs) > MAX_HOSTS_PER_RUN:
        raise HostError(f"at most {MAX_HOSTS_PER_RUN} hosts per run")
    root = Path(root)
    client_key(root)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    run_claim = claim()
    hosts = []
    try:
        for i, (name, gpus, model) in enumerate(specs, start=1):
            host = TestHost(name, i, root / name, gpus, model, run_claim)
            hosts.append(host)
            _kill_pidfile(host.sshd_pidfile)  # an sshd of an earlier run in the same folder
            host.root.mkdir(parents=True, exist_ok=True)
            _write_standins(host, driver)
            run_claim.record("netns", host.netns)
            _run(["ip", "netns", "add", host.netns])
            run_claim.record("links", f"{host.veth}a")
            _run(["ip", "link", "add", f"{host.veth}a", "type", "veth", "peer", "name", f"{host.veth}b"])
            _run(["ip", "link", "set", f"{host.veth}b", "netns", host.netns])
            _run(["ip", "addr", "add", f"{host.peer_address}/30", "dev", f"{host.veth}a"])
            _run(["ip", "link", "set", f"{host.veth}a", "up"])
            _run(["ip", "-n", host.netns, "addr", "add", f"{host.address}/30", "dev", f"{host.veth}b"])
            _run(["ip", "-n", host.netns, "link", "set", f"{host.veth}b", "up"])
            _run(["ip", "-n", host.netns, "link", "set", "lo", "up"])
            hostkey = host.root / "hostkey"
            if not hostkey.exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)])
            config = host.root / "sshd_config"
            config.write_text(
                "\n".join(
                    [
                        f"ListenAddress {host.address}",
                        f"HostKey {hostkey}",
                        f"PidFile {host.sshd_pidfile}",
                        f"AuthorizedKeysFile {root / 'authorized_keys'}",
                        "PermitRootLogin prohibit-password",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "UsePAM no",
                        "StrictModes no",
                        "Subsystem sftp internal-sftp",
                        "MaxSessions 50",
                        "MaxStartups 50:30:100",
                        "",
                    ]
                )
            )
            run_claim.record("pidfiles", str(host.sshd_pidfile))
            start_sshd(host)
            if engine_root is not None:
                data_from = (engine_data_from or {}).get(name)
                host.engine = _start_engine_slot(Path(engine_root), name, host.netns, run_claim, data_from)
        deadline = time.monotonic() + 20
        for host in hosts:
            while not _port_open(host.address, 22):
                if time.monotonic() > deadline:
                    raise HostError(f"sshd of {host.name} does not answer on {host.address}:22")
                time.sleep(0.1)
        return hosts
    except BaseException:
        down(hosts)
        raise


def start_sshd(host: TestHost, wait: float = 0) -> None:
    """(Re)start the host's sshd from its config (fault tests stop it to make the host unreachable)."""
    config = host.root / "sshd_config"
    _run(["ip", "netns", "exec", host.netns, SSHD, "-f", str(config), "-E", str(host.root / "sshd.log")])
    deadline = time.monotonic() + wait
    while wait and not _port_open(host.address, 22):
        if time.monotonic() > deadline:
            raise HostError(f"sshd of {host.name} does not answer on {host.address}:22")
        time.sleep(0.1)


def stop_sshd(host: TestHost) -> None:
    """Stop the host's sshd and its sessions: from now on the host is unreachable."""
    _kill_pidfile(host.sshd_pidfile)
    deadline = time.monotonic() + 10
    while _port_open(host.address, 22) and time.monotonic() < deadline:
        time.sleep(0.1)


def _start_engine_slot(
    engine_root: Path, name: str, netns: str, run_claim: Claim, data_from: Path | None = None
) -> dockerd.Dockerd:
    """The host's engine on the first free slot (engine_root/name, then name-2, ...): a concurrent run never
    waits for, nor stops, another run's engine, and a lone run reuses its data root (loaded images) unless
    data_from replaces it."""
    for k in range(1, ENGINE_SLOTS + 1):
        root = engine_root / (name if k == 1 else f"{name}-{k}")
        try:
            engine = dockerd.start(root, netns=netns, lock_timeout=0, data_from=data_from)
        except dockerd.DockerdBusy:
            continue
        run_claim.record("engines", str(engine.root))
        # this session's (prune_cache may remove it at the session's end; another session's prune may not)
        images.note_session_use(engine.root)
        os.utime(engine.root / "lock")
        return engine
    raise HostError(f"all {ENGINE_SLOTS} engine slots of {name} under {engine_root} are in use")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _kill_pidfile(pidfile: Path) -> None:
    """Stop the sshd we started and its per-connection children (Ansible's ControlPersist sessions would
    otherwise outlive the listener as orphans)."""
    try:
        pid = int(pidfile.read_text().strip())
        if b"sshd" in Path(f"/proc/{pid}/cmdline").read_bytes():
            for child in _children(pid):
                os.kill(child, signal.SIGTERM)
            os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass
    pidfile.unlink(missing_ok=True)


def _down_one(host: TestHost) -> None:
    if host.engine is not None:
        host.engine.stop()
        if re.fullmatch(rf"{re.escape(host.name)}-\d+", host.engine.root.name):
            # a spare slot (_start_engine_slot): its loaded images would only fill the cache
            shutil.rmtree(host.engine.root, ignore_errors=True)
        host.engine = None
    _kill_pidfile(host.sshd_pidfile)
    _run(["ip", "netns", "del", host.netns], check=False)
    _run(["ip", "link", "del", f"{host.veth}a"], check=False)


def down(hosts: list[TestHost]) -> None:
    """Stop engines and sshds by PID, delete namespaces and links, release the run's claim; safe to call
    twice."""
    for host in hosts:
        _down_one(host)
    for run_claim in {id(h.claim): h.claim for h in hosts if h.claim}.values():
        run_claim.release()


def inventory(
    hosts: list[TestHost],
    root: Path,
    group: str,
    host_vars: dict | None = None,
    group_vars: dict | None = None,
) -> dict:
    """An Ansible YAML inventory (as a dict) for the hosts, all in one group."""
    key = root / "id_ed25519"
    entries = {}
    for h in hosts:
        entries[h.name] = {
            "ansible_host": h.address,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
            "ansible_python_interpreter": "/usr/bin/python3",
            "kdakit_nvidia_smi": str(h.nvidia_smi),
            "kdakit_model_path": str(h.model_path),
            "kdakit_host_results_root": str(h.root / "results"),
            "kdakit_host_state_dir": str(h.root / "state"),
            "kdakit_image_disk_path": str(h.root),
            **({"kdakit_docker_host": h.engine.host} if h.engine else {}),
            **((host_vars or {}).get(h.name, {})),
        }
    return {group: {"hosts": entries, "vars": dict(group_vars or {})}}
