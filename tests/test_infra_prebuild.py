"""`make test-images` beside the tests: while it builds, the scheduler holds back the Docker unit that would
only wait for it (tests/infra/prebuild.py, tests/conftest.py). No Docker needed: the engine is a stand-in."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.infra import images, prebuild


def test_the_build_names_itself_while_it_runs_and_not_after(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "CACHE", tmp_path)
    seen = []

    class Engine:
        def stop(self):
            seen.append("stopped")

    monkeypatch.setattr(images, "start_engine", Engine)
    monkeypatch.setattr(prebuild, "cluster_images", lambda engine: seen.append(prebuild.running()))
    assert not prebuild.running()
    assert prebuild.main() == 0
    assert seen == [True, "stopped"]
    assert not prebuild.running()

    def fails(engine):
        raise RuntimeError("build failed")

    monkeypatch.setattr(prebuild, "cluster_images", fails)
    with pytest.raises(RuntimeError, match="build failed"):
        prebuild.main()
    assert not prebuild.running(), "a failed build still named as running"


def test_a_marker_of_a_process_that_ended_or_of_a_reused_pid_is_not_a_running_build(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "CACHE", tmp_path)
    marker = tmp_path / "prebuild.running"
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    marker.write_text(f"{ended.stdout.strip()} 1\n")
    assert not prebuild.running()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = prebuild.process_start(live.pid)
        marker.write_text(f"{live.pid} {start}\n")
        assert prebuild.running()
        marker.write_text(f"{live.pid} {int(start) + 1}\n")  # the pid, but another process's start time
        assert not prebuild.running()
        marker.write_text("garbage\n")
        assert not prebuild.running()
    finally:
        live.kill()
        live.wait()


def test_the_shared_unit_waits_only_while_its_images_build_and_other_work_is_left():
    queue = ["docker", "tests/test_faults_cluster.py", "tests/test_cli.py"]
    assert prebuild.defer_shared_unit(queue, "docker", building=True)
    assert not prebuild.defer_shared_unit(queue, "docker", building=False)
    assert not prebuild.defer_shared_unit(["docker"], "docker", building=True)  # nothing else: it goes now
    assert not prebuild.defer_shared_unit(queue[1:], "docker", building=True)  # not first: nothing to hold


class _Config:
    """What pytest-xdist's scheduler reads of a session's config: two workers, --dist loadscope."""

    def __init__(self):
        self.option = type("Option", (), {"loadscopereorder": True})()

    def getvalue(self, name):
        return {"dist": "loadscope", "tx": ["2*popen"]}[name]


class _Worker:
    shutting_down = False

    def __init__(self):
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indices):
        self.sent.append(list(indices))


def _suite_conftest(request):
    return next(
        plugin
        for plugin in request.config.pluginmanager.get_plugins()
        if getattr(plugin, "__file__", "").endswith("tests/conftest.py")
    )


def test_the_scheduler_gives_other_units_first_while_the_images_build(request, monkeypatch):
    conftest = _suite_conftest(request)
    scheduler = conftest.pytest_xdist_make_scheduler(_Config(), None)
    files = ("tests/test_images.py", "tests/test_faults_cluster.py", "tests/test_cli.py")
    tests = [f"{path}::test_{i}" for i, path in enumerate(files)]
    for test in tests:
        scheduler.workqueue[scheduler._split_scope(test)] = {test: False}
    assert next(iter(scheduler.workqueue)) == conftest.SHARED_UNIT
    workers = [_Worker(), _Worker()]
    for worker in workers:
        scheduler.registered_collections[worker] = tests

    monkeypatch.setattr(prebuild, "running", lambda: True)
    scheduler._assign_work_unit(workers[0])
    assert workers[0].sent == [[1]]  # the next unit, the own-engine cluster file
    assert list(scheduler.workqueue) == [conftest.SHARED_UNIT, "tests/test_cli.py"]

    monkeypatch.setattr(prebuild, "running", lambda: False)  # the images are built
    scheduler._assign_work_unit(workers[1])
    assert workers[1].sent == [[0]]
    assert list(scheduler.workqueue) == ["tests/test_cli.py"]
