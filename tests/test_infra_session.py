"""What a test session says and guards at its end: the test groups it skipped for want of Debian packages
(.ci/apt-packages.txt, tests/infra/packages.py: every package in a group, every skip reason for a missing
tool names a package of its group, the summary lines) and anything it left in the checkout
(tests/infra/checkout.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.infra import dockerd, packages, slurmcluster, sshhosts, webdriver

REPO = Path(__file__).resolve().parent.parent


def test_every_package_is_in_a_group():
    table = packages.groups()
    assert set(table) == {"images", "playbooks", "report", "Slurm"}
    listed = [w for line in packages.APT_FILE.read_text().splitlines() if not line.lstrip().startswith("#")
              for w in line.split()]  # fmt: skip
    assert sorted(p for ps in table.values() for p in ps) == sorted(listed)
    with pytest.raises(ValueError, match="before any"):
        packages.groups("docker.io\n# images (x)\n")


def test_each_infra_skip_reason_names_a_package_of_its_group(monkeypatch, tmp_path):
    """With its tools missing, each piece of test infrastructure skips naming a package of its own group."""
    none = str(tmp_path / "none")
    monkeypatch.setattr(dockerd, "DOCKERD", none)
    assert packages.group_of(dockerd.unavailable_reason() or "") == "images"
    monkeypatch.setattr(sshhosts, "SSHD", none)
    assert packages.group_of(sshhosts.unavailable_reason() or "") == "playbooks"
    monkeypatch.setattr(slurmcluster, "SLURM_DAEMONS", (none,))
    assert packages.group_of(slurmcluster.unavailable_reason() or "") == "Slurm"
    monkeypatch.setenv("PATH", str(tmp_path))
    assert packages.group_of(webdriver.missing() or "") == "report"


def test_the_summary_names_the_skipped_groups_and_the_one_command():
    reasons = ["/usr/sbin/sshd missing: install openssh-server openssh-client iproute2"] * 2 + [
        "no chromium (Debian package chromium)",
        "needs a GPU",
    ]
    table = {"playbooks": ["openssh-server"], "report": ["chromium"]}
    first, second = packages.summary(reasons, table)
    assert first.startswith(
        "kdakit: test groups skipped, their Debian packages are missing: playbooks (2 tests, "
    )
    assert "; report (1 test, " in first
    assert second == (
        "kdakit: add them (root, Debian; .ci/apt-packages.txt), then run make test again: make test-packages"
    )
    assert packages.summary(["needs a GPU"], table) == []


def test_make_test_packages_installs_the_list():
    cmd = ["make", "-n", "--no-print-directory", "test-packages"]
    dry = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True)
    assert "apt-get install" in dry.stdout and ".ci/apt-packages.txt" in dry.stdout
    assert "make test-packages" in (REPO / ".ci" / "run").read_text()


def test_a_session_that_leaves_a_folder_in_the_checkout_is_told(tmp_path):
    from tests.infra import checkout

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/out/\n")
    (tmp_path / "kernels").mkdir()
    before = checkout.state(tmp_path)
    (tmp_path / "kernels" / "new_source.py").write_text("")  # beside tracked sources: git status shows it
    (tmp_path / ".venv" / "lib").mkdir(parents=True)  # a tool's cache: not the tests' output
    (tmp_path / "results" / "kernels-x" / "vm").mkdir(parents=True)  # empty: git would not list it
    (tmp_path / "out" / "images").mkdir(parents=True)
    (tmp_path / "out" / "images" / "image-h200.id").write_text("sha256:0")
    assert checkout.left_behind(before, checkout.state(tmp_path), tmp_path) == [
        "out", "out/images", "out/images/image-h200.id",
        "results", "results/kernels-x", "results/kernels-x/vm",
    ]  # fmt: skip
    assert checkout.state(tmp_path / "not-a-checkout") is None
