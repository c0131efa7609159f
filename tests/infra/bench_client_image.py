"""The kdakit image plus what SGLang's benchmark client imports (transformers, tokenizers, ...).

SGLang's real CUDA image carries these; the CI stand-in base (tests/infra/standin-base.Dockerfile) installs
SGLang with --no-deps and so lacks them. This layer restores them, at the versions of pyproject's
`benchclient` extra, under the kdakit image's own constraints (its torch/triton/sglang stay untouched).
"""

from __future__ import annotations

import hashlib
import tempfile
import tomllib
from pathlib import Path

from tests.infra import dockerd, images

DOCKERFILE = """ARG BASE
FROM ${BASE}
COPY requirements.txt /tmp/bench-client-requirements.txt
RUN --mount=type=secret,id=cacert --mount=type=cache,target=/root/.cache/pip \\
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi \\
    && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --constraint /opt/kdakit/constraints.txt \\
        -r /tmp/bench-client-requirements.txt
"""


def requirements() -> list[str]:
    extras = tomllib.loads((images.REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    reqs = []
    for req in extras["benchclient"]:
        if req.startswith("kdakit["):
            reqs += extras["sglang-cli"]
        elif not req.startswith(("torch==", "triton==")):  # the image's own, never replaced
            reqs.append(req)
    return reqs


def build(engine: dockerd.Dockerd, base: str) -> str:
    """Tag of the kdakit image with the benchmark client's imports, built on base (cached by content)."""
    reqs = "\n".join(requirements()) + "\n"
    base_id = engine.image_id(base)
    tag = "kdakit-ci/kdakit-bench:" + hashlib.sha256(f"{DOCKERFILE}{base_id}{reqs}".encode()).hexdigest()[:12]
    if engine.image_id(tag) is None:
        with tempfile.TemporaryDirectory() as ctx:
            (Path(ctx) / "Dockerfile").write_text(DOCKERFILE)
            (Path(ctx) / "requirements.txt").write_text(reqs)
            engine.cli(
                "build",
                "--network",
                "host",
                "--secret",
                f"id=cacert,src={images.CA_BUNDLE}",
                "--build-arg",
                f"BASE={base}",
                "-t",
                tag,
                ctx,
                timeout=1200,
            )
    return images.used_image(tag)
