"""The images the Docker tests build on the image-building engine, built into the test cache beside the
tests (`make test-images`; CI runs it beside `make test`, not beside `make setup`, whose pip unpacks torch to
the same disk at the same time). The tests need nothing of it: their fixtures build whatever is missing,
and while this runs they wait for the engine's lock, then find the images cached. It names itself in the
cache while it runs (`running`), so that the test scheduler (tests/conftest.py) hands the shared Docker unit
to a worker only once it is done and the workers run other tests meanwhile."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kdakit.launch.hostlock import process_start
from tests.infra import bench_client_image, fake_server_image, images

KDAKIT_TAG = "kdakit:ci"


def cluster_images(engine) -> tuple[str, str, Path]:
    """The playbook cluster's images: (the kdakit image with the benchmark client's imports, the fake
    server's tag, its saved tarball), each built only where the engine or the cache lacks it."""
    images.kdakit_image(engine, images.standin_base(engine), tag=KDAKIT_TAG)
    fake_tag = fake_server_image.build(engine)
    return bench_client_image.build(engine, KDAKIT_TAG), fake_tag, images.image_tarball(engine, fake_tag)


def _marker() -> Path:
    """Where a running build names itself (pid and start time: a reused pid is not taken for it)."""
    return images.CACHE / "prebuild.running"


def running() -> bool:
    """Whether a `make test-images` build runs on this machine now."""
    try:
        pid, start = _marker().read_text().split()
        return process_start(int(pid)) == start
    except (OSError, ValueError):
        return False


def defer_shared_unit(queue: list[str], shared: str, building: bool) -> bool:
    """Whether a worker asking for work takes the unit after the shared Docker unit (`shared`, first in the
    scheduler's queue) instead: while its images build beside the tests its fixtures would only wait, so it
    goes to the first worker that asks once they are built (or when nothing else is left)."""
    return building and len(queue) > 1 and queue[0] == shared


def main() -> int:
    t0 = time.monotonic()
    marker = _marker()
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{os.getpid()} {process_start(os.getpid())}\n")
    try:
        engine = images.start_engine()
        try:
            cluster_images(engine)
        finally:
            engine.stop()
    finally:
        marker.unlink(missing_ok=True)
    print(f"test images ready in {images.CACHE} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
