"""The SSH test hosts' per-run claims (tests/infra/sshhosts.py): two runs on one machine get different
subnets and names, a subnet some interface already uses is never chosen, and the leftovers of a run that died
without `down()` are removed by the next run. Needs root and iproute2 (no sshd, no Docker)."""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.infra import sshhosts

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip"), reason="network namespaces need root and iproute2"
)


@pytest.fixture
def claims_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(sshhosts, "CLAIMS", tmp_path / "claims")
    return tmp_path / "claims"


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_two_runs_get_distinct_blocks_and_names(claims_dir):
    first, second = sshhosts.claim(random.Random(7)), sshhosts.claim(random.Random(7))
    try:
        assert first.block != second.block  # same random choices: the held lock moves the second one on
        assert first.token != second.token
        a = sshhosts.TestHost("h1", 1, claims_dir, 4, "NVIDIA H200", first)
        b = sshhosts.TestHost("h1", 1, claims_dir, 4, "NVIDIA H200", second)
        assert a.netns != b.netns and a.veth != b.veth and a.address != b.address
        assert len(f"{a.veth}a") <= 15
        assert ipaddress.ip_address(a.address) in first.block and ipaddress.ip_address(a.address).is_private
    finally:
        first.release()
        second.release()


def test_a_block_an_interface_uses_is_skipped(claims_dir, monkeypatch):
    blocks = list(sshhosts.SUBNET_POOL.subnets(new_prefix=24))
    taken = random.Random(3).sample(blocks, 64)[0]
    monkeypatch.setattr(
        sshhosts, "_used_networks", lambda: [ipaddress.ip_network(f"{taken.network_address}/30")]
    )
    c = sshhosts.claim(random.Random(3))
    try:
        assert c.block != taken
    finally:
        c.release()


def test_a_dead_runs_namespace_is_swept_by_the_next_run(claims_dir):
    script = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from types import SimpleNamespace
from tests.infra import sshhosts
sshhosts.CLAIMS = Path({str(claims_dir)!r})
c = sshhosts.claim()
name = f"kdk-{{c.token}}-h1"
c.record("netns", name)
sshhosts._run(["ip", "netns", "add", name])
print(name, flush=True)
os._exit(0)  # dies holding its hosts: no down()
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    name = proc.stdout.strip()
    try:
        assert name in _netns()
        live = sshhosts.claim()  # the next run's claim sweeps first
        try:
            assert name not in _netns()
            assert sshhosts.sweep_dead_claims() == []  # the live claim is not swept
            assert live.path.with_suffix(".json").exists()
        finally:
            live.release()
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


class _Engine:
    def __init__(self, root: Path):
        self.root = root

    def stop(self) -> None:
        pass


@pytest.mark.parametrize(("root_name", "removed"), [("h1-2", True), ("h1", False), ("engine", False)])
def test_down_removes_only_a_spare_engine_slot(tmp_path, root_name, removed):
    # h1's own slot keeps its images for the next run; a root that is no slot of h1 (the image-building
    # engine's) is not the host's to delete; a spare slot would only fill the cache.
    root = tmp_path / root_name
    (root / "data").mkdir(parents=True)
    claim = SimpleNamespace(token=f"t{os.getpid()}", block=ipaddress.ip_network("10.255.255.0/24"))
    host = sshhosts.TestHost("h1", 1, tmp_path / "host", 4, "NVIDIA H200", claim, _Engine(root))
    sshhosts._down_one(host)
    assert host.engine is None
    assert (root / "data").exists() is not removed
