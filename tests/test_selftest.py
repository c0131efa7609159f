"""`kdakit selftest` on the CPU, without Docker: its checks on injected facts, and the real command here."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import subprocess
import sys

import pytest

from kdakit.checks import selftest
from kdakit.facts import pins

PINNED = pins.load()


def _versions(**override):
    table = {name: PINNED["packages"][name] for name in selftest.IMAGE_PACKAGES}
    table.update(override)

    def version_of(name):
        if table.get(name) is None:
            raise metadata.PackageNotFoundError(name)
        return table[name]

    return version_of


def test_packages_pass_at_their_pins_with_a_local_label():
    checks = selftest.check_packages(PINNED, _versions(torch=PINNED["packages"]["torch"] + "+cu130"))
    assert [c.status for c in checks] == ["PASS"] * len(selftest.IMAGE_PACKAGES)


def test_wrong_torch_and_missing_helion_fail_by_name():
    checks = {c.name: c for c in selftest.check_packages(PINNED, _versions(torch="2.13.0+cpu", helion=None))}
    assert checks["torch version"].status == "FAIL" and "2.13.0+cpu" in checks["torch version"].detail
    assert checks["helion version"].status == "FAIL" and "not installed" in checks["helion version"].detail
    assert checks["triton version"].status == "PASS"


@pytest.mark.parametrize(
    ("facts", "status"),
    [
        ({"version": "2.14.1+cu130", "cuda": PINNED["cuda"]["version"], "gpu": False}, "PASS"),
        ({"version": "2.14.1+cu126", "cuda": "12.6", "gpu": False}, "FAIL"),
        ({"version": "2.13.0+cpu", "cuda": None, "gpu": False}, "FAIL"),
        ({"error": "import torch failed: ImportError: libcudnn.so.9"}, "FAIL"),
    ],
)
def test_torch_cuda(facts, status):
    assert selftest.check_torch_cuda(PINNED, facts).status == status


UPSTREAM = {p: f"sglang.kernels.ops.attention.helion.kda_{p}" for p in selftest.PHASES}


def _resolved(
    decode="kdakit.kernels.decode", verify="kdakit.kernels.verify", prefill="kdakit.kernels.prefill"
):
    return lambda value: {"kernels": value, "decode": decode, "verify": verify, "prefill": prefill}


def _statuses(checks):
    return {c.name: c.status for c in checks}


def test_helion_arm_passes_on_kdakit_kernels(monkeypatch):
    monkeypatch.setattr(selftest, "expected_modules", lambda arm: dict.fromkeys(selftest.PHASES, "kdakit."))
    checks = selftest.check_arm("helion", resolver=_resolved(), environ={"KDAKIT_HELION_KERNELS": "kdakit"})
    assert set(_statuses(checks).values()) == {"PASS"} and len(checks) == 3


def test_helion_arm_fails_when_a_phase_runs_upstream(monkeypatch):
    monkeypatch.setattr(selftest, "expected_modules", lambda arm: dict.fromkeys(selftest.PHASES, "kdakit."))
    resolver = _resolved(verify="sglang.kernels.ops.attention.helion.kda_verify")
    statuses = _statuses(selftest.check_arm("helion", resolver=resolver, environ={}))
    assert statuses["arm helion: verify kernel"] == "FAIL"
    assert statuses["arm helion: decode kernel"] == "PASS"


def test_unpatched_sglang_fails_the_helion_arm_but_not_the_upstream_arm():
    def unpatched(value):
        return {"kernels": "unpatched", **UPSTREAM}

    helion = _statuses(selftest.check_arm("helion", resolver=unpatched, environ={}))
    assert helion["arm helion: SGLang patched"] == "FAIL"
    upstream = selftest.check_arm("helion-upstream", resolver=unpatched, environ={})
    assert {c.status for c in upstream} == {"PASS"}


def test_the_arm_sets_the_switch_and_a_contrary_environment_fails():
    seen = []

    def resolver(value):
        seen.append(value)
        return _resolved(**UPSTREAM)(value)

    env = {"KDAKIT_HELION_KERNELS": "kdakit"}
    checks = selftest.check_arm("helion-upstream", resolver=resolver, environ=env)
    assert seen == ["upstream"]
    assert _statuses(checks)["KDAKIT_HELION_KERNELS"] == "FAIL"


@pytest.mark.parametrize(
    ("arm", "joins", "status"),
    [
        ("helion", True, "PASS"),
        ("helion", False, "FAIL"),  # kdakit's extend outside the graph: the patch's backend hunk is missing
        ("helion-upstream", False, "PASS"),  # SGLang's own Helion extend: eager, as upstream
        ("helion", "unknown: kda_backend does not import (ImportError)", "SKIP"),
    ],
)
def test_the_arm_states_whether_its_extend_joins_the_prefill_graph(monkeypatch, arm, joins, status):
    monkeypatch.delenv("SGLANG_DISABLE_KDA_PREFILL_GRAPH_EXTEND", raising=False)
    modules = UPSTREAM if arm == "helion-upstream" else {}
    resolver = lambda value: {**_resolved(**modules)(value), "prefill_graph": joins}  # noqa: E731
    checks = selftest.check_arm(arm, resolver=resolver, environ={})
    (graph,) = [c for c in checks if "prefill CUDA graph" in c.name]
    assert graph.status == status
    assert ("captured" in graph.detail) == (joins is True)


def test_missing_integration_reports_upstream_as_skipped_not_passed():
    checks = selftest.check_arm("helion", resolver=lambda v: {"absent": "No module named x"}, environ={})
    assert [c.status for c in checks] == ["SKIP"] and "upstream" in checks[0].detail


def test_resolution_error_fails():
    failing = {"error": "ImportError: no transformers"}
    checks = selftest.check_arm("helion", resolver=lambda v: failing, environ={})
    assert [c.status for c in checks] == ["FAIL"]


def test_triton_arm_checks_the_triton_adapter_imports():
    ok = selftest.check_arm("triton", importable=lambda name: (True, ""))
    bad = selftest.check_arm("triton", importable=lambda name: (False, "ModuleNotFoundError: flashinfer"))
    assert [c.status for c in ok] == ["PASS"]
    assert [c.status for c in bad] == ["FAIL"] and "flashinfer" in bad[0].detail


def test_gpu_rows_are_skipped_without_a_gpu_never_passed():
    rows = selftest.gpu_checks("helion", {"gpu": False})
    assert len(rows) == 3 and {r.status for r in rows} == {"SKIP"}


def test_the_command_runs_here_and_its_exit_code_follows_the_checks():
    """The real command in this environment (dev venv or CI): JSON out, exit 1 iff a check failed."""
    proc = subprocess.run(
        [sys.executable, "-m", "kdakit", "selftest", "--arm", "helion", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(proc.stdout)
    names = [c["name"] for c in report["checks"]]
    assert names[: len(selftest.IMAGE_PACKAGES)] == [f"{n} version" for n in selftest.IMAGE_PACKAGES]
    failed = [c for c in report["checks"] if c["status"] == "FAIL"]
    assert proc.returncode == (1 if failed else 0), proc.stderr
    if not report["torch"].get("gpu"):
        assert all(c["status"] == "SKIP" for c in report["checks"] if c["name"].startswith("GPU parity"))


def test_table_output_names_every_check(capsys):
    checks = [selftest.Check("torch version", "FAIL", "installed 2.13.0, pinned 2.14.1")]
    selftest.render(checks, "helion", {"gpu": False})
    out = capsys.readouterr().out
    assert "torch version" in out and "FAIL" in out
    assert "selftest FAILED: 0 passed, 1 failed, 0 skipped" in out


def test_gpu_parity_harness_on_the_cpu_interpreter():
    """The verify parity row's harness, run under TRITON_INTERPRET on the CPU (SGLang's Triton decode and
    prefill kernels do not run in the interpreter; verify does): kdakit's verify agrees with SGLang's Triton
    verify, and a kernel that is off by a little is reported as FAIL."""
    pytest.importorskip("helion")
    from kdakit.kernels.tools import testing
    from kdakit.kernels.tools import upstream as upstream_kernels

    from kdakit.checks import selftest_gpu

    with testing.interpreter():
        kernels = upstream_kernels.load()
        if kernels.triton_recurrent is None:
            pytest.skip(f"SGLang's Triton verify kernel did not import: {kernels.missing}")
        mine = selftest_gpu._helion_kernels("helion", kernels)["verify"]
        status, detail = selftest_gpu.verify_parity(mine, kernels.triton_recurrent, device="cpu")
        assert status == "PASS", detail

        def off_by_a_little(**kwargs):
            return mine(**kwargs) + 0.05

        status, detail = selftest_gpu.verify_parity(off_by_a_little, kernels.triton_recurrent, device="cpu")
        assert status == "FAIL" and "out" in detail


def test_arms_come_from_arms_toml():
    from kdakit.facts import profiles

    assert set(selftest.ARMS) == set(profiles.arms())
    assert selftest.ARMS == {"triton": None, "helion": "kdakit", "helion-upstream": "upstream",
                             "cutedsl": None, "triton-replayssm": None}  # fmt: skip


def test_lifecycle_row_is_skipped_without_a_gpu_never_passed():
    check = selftest.lifecycle_check("helion", {"gpu": False}, run=lambda *a: pytest.fail("ran"))
    assert check.status == selftest.SKIP


def _report(out_error):
    from kdakit.kernels.tools import lifecycle

    report = lifecycle.LifecycleReport("helion", lifecycle.served_shape(), 1, phases=["decode"])
    report.errors.append(lifecycle.PhaseError("decode", "helion", out_error, 0.0))
    return report


def test_lifecycle_row_follows_the_lifecycle_on_a_gpu():
    gpu = {"gpu": True}
    ok = selftest.lifecycle_check("helion", gpu, run=lambda arm, shape: _report(1e-3))
    assert ok.status == selftest.PASS and "max error vs fp64 output 1.00e-03" in ok.detail
    bad = selftest.lifecycle_check("helion", gpu, run=lambda arm, shape: _report(0.5))
    assert bad.status == selftest.FAIL and "helion decode: output error 0.5" in bad.detail

    def raises(arm, shape):
        raise ValueError("`intermediate_state_indices` [N]\nmore detail")

    broken = selftest.lifecycle_check("helion", gpu, run=raises)
    assert broken.status == selftest.FAIL and broken.detail == "ValueError: `intermediate_state_indices` [N]"


def _sweep_result(passed: int, refusal_ok: bool = True) -> dict:
    from kdakit.kernels.tools import sweep

    cfg = sweep.reduced()
    rows = [
        {"arm": "helion-kdakit", "case": c.key(), **vars(c), "status": "ok", "ok": i < passed + 2,
         "rel_err": {"out": 1e-3, "prefill_state": 1e-3}}
        for i, c in enumerate(sweep.cases(cfg))
    ]  # fmt: skip
    rows.append({"arm": "helion-kdakit", "check": "decode-non-power-of-two", "ok": refusal_ok,
                 "error": "ValueError: power-of-two head dims (got K=96, V=96)"})  # fmt: skip
    return sweep.summarize(rows, cfg, ["helion-kdakit"])


def test_sweep_row_is_skipped_without_a_gpu_or_a_helion_kernel_and_follows_the_sweep_on_a_gpu():
    never = lambda *a, **k: pytest.fail("ran")  # noqa: E731
    assert selftest.sweep_check("helion", {"gpu": False}, run=never).status == selftest.SKIP
    assert selftest.sweep_check("triton", {"gpu": True}, run=never).status == selftest.SKIP
    ok = selftest.sweep_check("helion", {"gpu": True}, run=lambda *a, **k: _sweep_result(6))
    assert ok.status == selftest.PASS and ok.detail.startswith("6/6 cases, 2/2 T = 1 probes"), ok.detail
    bad = selftest.sweep_check("helion", {"gpu": True}, run=lambda *a, **k: _sweep_result(5))
    assert bad.status == selftest.FAIL and "first failure T129 H16 varlen float32" in bad.detail, bad.detail
    no_refusal = selftest.sweep_check("helion", {"gpu": True}, run=lambda *a, **k: _sweep_result(6, False))
    assert no_refusal.status == selftest.FAIL
