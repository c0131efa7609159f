"""Build (cached) the images the Docker tests need, on a private dockerd (tests/infra/dockerd.py).

- `debian_base(engine)`: Debian bookworm made by debootstrap, imported with `docker import` (no registry).
- `standin_base(engine)`: stand-in for SGLang's CUDA 13 image: that Debian plus a venv holding the pinned
  torch (PyPI's CUDA build, run on the CPU), triton and `sglang --no-deps`, from a wheelhouse assembled on
  the host with `pip download` (so pip's local caches and mirrors count) and bind-mounted into the build.
- `wrong_torch_base(engine)`: the stand-in whose torch reports another version (2.13.0; relabel_dist.py),
  which the kdakit build must refuse.
- `kdakit_image(engine, base)`: `make -f images/images.mk image` on a base: the real images/Dockerfile.
- `image_tarball(engine, ref)`: `make image-save` output (.tar.zst + .sha256 + .id), for hosts to load.

Slow things are cached under $KDAKIT_CI_CACHE (default /var/tmp/kdakit-ci, outside the repo): the
debootstrap tarball, wheelhouses, and the engine's data root (images and BuildKit cache). Everything also
works from nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kdakit.launch.hostlock import serialised
from tests.infra import dockerd

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("KDAKIT_CI_CACHE", "/var/tmp/kdakit-ci"))
CACHE_BUDGET = int(float(os.environ.get("KDAKIT_CI_CACHE_GB", "15")) * 1e9)
# Another run's entries younger than this are kept by prune_cache (that run may still use them).
RECENT_S = 3600
_USED: set[Path] = set()  # cache entries (wheelhouses, tarballs) this process used
# This test session's id (tests/conftest.py sets it in the controller; xdist workers inherit it): what the
# session uses is noted in its ledger, CACHE/sessions/<id>/, and prune_cache counts only that as its own, so
# a second session on this machine never takes another's fresh stamps (or idle hosts) for its own.
SESSION_ENV = "KDAKIT_TEST_SESSION"
_USED_IMAGES: set[str] = set()  # image tags this process built or reused on the image-building engine
ENGINE_ROOT = CACHE / "engine"  # the image-building engine; its data root is the layer cache
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("KDAKIT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# patch: kdakit's SGLang integration applies a unified diff; ca-certificates: pip over TLS.
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates", "patch")
STANDIN_DOCKERFILE = Path(__file__).with_name("standin-base.Dockerfile")
WRONG_TORCH = "2.13.0"  # any torch version but the pinned one
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # the build's pip trusts what the host trusts (TLS proxy)


def _pins() -> dict:
    sys.path.insert(0, str(REPO))
    from kdakit.facts import pins

    return pins.load(REPO / "pins.toml")


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:16]


def _locked(path: Path):
    """Serialise builders of one cache entry (two test runs on one machine)."""
    return serialised(path, suffix=".lock")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def used_image(tag: str) -> str:
    """Note that this run uses tag on the image-building engine (prune_cache keeps it, in any process on
    this machine for RECENT_S); returns tag."""
    _USED_IMAGES.add(tag)
    note_session_use(f"image:{tag}")
    stamp = _image_use_stamp(tag)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(f"{tag}\n")
    return tag


def _image_use_stamp(tag: str) -> Path:
    return CACHE / "image-uses" / _key(tag)


def used_recently(tag: str) -> bool:
    """Whether some run on this machine used tag in the last RECENT_S (another xdist worker, another run)."""
    try:
        return time.time() - _image_use_stamp(tag).stat().st_mtime < RECENT_S
    except OSError:
        return False


def start_engine(root: Path = ENGINE_ROOT) -> dockerd.Dockerd:
    return dockerd.start(root)


def cache_size(path: Path | None = None) -> int:
    """Bytes under path (default: the cache; hard links counted once: the wheel pool and its wheelhouses
    share files)."""
    proc = subprocess.run(["du", "-sb", str(path or CACHE)], capture_output=True, text=True)
    return int(proc.stdout.split()[0]) if proc.returncode == 0 and proc.stdout else 0


def _ledger() -> Path | None:
    session = os.environ.get(SESSION_ENV)
    return CACHE / "sessions" / session if session else None


def session_file(name: str) -> Path | None:
    """A file of this test session's own, in its ledger (removed with it)."""
    ledger = _ledger()
    return ledger / name if ledger is not None else None


def note_session_use(what: object) -> None:
    """Note in this session's ledger that it uses what (a cache entry's path, an image, a host engine)."""
    ledger = _ledger()
    if ledger is not None:
        ledger.mkdir(parents=True, exist_ok=True)
        (ledger / _key(what)).write_text(f"{what}\n")


def session_used(what: object) -> bool:
    ledger = _ledger()
    return ledger is not None and (ledger / _key(what)).exists()


def _mark_used(entry: Path, stamp: Path) -> None:
    _USED.add(entry)
    note_session_use(entry)
    os.utime(stamp)  # "recently used", for another run's prune_cache


def _stale(entry: Path, stamp: Path) -> bool:
    """Not used by this run, and not recently by another one."""
    try:
        return not _ours(entry, stamp) and time.time() - stamp.stat().st_mtime > RECENT_S
    except OSError:
        return True


def session_used_cache() -> bool:
    """Whether this process or this session (any xdist worker) used the cache: its ledger holds a note (every
    Docker test notes the images it uses). Another session's stamps, however fresh, do not count."""
    ledger = _ledger()
    return bool(_USED or _USED_IMAGES) or (ledger is not None and any(ledger.glob("*")))


def _ours(entry: Path, stamp: Path) -> bool:
    """Used by this process, or by this session (another of its xdist workers)."""
    return entry in _USED or session_used(entry)


def _idle_host_engine_removable(root: Path) -> bool:
    """A test host's engine goes only when this session used it or no run has in the last RECENT_S (its lock
    file's mtime: sshhosts touches it at every start)."""
    try:
        return session_used(root) or time.time() - (root / "lock").stat().st_mtime > RECENT_S
    except OSError:
        return False


@contextlib.contextmanager
def _build_engine_if_free():
    """The image-building engine, started for the caller; None while another run holds it (the next run's
    prune gets to it)."""
    try:
        engine = dockerd.start(ENGINE_ROOT, lock_timeout=0)
    except dockerd.DockerdError:
        yield None
        return
    try:
        yield engine
    finally:
        engine.stop()


def prune_cache(budget: int | None = None, log=None) -> int:
    """Keep the cache within budget (default CACHE_BUDGET): drop tarballs and wheelhouses no run uses now and
    pool wheels no wheelhouse links to; when still over budget, the BuildKit cache no build used in the last
    hour, then idle test-host engines, then the image-building engine's images that no run used in the last
    hour and BuildKit cache beyond 2 GB. Runs at the end of a test session that used the cache
    (tests/conftest.py: in xdist's controller, after its workers); returns the size left."""
    budget = CACHE_BUDGET if budget is None else budget
    log = log or sys.__stderr__  # past pytest's capture
    for tarball in (CACHE / "tarballs").glob("*.tar.zst"):
        if _stale(tarball, tarball):
            for suffix in ("", ".sha256", ".id", ".source", ".lock"):
                Path(f"{tarball}{suffix}").unlink(missing_ok=True)
    for folder in (CACHE / "wheelhouse").glob("*"):
        if folder.is_dir() and _stale(folder, folder / ".complete"):
            shutil.rmtree(folder, ignore_errors=True)
    for context in (CACHE / "standin-context").glob("*"):
        if context.is_dir() and _stale(context, context / ".complete"):
            shutil.rmtree(context, ignore_errors=True)
    # Still over budget: what only a rebuild of the stand-in needs (its image is the cache), then BuildKit's
    # records no build reused for an hour, then the test hosts' engines that no run holds (the next run loads
    # its images again), then build-engine images.
    if cache_size() > budget:
        for name in ("wheelhouse", "standin-context"):
            for entry in (CACHE / name).glob("*"):
                stamp = entry / ".complete"
                if entry.is_dir() and (_ours(entry, stamp) or _stale(entry, stamp)):
                    shutil.rmtree(entry, ignore_errors=True)
    # BuildKit keeps its own copy of each layer it built: the stand-in's (GBs; its tag is the cache) and each
    # commit's benchmark-client layer stay until pruned. A build touches the records it reuses, so those
    # unused for an hour cost no rebuild.
    if session_used_cache() and (ENGINE_ROOT / "data").exists() and cache_size() > budget:
        with _build_engine_if_free() as engine:
            if engine is not None:
                engine.cli("builder", "prune", "--force", "--filter", f"until={RECENT_S}s", check=False)
    if cache_size() > budget:
        for hosts_root in (CACHE / "playbook-hosts", CACHE / "fault-hosts"):
            for root in hosts_root.glob("*"):
                if _idle_host_engine_removable(root) and dockerd.remove_if_unused(root):
                    print(f"kdakit CI cache: removed the idle test-host engine {root}", file=log)
    # Images cost a rebuild (minutes), so they go last, and never one that another run on this machine
    # built or used in the last hour.
    if session_used_cache() and (ENGINE_ROOT / "data").exists() and cache_size() > budget:
        with _build_engine_if_free() as engine:
            if engine is not None:
                listed = engine.cli(
                    "images", "--format", "{{.Repository}}:{{.Tag}} {{.CreatedAt}}", check=False
                )
                for line in listed.stdout.decode().splitlines():
                    ref, _, created = line.partition(" ")
                    try:
                        stamp = time.mktime(time.strptime(created[:19], "%Y-%m-%d %H:%M:%S"))
                    except ValueError:
                        stamp = 0.0
                    recent = time.time() - stamp < RECENT_S or used_recently(ref)
                    if ref not in _USED_IMAGES and not ref.endswith(":<none>") and not recent:
                        engine.cli("rmi", ref, check=False)
                engine.cli("image", "prune", "--force", check=False)
                engine.cli("builder", "prune", "--force", "--keep-storage", "2GB", check=False)
    for wheel in (CACHE / "wheels").glob("*.whl"):
        if wheel.stat().st_nlink == 1:
            wheel.unlink(missing_ok=True)
    ledger = _ledger()
    if ledger is not None:
        shutil.rmtree(ledger, ignore_errors=True)  # this session is over
    for old in (CACHE / "sessions").glob("*"):
        if time.time() - old.stat().st_mtime > 24 * 3600:  # a session that died before its prune
            shutil.rmtree(old, ignore_errors=True)
    size = cache_size()
    verdict = "within" if size <= budget else "OVER"
    print(
        f"kdakit CI cache {CACHE}: {size / 1e9:.1f} GB, {verdict} the {budget / 1e9:.0f} GB budget", file=log
    )
    return size


def debootstrap_tarball() -> Path:
    """A minbase Debian rootfs as a tarball (about a minute to make, then cached)."""
    out = CACHE / "debootstrap" / f"{DEBIAN_SUITE}-{_key(DEBIAN_MIRROR, DEBIAN_PACKAGES)}.tar"
    with _locked(out):
        if out.exists():
            return out
        rootfs = out.with_suffix(".rootfs")
        shutil.rmtree(rootfs, ignore_errors=True)
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(DEBIAN_PACKAGES)}",
                DEBIAN_SUITE,
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            timeout=1200,
        )
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True)
        tmp = out.with_suffix(".tmp")
        _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tmp), "."])
        tmp.rename(out)
        shutil.rmtree(rootfs, ignore_errors=True)
        return out


def debian_base(engine: dockerd.Dockerd) -> str:
    """Import the debootstrap rootfs as an image; returns its tag."""
    tarball = debootstrap_tarball()
    tag = f"kdakit-ci/debian:{DEBIAN_SUITE}-{tarball.stem.rsplit('-', 1)[-1]}"
    if engine.image_id(tag) is None:
        with open(tarball, "rb") as f:
            engine.cli(
                "import",
                "--change",
                'CMD ["/bin/bash"]',
                "--change",
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "-",
                tag,
                capture=True,
                stdout=subprocess.PIPE,
                input=f.read(),
                timeout=600,
            )
    return used_image(tag)


def _dedupe_into_pool(folder: Path) -> None:
    """Replace each wheel by a hard link into CACHE/wheels (one copy per file name across wheelhouses: the
    nvidia-* wheels of two torch versions are mostly the same files)."""
    pool = CACHE / "wheels"
    pool.mkdir(parents=True, exist_ok=True)
    for wheel in folder.glob("*.whl"):
        pooled = pool / wheel.name
        if not pooled.exists():
            os.link(wheel, pooled)
        elif not os.path.samefile(wheel, pooled) and pooled.stat().st_size == wheel.stat().st_size:
            tmp = wheel.with_name(wheel.name + ".link")
            os.link(pooled, tmp)
            os.replace(tmp, wheel)


def wheelhouse(requirements: tuple[str, ...], no_deps: tuple[str, ...] = ()) -> Path:
    """Wheels for `requirements` (with their dependencies) and `no_deps` (without), via the host's pip."""
    out = CACHE / "wheelhouse" / _key(requirements, no_deps, sys.version_info[:2])
    with _locked(out):
        if (out / ".complete").exists():
            _mark_used(out, out / ".complete")
            return out
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        # The host's Python and glibc match the stand-in's (CPython 3.11, Debian bookworm).
        pip = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(out)]
        if requirements:
            _run([*pip, *requirements], timeout=3600)
        if no_deps:
            _run([*pip, "--no-deps", *no_deps], timeout=3600)
        _dedupe_into_pool(out)
        (out / ".complete").write_text("\n".join((*requirements, *no_deps)) + "\n")
        _mark_used(out, out / ".complete")
        return out


def _build(
    engine: dockerd.Dockerd,
    dockerfile: Path,
    context: Path,
    tag: str,
    args: dict[str, str],
    timeout: float = 3600,
) -> str:
    cmd = ["build", "--network", "host", "-f", str(dockerfile), "-t", tag]
    for name, value in args.items():
        cmd += ["--build-arg", f"{name}={value}"]
    engine.cli(*cmd, str(context), timeout=timeout)
    return engine.image_id(tag)


# What importing SGLang's KDA backend adapter needs beyond torch (found by importing it in the bare stand-in).
SGLANG_IMPORT_DEPS = ("orjson", "pybase64", "requests", "pillow", "starlette", "msgspec", "pydantic", "pyzmq",
                      "tqdm", "ipython", "aiohttp")  # fmt: skip


def _standin_context(torch_wheels: Path, deps_wheels: Path) -> Path:
    """A build context with torch/ and deps/ (hard links into the wheelhouses: no copies, and each
    subfolder's content alone decides whether its layer is rebuilt)."""
    out = CACHE / "standin-context" / _key(torch_wheels, deps_wheels)
    with _locked(out):
        if not (out / ".complete").exists():
            shutil.rmtree(out, ignore_errors=True)
            for name, src in (("torch", torch_wheels), ("deps", deps_wheels)):
                (out / name).mkdir(parents=True)
                for wheel in src.glob("*.whl"):
                    os.link(wheel, out / name / wheel.name)
            (out / ".complete").touch()
        _mark_used(out, out / ".complete")
    return out


def standin_base(engine: dockerd.Dockerd) -> str:
    """The stand-in base with the pinned stack; returns its tag. Cached by content."""
    p = _pins()["packages"]
    base = debian_base(engine)
    args = {"DEBIAN_BASE": base, "TORCH_VERSION": p["torch"], "TRITON_VERSION": p["triton"],
            "SGLANG_VERSION": p["sglang"], "SGLANG_IMPORT_DEPS": " ".join(SGLANG_IMPORT_DEPS)}  # fmt: skip
    tag = f"kdakit-ci/standin:{_key(STANDIN_DOCKERFILE.read_text(), args)}"
    if engine.image_id(tag) is None:  # only a build needs the wheelhouses (3 GB of wheels on the disk)
        no_deps = (f"triton=={p['triton']}", f"sglang=={p['sglang']}")
        torch_wheels = wheelhouse((f"torch=={p['torch']}",), no_deps)
        deps_wheels = wheelhouse(SGLANG_IMPORT_DEPS)
        _build(engine, STANDIN_DOCKERFILE, _standin_context(torch_wheels, deps_wheels), tag, args)
        # BuildKit keeps a copy of the sent context (GBs of wheels); the tag is the cache from now on.
        engine.cli("builder", "prune", "--force", "--filter", "type=source.local", check=False)
    return used_image(tag)


# Another torch version, as the version checks see it: the installed torch relabelled (relabel_dist.py), a
# small layer instead of a second 2.5 GB torch with its nvidia-* wheels (download, install, cache).
RELABEL_SCRIPT = Path(__file__).with_name("relabel_dist.py")
RELABEL_DOCKERFILE = """\
ARG IMAGE
FROM ${IMAGE}
ARG DIST
ARG VERSION
COPY relabel_dist.py /tmp/relabel_dist.py
RUN python3 /tmp/relabel_dist.py "${DIST}" "${VERSION}" && rm /tmp/relabel_dist.py
"""


def relabelled_image(engine: dockerd.Dockerd, image: str, prefix: str, torch: str = WRONG_TORCH) -> str:
    """`image` whose installed torch reports version `torch`; returns its tag (cached by content)."""
    image_id = engine.image_id(image)
    tag = f"{prefix}:{_key(RELABEL_DOCKERFILE, RELABEL_SCRIPT.read_text(), image_id, torch)}"
    if engine.image_id(tag) is None:
        context = CACHE / "relabel-context"
        with _locked(context):
            context.mkdir(parents=True, exist_ok=True)
            (context / "Dockerfile").write_text(RELABEL_DOCKERFILE)
            shutil.copy(RELABEL_SCRIPT, context / "relabel_dist.py")
            _build(engine, context / "Dockerfile", context, tag,
                   {"IMAGE": image, "DIST": "torch", "VERSION": torch}, timeout=600)  # fmt: skip
    return used_image(tag)


def wrong_torch_base(engine: dockerd.Dockerd) -> str:
    """The stand-in with torch reporting 2.13.0 instead of the pin: the kdakit image build must refuse it."""
    return relabelled_image(engine, standin_base(engine), "kdakit-ci/standin-wrong-torch")


def _commit_date() -> str:
    """HEAD's commit time: as the tests' build date, an unchanged tree rebuilds to the same image ID (and
    tarball), instead of a new 3 GB tarball per run."""
    proc = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=REPO, capture_output=True, text=True)
    seconds = int(proc.stdout.strip() or 0)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def torch_swapped_image(engine: dockerd.Dockerd, image: str, torch: str = WRONG_TORCH) -> str:
    """`image` after someone swapped its torch (what the in-image selftest must catch)."""
    return relabelled_image(engine, image, "kdakit-ci/torch-swapped", torch)


@dataclass
class Build:
    returncode: int
    output: str
    seconds: float
    image_id: str | None


def make(
    target: str, engine: dockerd.Dockerd, timeout: float = 3600, **variables: str
) -> subprocess.CompletedProcess:
    """Run one of images/images.mk's targets against the engine (Debian's BuildKit-capable client); the
    image ID files go to the cache, never into the checkout's out/."""
    variables.setdefault("IMAGE_OUT", str(CACHE / "image-out"))
    cmd = [
        "make",
        "--no-print-directory",
        "-f",
        str(REPO / "images" / "images.mk"),
        target,
        f"DOCKER={dockerd.DOCKER_CLI}",
        f"PYTHON={sys.executable}",
        *(f"{k}={v}" for k, v in variables.items()),
    ]
    return subprocess.run(cmd, cwd=REPO, env=engine.env(), capture_output=True, text=True, timeout=timeout)


def kdakit_image(
    engine: dockerd.Dockerd, base: str, tag: str = "kdakit:ci", check: bool = True, **variables: str
) -> Build:
    """`make image` on a base image; with check, raise when the build fails."""
    t0 = time.monotonic()
    variables.setdefault("BUILD_DATE", _commit_date())
    variables.setdefault("CA_BUNDLE", CA_BUNDLE if Path(CA_BUNDLE).is_file() else "")
    proc = make("image", engine, BASE_IMAGE=base, IMAGE=tag, **variables)
    used_image(tag)
    build = Build(
        proc.returncode,
        proc.stdout + proc.stderr,
        time.monotonic() - t0,
        engine.image_id(tag) if proc.returncode == 0 else None,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"make image failed ({proc.returncode}):\n{build.output[-6000:]}")
    return build


def tarball_path(engine: dockerd.Dockerd, ref: str) -> Path:
    """Where image_tarball saves ref (named by image ID)."""
    image_id = engine.image_id(ref)
    if image_id is None:
        raise RuntimeError(f"no image {ref} in the engine at {engine.root}")
    return CACHE / "tarballs" / f"{image_id.split(':')[-1][:16]}.tar.zst"


def image_tarball(engine: dockerd.Dockerd, ref: str) -> Path:
    """`make image-save` of ref into the cache; returns the .tar.zst path."""
    out = tarball_path(engine, ref)
    with _locked(out):
        if not (out.exists() and Path(f"{out}.sha256").exists() and Path(f"{out}.id").exists()):
            proc = make("image-save", engine, IMAGE=ref, FILE=str(out))
            if proc.returncode != 0:
                raise RuntimeError(f"make image-save failed:\n{proc.stdout}\n{proc.stderr}")
    _mark_used(out, out)
    return out
