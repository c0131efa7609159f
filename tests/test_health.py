"""kdakit health allreduce: bandwidth arithmetic, verdicts, and a real gloo sweep over 3 CPU processes."""

import json

import pytest

from kdakit import cli
from kdakit.checks import health
from kdakit.facts.errors import UsageError


def test_bus_factor_follows_nccl_tests():
    assert health.bus_factor(1) == 0.0
    assert health.bus_factor(2) == 1.0
    assert health.bus_factor(4) == 1.5
    assert health.bus_factor(8) == 1.75


def test_point_bandwidths():
    p = health.to_point(1 << 30, 0.01, 8, True)
    assert p.algbw_gbps == pytest.approx((1 << 30) / 0.01 / 1e9)
    assert p.busbw_gbps == pytest.approx(p.algbw_gbps * 1.75)
    assert p.time_us == pytest.approx(10000.0)


def test_parse_sizes():
    assert health.parse_sizes("4K,1M,1G,512") == [4096, 1 << 20, 1 << 30, 512]
    assert health.parse_sizes("2MiB") == [2 << 20]
    with pytest.raises(UsageError):
        health.parse_sizes("lots")
    with pytest.raises(UsageError):
        health.parse_sizes("2")


def test_verdict_threshold_uses_largest_size():
    slow_big = [health.to_point(1 << 20, 1e-5, 4, True), health.to_point(1 << 30, 1.0, 4, True)]
    ok, text = health.verdict(slow_big, 4, 200.0)
    assert not ok and text.startswith("FAIL") and "1G" in text
    fast = [health.to_point(1 << 30, 0.004, 4, True)]
    ok, text = health.verdict(fast, 4, 200.0)
    assert ok and text.startswith("PASS")


def test_verdict_wrong_values_fail_even_when_fast():
    ok, text = health.verdict([health.to_point(1 << 30, 1e-4, 2, False)], 2, 0.0)
    assert not ok and "wrong all-reduce result" in text


def test_verdict_single_rank_has_no_bandwidth_claim():
    ok, text = health.verdict([health.to_point(1 << 20, 1e-4, 1, True)], 1, 200.0)
    assert ok and "world size 1" in text


def _gloo_sweep(world_size: int, sizes: str, iters: int, warmup: int, *options: str) -> int:
    """`kdakit health allreduce` over `world_size` CPU processes (gloo); its exit code."""
    argv = ["health", "allreduce", "--backend", "gloo", "--world-size", str(world_size), "--sizes", sizes]
    return cli.main([*argv, "--iters", str(iters), "--warmup", str(warmup), *options])


def test_gloo_sweep_three_processes(tmp_path, capsys):
    out = tmp_path / "allreduce.json"
    rc = _gloo_sweep(3, "4K,256K", 3, 1, "--json", str(out))
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["world_size"] == 3 and data["pass"] is True
    assert [p["size_bytes"] for p in data["points"]] == [4096, 256 << 10]
    assert all(p["correct"] and p["busbw_gbps"] > 0 for p in data["points"])
    assert data["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert "busbw_GB/s" in capsys.readouterr().out


def test_gloo_threshold_failure_exit_code(tmp_path):
    assert _gloo_sweep(2, "4K", 2, 0, "--min-busbw", "1e9") == 1


@pytest.mark.gpu
def test_nccl_sweep_on_visible_gpus(tmp_path):
    out = tmp_path / "allreduce.json"
    rc = cli.main(
        ["health", "allreduce", "--sizes", "1M,64M", "--iters", "5", "--min-busbw", "0", "--json", str(out)]
    )
    data = json.loads(out.read_text())
    assert rc == 0 and data["backend"] == "nccl" and all(p["correct"] for p in data["points"])
