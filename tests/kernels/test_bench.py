"""`kdakit kernels bench` and the upstream loader: the pure parts on CPU (byte counts, floors, statistics,
slot rotation, table, JSON records, CLI errors, SGLang kernels from the pinned wheel); a short GPU run."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest
from kdakit.kernels.tools import bench, bench_inputs, bench_record, cost_model, table, timing, upstream

from kdakit.cli import main

H = HV = 16
K = V = 128


def test_decode_bytes_match_the_baseline_floor():
    # h200-baseline.md: decode B = 48 moves ~101.7 MB -> ~23.6 µs at 4.3 TB/s
    nbytes = cost_model.decode_bytes(48, H, HV, K, V)
    assert nbytes == pytest.approx(101.7e6, rel=2e-3)
    assert 48 * 2 * HV * V * K * 4 < nbytes  # state read + written, plus the activations
    assert cost_model.floor_us(nbytes, 4.3e12) == pytest.approx(23.6, abs=0.05)
    assert cost_model.decode_bytes(1, H, HV, K, V) * 48 > nbytes  # parameters are counted once per call


def test_verify_bytes_match_the_baseline_floor():
    # h200-baseline.md: verify 48x6 ~358 MB (~83 µs), 16x6 ~119 MB (~28 µs)
    assert cost_model.verify_bytes(48, 6, H, HV, K, V) == pytest.approx(358e6, rel=3e-3)
    assert cost_model.verify_bytes(16, 6, H, HV, K, V) == pytest.approx(119e6, rel=5e-3)
    floor = cost_model.floor_us(cost_model.verify_bytes(48, 6, H, HV, K, V), 4.3e12)
    assert floor == pytest.approx(83.3, abs=0.3)


def test_prefill_bytes_scale_with_tokens():
    one = cost_model.prefill_bytes(1, 4096, H, HV, K, V)
    assert cost_model.prefill_bytes(1, 8192, H, HV, K, V) - one == pytest.approx(
        one - 2 * HV * V * K * 4 - 16 * 129 * 4
    )
    assert cost_model.floor_us(one, None) is None


def test_change_and_summary():
    assert table.change(7.0, 10.0) == pytest.approx(-0.3)
    assert table.change(None, 10.0) is None and table.change(1.0, 0.0) is None
    s = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s == {"n": 5, "median": 3.0, "p20": 1.8, "p80": 4.2, "min": 1.0}
    assert timing.summarize([])["median"] is None


def test_rotation_keeps_l2_cold():
    state = HV * V * K * 4  # 1 MiB per slot
    for batch in (1, 16, 48):
        n = bench.calls_per_graph(batch, state)
        assert n >= 32 and n * batch * state >= bench.L2_COLD_BYTES
        sets = bench.slot_sets(512, batch, n, seed=batch)
        assert len(sets) == n and all(len(s) == batch == len(set(s)) for s in sets)
        distinct = 512 // batch
        for i in range(min(n, distinct) - 1):
            assert not set(sets[i]) & set(sets[i + 1])  # consecutive calls touch different slots
        window = {slot for s in sets[: min(n, distinct)] for slot in s}
        assert len(window) * state >= bench.L2_COLD_BYTES  # one cycle of distinct state exceeds L2
    with pytest.raises(Exception, match="exceeds the state pool"):
        bench.slot_sets(8, 16, 4, seed=0)


def _entry(median: float, ok: bool = True) -> dict:
    stats = timing.summarize([median] * 60)
    return {"status": "ok", "check": {"ok": ok}, "per_call": stats, "single_call": stats, "samples_us": []}


def _result() -> dict:
    rows = [
        {
            "phase": "decode",
            "shape": "48x1",
            "shape_label": "48 × 1",
            "floor_us": 23.6,
            "arms": {
                "triton": _entry(35.8),
                "triton-packed": _entry(32.6),
                "triton-packed-dispatch": {"status": "missing", "error": "CudaJitUnavailable: no toolchain"},
                "helion-upstream": _entry(28.75),
                "helion-kdakit": _entry(25.0),
            },
        },
        {
            "phase": "verify",
            "shape": "16x6",
            "shape_label": "16 × 6",
            "floor_us": 28.0,
            "arms": {
                "triton": _entry(39.55),
                "helion-upstream": _entry(43.9),
                "helion-kdakit": {"status": "failed", "error": "ValueError: boom"},
            },
        },
    ]
    return {
        "rows": rows,
        "copy_bandwidth": {"bytes_per_s": 4.3e12},
        "environment": {"gpu": "NVIDIA H200", "versions": {"torch": "2.11.0+cu130"}},
        "notes": ["ran with torch 2.11.0+cu130, not the pins"],
    }


class CudaJitUnavailable(RuntimeError):  # the name SGLang's extracted tree raises without its JIT toolchain
    pass


def test_every_arm_is_checked_against_the_first_that_runs_then_timed_and_failures_are_kept():
    torch = pytest.importorskip("torch")
    ref = torch.ones(4)
    outputs = {  # arm -> its output, or the exception it raises
        "triton": RuntimeError("triton broke"),
        "triton-packed-dispatch": CudaJitUnavailable("no tvm_ffi"),
        "helion-upstream": ref,
        "helion-kdakit": ref * 1.001,
        "helion-kdakit-default": ref * 2,
    }
    timed = []

    def observe(arm, fn):
        if isinstance(outputs[arm], Exception):
            raise outputs[arm]
        return {"out": outputs[arm], "state": ref}, {"untouched": arm != "helion-kdakit-default"}

    def time_arm(arm, fn):
        timed.append(arm)
        return {"samples_us": [1.0, 2.0, 3.0]}

    row = {"arms": {}}
    arms = {f"decode:{a}": object() for a in outputs}
    bench.run_arms("decode", row, arms, {"decode:triton-packed": "not in the tree"}, observe, time_arm)
    got = row["arms"]
    assert got["triton"]["status"] == "failed" and "triton broke" in got["triton"]["error"]
    assert got["triton-packed"] == {"status": "missing", "error": "not in the tree"}
    assert got["triton-packed-dispatch"]["status"] == "missing"
    assert got["helion-upstream"]["check"]["reference"] == "helion-upstream"  # Triton failed: the next one is
    assert got["helion-kdakit"]["check"]["ok"] and got["helion-kdakit"]["check"]["rel_err"]["out"] > 0
    assert not got["helion-kdakit-default"]["check"]["ok"]  # out off by 100 % and a flag false
    assert timed == ["helion-upstream", "helion-kdakit", "helion-kdakit-default"]
    assert got["helion-kdakit"]["per_call"]["median"] == 2.0
    row = {"arms": {}}
    bench.run_arms("verify", row, {"verify:triton": object()}, {}, observe, time_arm)
    assert set(row["arms"]) == {"triton", "helion-upstream", "helion-kdakit"}  # the optional arm is left out


def test_the_packed_projection_splits_into_q_k_v_views_as_sglang_does():
    torch = pytest.importorskip("torch")
    cfg = bench.BenchConfig(heads=2, value_heads=4, head_dim=3)
    packed = torch.arange(5 * (2 * 2 * 3 + 4 * 3), dtype=torch.float32).reshape(5, -1)
    q, k, v = bench_inputs.split_qkv(packed, cfg)
    assert q.shape == k.shape == (1, 5, 2, 3) and v.shape == (1, 5, 4, 3)
    assert torch.equal(k[0, 2, 1], packed[2, 9:12]) and torch.equal(v[0, 4, 3], packed[4, 21:24])
    assert v.data_ptr() == packed[:, 12:].data_ptr()  # views: prefill writes its output into v in place


def test_table_has_the_pr_columns_changes_and_floor():
    printed = table.render_table(_result())
    lines = printed.splitlines()
    header = next(line for line in lines if line.startswith("| phase | shape | Triton |"))
    assert "| Helion (kdakit) | change |" in header and "HBM floor" in header
    decode = next(line for line in lines if line.startswith("| decode | 48 × 1 |"))
    cells = [c.strip() for c in decode.strip("|").split("|")]
    assert cells == ["decode", "48 × 1", "35.80", "25.00", "-30.2 %", "28.75", "-19.7 %", "23.60", "1.06×"]
    verify = next(line for line in lines if line.startswith("| verify | 16 × 6 |"))
    assert "FAIL" in verify and "+11.0 %" in verify
    assert any("n/a" in line for line in lines if "dispatch" in line)
    assert "verify 16 × 6 helion-kdakit: ValueError: boom" in printed


def test_targets_are_judged_from_the_measured_numbers():
    result = _result()
    result["rows"][0]["batch"] = 48
    result["rows"][1]["arms"]["helion-kdakit"] = _entry(33.0)
    verdicts = dict(table.targets(result))
    assert verdicts["decode 48 × 1: 0.70x Triton non-packed (target <= 0.7)"] is True  # 25.0 / 35.8
    assert verdicts["decode 48 × 1: 25.00 vs helion-upstream 28.75 µs (target: faster)"] is True
    assert verdicts["decode 48 × 1: 1.06x the HBM floor (target <= 1.15)"] is True
    assert verdicts["verify 16 × 6: 0.83x Triton verify (target <= 0.85)"] is True
    assert not any("dispatch" in what for what in verdicts)  # no number, no verdict
    result["rows"][0]["arms"]["helion-kdakit"] = _entry(30.0)
    verdicts = dict(table.targets(result))
    assert verdicts["decode 48 × 1: 0.84x Triton non-packed (target <= 0.7)"] is False
    assert "MISS decode 48 × 1: 0.84x Triton non-packed" in table.render_table(result)


def test_normalized_record_validates_against_the_results_schema(tmp_path):
    results = pytest.importorskip("kdakit.records.results")
    result = _result()
    rows = bench_record.normalized_rows(result)
    assert len(rows) == 8
    kdakit_verify = next(r for r in rows if r["phase"] == "verify" and r["variant"] == "helion-kdakit")
    assert kdakit_verify == {
        "phase": "verify",
        "shape": "16x6",
        "arm": "helion",
        "variant": "helion-kdakit",
        "median_us": None,
        "samples": 0,
        "floor_us": 28.0,
        "status": "failed",
        "error": "ValueError: boom",
    }
    raw, record_path = bench_record.write_outputs(result, tmp_path, "kernels-test")
    assert json.loads(raw.read_text())["rows"][0]["shape"] == "48x1"
    record = results.read_result(record_path)
    assert record["kind"] == "kernels" and record["arm"] == "both"
    assert {r["variant"] for r in record["metrics"]["rows"]} >= {"triton", "helion-kdakit", "helion-upstream"}


def test_a_failed_check_counts_as_failure():
    result = _result()
    assert bench_record.any_failure(result)  # the failed kdakit verify
    result["rows"][1]["arms"]["helion-kdakit"] = _entry(30.0, ok=False)
    assert bench_record.any_failure(result)
    assert bench_record.normalized_rows(result)[-1]["status"] == "failed"
    result["rows"][1]["arms"]["helion-kdakit"] = _entry(30.0)
    assert not bench_record.any_failure(result)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--phases", "decode,train"], "--phases: expected a subset"),
        (["--decode-batches", "1,x"], "--decode-batches: expected comma-separated integers"),
        (["--verify-batches", "0"], "--verify-batches: expected positive integers"),
        (["--prefill-shapes", "4096"], "--prefill-shapes: expected BATCHxTOKENS"),
        (["--replays", "10"], "--replays must be >= 60"),
        (["autotune", "--batches", "3"], "not batch buckets"),
        (["autotune", "--batches", "x"], "comma-separated integers"),
        (["autotune", "--kernels", "prefil"], "unknown kernel 'prefil'"),
        (["autotune", "--heads", "0"], "positive integers"),
        (["autotune", "--budget-seconds", "0"], "--budget-seconds must be >= 1"),
    ],
)
def test_cli_rejects_bad_input_in_one_line(argv, message, capsys):
    command = ["autotune", "--sku", "h200", *argv[1:]] if argv[0] == "autotune" else ["bench", *argv]
    assert main(["kernels", *command]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_cli_bench_without_gpu_says_so(capsys, monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["kernels", "bench", "--phases", "decode", "--results-dir", str(tmp_path)]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err


def test_upstream_kernels_extract_from_the_pinned_wheel(tmp_path):
    wheel = upstream.find_wheel(download=True)
    root = upstream.extract(tmp_path / "tree", wheel=wheel)
    info = json.loads((root / upstream.MARKER).read_text())
    assert info["sglang"] == upstream.sglang_version() and len(info["sha256"]) == 64
    assert "sglang/kernels/ops/attention/helion/kda_verify.py" in info["files"]
    # Stand-ins only where SGLang's own package files would import all of SGLang; kernel files verbatim.
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        for name in info["files"]:
            assert (root / name).read_bytes() == zf.read(name)
    assert "kdakit stand-in" in (root / "sglang/__init__.py").read_text()
    assert upstream.extract(tmp_path / "tree") == root  # already there: not extracted again


def test_the_pinned_wheel_is_found_in_this_checkouts_wheel_folder_from_any_directory(tmp_path, monkeypatch):
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KDAKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KDAKIT_SGLANG_WHEEL", raising=False)
    assert root / ".cache" / "wheels" in upstream.wheel_folders()
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    wheel = tmp_path / "cache" / "wheels" / f"sglang-{upstream.sglang_version()}-py3-none-any.whl"
    wheel.write_bytes(b"")
    assert upstream.find_wheel(download=False) == wheel


def test_upstream_loader_returns_sglangs_entry_points(tmp_path, monkeypatch):
    monkeypatch.setattr(upstream, "_LOADED", {})
    kernels = upstream.load("extracted", extract_dir=tmp_path / "tree")
    try:
        assert kernels.source.startswith("extracted:")
        assert kernels.missing == {}
        assert kernels.helion_packed_decode.__module__ == "sglang.kernels.ops.attention.helion.kda_decode"
        assert kernels.helion_verify.__module__ == "sglang.kernels.ops.attention.helion.kda_verify"
        assert kernels.helion_chunk_kda.__module__ == "sglang.kernels.ops.attention.helion.kda_prefill"
        assert kernels.triton_chunk_kda.__module__ == "sglang.kernels.ops.attention.fla.kda"
        params = list(inspect.signature(kernels.triton_packed_decode_dispatch).parameters)
        assert params == list(inspect.signature(kernels.helion_packed_decode).parameters)
        assert "intermediate_states_buffer" in inspect.signature(kernels.triton_recurrent).parameters
        dispatch = kernels.modules["triton_cuda_dispatch"]
        original = dispatch.covered
        with upstream.cuda_jit_dispatch(kernels, enabled=False):
            assert dispatch.covered() is False
        assert dispatch.covered is original
        jit_utils = sys.modules["sglang.kernels.jit.utils"]
        if not jit_utils.TOOLCHAIN:  # without msgspec/tvm_ffi the CUDA fast path says why it cannot build
            with pytest.raises(jit_utils.CudaJitUnavailable, match="msgspec and tvm_ffi"):
                dispatch._jit_kda_packed_decode_module()
        else:  # SGLang's real JIT toolchain is wired in
            assert jit_utils.load_jit.__module__ == "sglang.kernels.jit.utils.compile.loader"
    finally:
        upstream._purge_sglang_modules()
        sys.path.remove(str(tmp_path / "tree"))


@pytest.mark.gpu
def test_bench_decode_and_verify_on_gpu(tmp_path):
    try:
        upstream.load()
    except Exception as exc:  # no SGLang and no wheel here: the comparison has nothing to compare with
        pytest.skip(
            f"SGLang's kernels unavailable (kdakit kernels fetch-upstream, KDAKIT_UPSTREAM_DIR): {exc}"
        )
    cfg = bench.BenchConfig(
        phases=("decode", "verify"), decode_batches=(2,), verify_batches=(2,), replays=60, repeats=2
    )
    result = bench.run(cfg)
    assert result["copy_bandwidth"]["bytes_per_s"] > 1e11
    for row in result["rows"]:
        triton = row["arms"]["triton"]
        assert triton["status"] == "ok" and triton["per_call"]["n"] == 120 and len(triton["rounds"]) == 2
        assert row["kdakit_vs"]["triton"]["ci"]["n"] == 2
        for arm, entry in row["arms"].items():
            if entry["status"] == "ok":
                assert entry["check"]["ok"], (row["phase"], arm, entry["check"])
                assert entry["per_call"]["median"] > 0
    raw, record = bench_record.write_outputs(result, tmp_path, "gpu-test")
    assert raw.is_file()


def test_cli_record_writes_the_record_from_a_raw_json(tmp_path, capsys):
    pytest.importorskip("kdakit.records.results")
    result = _result()
    result["rows"][1]["arms"]["helion-kdakit"] = _entry(40.0)
    result["kind"] = "kdakit.kernels-bench"
    result["environment"].update(driver="580.159.04", hostname="gpu-box")
    raw = tmp_path / "run-7" / "gpu-box" / bench_record.RAW_NAME
    raw.parent.mkdir(parents=True)
    raw.write_text(json.dumps(result))
    assert main(["kernels", "record", str(raw)]) == 0
    assert "| verify | 16 × 6 | 39.55 | 40.00 | +1.1 % |" in capsys.readouterr().out
    record = json.loads((raw.parent / bench_record.RECORD_NAME).read_text())
    assert record["run_id"] == "run-7" and record["host"] == "gpu-box" and record["sku"] == "H200"
    assert record["provenance"]["gpus"] == ["NVIDIA H200"] and record["provenance"]["driver"] == "580.159.04"
    assert record["provenance"]["git_sha"] is None  # the bench host's checkout is unknown, not this one's
    (tmp_path / "other.json").write_text('{"kind": "gsm8k"}')
    assert main(["kernels", "record", str(tmp_path / "other.json")]) == 2
    assert "not a kernels-bench JSON" in capsys.readouterr().err


def test_prefill_flops_count_the_chunked_products_and_give_a_compute_floor():
    H = HV = 16
    K = V = 128
    one = cost_model.prefill_flops(1, 4096, H, HV, K, V)
    assert cost_model.prefill_flops(1, 8192, H, HV, K, V) == 2 * one  # linear in chunks
    assert cost_model.prefill_flops(1, 4097, H, HV, K, V) > one  # a partial chunk costs a whole one
    assert one == pytest.approx(11.99e9, rel=0.01)  # 64 chunks x 16 heads x 11.7 MFLOP
    assert cost_model.compute_floor_us(one, 800e12) == pytest.approx(15.0, rel=0.01)
    assert cost_model.compute_floor_us(one, None) is None


def test_the_prefill_peers_table_shows_fla_and_both_floors():
    row = {
        "phase": "prefill", "shape": "1x4096", "shape_label": "1 × 4096", "floor_us": 20.0,
        "compute_floor_us": 22.4,
        "arms": {"triton": _entry(420.0), "helion-kdakit": _entry(330.0), "helion-upstream": _entry(440.0),
                 "fla": {"status": "missing", "error": "fla-core 0.6.0 not installed"}},
    }  # fmt: skip
    result = {"rows": [row], "matmul_rate": {"flops_per_s": 800e12}, "copy_bandwidth": {}}
    printed = table.render_table(result)
    assert "at 800 TFLOP/s (bf16 matmul measured in this run)" in printed
    assert (
        "| 1 × 4096 | 420.00 (-21.4 %) | 440.00 (-25.0 %) | 330.00 | n/a | 20.00 | 22.40 | 14.7× |" in printed
    )
