"""Prefill in the per-SKU tuned-config machinery, on CPU: bucket mapping, run-time selection of the six
prefill kernels (shipped / default with ONE warning naming the tune command / version policy / explicit
configure() and KDAKIT_PREFILL_CONFIGS), the per-bucket cache, a shipped config actually running (Triton
interpreter, against the fp64 reference), and `kdakit kernels autotune --kernels prefill` (plan, dry run, and
the job flow with Helion's search and the CUDA-graph timer replaced by fakes). No shipped prefill file is
needed: every test writes its own files into a temporary folder."""

from __future__ import annotations

import copy
import json

import helion
import pytest
import torch
from kdakit.kernels import prefill, tuned
from kdakit.kernels import reference as R
from kdakit.kernels.tools import autotune
from kdakit.kernels.tools.testing import interpreter
from kdakit.kernels.tuned import Bucket, TunedConfig

from kdakit.cli import main
from tests.kernels.kernel_configs import apply_cuda_config_rules, config_warnings, tuned_record

SKU = "testgpu"
SMALL = Bucket(2, 2, 32, 32, "fp32", 4096)  # H = HV = 2, K = V = 32, up to 4096 tokens
SMALL_70 = SMALL._replace(batch=512)  # the bucket of a 70-token call
# configs unlike the module defaults (K = V = 32 allows 16-wide tiles)
INTRA = {"block_sizes": [16], "num_warps": 2, "num_stages": 1, "indexing": "pointer"}
STATE = {"block_sizes": [32], "num_warps": 4, "num_stages": 1, "indexing": "pointer"}


@pytest.fixture(autouse=True)
def _fresh_selection(monkeypatch, tmp_path):
    """Every test selects against its own config folder and SKU, from clean caches and no explicit config."""
    monkeypatch.setenv(tuned.ENV_SKU, SKU)
    monkeypatch.setenv(tuned.ENV_DIR, str(tmp_path / "configs"))
    monkeypatch.delenv(tuned.ENV_MODE, raising=False)
    monkeypatch.delenv("KDAKIT_PREFILL_CONFIGS", raising=False)
    monkeypatch.setattr(tuned, "_mode", None)
    prefill.configure({})
    tuned.reset()
    yield
    prefill.configure({})
    tuned.reset()


def _record(kernel="prefill-intra", bucket=SMALL, config=None, **override) -> TunedConfig:
    return tuned_record(kernel, bucket, config or INTRA, **{"sku": SKU, **override})


def _select(bucket=SMALL, device=None):
    return prefill._kernels_for(bucket, device)


def _config_of(kernel: helion.Kernel) -> dict:
    return dict(kernel.configs[0])


# ------------------------------------------------------------------------------------------- buckets, files
@pytest.mark.parametrize(
    ("tokens", "bucket"),
    [
        (1, 16),
        (16, 16),
        (17, 512),
        (512, 512),
        (513, 4096),
        (4096, 4096),
        (4097, 8192),
        (8192, 8192),
        (9000, 16384),
        (65536, 16384),
    ],  # fmt: skip
)
def test_total_tokens_map_to_the_token_bucket_at_or_above_them(tokens, bucket):
    assert prefill._bucket(tokens, 16, 16, 128, 128, torch.float32) == Bucket(
        16, 16, 128, 128, "fp32", bucket
    )


def test_a_pool_dtype_no_file_describes_runs_the_configured_kernels():
    assert prefill._bucket(100, 2, 2, 32, 32, torch.float64) is None
    assert prefill._kernels_for(None, None) is prefill._kernels


def test_prefill_files_are_per_kernel_named_by_token_bucket_and_validated(tmp_path):
    path = tuned.write_file(_record(), tmp_path)
    assert path.name == "prefill-intra-h2-hv2-k32-v32-fp32-t4096.json"
    assert tuned.load_file(path) == _record()
    data = _record().to_dict()
    data["bucket"]["batch"] = 48  # a batch bucket, not a token bucket
    with pytest.raises(
        tuned.ConfigFileError, match=r"bucket.batch must be one of \(16, 512, 4096, 8192, 16384\)"
    ):
        tuned.parse(data)


def test_each_prefill_kernel_hashes_its_own_body_and_the_helpers_it_calls():
    hashes = {k: tuned.source_sha256(k) for k in tuned.PREFILL_KERNELS}
    assert len(set(hashes.values())) == 5
    solve_helpers = [f.__name__ for f in tuned._helpers(prefill._solve_fn)]
    assert solve_helpers == ["_invert_rows", "_invert_unit_lower_16", "_dot32"]
    gate_helpers = [f.__name__ for f in tuned._helpers(prefill._gate_cumsum_fn)]
    assert gate_helpers == ["_row", "_gate_chunk", "_column", "_activate_row"]


# -------------------------------------------------------------------------------------------- selection
def test_no_prefill_configs_mean_defaults_and_one_warning_per_bucket_naming_the_command():
    kernels, caught = config_warnings(lambda: [_select() for _ in range(3)])
    assert all(k == prefill._kernels for k in kernels)  # the default kernel objects, nothing rebuilt
    assert len(caught) == 1
    text = str(caught[0].message)
    assert (
        "5 of 5 prefill kernels have no usable tuned config for testgpu at h2-hv2-k32-v32-fp32-t4096" in text
    )
    assert "kdakit kernels autotune --sku testgpu --kernels prefill --heads 2 --tokens 4096" in text
    assert "make autotune SKU=testgpu AUTOTUNE_KERNELS=prefill" in text
    assert "prefill-state: no file prefill-state-h2-hv2-k32-v32-fp32-t4096.json" in text
    _, caught = config_warnings(lambda: _select(SMALL._replace(batch=8192)))
    assert len(caught) == 1 and "t8192" in str(caught[0].message)  # another bucket warns once more
    rows = tuned.active()
    assert len(rows) == 10 and {r["source"] for r in rows} == {"default"}


def test_a_shipped_prefill_config_is_used_for_its_kernel_and_bucket_only():
    path = tuned.write_file(_record(), tuned.config_dir())
    kernels, caught = config_warnings(_select)
    assert _config_of(kernels["intra"]) == INTRA and kernels["intra"] is not prefill._kernels["intra"]
    assert all(kernels[n] is prefill._kernels[n] for n in prefill._FNS if n != "intra")
    [warning] = caught  # the four kernels without a file still say so, once
    assert "4 of 5 prefill kernels" in str(warning.message) and "prefill-intra" not in str(warning.message)
    active = {r["kernel"]: r for r in tuned.active()}
    assert active["prefill-intra"]["source"] == "shipped" and active["prefill-intra"]["path"] == str(path)
    assert active["prefill-intra"]["bucket"] == "h2-hv2-k32-v32-fp32-t4096"
    other, _ = config_warnings(lambda: _select(SMALL._replace(batch=8192)))  # no file for t8192
    assert other["intra"] is prefill._kernels["intra"]


def test_a_full_set_of_shipped_prefill_configs_is_selected_silently():
    for kernel, short in tuned.PREFILL_KERNELS.items():
        config = STATE if short == "state" else INTRA if short == "intra" else prefill.DEFAULT_CONFIGS[short]
        tuned.write_file(_record(kernel, config=config), tuned.config_dir())
    kernels, caught = config_warnings(_select)
    assert caught == []
    assert _config_of(kernels["state"]) == STATE and _config_of(kernels["intra"]) == INTRA
    assert kernels["gate"] is prefill._kernels["gate"]  # a file holding the default config: no new kernel
    assert {r["source"] for r in tuned.active()} == {"shipped"}


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"source_sha256": "0" * 64}, "kernel source changed"),
        ({"versions": {**tuned.installed_versions(), "helion": "1.3.0"}}, "tuned with helion 1.3.0"),
    ],
)
def test_a_prefill_config_for_another_source_or_helion_is_refused(override, reason):
    tuned.write_file(_record("prefill-state", config=STATE, **override), tuned.config_dir())
    kernels, caught = config_warnings(_select)
    assert kernels["state"] is prefill._kernels["state"]
    [warning] = caught
    assert "not used" in str(warning.message) and reason in str(warning.message)
    active = {r["kernel"]: r for r in tuned.active()}
    assert active["prefill-state"]["source"] == "default" and reason in active["prefill-state"]["reason"]


def test_a_prefill_config_tuned_with_another_triton_is_used_and_flagged_once():
    installed = tuned.installed_versions()
    assert installed["triton"] != "3.6.0"
    versions = {**installed, "triton": "3.6.0"}
    for kernel in tuned.PREFILL_KERNELS:
        config = (
            STATE if kernel == "prefill-state" else prefill.DEFAULT_CONFIGS[tuned.PREFILL_KERNELS[kernel]]
        )
        tuned.write_file(_record(kernel, config=config, versions=versions), tuned.config_dir())
    kernels, caught = config_warnings(lambda: [_select(), _select()])
    assert _config_of(kernels[0]["state"]) == STATE
    [warning] = caught
    text = str(warning.message)
    assert "5 tuned config(s) used anyway" in text and "tuned with triton 3.6.0" in text
    assert "--kernels prefill --heads 2 --tokens 4096" in text
    assert {r["source"] for r in tuned.active()} == {"shipped"}


def test_configure_and_the_env_variable_win_over_shipped_configs(monkeypatch):
    tuned.write_file(_record(), tuned.config_dir())
    explicit = {"block_sizes": [32], "num_warps": 4, "num_stages": 1, "indexing": "pointer"}
    prefill.configure({"intra": explicit})
    kernels, caught = config_warnings(_select)
    assert _config_of(kernels["intra"]) == explicit
    [warning] = caught  # the explicit kernel is neither selected nor reported missing
    assert "4 of 4 prefill kernels" in str(warning.message) and "prefill-intra" not in str(warning.message)
    assert {r["kernel"]: r["source"] for r in tuned.active()}["prefill-intra"] == "explicit"
    prefill.configure({})  # back to selection: the shipped file
    assert _config_of(_select()["intra"]) == INTRA
    monkeypatch.setenv("KDAKIT_PREFILL_CONFIGS", json.dumps({"configs": {"intra": explicit}}))
    prefill._configure_from_env()
    assert _config_of(_select()["intra"]) == explicit


def test_the_env_variable_is_read_at_import():
    """A fresh process with KDAKIT_PREFILL_CONFIGS set starts with those configs (the sweep and tuning
    scripts set it before anything imports the prefill)."""
    import os
    import subprocess
    import sys

    explicit = {"block_sizes": [32], "num_warps": 4, "num_stages": 1, "indexing": "pointer"}
    setting = json.dumps({"configs": {"intra": explicit}, "widen_state": False})
    env = {**os.environ, "KDAKIT_PREFILL_CONFIGS": setting}
    code = (
        "import json; from kdakit.kernels import prefill as p; "
        "print(json.dumps([sorted(p._explicit), dict(p._kernels['intra'].configs[0]), p._widen_state]))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    names, config, widen = json.loads(out.stdout.strip().splitlines()[-1])
    assert names == ["intra"] and config == explicit and widen is False


def test_default_mode_and_cpu_tensors_without_a_sku_run_the_defaults_silently(monkeypatch):
    tuned.write_file(_record(), tuned.config_dir())
    with tuned.configs_mode("default"):
        kernels, caught = config_warnings(_select)
    assert kernels == prefill._kernels and caught == []
    monkeypatch.delenv(tuned.ENV_SKU)
    tuned.reset()
    kernels, caught = config_warnings(lambda: _select(device=torch.device("cpu")))
    assert kernels == prefill._kernels and caught == []


def test_selection_is_cached_per_bucket_and_forgotten_on_reset(monkeypatch):
    path = tuned.write_file(_record(), tuned.config_dir())
    first, _ = config_warnings(_select)

    def no_lookup(*_):
        raise AssertionError("selection ran again")

    with monkeypatch.context() as patched:
        patched.setattr(tuned, "_resolve", no_lookup)
        assert _select() is first  # a cached bucket costs a dict lookup: no file access, no resolution
    path.unlink()
    assert _select() is first  # still cached
    tuned.reset()
    again, _ = config_warnings(_select)
    assert again["intra"] is prefill._kernels["intra"]  # looked again: the file is gone


# ------------------------------------------------------------- a shipped config runs, and runs correctly
@pytest.fixture
def interp():
    with interpreter():
        yield


def _inputs(T=70, H=2, K=32, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, s=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen) * s).to(dtype)

    return dict(
        q=rnd(1, T, H, K), k=rnd(1, T, H, K), v=rnd(1, T, H, K), g=rnd(1, T, H, K), beta=rnd(1, T, H),
        A_log=rnd(H, s=0.5, dtype=torch.float32), dt_bias=rnd(H * K, s=0.3, dtype=torch.float32),
        pool=rnd(3, H, K, K, s=0.3, dtype=torch.float32), idx=torch.tensor([1]),
        cu=torch.tensor([0, T], dtype=torch.int32),
    )  # fmt: skip


def test_chunk_kda_runs_the_shipped_intra_and_state_configs_and_matches_the_reference(interp):
    tuned.write_file(_record(bucket=SMALL_70), tuned.config_dir())
    tuned.write_file(_record("prefill-state", bucket=SMALL_70, config=STATE), tuned.config_dir())
    x = _inputs()
    v, pool = x["v"].clone(), x["pool"].clone()
    out, caught = config_warnings(
        lambda: prefill.chunk_kda(
            x["q"], x["k"], v, x["g"], x["beta"], initial_state=pool, initial_state_indices=x["idx"],
            use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu"], A_log=x["A_log"], dt_bias=x["dt_bias"],
            lower_bound=-5.0, beta_is_raw=True,
        )
    )  # fmt: skip
    active = {r["kernel"]: r["source"] for r in tuned.active()}
    assert active["prefill-intra"] == active["prefill-state"] == "shipped" and len(caught) == 1
    used = prefill._for_bucket[(tuned.generation(), "shipped", SMALL_70)]
    assert _config_of(used["intra"]) == INTRA and _config_of(used["state"]) == STATE
    g_log = R.kda_gate(x["g"], x["A_log"], x["dt_bias"], -5.0)
    beta = torch.sigmoid(x["beta"].double())
    o_ref, states = R.kda_recurrence(
        x["q"][0], x["k"][0], x["v"][0], g_log[0], beta[0], x["pool"][1].double(), 32**-0.5, True
    )
    assert (out[0].double() - o_ref).abs().max().item() < 1.5e-2
    assert (pool[1].double() - states[-1]).abs().max().item() < 3e-2
    assert torch.equal(pool[[0, 2]], x["pool"][[0, 2]])


# ----------------------------------------------------------------------------------- autotune: the plan
def test_autotune_plans_every_prefill_kernel_per_head_count_and_token_bucket(capsys, tmp_path):
    argv = ["kernels", "autotune", "--sku", "h200", "--kernels", "prefill", "--heads", "16"]
    assert main([*argv, "--tokens", "4096,16384", "--out", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    planned = [line.split()[0:2] for line in out.splitlines()[1:]]
    assert planned == [
        [kernel, f"h16-hv16-k128-v128-fp32-t{tokens}"]
        for kernel in tuned.PREFILL_KERNELS
        for tokens in (4096, 16384)
    ]
    assert str(tmp_path / "h200" / "prefill-recompute-h16-hv16-k128-v128-fp32-t16384.json") in out
    assert "10 kernel/bucket tunes" in out and not any(tmp_path.iterdir())


def test_autotune_names_single_prefill_kernels_and_rejects_other_token_sizes(capsys):
    argv = ["kernels", "autotune", "--sku", "h200", "--kernels", "prefill-state,decode", "--heads", "8"]
    assert main([*argv, "--batches", "1", "--dry-run"]) == 0
    planned = [line.split()[0:2] for line in capsys.readouterr().out.splitlines()[1:]]
    assert planned == [
        ["prefill-state", "h8-hv8-k128-v128-fp32-t4096"],
        ["prefill-state", "h8-hv8-k128-v128-fp32-t8192"],
        ["decode", "h8-hv8-k128-v128-fp32-b1"],
    ]
    assert main(["kernels", "autotune", "--sku", "h200", "--tokens", "5000", "--dry-run"]) == 2
    assert "[5000] are not prefill token buckets" in capsys.readouterr().err


# ------------------------------------------------------------------------------ autotune: a job, with fakes
def _prefill_job(kernel, monkeypatch, lens=(70, 30)):
    monkeypatch.setattr(autotune, "prefill_lengths", lambda bucket: list(lens))
    return autotune.Job(kernel, SMALL)


def _fake_prefill_timer(times, timed):
    def fake_time(run, restore):
        if restore is not None:
            restore()
        run()
        timed.append(restore is not None)
        return next(times)

    return fake_time


def test_a_prefill_autotune_job_records_real_inputs_checks_times_and_writes(interp, tmp_path, monkeypatch):
    """chunk_kda's earlier stages build the kernel's inputs; the search (a fake) gets copies of them and the
    module default as its seed; default and found config run on the same inputs and must agree (really
    compared: the found config tiles differently); both are timed and the faster is written with the
    sequence lengths it was tuned at."""
    kernel, searched, restores = "prefill-intra", INTRA, False
    short = tuned.PREFILL_KERNELS[kernel]
    seed = prefill.SEARCH_SEEDS[short][0]  # one of the module's seeds (each costs an interpreter run)
    monkeypatch.setitem(prefill.SEARCH_SEEDS, short, [seed])
    searches, timed = [], []

    def fake_search(fn, args, budget, effort, seeds, settings):
        searches.append((fn, args, seeds, settings))
        return helion.Config(**searched)

    result = autotune.run_job(
        _prefill_job(kernel, monkeypatch), sku=SKU, gpu_name="NVIDIA TestGPU", out_dir=tmp_path, budget_s=5,
        effort="quick", device="cpu", autotune=fake_search,
        prefill_time_us=_fake_prefill_timer(iter([10.0, 12.0, 7.5]), timed),
    )  # fmt: skip
    assert result.error is None and result.search_error is None, (result.error, result.search_error)
    [(fn, args, seeds, settings)] = searches
    assert fn is prefill._FNS[short]
    assert seeds == [helion.Config(**prefill.DEFAULT_CONFIGS[short]), helion.Config(**seed)]
    # the search checks candidates against the module default's results (Helion's own default is a 4-warp
    # build, which the state pass cannot run on the H200) and holds the fields the module fixes for this
    # kernel; Helion deep-copies its settings, so nothing in them may hold a kernel that has run
    copy.deepcopy(helion.Settings(**settings))
    baseline = settings.pop("autotune_baseline_fn")
    assert settings == {"ignore_warnings": prefill._IGNORED}
    given = autotune.cloned_args(args)
    for t in given:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            t.fill_(float("nan"))  # the baseline's results replace whatever its arguments hold
    expected = autotune.cloned_args(args)
    prefill._kernel(short, prefill.DEFAULT_CONFIGS[short])(*expected)
    baseline(*given)
    for got, want in zip(given, expected, strict=True):
        if isinstance(got, torch.Tensor):
            assert torch.equal(got, want)
    names = list(__import__("inspect").signature(fn).parameters)
    real = dict(zip(names, args, strict=True))
    assert real["q_rows"].shape == (100, 2 * 32) and real["spans"].shape[1] == 2
    assert timed == [restores] * 3  # default, the seed, the search's config
    assert (result.default_us, result.tuned_us, result.chosen) == (10.0, 7.5, "autotuned")
    loaded = tuned.load_file(result.path)
    [timed_seed] = loaded.tuning["seeds"]
    assert timed_seed["per_call_us"] == 12.0 and timed_seed["error"] is None
    assert timed_seed["config"]["loop_orders"] == seed["loop_orders"]
    assert result.path.name == f"{kernel}-h2-hv2-k32-v32-fp32-t4096.json"
    assert loaded.config == searched and loaded.source_sha256 == tuned.source_sha256(kernel)
    assert (
        loaded.tuning["sequence_lengths"] == [70, 30] and loaded.tuning["method"] == autotune.PREFILL_METHOD
    )
    assert "draft_tokens" not in loaded.tuning


def test_the_search_seeds_are_valid_on_cuda_and_inside_helions_search_space(monkeypatch):
    """Each prefill seed must pass Helion's CUDA-only config rules (the CPU tests do not apply them) and lie
    in the search's space (a seed outside it would stop the search, so autotune leaves it out of the search
    and only times it); the seeds change only the grid's order, so they cannot change a result."""
    from kdakit.kernels.tools import ptxas

    apply_cuda_config_rules(monkeypatch)
    args = ptxas.example_args()
    assert set(prefill.SEARCH_SEEDS) <= set(prefill._FNS) - set(prefill.UNSEARCHED_CANDIDATES)
    for name, seeds in prefill.SEARCH_SEEDS.items():
        assert seeds, name
        configs = [helion.Config(**c) for c in seeds]
        spec = helion.kernel(prefill._FNS[name], static_shapes=False).bind(args[name]).config_spec
        for seed in seeds:
            assert {k: v for k, v in seed.items() if k != "loop_orders"} == prefill.DEFAULT_CONFIGS[name]
            spec.normalize(helion.Config(**seed))  # raises helion.exc.InvalidConfig
        kept = autotune.searchable_seeds(prefill._FNS[name], args[name], configs)
        assert kept == configs, name


def test_the_state_pass_is_not_searched_its_candidates_are_checked_and_timed(interp, tmp_path, monkeypatch):
    """The state pass's search can fault and take the CUDA context with it: the job times the module default
    and prefill.UNSEARCHED_CANDIDATES on the recorded inputs (nothing to restore in-graph: the recorded o
    rows are a buffer apart from U's, as SGLang's graph hands them over) and writes the fastest of those that
    match the default; one that disagrees is dropped."""
    candidates = [{**STATE, "num_stages": 1}, STATE]
    monkeypatch.setitem(prefill.UNSEARCHED_CANDIDATES, "state", candidates)
    real_close, checked = autotune._close, []

    def close(got, want, tol):
        checked.append(got)
        return real_close(got, want, tol) and len(checked) > 1  # the first candidate's outputs disagree

    monkeypatch.setattr(autotune, "_close", close)
    timed = []

    def no_search(*args, **kwargs):
        raise AssertionError("the state pass was handed to Helion's search")

    result = autotune.run_job(
        _prefill_job("prefill-state", monkeypatch), sku=SKU, gpu_name="x", out_dir=tmp_path, budget_s=5,
        effort="quick", device="cpu", autotune=no_search,
        prefill_time_us=_fake_prefill_timer(iter([10.0, 6.0]), timed),
    )  # fmt: skip
    assert result.error is None and result.search_error is None, (result.error, result.search_error)
    assert timed == [False, False] and (result.chosen, result.chosen_us) == ("seed 2", 6.0)
    loaded = tuned.load_file(result.path)
    assert loaded.config == json.loads(helion.Config(**STATE).to_json())
    assert loaded.tuning["searched"] is False and loaded.tuning["autotuned_per_call_us"] is None
    [first, second] = loaded.tuning["seeds"]
    assert "disagrees with the default" in first["error"] and first["per_call_us"] is None
    assert second["per_call_us"] == 6.0 and second["error"] is None


def test_recompute_is_timed_with_vs_rows_restored_in_graph(interp, tmp_path, monkeypatch):
    """Recompute writes U over v's rows, which it reads: every timed run restores them first, inside the
    timed graph (autotune.PREFILL_RESTORED_IN_GRAPH), else the runs after the first read U as v."""
    monkeypatch.setitem(prefill.SEARCH_SEEDS, "recompute", [])
    default = helion.Config(**prefill.DEFAULT_CONFIGS["recompute"])
    timed = []
    result = autotune.run_job(
        _prefill_job("prefill-recompute", monkeypatch, lens=(40,)), sku=SKU, gpu_name="x", out_dir=tmp_path,
        budget_s=5, effort="quick", device="cpu", autotune=lambda *args: default,
        prefill_time_us=_fake_prefill_timer(iter([9.0] * 4), timed),
    )  # fmt: skip
    assert result.error is None, result.error
    assert timed and all(timed)


def test_a_prefill_config_that_disagrees_is_dropped_and_the_default_written(interp, tmp_path, monkeypatch):
    monkeypatch.setattr(autotune, "_close", lambda got, want, tol: False)
    timed = []
    result = autotune.run_job(
        _prefill_job("prefill-solve", monkeypatch, lens=(40,)), sku=SKU, gpu_name="x", out_dir=tmp_path,
        budget_s=5, effort="quick", device="cpu",
        autotune=lambda fn, args, b, e, seeds, settings: helion.Config(block_sizes=[], num_warps=1),
        prefill_time_us=_fake_prefill_timer(iter([9.0]), timed),
    )  # fmt: skip
    assert "disagrees with the default" in result.search_error and timed == [False]
    loaded = tuned.load_file(result.path)
    assert loaded.tuning["chosen"] == "default"
    assert loaded.config == json.loads(helion.Config(**prefill.DEFAULT_CONFIGS["solve"]).to_json())
    assert "SEARCH FAILED" in autotune.render([result]) and "prefill-solve" in autotune.render([result])


def test_the_prefill_timer_restores_v_in_graph_and_subtracts_the_restore(monkeypatch):
    """prefill_per_call_us on the bench's timer (faked): the timed graph holds restore-then-run, and the
    restore's own per-call median is subtracted."""
    from kdakit.kernels.tools import timing

    steps, graphs = [], []

    class FakeTimer:
        def __init__(self, replays, single_replays):
            assert (replays, single_replays) == (timing.REPLAYS, timing.SINGLE_REPLAYS)

        def per_call(self, calls):
            calls[0]()
            graphs.append((tuple(steps), len(calls)))
            per_call = {("restore", "run"): [90.0, 100.0, 120.0], ("restore",): [30.0], ("run",): [55.0]}
            steps.clear()
            return per_call[graphs[-1][0]]

    monkeypatch.setattr(timing, "GraphTimer", FakeTimer)
    assert autotune.prefill_per_call_us(lambda: steps.append("run"), lambda: steps.append("restore")) == 70.0
    calls = timing.PREFILL_CALLS
    assert graphs == [(("restore", "run"), calls), (("restore",), calls)]
    assert autotune.prefill_per_call_us(lambda: steps.append("run"), None) == 55.0


def test_selftest_lists_shipped_prefill_configs_and_fails_stale_ones():
    from kdakit.checks import selftest

    tuned.write_file(_record(), tuned.config_dir())
    tuned.write_file(_record("prefill-state", config=STATE, source_sha256="3" * 64), tuned.config_dir())
    rows = {c.name: c for c in selftest.config_checks("helion", {"gpu": False})}
    good = rows[f"config {SKU}/prefill-intra-h2-hv2-k32-v32-fp32-t4096.json"]
    stale = rows[f"config {SKU}/prefill-state-h2-hv2-k32-v32-fp32-t4096.json"]
    assert good.status == "PASS" and "8.0 us tuned vs 10.0 us default" in good.detail
    assert stale.status == "FAIL" and "kernel source changed" in stale.detail


@pytest.mark.gpu
def test_autotune_one_prefill_kernel_bucket_on_the_gpu_and_select_it(tmp_path, monkeypatch, capsys):
    """The real command on a GPU (never run yet: written without GPU access). One kernel, one bucket, 20 s of
    search: it writes a config that chunk_kda then selects for this GPU at that bucket."""
    monkeypatch.delenv(tuned.ENV_SKU)
    monkeypatch.setenv(tuned.ENV_DIR, str(tmp_path / "configs"))
    sku = tuned.sku_of(torch.cuda.get_device_name(0))
    argv = ["kernels", "autotune", "--sku", sku, "--kernels", "prefill-solve", "--heads", "16"]
    argv += ["--tokens", "4096", "--budget-seconds", "20", "--out", str(tmp_path / "configs")]
    assert main(argv) == 0
    path = tmp_path / "configs" / sku / "prefill-solve-h16-hv16-k128-v128-fp32-t4096.json"
    record = tuned.load_file(path)
    assert record.tuning["default_per_call_us"] > 0 and record.tuning["sequence_lengths"] == [4096]
    assert "default us" in capsys.readouterr().out
    tuned.reset()
    bucket = prefill._bucket(4096, 16, 16, 128, 128, torch.float32)
    kernels, _ = config_warnings(lambda: prefill._kernels_for(bucket, torch.device("cuda")))
    assert _config_of(kernels["solve"]) == record.config
    assert {r["kernel"]: r["source"] for r in tuned.active()}["prefill-solve"] == "shipped"
