"""The kdakit image, built for real: images/Dockerfile through `make image` on a debootstrap stand-in base
(pinned torch/triton/sglang), its self-test run in the result, a wrong-torch base refused, and the
air-gapped tarball round trip (`make image-save` / `make image-load`) into a second, empty engine.

Needs root, Debian's docker.io, debootstrap and zstd (.ci/apt-packages.txt). Slow parts are cached under
/var/tmp/kdakit-ci (tests/infra/images.py): cold about 10 minutes, warm about 1-2.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from kdakit.facts import pins
from tests.infra import dockerd, images

pytestmark = [pytest.mark.docker, pytest.mark.integration]

TAG = "kdakit:ci-test"


@pytest.fixture(scope="module")
def engine():
    reason = dockerd.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with images.start_engine() as eng:
        yield eng


@pytest.fixture(scope="module")
def standin(engine):
    return images.standin_base(engine)


@pytest.fixture(scope="module")
def built(engine, standin):
    return images.kdakit_image(engine, standin, tag=TAG, SKU="h200")


def selftest(engine, *args: str, env: dict | None = None) -> tuple[int, dict]:
    cmd = ["run", "--rm", "--network", "none"]
    for key, value in (env or {}).items():
        cmd += ["-e", f"{key}={value}"]
    proc = engine.cli(*cmd, TAG, "selftest", "--json", *args, check=False, timeout=300)
    out = proc.stdout.decode()
    assert out.strip(), proc.stderr.decode()[-3000:]
    return proc.returncode, json.loads(out)


def by_name(report: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def test_image_builds_and_its_selftest_passes(engine, built):
    assert built.image_id and built.image_id.startswith("sha256:")
    rc, report = selftest(engine, "--arm", "helion")
    status = by_name(report)
    for name in ("torch", "triton", "helion", "sglang", "lm-eval"):
        assert status[f"{name} version"] == "PASS"
    assert status["torch CUDA version"] == "PASS"
    # kdakit's integration patch is applied in the image: every phase resolves to kdakit's kernels.
    assert {status[f"arm helion: {p}"] for p in ("decode kernel", "verify kernel", "prefill kernel")} == {
        "PASS"
    }
    assert {s for n, s in status.items() if n.startswith("GPU parity")} == {"SKIP"}  # no GPU in CI
    assert rc == 0 and "FAIL" not in status.values()
    assert report["image"]["sku"] == "h200" and len(report["image"]["image_revision"].split("-")[0]) == 40


def test_upstream_switch_in_the_image(engine, built):
    rc, report = selftest(engine, "--arm", "helion-upstream", env={"KDAKIT_HELION_KERNELS": "upstream"})
    assert rc == 0, report
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert details["arm helion-upstream: decode kernel"].startswith("sglang.kernels.ops.attention.helion")
    # The image defaults to kdakit's kernels, so asking for the upstream arm without the switch fails.
    rc, report = selftest(engine, "--arm", "helion-upstream")
    assert rc == 1 and by_name(report)["KDAKIT_HELION_KERNELS"] == "FAIL"


def test_image_provenance_and_baked_gsm8k(engine, built):
    inspect = json.loads(engine.cli("image", "inspect", TAG).stdout)[0]
    labels, env = inspect["Config"]["Labels"], dict(e.split("=", 1) for e in inspect["Config"]["Env"])
    revision = labels["org.opencontainers.image.revision"].removesuffix("-dirty")
    assert len(revision) == 40  # the commit the image was built from, and this checkout knows it
    assert (
        subprocess.run(["git", "cat-file", "-e", f"{revision}^{{commit}}"], cwd=images.REPO).returncode == 0
    )
    assert labels["org.opencontainers.image.created"][:2] == "20"
    assert f"torch={pins.package('torch')}" in labels["io.kdakit.pins"]
    assert env["KDAKIT_HELION_KERNELS"] == "kdakit" and env["KDAKIT_SKU"] == "h200"
    assert inspect["Config"]["Entrypoint"] == ["kdakit"]
    # The baked data matches the pinned sums (checked again here, by the image's own sha256sum).
    proc = engine.cli("run", "--rm", "--network", "none", "--entrypoint", "sh", TAG, "-c",
                      "cd $KDAKIT_GSM8K_DIR && sha256sum -c /opt/kdakit/build/gsm8k.sha256")  # fmt: skip
    assert proc.stdout.decode().count(": OK") == 3


def test_build_refuses_a_base_with_the_wrong_torch(engine):
    wrong = images.wrong_torch_base(engine)
    build = images.kdakit_image(engine, wrong, tag="kdakit:ci-wrong-torch", check=False)
    assert build.returncode != 0
    assert f"torch: the base image has {images.WRONG_TORCH}" in build.output
    assert f"pins.toml wants {pins.package('torch')}" in build.output
    assert engine.image_id("kdakit:ci-wrong-torch") is None


def test_selftest_fails_in_the_image_when_torch_was_swapped(engine, built):
    """Someone pip-installs another torch into the image: its selftest must say so and exit non-zero."""
    swapped = images.torch_swapped_image(engine, TAG)
    proc = engine.cli(
        "run", "--rm", "--network", "none", swapped, "selftest", "--json", check=False, timeout=300
    )
    report = json.loads(proc.stdout)
    status = {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}
    assert proc.returncode == 1
    assert status["torch version"][0] == "FAIL" and images.WRONG_TORCH in status["torch version"][1]
    assert status["triton version"][0] == "PASS"


def test_save_load_round_trip_checks_sha256_and_image_id(engine, standin, tmp_path):
    """`make image-save`, then `make image-load` into a second, empty engine; a corrupted tarball and a
    tarball whose recorded ID is wrong are refused. (A small image: the targets do not depend on size.)"""
    small = images.debian_base(engine)
    tarball = tmp_path / "out" / "debian.tar.zst"
    saved = images.make("image-save", engine, IMAGE=small, FILE=str(tarball))
    assert saved.returncode == 0, saved.stderr
    recorded_id = (tmp_path / "out" / "debian.tar.zst.id").read_text().strip()
    assert recorded_id == engine.image_id(small)
    assert (tmp_path / "out" / "debian.tar.zst.sha256").read_text().split()[1] == "debian.tar.zst"

    with dockerd.start(tmp_path / "site") as site:  # the air-gapped site: an engine with nothing in it
        assert site.image_id(small) is None
        # A flipped byte: refused before anything is loaded.
        bad = tmp_path / "bad"
        bad.mkdir()
        data = bytearray(tarball.read_bytes())
        data[len(data) // 2] ^= 0xFF
        (bad / "debian.tar.zst").write_bytes(bytes(data))
        for suffix in (".sha256", ".id"):
            (bad / f"debian.tar.zst{suffix}").write_text(
                (tmp_path / "out" / f"debian.tar.zst{suffix}").read_text()
            )
        refused = images.make("image-load", site, FILE=str(bad / "debian.tar.zst"))
        assert refused.returncode != 0 and "FAILED" in refused.stdout + refused.stderr
        assert site.image_id(small) is None
        # The right tarball with a wrong recorded ID: loaded, but the mismatch is reported as a failure.
        wrong_id = tmp_path / "wrongid"
        wrong_id.mkdir()
        (wrong_id / "debian.tar.zst").write_bytes(tarball.read_bytes())
        (wrong_id / "debian.tar.zst.sha256").write_text(
            (tmp_path / "out" / "debian.tar.zst.sha256").read_text()
        )
        (wrong_id / "debian.tar.zst.id").write_text("sha256:" + "0" * 64 + "\n")
        mismatch = images.make("image-load", site, FILE=str(wrong_id / "debian.tar.zst"))
        assert mismatch.returncode != 0 and "image ID mismatch" in mismatch.stderr
        # The real thing: checked, loaded, same ID and tag as on the builder.
        loaded = images.make("image-load", site, FILE=str(tarball))
        assert loaded.returncode == 0, loaded.stderr
        assert site.image_id(small) == recorded_id
        assert f"loaded {recorded_id}" in loaded.stdout


@pytest.fixture
def registry(tmp_path):
    """Debian's docker-registry on a free loopback port (dockerd trusts 127.0.0.0/8 over plain HTTP)."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("docker-registry missing: install it (.ci/apt-packages.txt)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'registry'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_push_records_the_registry_digest(engine, registry, tmp_path):
    small = images.debian_base(engine)
    pushed = images.make(
        "image-push", engine, IMAGE=small, REGISTRY=f"{registry}/site", IMAGE_OUT=str(tmp_path)
    )
    assert pushed.returncode == 0, pushed.stderr
    ref, digest, image_id = (tmp_path / "pushed.txt").read_text().split()
    repo, tag = small.split(":")
    assert ref == f"{registry}/site/{small}" and image_id == engine.image_id(small)
    # The recorded digest is the one the registry serves for that tag.
    request = urllib.request.Request(
        f"http://{registry}/v2/site/{repo}/manifests/{tag}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert digest == f"{registry}/site/{repo}@{resp.headers['Docker-Content-Digest']}"
    finally:
        engine.cli("rmi", ref, check=False)
