"""Session policy: in CI (CI=true, or KDAKIT_NO_SKIPS=1) a skipped non-GPU test fails.

CI installs everything the suite needs, so a skip there means a missing proof, never a pass.
GPU tests are deselected on CPU machines with -m "not gpu" and are not affected.
"""

import os
import time
from pathlib import Path

import pytest

STRICT = os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.environ.get("KDAKIT_NO_SKIPS") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and "gpu" not in item.keywords and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, but CI must run every non-GPU test: {report.longrepr}"


# pytest-xdist, as `make test` runs it (--dist loadscope): one work unit per test file, except the files that
# start Docker engines on the image-building engine's data root, which are one unit (SHARED_UNIT), run first
# (they are the longest; while `make test-images` builds their images beside the tests, first once it is
# done) and one after the other (side by side their engines' GBs of images outgrow a CI machine's disk).
# A Docker file that loads only small images and builds them on an engine of its own (OWN_ENGINE_FILES) is a
# unit of its own, second in the queue: it runs on the other worker beside the shared unit.
TESTS = Path(__file__).parent
DOCKER_FILES = {
    str(path.relative_to(TESTS.parent))
    for path in TESTS.rglob("test_*.py")
    if "pytest.mark.docker" in path.read_text()
}
OWN_ENGINE_FILES = {"tests/test_faults_cluster.py"}
# First in the shared unit: xdist gives a worker its next unit once two of its tests are left, and that unit
# waits behind them; the two long cluster tests first leave only short image tests for it to wait behind.
SHARED_UNIT_FIRST = "tests/test_playbooks_cluster.py"
SHARED_UNIT = "docker"
assert OWN_ENGINE_FILES | {SHARED_UNIT_FIRST} <= DOCKER_FILES, OWN_ENGINE_FILES - DOCKER_FILES


def _scope(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return SHARED_UNIT if path in DOCKER_FILES - OWN_ENGINE_FILES else path


def _queue_rank(nodeid: str) -> int:
    """A test's place in the queue: the shared Docker unit, the own-engine Docker files, the rest."""
    path = nodeid.split("::", 1)[0]
    if _scope(nodeid) == SHARED_UNIT:
        return 0 if path == SHARED_UNIT_FIRST else 1
    return 2 if path in OWN_ENGINE_FILES else 3


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: the suite also runs without xdist (the GPU host)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None  # another --dist: xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    from tests.infra import prebuild

    class DockerFilesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            # `make test-images` beside the tests (CI): the shared unit's fixtures would wait for its images,
            # so meanwhile the worker takes the next unit and the shared unit stays first in the queue
            if not prebuild.defer_shared_unit(list(self.workqueue), SHARED_UNIT, prebuild.running()):
                return super()._assign_work_unit(node)
            shared = self.workqueue.pop(SHARED_UNIT)
            super()._assign_work_unit(node)
            self.workqueue[SHARED_UNIT] = shared
            self.workqueue.move_to_end(SHARED_UNIT, last=False)

    config.option.loadscopereorder = False  # keep the collection order: the Docker units first
    return DockerFilesTogether(config, log)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: its order is the scheduler's queue
        items.sort(key=lambda item: _queue_rank(item.nodeid))


def pytest_configure(config):
    # Before xdist starts its workers, which inherit the id: the session's ledger of what it uses
    # (tests/infra/images.py), so that it prunes only its own hosts and cache entries.
    if not hasattr(config, "workerinput"):
        from tests.infra import images

        os.environ[images.SESSION_ENV] = f"{os.uname().nodename}-{os.getpid()}-{time.time_ns()}"
        from tests.infra import checkout

        config.kdakit_checkout_before = checkout.state()


def pytest_terminal_summary(terminalreporter):
    # Which test groups a machine without their Debian packages skipped, and the one command that adds them.
    if hasattr(terminalreporter.config, "workerinput"):
        return
    from tests.infra import packages

    reasons = [
        str(r.longrepr[2]) if isinstance(r.longrepr, tuple) else str(r.longrepr)
        for r in terminalreporter.stats.get("skipped", [])
    ]
    terminalreporter.config.kdakit_package_lines = packages.summary(reasons)


def pytest_unconfigure(config):
    # after pytest's own closing line, so that they are the run's last words
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    lines = getattr(config, "kdakit_keyscan_lines", []) + getattr(config, "kdakit_checkout_lines", [])
    lines += getattr(config, "kdakit_package_lines", [])
    for line in lines if reporter else []:
        reporter.write_line(line, yellow=True, bold=True)


def pytest_sessionfinish(session):
    # Here rather than at each process's exit: xdist workers end without running atexit handlers, and the
    # controller sees, after all of them, what the whole session used (its ledger).
    if hasattr(session.config, "workerinput"):
        return
    from tests.infra import checkout

    # Tests leave nothing in the checkout (results and out folders go under a temporary or cache folder).
    left = checkout.left_behind(getattr(session.config, "kdakit_checkout_before", None), checkout.state())
    if left:
        lines = [f"kdakit: the tests left {len(left)} path(s) in the checkout {checkout.REPO}:"] + left[:20]
        session.config.kdakit_checkout_lines = lines
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    from tests.infra import images, keyscan

    scans = keyscan.session_scans()
    if scans is not None and scans.exists():  # what the cluster tests' key scans read: the run's last words
        session.config.kdakit_keyscan_lines = scans.read_text().splitlines()
        scans.unlink()
    if images.session_used_cache():
        images.prune_cache()
