"""The test-double server image: debootstrap Debian (tests/infra/images.py) + python3 +
tests/fakes/openai_server.py + the kit's GSM8K test split. Built on the image-building engine, cached by
content, and saved as `make image-save` does (.tar.zst + .sha256 + .id) so the playbooks' image role loads it.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from tests.infra import dockerd, images

REPO = images.REPO
SERVER = REPO / "tests" / "fakes" / "openai_server.py"
GSM8K_TEST = REPO / "evals" / "data" / "gsm8k" / "test.jsonl"
DOCKERFILE = """ARG BASE
FROM ${BASE}
# The repository's layout, so that the server finds evals/data/gsm8k/test.jsonl by default.
COPY openai_server.py /srv/kdakit/tests/fakes/openai_server.py
COPY test.jsonl /srv/kdakit/evals/data/gsm8k/test.jsonl
ENTRYPOINT ["python3", "/srv/kdakit/tests/fakes/openai_server.py"]
"""


def build(engine: dockerd.Dockerd) -> str:
    """Tag of the fake server image in engine (built once per content)."""
    base = images.debian_base(engine)
    digest = hashlib.sha256(
        DOCKERFILE.encode() + base.encode() + SERVER.read_bytes() + GSM8K_TEST.read_bytes()
    )
    tag = f"kdakit-ci/fake-sglang:{digest.hexdigest()[:12]}"
    if engine.image_id(tag) is None:
        with tempfile.TemporaryDirectory() as ctx:
            (Path(ctx) / "Dockerfile").write_text(DOCKERFILE)
            shutil.copy(SERVER, Path(ctx) / "openai_server.py")
            shutil.copy(GSM8K_TEST, Path(ctx) / "test.jsonl")
            engine.cli(
                "build", "--network", "host", "--build-arg", f"BASE={base}", "-t", tag, ctx, timeout=600
            )
    return images.used_image(tag)
