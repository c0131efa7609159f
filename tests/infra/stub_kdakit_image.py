"""A small stand-in for the kdakit image, for the fault tests: the test-double server image (Debian +
python3 + tests/fakes/openai_server.py) plus a `kdakit` whose `eval gsm8k` and `bench serving` print their
usual verdict line and exit 0, or sleep first (`--stub-sleep S`: a long step to interrupt). A few hundred MB,
not the 3 GB kdakit image: the fault cases test the rollout, not the measurements (those run in
tests/test_playbooks_cluster.py on the real image).

They are built on an engine of their own (ENGINE_ROOT), never the image-building one that the other Docker
tests hold for minutes (h1 of the playbook cluster runs on its data root): the fault tests run beside them.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from tests.infra import dockerd, fake_server_image, images

ENGINE_ROOT = images.CACHE / "stub-engine"  # its images are the layer cache; keep_only bounds them

# It ends at docker stop's SIGTERM: as a container's PID 1 without a handler it would ignore the signal and be
# killed only after the engine's 10 s stop timeout (the interrupted steps' cleanup waited on that).
STUB = """#!/usr/bin/env python3
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
args = sys.argv[1:]
if "--stub-sleep" in args:
    time.sleep(float(args[args.index("--stub-sleep") + 1]))
what = " ".join(args[:2])
tag = {"eval gsm8k": "[gsm8k]", "bench serving": "[bench]"}.get(what, "[kdakit]")
print(f"{tag} stub {what}: ok", flush=True)
"""
DOCKERFILE = """ARG BASE
FROM ${BASE}
COPY kdakit /usr/local/bin/kdakit
RUN chmod 0755 /usr/local/bin/kdakit
ARG VARIANT=0
LABEL io.kdakit.test-variant=${VARIANT}
"""


def build(engine: dockerd.Dockerd, variant: int = 0) -> str:
    """Tag of the stub image (variant: same content, another image ID)."""
    base = fake_server_image.build(engine)
    key = hashlib.sha256(f"{DOCKERFILE}{STUB}{engine.image_id(base)}{variant}".encode()).hexdigest()[:12]
    tag = f"kdakit-ci/kdakit-stub:{key}"
    if engine.image_id(tag) is None:
        with tempfile.TemporaryDirectory() as ctx:
            (Path(ctx) / "Dockerfile").write_text(DOCKERFILE)
            (Path(ctx) / "kdakit").write_text(STUB)
            engine.cli("build", "--network", "host", "--build-arg", f"BASE={base}",
                       "--build-arg", f"VARIANT={variant}", "-t", tag, ctx, timeout=600)  # fmt: skip
    return images.used_image(tag)


def keep_only(engine: dockerd.Dockerd, tags: list[str]) -> None:
    """Untag the engine's stub and server images other than tags (made from earlier inputs), then drop their
    layers; the Debian base stays (an import saved)."""
    listed = engine.cli("images", "--format", "{{.Repository}}:{{.Tag}}", check=False).stdout.decode()
    for ref in listed.split():
        if ref.startswith(("kdakit-ci/kdakit-stub:", "kdakit-ci/fake-sglang:")) and ref not in tags:
            engine.cli("rmi", ref, check=False)
    engine.cli("image", "prune", "--force", check=False)
