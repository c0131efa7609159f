"""The images the Docker tests build on the image-building engine, built into the test cache beside the
tests (`make test-images`; CI runs it beside `make test`, not beside `make setup`, whose pip unpacks torch to
the same disk at the same time). The tests need nothing of it: their fixtures build whatever is missing,
and while this runs they wait for the engine's lock, then find the images cached."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.infra import bench_client_image, fake_server_image, images

KDAKIT_TAG = "kdakit:ci"


def cluster_images(engine) -> tuple[str, str, Path]:
    """The playbook cluster's images: (the kdakit image with the benchmark client's imports, the fake
    server's tag, its saved tarball), each built only where the engine or the cache lacks it."""
    images.kdakit_image(engine, images.standin_base(engine), tag=KDAKIT_TAG)
    fake_tag = fake_server_image.build(engine)
    return bench_client_image.build(engine, KDAKIT_TAG), fake_tag, images.image_tarball(engine, fake_tag)


def main() -> int:
    t0 = time.monotonic()
    engine = images.start_engine()
    try:
        cluster_images(engine)
    finally:
        engine.stop()
    print(f"test images ready in {images.CACHE} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
