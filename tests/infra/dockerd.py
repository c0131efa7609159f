"""A private Docker engine for tests: Debian's `docker.io` dockerd with its own data root, exec root, socket
and pidfile, never touching the host's network setup (`--bridge=none --iptables=false --ip6tables=false`).

    with dockerd.start(Path("/var/tmp/kdakit-ci/engine")) as engine:
        engine.cli("run", "--rm", "--network", "host", image, "true")

`start(root, netns="h1")` runs the engine inside an existing network namespace (`nsenter --net`, not
`ip netns exec`, which remounts /sys and hides the cgroup mounts dockerd needs), so that host-network
containers of that engine see only the namespace's interfaces. One engine per root at a time (a lock file);
the data root persists, so images and build cache survive for the next run on the same machine.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Debian's 20.10 client: it drives BuildKit itself (DOCKER_BUILDKIT=1, --secret) without the buildx plugin,
# which other clients (e.g. a 28.x in /usr/local/bin) need and which no Debian package ships.
DOCKER_CLI = os.environ.get("KDAKIT_DOCKER_CLI", "/usr/bin/docker")
STALE_BUILD_CACHE = "layer does not exist"  # a build whose cache names a layer the engine no longer has
DOCKERD = os.environ.get("KDAKIT_DOCKERD", shutil.which("dockerd") or "/usr/sbin/dockerd")
SYSTEM_CONTAINERD_SOCKET = Path("/run/containerd/containerd.sock")


class DockerdError(RuntimeError):
    pass


class DockerdBusy(DockerdError):
    """Another live process holds the engine root's lock."""


def unavailable_reason() -> str | None:
    """Why a private dockerd cannot run here (for pytest.skip), or None when it can."""
    if os.geteuid() != 0:
        return "dockerd needs root"
    for path in (DOCKERD, DOCKER_CLI):
        if not os.access(path, os.X_OK):
            return f"{path} missing: install Debian's docker.io (.ci/apt-packages.txt)"
    return None


@dataclass
class Dockerd:
    root: Path
    netns: str | None
    process: subprocess.Popen
    _lock_fd: int = field(repr=False)
    exec_root: Path  # root/exec, or a short folder when that path is too long for sockets

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log_path(self) -> Path:
        return self.root / "dockerd.log"

    def env(self, base: dict | None = None) -> dict[str, str]:
        """Environment for a docker client (or `make image ...`) talking to this engine."""
        env = dict(os.environ if base is None else base)
        env.update(DOCKER_HOST=self.host, DOCKER_BUILDKIT="1")
        return env

    def cli(
        self,
        *args: str,
        check: bool = True,
        timeout: float | None = 600,
        input: bytes | None = None,
        capture: bool = True,
        stdout=None,
        _retried: bool = False,
    ) -> subprocess.CompletedProcess:
        """Run the docker client against this engine; on failure raise with its output."""
        cmd = [DOCKER_CLI, "-H", self.host, *args]
        out = subprocess.PIPE if capture and stdout is None else stdout
        proc = subprocess.run(
            cmd,
            input=input,
            stdout=out,
            stderr=subprocess.PIPE if capture else None,
            env=self.env(),
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            detail = (proc.stderr or b"").decode(errors="replace")[-4000:]
            if args[:1] == ("build",) and STALE_BUILD_CACHE in detail and not _retried:
                # BuildKit's cache can name layers that the cache bound's pruning removed: drop the build
                # cache (the engine's images stay) and build once more
                self.cli("builder", "prune", "--all", "--force", check=False)
                return self.cli(*args, check=check, timeout=timeout, input=input, capture=capture,
                                stdout=stdout, _retried=True)  # fmt: skip
            raise DockerdError(f"{' '.join(cmd)} exited {proc.returncode}:\n{detail}")
        return proc

    def image_id(self, ref: str) -> str | None:
        """The image ID (sha256:...) of ref in this engine, or None when it has no such image."""
        proc = self.cli("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def stop(self, timeout: float = 30) -> None:
        """Remove containers, stop dockerd (and the containerd it started) by PID, unmount what it left."""
        try:
            if self.process.poll() is None:
                ids = self.cli("ps", "-aq", check=False, timeout=30).stdout.decode().split()
                if ids:
                    self.cli("rm", "-f", *ids, check=False, timeout=60)
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
            _kill_pidfile(self.exec_root / "containerd" / "containerd.pid", "containerd")
            unmount_under(self.root)
            if not self.exec_root.is_relative_to(self.root):
                unmount_under(self.exec_root)
                shutil.rmtree(self.exec_root, ignore_errors=True)
            (self.root / "dockerd.pid").unlink(missing_ok=True)
        finally:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    def __enter__(self) -> Dockerd:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _alive(pid: int, name: str) -> bool:
    try:
        return name in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _kill_pidfile(pidfile: Path, name: str, timeout: float = 10) -> None:
    """Stop the process a pidfile names, if it is still alive and really is `name`."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    if not _alive(pid, name):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid, name) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid, name):
        os.kill(pid, signal.SIGKILL)


def stop_leftover(root: Path) -> None:
    """Stop the dockerd (and its containerd) a dead test run left on root, unless a live one holds root's
    lock; unmount what they left."""
    root = Path(root)
    if not (root / "lock").exists():
        return
    lock_fd = os.open(root / "lock", os.O_RDWR)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        _kill_pidfile(root / "dockerd.pid", "dockerd", timeout=30)
        _kill_pidfile(root / "exec" / "containerd" / "containerd.pid", "containerd")
        unmount_under(root)
        (root / "dockerd.pid").unlink(missing_ok=True)
    finally:
        os.close(lock_fd)


def remove_if_unused(root: Path) -> bool:
    """Delete an engine root (its images and containers) unless a live process holds its lock."""
    lock_fd = os.open(root / "lock", os.O_RDWR)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        _kill_pidfile(root / "dockerd.pid", "dockerd", timeout=30)
        unmount_under(root)
        # Renamed first: a deletion cut short never leaves a half-deleted data root under the slot's name
        # (an engine started on one believes it holds layers whose files are gone); prune_cache retries it.
        aside = root.with_name(f"{root.name}.removing-{os.getpid()}-{time.monotonic_ns()}")
        root.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)
        return True
    finally:
        os.close(lock_fd)


def unmount_under(root: Path) -> list[str]:
    """Unmount every mount point below root (overlay layers, nsfs), deepest first; returns them."""
    prefix = str(root.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    return points


def _chain_ids(diff_ids: list[str]) -> list[str]:
    """The layer store's keys of an image's layers, bottom first (Docker's chain IDs)."""
    chains = diff_ids[:1]
    for diff_id in diff_ids[1:]:
        chains.append("sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
    return chains


def copy_images(source_root: Path, dest: Path, lock_timeout: float = 1800) -> Path:
    """A data root at dest holding the tagged images of the engine root source_root, for another engine to
    start on (start's data_from). The image store's metadata is copied and every layer's files are
    hard-linked: seconds and almost no disk, where `docker save | docker load` writes the GBs twice. Safe to
    share: overlay2 never writes a layer's files once the layer exists (a container writes to its own upper
    folder), and removing an image on either engine removes only that engine's links. Under source_root's
    lock, with no dockerd running there (a running one's mounts keep links from crossing)."""
    lock_fd = _take_lock(Path(source_root), lock_timeout)
    try:
        return _copy_images(Path(source_root) / "data", Path(dest))
    finally:
        os.close(lock_fd)


def _copy_images(src: Path, dest: Path) -> Path:
    store = Path("image") / "overlay2"
    metadata_dir = Path("imagedb") / "metadata" / "sha256"
    repositories = json.loads((src / store / "repositories.json").read_text())["Repositories"]
    digests = {image_id.split(":", 1)[1] for refs in repositories.values() for image_id in refs.values()}
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "overlay2" / "l").mkdir(parents=True)
    (dest / store / "imagedb" / "content" / "sha256").mkdir(parents=True)
    layers: set[str] = set()
    for digest in digests:
        config = src / store / "imagedb" / "content" / "sha256" / digest
        shutil.copy2(config, dest / store / "imagedb" / "content" / "sha256" / digest)
        layers.update(_chain_ids(json.loads(config.read_text())["rootfs"]["diff_ids"]))
        # metadata (last update, parent image): the parent link only where that parent comes along too
        metadata = src / store / metadata_dir / digest
        parent = (metadata / "parent").read_text().split(":")[-1] if (metadata / "parent").exists() else None
        if metadata.is_dir():
            ignore = None if parent in digests else shutil.ignore_patterns("parent")
            shutil.copytree(metadata, dest / store / metadata_dir / digest, ignore=ignore)
    layer_folders = []
    for chain_id in layers:
        meta = src / store / "layerdb" / "sha256" / chain_id.split(":", 1)[1]
        shutil.copytree(meta, dest / store / "layerdb" / "sha256" / meta.name)
        folder = src / "overlay2" / (meta / "cache-id").read_text().strip()
        layer_folders.append(str(folder))
        (dest / "overlay2" / "l" / (folder / "link").read_text().strip()).symlink_to(f"../{folder.name}/diff")
    # cp -a keeps what overlayfs reads beside the files: whiteout devices, opaque-directory xattrs
    copy = subprocess.run(["cp", "-a", "--link", *layer_folders, str(dest / "overlay2")], capture_output=True)
    if copy.returncode != 0:
        detail = copy.stderr.decode(errors="replace")[-2000:]
        raise DockerdError(f"copying the layers of {src} failed: {detail}")
    (dest / store / "repositories.json").write_text(json.dumps({"Repositories": repositories}))
    return dest


def _replace_data_root(root: Path, data_from: Path) -> None:
    old = root / "data"
    if old.exists():  # renamed first, as in remove_if_unused: never a half-deleted data root under its name
        old.rename(root / f"data.removing-{os.getpid()}-{time.monotonic_ns()}")
    for aside in root.glob("data.removing-*"):  # this one, and any a killed run left
        shutil.rmtree(aside, ignore_errors=True)
    data_from.rename(old)


def _take_lock(root: Path, timeout: float) -> int:
    """The engine root's lock (its open fd; closing it releases the lock)."""
    lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    while True:  # another test run using the same root waits its turn
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock_fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(lock_fd)
                raise DockerdBusy(
                    f"{root} stayed locked by another dockerd user for {timeout:.0f}s"
                ) from None
            time.sleep(1)


def _ping(sock: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(str(sock))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return s.recv(64).split(b"\r\n", 1)[0].endswith(b" 200 OK")
    except OSError:
        return False


def start(
    root: Path,
    *,
    netns: str | None = None,
    timeout: float = 60,
    lock_timeout: float = 1800,
    extra_args: tuple[str, ...] = (),
    data_from: Path | None = None,
) -> Dockerd:
    """Start a dockerd whose whole state lives under root; return once its API answers. data_from: a data root
    (copy_images) that replaces root's own before dockerd starts."""
    reason = unavailable_reason()
    if reason:
        raise DockerdError(reason)
    root = Path(root).resolve()
    if len(str(root / "docker.sock")) > 100:
        raise DockerdError(f"{root} is too long for a unix socket path")
    root.mkdir(parents=True, exist_ok=True)
    lock_fd = _take_lock(root, lock_timeout)
    engine = None
    try:
        pidfile = root / "dockerd.pid"
        # We hold the lock, so a dockerd still running here belongs to a run that died without stopping it.
        _kill_pidfile(pidfile, "dockerd", timeout=30)
        _kill_pidfile(root / "exec" / "containerd" / "containerd.pid", "containerd")
        pidfile.unlink(missing_ok=True)  # a stale pidfile makes dockerd refuse to start
        unmount_under(root)
        (root / "docker.sock").unlink(missing_ok=True)
        if data_from is not None:
            _replace_data_root(root, Path(data_from))
        exec_root = root / "exec"
        if len(str(exec_root / "containerd" / "containerd-debug.sock")) > 100:
            # containerd puts its sockets under the exec root and unix socket paths stop at ~104 bytes: a
            # deep root (a pytest temp dir numbered past 99) gets a short exec root instead
            exec_root = Path(tempfile.mkdtemp(prefix="kdakit-exec-", dir="/tmp"))
        cmd = [
            DOCKERD,
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(exec_root),
            "-H",
            f"unix://{root / 'docker.sock'}",
            "--pidfile",
            str(pidfile),
            "--storage-driver",
            "overlay2",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
            *extra_args,
        ]
        if netns:
            ns_path = Path("/run/netns") / netns
            if not ns_path.exists():
                raise DockerdError(f"network namespace {netns} does not exist ({ns_path})")
            cmd = ["nsenter", f"--net={ns_path}", *cmd]
        log = open(root / "dockerd.log", "ab")
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()
        engine = Dockerd(root, netns, proc, lock_fd, exec_root)
        ready_by = time.monotonic() + timeout
        while not _ping(engine.socket):
            if proc.poll() is not None or time.monotonic() > ready_by:
                tail = engine.log_path.read_text(errors="replace")[-3000:]
                engine.stop()  # also releases the lock
                raise DockerdError(f"dockerd on {root} did not become ready (rc={proc.poll()}):\n{tail}")
            time.sleep(0.2)
        return engine
    except BaseException:
        if engine is None:
            os.close(lock_fd)
        elif engine._lock_fd >= 0:
            engine.stop()
        raise
