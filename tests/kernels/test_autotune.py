"""Per-SKU tuned kernel configs on CPU: the file format, bucket lookup, run-time selection and its single
fallback warning, stale-config rejection, the selftest rows, `kdakit kernels autotune` without a GPU, and
(under TRITON_INTERPRET) that a shipped config is the one the kernels actually run with."""

from __future__ import annotations

import inspect
import json
import logging
import re
import time

import helion
import pytest
import torch
from kdakit.kernels import decode as kd
from kdakit.kernels import tuned
from kdakit.kernels import verify as kv
from kdakit.kernels.reference import packed_decode_reference, verify_reference
from kdakit.kernels.tools import autotune
from kdakit.kernels.tools.testing import decode_case, interpreter, verify_case
from kdakit.kernels.tuned import Bucket, KernelConfigWarning, TunedConfig

from kdakit.checks import selftest
from kdakit.cli import main
from tests.kernels.kernel_configs import apply_cuda_config_rules, config_warnings, tuned_record

SKU = "testgpu"
SMALL = Bucket(2, 4, 32, 32, "fp32", 4)  # decode/verify at B = 3 or 4 with H = 2, HV = 4, K = V = 32


@pytest.fixture(autouse=True)
def _fresh_selection(monkeypatch, tmp_path):
    """Every test selects against its own config folder and SKU, from a clean cache."""
    monkeypatch.setenv(tuned.ENV_SKU, SKU)
    monkeypatch.setenv(tuned.ENV_DIR, str(tmp_path / "configs"))
    monkeypatch.delenv(tuned.ENV_MODE, raising=False)
    monkeypatch.setattr(tuned, "_mode", None)
    monkeypatch.setattr(kd, "_EXPLICIT", set())
    monkeypatch.setattr(kv, "_EXPLICIT", set())
    tuned.reset()
    yield
    tuned.reset()


def _record(kernel="decode", bucket=SMALL, config=None, **override) -> TunedConfig:
    return tuned_record(
        kernel,
        bucket,
        config or {"block_sizes": [4], "num_warps": 1, "num_stages": 1, "indexing": "pointer"},
        **{"sku": SKU, **override},
    )


_warnings_of = config_warnings


# ------------------------------------------------------------------------------------- files and buckets
def test_config_file_round_trip_is_atomic_and_named_after_kernel_and_bucket(tmp_path):
    record = _record()
    path = tuned.write_file(record, tmp_path)
    assert path == tmp_path / SKU / "decode-h2-hv4-k32-v32-fp32-b4.json"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind
    loaded = tuned.load_file(path)
    assert loaded == record
    assert loaded.helion_config() == helion.Config(**record.config)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema="kdakit.kernel-config.v0"), "schema"),
        (lambda d: d.pop("source_sha256"), "missing fields: source_sha256"),
        (lambda d: d.update(extra=1), "unknown fields: extra"),
        (lambda d: d.update(kernel="prefill"), "unknown kernel"),
        (lambda d: d.update(source_sha256="abc"), "64 hex"),
        (lambda d: d["versions"].pop("triton"), "helion, triton and torch"),
        (lambda d: d["bucket"].update(batch=3), "bucket.batch"),
        (lambda d: d["bucket"].update(state_dtype="fp8"), "state_dtype"),
        (lambda d: d["bucket"].update(heads=3), "multiple"),
        (lambda d: d["config"].update(block_sizes=[0]), "block_sizes"),
        (lambda d: d["config"].update(num_warps=3), "num_warps"),
    ],
)
def test_invalid_config_files_are_rejected_with_the_reason(tmp_path, mutate, message):
    data = _record().to_dict()
    mutate(data)
    with pytest.raises(tuned.ConfigFileError, match=message):
        tuned.parse(data)
    path = tmp_path / tuned.file_name("decode", SMALL)
    path.write_text(json.dumps(data))
    with pytest.raises(tuned.ConfigFileError, match=str(path.name)):
        tuned.load_file(path)


def test_a_renamed_file_is_rejected(tmp_path):
    path = tuned.write_file(_record(), tmp_path)
    moved = path.with_name("decode-h2-hv4-k32-v32-fp32-b8.json")
    path.rename(moved)
    with pytest.raises(tuned.ConfigFileError, match="named decode-h2-hv4-k32-v32-fp32-b4.json"):
        tuned.load_file(moved)


@pytest.mark.parametrize(
    ("batch", "bucket"), [(1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 24), (33, 40), (48, 48), (200, 48)]
)
def test_batches_map_to_the_cuda_graph_bucket_at_or_above_them(batch, bucket):
    assert tuned.batch_bucket(batch) == bucket


def test_decode_and_verify_hashes_cover_the_shared_recurrent_helpers(monkeypatch):
    from kdakit.kernels import recurrent

    for fn in (kd._packed_decode, kv._verify):
        assert tuned._helpers(fn) == [recurrent.program_heads, recurrent.gate_log_decay]
    before = {kernel: tuned.source_sha256(kernel) for kernel in ("decode", "verify-chain")}

    def gate_log_decay(x, decay_rate, lower_bound, log2e, bounded_gate):  # an edited shared gate
        return decay_rate * x, None

    gate_log_decay.__module__ = recurrent.__name__
    monkeypatch.setattr(kd, "gate_log_decay", gate_log_decay)
    monkeypatch.setattr(kv, "gate_log_decay", gate_log_decay)
    tuned.source_sha256.cache_clear()
    try:
        after = {kernel: tuned.source_sha256(kernel) for kernel in before}
    finally:
        tuned.source_sha256.cache_clear()
    assert all(after[kernel] != before[kernel] for kernel in before), "configs of an edited helper look fresh"


def test_batch_zero_has_no_bucket():
    with pytest.raises(ValueError):
        tuned.batch_bucket(0)


@pytest.mark.parametrize(
    ("name", "sku"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
        ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ],
)
def test_gpu_names_map_to_sku_folders(name, sku):
    assert tuned.sku_of(name) == sku


# -------------------------------------------------------------------------------------------- selection
DEFAULT = helion.Config(block_sizes=[16], num_warps=1)


def test_a_missing_config_falls_back_with_exactly_one_warning_per_bucket_naming_the_command():
    def calls():
        return [tuned.select("decode", SMALL, DEFAULT) for _ in range(3)]

    chosen, caught = _warnings_of(calls)
    assert chosen == [DEFAULT] * 3
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "kdakit kernels autotune --sku testgpu --kernels decode --heads 4 --batches 4" in text
    assert SMALL.slug() in text
    other = SMALL._replace(batch=8)
    _, caught = _warnings_of(lambda: [tuned.select("decode", other, DEFAULT) for _ in range(2)])
    assert len(caught) == 1  # a new bucket warns once more
    assert {r["source"] for r in tuned.active()} == {"default"}


def test_a_shipped_valid_config_is_selected_silently(tmp_path):
    path = tuned.write_file(_record(), tuned.config_dir())
    chosen, caught = _warnings_of(lambda: tuned.select("decode", SMALL, DEFAULT))
    assert caught == []
    assert chosen == helion.Config(block_sizes=[4], num_warps=1, num_stages=1, indexing="pointer")
    assert tuned.active() == [
        {"kernel": "decode", "bucket": SMALL.slug(), "source": "shipped", "path": str(path),
         "reason": "tuned on NVIDIA TestGPU", "mode": "shipped"}
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"source_sha256": "0" * 64}, "kernel source changed"),
        ({"versions": {**tuned.installed_versions(), "helion": "1.3.0"}}, "tuned with helion 1.3.0"),
    ],
)
def test_a_config_for_another_kernel_source_or_helion_is_refused_and_warns_once(override, reason):
    tuned.write_file(_record(**override), tuned.config_dir())
    chosen, caught = _warnings_of(lambda: [tuned.select("decode", SMALL, DEFAULT) for _ in range(2)])
    assert chosen == [DEFAULT, DEFAULT]
    assert len(caught) == 1 and reason in str(caught[0].message) and "is not used" in str(caught[0].message)
    assert tuned.active()[0]["source"] == "default" and reason in tuned.active()[0]["reason"]


@pytest.mark.parametrize(
    ("override", "reasons"),
    [
        ({"triton": "3.6.0"}, ["tuned with triton 3.6.0, installed"]),
        ({"torch": "2.11.0+cu130"}, ["tuned with torch 2.11.0+cu130, installed"]),  # pins: ignore
        (
            {"triton": "3.6.0", "torch": "2.11.0+cu130"},  # pins: ignore
            [
                "tuned with triton 3.6.0, installed",
                "tuned with torch 2.11.0+cu130, installed",
            ],  # pins: ignore
        ),
    ],
)
def test_a_config_tuned_with_another_triton_or_torch_is_used_with_one_warning(override, reasons):
    """The version policy: triton/torch differences keep the config (it is the only measured one) but flag
    it once per bucket, naming the versions and the command that re-tunes it."""
    installed = tuned.installed_versions()
    assert all(installed[k] != v for k, v in override.items())  # the test means a real difference
    tuned.write_file(_record(versions={**installed, **override}), tuned.config_dir())
    chosen, caught = _warnings_of(lambda: [tuned.select("decode", SMALL, DEFAULT) for _ in range(3)])
    assert chosen[0] == helion.Config(block_sizes=[4], num_warps=1, num_stages=1, indexing="pointer")
    assert chosen == [chosen[0]] * 3
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "is used" in text and all(r in text for r in reasons)
    assert "kdakit kernels autotune --sku testgpu --kernels decode --heads 4 --batches 4" in text
    [row] = tuned.active()
    assert row["source"] == "shipped" and all(r in row["reason"] for r in reasons)
    [inv] = tuned.inventory(SKU)
    assert inv["problems"] == [] and len(inv["flags"]) == len(reasons)
    assert all(r in f for r, f in zip(reasons, inv["flags"], strict=True))


def test_torch_local_label_alone_does_not_make_a_config_stale():
    versions = tuned.installed_versions()
    base = versions["torch"].split("+")[0]
    tuned.write_file(_record(versions={**versions, "torch": base + "+cu999"}), tuned.config_dir())
    chosen, caught = _warnings_of(lambda: tuned.select("decode", SMALL, DEFAULT))
    assert caught == [] and chosen != DEFAULT


def test_a_file_in_another_skus_folder_is_not_used():
    tuned.write_file(_record(sku="othergpu"), tuned.config_dir())
    (tuned.config_dir() / "othergpu").rename(tuned.config_dir() / SKU)
    chosen, caught = _warnings_of(lambda: tuned.select("decode", SMALL, DEFAULT))
    assert chosen == DEFAULT and len(caught) == 1


def test_default_mode_ignores_shipped_configs_without_warning(monkeypatch):
    tuned.write_file(_record(), tuned.config_dir())
    monkeypatch.setenv(tuned.ENV_MODE, "default")
    chosen, caught = _warnings_of(lambda: tuned.select("decode", SMALL, DEFAULT))
    assert chosen == DEFAULT and caught == []
    monkeypatch.delenv(tuned.ENV_MODE)
    tuned.set_mode("shipped")
    assert tuned.select("decode", SMALL, DEFAULT) != DEFAULT


def test_cpu_tensors_without_a_named_sku_run_the_default_silently(monkeypatch):
    monkeypatch.delenv(tuned.ENV_SKU)
    tuned.write_file(_record(), tuned.config_dir())
    chosen, caught = _warnings_of(lambda: tuned.select("decode", SMALL, DEFAULT, torch.device("cpu")))
    assert chosen == DEFAULT and caught == []


def test_set_decode_config_wins_over_a_shipped_config():
    tuned.write_file(_record(), tuned.config_dir())
    state = torch.zeros(8, 4, 32, 32)
    assert (
        kd._config_for(state, 3, 2, 4, 32, 32)
        == tuned.load_file(tuned.config_dir() / SKU / tuned.file_name("decode", SMALL)).helion_config()
    )
    explicit = helion.Config(block_sizes=[32], num_warps=2)
    kd.set_decode_config("fp32", explicit)
    try:
        assert kd._config_for(state, 3, 2, 4, 32, 32) == explicit
    finally:
        kd.DECODE_CONFIGS["fp32"] = kd._config(8, 2)
    assert tuned.active()[0]["source"] == "explicit"


# ------------------------------------------------------------------ the kernels run the selected config
@pytest.fixture
def interp():
    with interpreter():
        yield


def test_decode_runs_the_shipped_config_correctly(interp, monkeypatch):
    """A shipped config with a block size unlike the default's (4 vs 8) is what the kernel is built with, its
    results match the fp64 reference, and it is reported as active."""
    shipped = {"block_sizes": [4], "num_warps": 1, "num_stages": 1, "indexing": "pointer", "pid_type": "flat"}
    tuned.write_file(_record(config=shipped), tuned.config_dir())
    built = []
    real = kd.make_decode_kernel
    monkeypatch.setattr(kd, "make_decode_kernel", lambda cfg: built.append(cfg) or real(cfg))
    case = decode_case(3, 2, 4, 32, 32, 6, indices=[4, -1, 1])
    pool = case["initial_state"].clone()
    ref_out, ref_pool = packed_decode_reference(
        case["mixed_qkv"], case["a"], case["b"], case["A_log"], case["dt_bias"], 32**-0.5, pool,
        case["ssm_state_indices"], True, -5.0,
    )  # fmt: skip
    (out, state), caught = _warnings_of(
        lambda: kd.helion_fused_recurrent_kda_packed_decode(
            **case, scale=32**-0.5, use_qk_l2norm_in_kernel=True, lower_bound=-5.0
        )
    )
    assert caught == []
    assert built == [helion.Config(**shipped)] and built[0] != kd.DECODE_CONFIGS["fp32"]
    assert torch.allclose(out.double(), ref_out, atol=2e-2, rtol=2e-2)
    assert torch.allclose(state.double(), ref_pool, atol=1e-4, rtol=1e-4)
    assert [r["source"] for r in tuned.active()] == ["shipped"]


def test_decode_without_a_config_warns_once_per_bucket_and_runs_the_default(interp):
    case = decode_case(3, 2, 4, 32, 32, 6, indices=[0, 1, 2])
    one = decode_case(1, 2, 4, 32, 32, 6, indices=[3])

    def calls():
        for c in (case, case, one):
            kd.helion_fused_recurrent_kda_packed_decode(**c, scale=32**-0.5, lower_bound=-5.0)

    _, caught = _warnings_of(calls)
    assert len(caught) == 2  # bucket b4 once (two calls), bucket b1 once
    assert "b4" in str(caught[0].message) and "b1 " in str(caught[1].message)


def test_verify_runs_the_shipped_chain_config_correctly(interp, monkeypatch):
    shipped = {"block_sizes": [8], "num_warps": 2, "num_stages": 1, "indexing": "pointer"}
    bucket = SMALL._replace(batch=2)
    tuned.write_file(_record(kernel="verify-chain", bucket=bucket, config=shipped), tuned.config_dir())
    built = []
    real = kv.make_verify_kernel
    monkeypatch.setattr(kv, "make_verify_kernel", lambda cfg: built.append(cfg) or real(cfg))
    case = verify_case([3, 2], 2, 4, 32, 32, 4, cache_indices=[3, 1], rows=[1, 0], num_rows=2)
    ref_out, ref_snaps = verify_reference(
        case["q"], case["k"], case["v"], case["a"], case["b"], case["A_log"], case["dt_bias"],
        case["ssm_states"], case["cache_indices"], case["query_start_loc"],
        case["intermediate_states_buffer"], case["intermediate_state_indices"], None, -5.0,
    )  # fmt: skip
    out, caught = _warnings_of(lambda: kv.helion_kda_verify(**case, lower_bound=-5.0))
    assert caught == []
    assert built == [helion.Config(**shipped)]
    assert torch.allclose(out.double(), ref_out, atol=2e-2, rtol=2e-2)
    snaps = case["intermediate_states_buffer"].double()
    assert torch.allclose(snaps[1, :3], ref_snaps[1, :3], atol=1e-4, rtol=1e-4)
    assert torch.allclose(snaps[0, :2], ref_snaps[0, :2], atol=1e-4, rtol=1e-4)
    assert tuned.active()[0]["kernel"] == "verify-chain" and tuned.active()[0]["source"] == "shipped"


# ---------------------------------------------------------------------- the autotune job's CPU-testable part
def _fake_timer(times, timed_calls):
    def fake_time(run, sets):
        for s in sets:
            run(s)
        timed_calls.append(len(sets))
        return next(times)

    return fake_time


def _two_sets(batch, pool, device):
    return [torch.tensor([1, 5], dtype=torch.int32), torch.tensor([6, 2], dtype=torch.int32)]


@pytest.fixture
def no_seeds(monkeypatch):
    """Only the default and the search's config: the tests of the job's failure paths count timings."""
    monkeypatch.setattr(kd, "DECODE_SEEDS", {"fp32": [], "bf16": []})
    monkeypatch.setattr(kv, "VERIFY_SEEDS", {"chain": [], "tree": []})


def _module_configs(kernel):
    if kernel == "decode":
        return kd.DECODE_CONFIGS["fp32"], kd.DECODE_SEEDS["fp32"]
    mode = kernel.split("-")[1]
    return kv.VERIFY_CONFIGS[mode], kv.VERIFY_SEEDS[mode]


@pytest.mark.parametrize("kernel", ["decode", "verify-chain", "verify-tree"])
def test_an_autotune_job_checks_times_and_writes_the_faster_config(interp, tmp_path, monkeypatch, kernel):
    """The job pipeline on CPU with Helion's search and the CUDA-graph timer replaced: the search is seeded
    with the module default and seed configs and runs on a pool of only the bucket's slots; every config runs
    on the same inputs, every one is timed, and the fastest is written with the times and the versions."""
    searched = helion.Config(block_sizes=[4], num_warps=1, num_stages=1, indexing="pointer")
    timed_calls, searches = [], []

    def fake_search(fn, args, budget, effort, seeds):
        searches.append((fn, args, seeds))
        return searched

    monkeypatch.setattr(autotune, "DRAFT_TOKENS", 3)  # the interpreter's cost grows with the steps
    default, module_seeds = _module_configs(kernel)
    job = autotune.Job(kernel, Bucket(2, 2, 32, 32, "fp32", 2))
    times = iter([10.0] + [12.0] * len(module_seeds) + [7.5])  # default, seeds, then the search's config
    result = autotune.run_job(
        job, sku=SKU, gpu_name="NVIDIA TestGPU", out_dir=tmp_path, budget_s=5, effort="quick", device="cpu",
        pool_slots=8, autotune=fake_search, time_us=_fake_timer(times, timed_calls), slot_sets=_two_sets,
    )  # fmt: skip
    assert result.error is None and result.search_error is None, (result.error, result.search_error)
    [(fn, args, seeds)] = searches
    assert seeds == [default, *module_seeds]
    assert fn is (kd._packed_decode if kernel == "decode" else kv._verify)
    pools = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 4 and a.shape[-2:] == (32, 32)]
    assert pools and all(p.shape[0] == 2 for p in pools)  # the search's state is the bucket's 2 slots
    assert timed_calls == [2] * (2 + len(module_seeds))
    assert (result.default_us, result.tuned_us, result.chosen) == (10.0, 7.5, "autotuned")
    loaded = tuned.load_file(result.path)
    assert loaded.helion_config() == searched
    assert loaded.source_sha256 == tuned.source_sha256(kernel)
    assert loaded.versions == tuned.installed_versions()
    assert loaded.tuning["default_per_call_us"] == 10.0 and loaded.tuning["budget_seconds"] == 5
    assert loaded.tuning["search_error"] is None
    assert [s["per_call_us"] for s in loaded.tuning["seeds"]] == [12.0] * len(module_seeds)


def test_a_seed_config_faster_than_default_and_search_is_written_and_a_broken_one_dropped(
    interp, tmp_path, monkeypatch
):
    """Seeds are timed like the search's config: the fastest of all is written (named in the table with
    its time); a seed that cannot run is dropped with its error recorded, and the bucket still gets its
    file."""
    good = helion.Config(block_sizes=[4], num_warps=1, num_stages=1, indexing="pointer")
    broken = helion.Config(block_sizes=[4], num_warps=1, num_stages=1, indexing="pointer", no_such_option=1)
    monkeypatch.setattr(kd, "DECODE_SEEDS", {"fp32": [broken, good], "bf16": []})
    searched = helion.Config(block_sizes=[8], num_warps=1, num_stages=1, indexing="pointer")
    timed_calls = []
    result = autotune.run_job(
        autotune.Job("decode", Bucket(2, 2, 32, 32, "fp32", 2)), sku=SKU, gpu_name="x", out_dir=tmp_path,
        budget_s=5, effort="quick", device="cpu", pool_slots=8, autotune=lambda *a, **k: searched,
        time_us=_fake_timer(iter([10.0, 6.0, 7.5]), timed_calls), slot_sets=_two_sets,
    )  # fmt: skip
    assert result.error is None and result.search_error is None
    assert timed_calls == [2, 2, 2]  # default, seed 2, autotuned: seed 1 never ran
    assert (result.chosen, result.chosen_us, result.tuned_us) == ("seed 2", 6.0, 7.5)
    loaded = tuned.load_file(result.path)
    assert loaded.helion_config() == good and loaded.tuning["chosen"] == "seed 2"
    seed1, seed2 = loaded.tuning["seeds"]
    assert seed1["per_call_us"] is None and "seed 1 config failed to run" in seed1["error"]
    assert seed2 == {"name": "seed 2", "config": dict(good), "per_call_us": 6.0, "error": None}
    assert "seed 2 6.00 us" in autotune.render([result])


@pytest.mark.parametrize("kernel", ["decode", "verify-chain"])
def test_every_config_is_timed_on_inputs_built_before_any_timing(
    interp, tmp_path, monkeypatch, kernel, no_seeds
):
    """The timer captures each config's calls into a CUDA graph: whatever the calls build on first use
    (snapshot rows per slot set) would be captured into the first timed config's graph only, and make the
    default look slower. So the tensor conversions done while timing are the same for every config."""
    from unittest import mock

    monkeypatch.setattr(autotune, "DRAFT_TOKENS", 2)
    real_to = torch.Tensor.to
    per_config = []

    def counting_timer(run, sets):
        with mock.patch.object(torch.Tensor, "to", autospec=True, side_effect=real_to) as to:
            for s in sets:
                run(s)
        per_config.append(to.call_count)
        return 1.0

    searched = helion.Config(block_sizes=[4], num_warps=1, num_stages=1, indexing="pointer")
    result = autotune.run_job(
        autotune.Job(kernel, Bucket(2, 2, 32, 32, "fp32", 2)), sku=SKU, gpu_name="x", out_dir=tmp_path,
        budget_s=5, effort="quick", device="cpu", pool_slots=8, autotune=lambda *a, **k: searched,
        time_us=counting_timer, slot_sets=_two_sets,
    )  # fmt: skip
    assert result.error is None and len(per_config) == 2
    assert per_config[0] == per_config[1], per_config


def test_timed_calls_rotate_over_their_own_activation_copies():
    """A server's activations come from HBM on every call: each timed slot set gets its own copy of the
    inputs (the first set runs on the case itself, the check's inputs), cycling after ACTIVATION_SETS."""
    case = {"x": torch.arange(4.0), "pool": torch.zeros(2)}
    activations_of = autotune._activation_rotation(case, ("x",), sets=3)
    case["x"].add_(10)  # copies made later (inside a timed graph's capture) would see this
    sets = [torch.tensor([i]) for i in range(5)]
    got = [activations_of(s) for s in sets]
    assert got[0] is case
    ptrs = [g["x"].data_ptr() for g in got]
    assert len(set(ptrs[:3])) == 3 and ptrs[3] == ptrs[0] and ptrs[4] == ptrs[1]
    assert all(torch.equal(g["x"], torch.arange(4.0)) for g in got[1:3])  # copied when built
    assert all(g["pool"] is case["pool"] for g in got)
    assert activations_of(sets[2]) is got[2]  # a slot set seen again keeps its copy


def _small_kernel_args():
    """{name: (kernel function, args)} for decode and chain/tree verify at a small CPU shape."""
    c = decode_case(2, 2, 2, 32, 32, 4, indices=[3, 1])
    decode_args = (c["mixed_qkv"], c["a"], c["b"], c["A_log"], c["dt_bias"], 0.1, -5.0, c["initial_state"],
                   c["out"], c["ssm_state_indices"], True, True)  # fmt: skip
    kernels = {"decode": (kd._packed_decode, decode_args)}
    for mode, parents in (("chain", None), ("tree", [[0, 0, 1], [0, 0, 1]])):
        case = verify_case([3, 3], 2, 2, 32, 32, 4, cache_indices=[3, 1], rows=[0, 1], num_rows=2,
                           parents=parents)  # fmt: skip
        case.pop("cache_steps")
        args = kv.kernel_args(**case, out=torch.empty_like(case["v"]), lower_bound=-5.0)
        kernels[mode] = (kv._verify, args)
    return kernels


def test_seeds_outside_helions_search_space_are_not_seeded():
    """Helion's search space for decode and verify has no 3-D launch grid (pid_type "xyz"; their request
    and head tiles have a fixed size of 1), though both kernels run with one. Seeded, such a config stopped
    every verify search on the H200; now it is only timed against the search's result, not seeded."""
    flat = helion.Config(block_sizes=[8], num_warps=1, pid_type="flat")
    xyz = helion.Config(block_sizes=[8], num_warps=1, pid_type="xyz")
    kernels = _small_kernel_args()
    assert autotune.searchable_seeds(*kernels["decode"], [xyz, flat, xyz]) == [flat]
    assert autotune.searchable_seeds(*kernels["chain"], [flat, xyz]) == [flat]


def test_every_module_config_and_seed_is_valid_on_cuda(monkeypatch):
    """Helion applies its CUDA-only config rules (e.g. a register cap only on a persistent grid) only where
    CUDA is available, so a config that passes every CPU test can be refused on the GPU: three verify seeds
    were, on the H200. Here those rules run on the CPU, with an H200's register file."""
    apply_cuda_config_rules(monkeypatch)
    configs = {
        "decode": [*kd.DECODE_CONFIGS.values(), *(s for seeds in kd.DECODE_SEEDS.values() for s in seeds)],
        "chain": [kv.VERIFY_CONFIGS["chain"], *kv.VERIFY_SEEDS["chain"]],
        "tree": [kv.VERIFY_CONFIGS["tree"], *kv.VERIFY_SEEDS["tree"]],
    }
    kernels = _small_kernel_args()
    for name, (fn, args) in kernels.items():
        spec = helion.kernel(fn, static_shapes=False).bind(args).config_spec
        for config in configs[name]:
            spec.normalize(helion.Config(**dict(config.config)))  # raises helion.exc.InvalidConfig
    # the rules are live: a register cap on the flat grid is refused
    fn, args = kernels["chain"]
    capped = helion.Config(**dict(kv.VERIFY_CONFIGS["chain"].config, maxnreg=64))
    with pytest.raises(helion.exc.InvalidConfig, match="maxnreg"):
        helion.kernel(fn, static_shapes=False).bind(args).config_spec.normalize(capped)


def test_a_failed_search_still_writes_the_timed_default_and_says_so(interp, tmp_path, capsys, no_seeds):
    """Helion finding nothing within the budget must not lose the bucket: the default alone is timed and
    written as chosen, the search's failure is recorded in the file, the table and the exit code."""

    def broken(*_, **__):
        raise helion.exc.NoConfigFound()

    timed_calls = []
    job = autotune.Job("decode", Bucket(2, 2, 32, 32, "fp32", 2))
    result = autotune.run_job(
        job, sku=SKU, gpu_name="x", out_dir=tmp_path, budget_s=5, effort="quick", device="cpu", pool_slots=8,
        autotune=broken, time_us=_fake_timer(iter([9.0]), timed_calls), slot_sets=_two_sets,
    )  # fmt: skip
    assert result.error is None and "NoConfigFound" in result.search_error
    assert timed_calls == [2]  # only the default was timed
    assert (result.default_us, result.tuned_us, result.chosen) == (9.0, None, "default")
    loaded = tuned.load_file(result.path)
    assert loaded.helion_config() == kd.DECODE_CONFIGS["fp32"]
    assert loaded.tuning["chosen"] == "default" and "NoConfigFound" in loaded.tuning["search_error"]
    assert loaded.tuning["autotuned_per_call_us"] is None and loaded.tuning["autotuned_config"] is None
    table = autotune.render([result])
    assert "SEARCH FAILED: NoConfigFound" in table and "9.00" in table and str(result.path) in table
    assert "search gave nothing usable" in autotune.status_line(result)


def test_an_autotuned_config_that_disagrees_with_the_default_is_not_written(
    interp, tmp_path, monkeypatch, no_seeds
):
    searched = helion.Config(block_sizes=[4], num_warps=1, num_stages=1, indexing="pointer")
    monkeypatch.setattr(autotune, "_close", lambda got, want, tol: False)
    timed_calls = []
    result = autotune.run_job(
        autotune.Job("decode", Bucket(2, 2, 32, 32, "fp32", 2)), sku=SKU, gpu_name="x", out_dir=tmp_path,
        budget_s=5, effort="quick", device="cpu", pool_slots=8, autotune=lambda *a, **k: searched,
        time_us=_fake_timer(iter([9.0, 1.0]), timed_calls), slot_sets=_two_sets,
    )  # fmt: skip
    assert "disagrees with the default" in result.search_error and timed_calls == [2]
    loaded = tuned.load_file(result.path)
    assert loaded.tuning["chosen"] == "default" and loaded.helion_config() == kd.DECODE_CONFIGS["fp32"]
    assert loaded.tuning["autotuned_config"]["block_sizes"] == [4]  # recorded, not used


def test_an_autotuned_config_that_fails_to_time_is_dropped_and_the_default_written(
    interp, tmp_path, no_seeds
):
    searched = helion.Config(block_sizes=[4], num_warps=1, num_stages=1, indexing="pointer")
    timed = []

    def time_default_only(run, sets):
        timed.append(len(sets))
        if len(timed) == 2:
            raise RuntimeError("CUDA graph capture failed")
        return 9.0

    result = autotune.run_job(
        autotune.Job("decode", Bucket(2, 2, 32, 32, "fp32", 2)), sku=SKU, gpu_name="x", out_dir=tmp_path,
        budget_s=5, effort="quick", device="cpu", pool_slots=8, autotune=lambda *a, **k: searched,
        time_us=time_default_only, slot_sets=_two_sets,
    )  # fmt: skip
    assert result.error is None and "failed under CUDA graph timing" in result.search_error
    assert (result.chosen, result.default_us, result.tuned_us) == ("default", 9.0, None)
    assert tuned.load_file(result.path).helion_config() == kd.DECODE_CONFIGS["fp32"]


def test_a_bucket_whose_default_cannot_run_gets_no_file(tmp_path, monkeypatch):
    def broken_problem(*_):
        raise RuntimeError("no inputs")

    monkeypatch.setattr(autotune, "problem_for", broken_problem)
    result = autotune.run_job(
        autotune.Job("decode", Bucket(2, 2, 32, 32, "fp32", 2)), sku=SKU, gpu_name="x", out_dir=tmp_path,
        budget_s=5, effort="quick", device="cpu", pool_slots=8,
    )  # fmt: skip
    assert "no inputs" in result.error and result.path is None
    assert not any(tmp_path.rglob("*.json"))
    assert "FAILED, no file" in autotune.render([result])


# ------------------------------------------------------------------------------------------------ selftest
def test_selftest_lists_active_configs_and_fails_stale_ones():
    tuned.write_file(_record(), tuned.config_dir())
    stale = _record(bucket=SMALL._replace(batch=8), source_sha256="1" * 64)
    tuned.write_file(stale, tuned.config_dir())
    rows = {c.name: c for c in selftest.config_checks("helion", {"gpu": False})}
    good = rows[f"config {SKU}/decode-h2-hv4-k32-v32-fp32-b4.json"]
    bad = rows[f"config {SKU}/decode-h2-hv4-k32-v32-fp32-b8.json"]
    assert (
        good.status == "PASS" and "active" in good.detail and "8.0 us tuned vs 10.0 us default" in good.detail
    )
    assert bad.status == "FAIL" and "kernel source changed" in bad.detail


def test_selftest_lists_a_config_tuned_with_other_triton_as_active_and_flagged():
    versions = {**tuned.installed_versions(), "triton": "3.6.0"}
    tuned.write_file(_record(versions=versions), tuned.config_dir())
    tuned.write_file(_record(bucket=SMALL._replace(batch=8), versions={**versions, "helion": "0.9"}),
                     tuned.config_dir())  # fmt: skip
    rows = {c.name: c for c in selftest.config_checks("helion", {"gpu": False})}
    flagged = rows[f"config {SKU}/decode-h2-hv4-k32-v32-fp32-b4.json"]
    refused = rows[f"config {SKU}/decode-h2-hv4-k32-v32-fp32-b8.json"]
    assert flagged.status == "PASS"
    assert "active, tuned with other triton/torch: re-tune in the image" in flagged.detail
    assert "tuned with triton 3.6.0" in flagged.detail
    assert refused.status == "FAIL" and "tuned with helion 0.9" in refused.detail


def test_selftest_skips_with_the_tune_command_when_none_are_shipped_for_the_gpu(monkeypatch):
    monkeypatch.delenv(tuned.ENV_SKU)
    checks = selftest.config_checks("helion", {"gpu": True, "gpu_name": "NVIDIA H200"})
    assert [(c.name, c.status) for c in checks] == [("tuned kernel configs", "SKIP")]
    assert "make autotune SKU=h200" in checks[0].detail


def test_selftest_without_a_gpu_checks_every_shipped_sku(monkeypatch):
    monkeypatch.delenv(tuned.ENV_SKU)
    tuned.write_file(_record(source_sha256="2" * 64), tuned.config_dir())
    checks = selftest.config_checks("helion", {"gpu": False})
    assert [c.status for c in checks] == ["FAIL"] and checks[0].name.startswith(f"config {SKU}/")


# -------------------------------------------------------------------------------------------------- the CLI
def test_autotune_refuses_without_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: this checks the no-GPU refusal")
    assert main(["kernels", "autotune", "--sku", "h200", "--out", "unused"]) == 2
    assert "no CUDA GPU visible" in capsys.readouterr().err


def test_autotune_rejects_a_bad_sku_name(capsys):
    assert main(["kernels", "autotune", "--sku", "../h200"]) == 2
    assert "a SKU of the registry (b200, h200)" in capsys.readouterr().err


def test_autotune_dry_run_prints_the_plan_and_budget(capsys, tmp_path):
    argv = [
        "kernels",
        "autotune",
        "--sku",
        "h200",
        "--out",
        str(tmp_path),
        "--budget-seconds",
        "30",
        "--dry-run",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # decode and verify-chain: 2 heads x 9 batch buckets each; prefill: 5 kernels x 2 heads x 2 token buckets
    assert "56 kernel/bucket tunes x 30 s search budget (effort quick)" in out and "up to 28 min" in out
    assert str(tmp_path / "h200" / "decode-h16-hv16-k128-v128-fp32-b48.json") in out
    assert str(tmp_path / "h200" / "verify-chain-h8-hv8-k128-v128-fp32-b1.json") in out
    assert str(tmp_path / "h200" / "prefill-state-h8-hv8-k128-v128-fp32-t8192.json") in out
    assert not any(tmp_path.iterdir())


def test_autotune_tunes_exactly_the_named_kernels_and_buckets(capsys, tmp_path):
    argv = ["kernels", "autotune", "--sku", "h200", "--kernels", "decode,verify-chain", "--heads", "16"]
    assert main([*argv, "--batches", "16,48", "--out", str(tmp_path), "--dry-run"]) == 0
    planned = [line.split()[0:2] for line in capsys.readouterr().out.splitlines()[1:]]
    assert planned == [
        ["decode", "h16-hv16-k128-v128-fp32-b16"],
        ["decode", "h16-hv16-k128-v128-fp32-b48"],
        ["verify-chain", "h16-hv16-k128-v128-fp32-b16"],
        ["verify-chain", "h16-hv16-k128-v128-fp32-b48"],
    ]


def test_a_kernel_bucketed_by_tokens_registers_its_own_sizes(monkeypatch):
    """How prefill opts in: its own size buckets validate and look up like the batch buckets do."""
    monkeypatch.setitem(tuned.SIZE_BUCKETS, "decode", (1024, 4096, 8192))
    assert tuned.batch_bucket(5000, tuned.size_buckets("decode")) == 8192
    tuned.write_file(_record(bucket=SMALL._replace(batch=4096)), tuned.config_dir())
    with pytest.raises(tuned.ConfigFileError, match="bucket.batch"):
        tuned.parse(_record().to_dict())  # batch 4 is not one of this kernel's sizes
    assert tuned.select("decode", SMALL._replace(batch=4096), DEFAULT) != DEFAULT


def test_the_active_line_counts_the_default_selections():
    tuned.set_mode("shipped")
    with pytest.warns(KernelConfigWarning):
        tuned.select("decode", SMALL, DEFAULT)
    line = tuned.describe_active("shipped")
    assert line == "kdakit kernel configs (shipped): 1 default of 1 kernel/bucket selections"


@pytest.mark.gpu
def test_autotune_one_decode_bucket_on_the_gpu_and_run_it(tmp_path, monkeypatch, capsys):
    """The real command on a GPU (quick effort, 20 s budget, one bucket): it writes a config that the decode
    wrapper then selects for this GPU without any warning, and whose results agree with the reference."""
    monkeypatch.delenv(tuned.ENV_SKU)
    sku = tuned.sku_of(torch.cuda.get_device_name(0))
    argv = ["kernels", "autotune", "--sku", sku, "--kernels", "decode", "--heads", "16", "--batches", "1"]
    argv += ["--budget-seconds", "20", "--effort", "quick", "--out", str(tmp_path / "configs")]
    assert main(argv) == 0
    path = tmp_path / "configs" / sku / "decode-h16-hv16-k128-v128-fp32-b1.json"
    record = tuned.load_file(path)
    assert record.tuning["default_per_call_us"] > 0 and record.tuning["autotuned_per_call_us"] > 0
    assert "default us" in capsys.readouterr().out
    case = decode_case(1, 16, 16, 128, 128, 4, indices=[2], device="cuda")
    pool = case["initial_state"].cpu().clone()
    ref_out, ref_pool = packed_decode_reference(
        *(case[k].cpu() for k in ("mixed_qkv", "a", "b", "A_log", "dt_bias")), 128**-0.5, pool,
        case["ssm_state_indices"].cpu(), True, -5.0,
    )  # fmt: skip
    (out, state), caught = _warnings_of(
        lambda: kd.helion_fused_recurrent_kda_packed_decode(
            **case, scale=128**-0.5, use_qk_l2norm_in_kernel=True, lower_bound=-5.0
        )
    )
    assert caught == [] and tuned.active()[0]["source"] == "shipped"
    assert torch.allclose(out.double().cpu(), ref_out, atol=2e-2, rtol=2e-2)
    assert torch.allclose(state.double().cpu(), ref_pool, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("chosen, chosen_us", [("default", 80.0), ("seed 1", 75.5)])
def test_an_unsearched_bucket_reports_its_default_and_the_config_written(tmp_path, chosen, chosen_us):
    """A kernel Helion does not search (the state pass: its default against the seeds) has no searched time:
    the progress line and the table say so and name what was written, and the run goes on to the next
    bucket."""
    result = autotune.JobResult(
        autotune.Job("prefill-state", Bucket(16, 16, 128, 128, "fp32", 512)), default_us=80.0, tuned_us=None,
        chosen=chosen, chosen_us=chosen_us, path=tmp_path / "x.json",
    )  # fmt: skip
    line = autotune.status_line(result)
    assert line.startswith("not searched; default 80.00 us") and "SEARCH FAILED" not in line
    table = autotune.render([result])
    assert "(not searched)" in table and "SEARCH FAILED" not in table and "80.00" in table
    if chosen.startswith("seed"):
        assert "seed 1 75.50 us" in line and "seed 1 75.50 us" in table
    else:
        assert line.endswith("default written")


def test_a_search_that_outlasts_its_budget_empty_handed_says_to_raise_the_budget(interp, tmp_path, no_seeds):
    """Helion ends a search at its budget with its best so far, which is nothing when no candidate compiled
    in time: the file, the progress line and the table say the budget was too short, not only NoConfigFound;
    a search that fails fast names no budget."""

    def searches_past_the_budget(*_, **__):
        time.sleep(1.05)
        raise helion.exc.NoConfigFound()

    def fails_at_once(*_, **__):
        raise helion.exc.NoConfigFound()

    job = autotune.Job("decode", Bucket(2, 2, 32, 32, "fp32", 2))
    common = dict(sku=SKU, gpu_name="x", effort="quick", device="cpu", pool_slots=8, slot_sets=_two_sets)
    slow = autotune.run_job(
        job, out_dir=tmp_path / "slow", budget_s=1, autotune=searches_past_the_budget,
        time_us=_fake_timer(iter([9.0]), []), **common,
    )  # fmt: skip
    assert slow.error is None and slow.chosen == "default"
    assert slow.search_error.startswith("nothing within the 1-s budget (the search took 1 s")
    assert "--budget-seconds may find a config): NoConfigFound" in slow.search_error
    assert tuned.load_file(slow.path).tuning["search_error"] == slow.search_error
    assert "--budget-seconds" in autotune.status_line(slow) and "--budget-seconds" in autotune.render([slow])
    fast = autotune.run_job(
        job, out_dir=tmp_path / "fast", budget_s=5, autotune=fails_at_once,
        time_us=_fake_timer(iter([9.0]), []), **common,
    )  # fmt: skip
    assert fast.search_error.startswith("NoConfigFound") and "budget" not in fast.search_error


def _stored_parameters(fn) -> set[str]:
    """Names of the tensors a prefill kernel stores into: `hl.store(name, ...)` in its body and in the
    helpers Helion traces through (tuned._helpers; they take the kernel's tensors under the same names)."""
    sources = [inspect.getsource(f) for f in [fn, *tuned._helpers(fn)]]
    return {name for text in sources for name in re.findall(r"hl\.store\(\s*(\w+)", text)}


def test_prefill_search_zeroes_or_restores_exactly_what_each_kernel_writes():
    """The prefill search checks each config against the default on the tensors a kernel writes, zeroed or
    restored between runs; a kernel that gains an output (or renames one) must be listed, or the search
    compares stale memory (or stops on a missing name, on the GPU)."""
    from kdakit.kernels import prefill

    for short, fn in prefill._FNS.items():
        listed = set(autotune.PREFILL_OUTPUTS[short]) | set(autotune.PREFILL_INOUT.get(short, ()))
        assert listed == _stored_parameters(fn), short
        assert listed <= set(inspect.signature(fn).parameters), short
    restored = {n for names in autotune.PREFILL_INOUT.values() for n in names}
    assert set(autotune.PREFILL_RESTORED_IN_GRAPH) <= restored


@pytest.mark.parametrize(("env_level", "quiet"), [(None, True), ("", True), ("DEBUG", False), ("10", False)])
def test_the_search_is_quiet_unless_helions_log_level_variable_asks_for_detail(monkeypatch, env_level, quiet):
    """Helion logs each failed candidate at DEBUG only, so a search that found nothing can be explained only
    with HELION_AUTOTUNE_LOG_LEVEL set: the search must then leave the level to Helion, and otherwise keep to
    warnings."""
    built = []

    class FakeKernel:
        def bind(self, args):
            return self

        def autotune(self, args, force):
            return "config"

    def fake_kernel(fn, **options):
        built.append(options)
        return FakeKernel()

    if env_level is None:
        monkeypatch.delenv("HELION_AUTOTUNE_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("HELION_AUTOTUNE_LOG_LEVEL", env_level)
    monkeypatch.setenv("HELION_BENCHMARK_CUDAGRAPH", "1")  # the search sets it: restored after the test
    monkeypatch.setattr(helion, "kernel", fake_kernel)
    monkeypatch.setattr(autotune, "searchable_seeds", lambda *a, **k: [])
    assert autotune.helion_autotune(lambda: None, (), 5, "quick") == "config"
    [options] = built
    assert (options.get("autotune_log_level") == logging.WARNING) is quiet
    assert quiet or "autotune_log_level" not in options
