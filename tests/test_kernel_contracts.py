"""The arms of the CuTe-verify PR (cutedsl, triton-replayssm): their plans, and the one-line refusals where
SGLang 0.5.23 would run another kernel than the arm names (kdakit/facts/kernel_contracts.py)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kdakit.checks import selftest
from kdakit.facts import kernel_contracts, profiles
from kdakit.facts.errors import UsageError
from kdakit.launch import plan, serve

KDA_BACKEND = "sglang/srt/layers/attention/linear/kda_backend.py"


def wheel_source(relative: str) -> str:
    import sglang

    return (Path(sglang.__file__).parents[1] / relative).read_text()


def test_cutedsl_arm_is_cute_verify_with_triton_prefill_and_decode_on_b200():
    f = plan.render("b200", "cutedsl").flags()
    assert f["--linear-attn-verify-backend"] == "nv_cutedsl"
    assert f["--linear-attn-prefill-backend"] == f["--linear-attn-decode-backend"] == "triton"
    triton = plan.render("b200", "triton").flags()
    differ = {k for k in f.keys() | triton.keys() if f.get(k) != triton.get(k)}
    assert differ == {"--linear-attn-verify-backend"}


def test_replayssm_arm_adds_the_ring_flags_to_the_triton_arm():
    f, triton = plan.render("h200", "triton-replayssm").flags(), plan.render("h200", "triton").flags()
    assert {k for k in f.keys() | triton.keys() if f.get(k) != triton.get(k)} == {
        "--enable-linear-replayssm-spec",
        "--linear-replayssm-cache-len",
    }
    assert f["--enable-linear-replayssm-spec"] is True and int(f["--linear-replayssm-cache-len"]) >= int(
        f["--speculative-num-draft-tokens"]
    )


def test_plan_refuses_cutedsl_on_the_h200_with_one_line():
    with pytest.raises(UsageError) as info:
        plan.render("h200", "cutedsl")
    line = str(info.value)
    assert "\n" not in line
    assert "arm cutedsl: the CuTe DSL verify cannot run on h200 (NVIDIA H200)" in line
    assert "compute capability 10.x (SM100), the GPU's is 9.0" in line and "Triton verify instead" in line
    r = subprocess.run([sys.executable, "-m", "kdakit", "plan", "--sku", "h200", "--arm", "cutedsl"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip() == f"kdakit plan: error: {line}"


@pytest.mark.parametrize(
    ("sku", "arm", "settings", "message"),
    [
        ("b200", "cutedsl", ["--speculative-num-draft-tokens=12"], "takes 2–8 draft tokens"),
        ("b200", "cutedsl", ["--speculative-eagle-topk=4"], "verifies a chain only"),
        ("h200", "triton-replayssm", ["--speculative-eagle-topk=4"], "needs a linear draft chain"),
        ("h200", "triton-replayssm", ["--linear-attn-verify-backend=helion"], "only triton or nv_cutedsl"),
        ("h200", "helion", ["--enable-linear-replayssm-spec"], "--linear-attn-decode-backend triton or"),
    ],
)
def test_plan_refuses_kernels_outside_their_contract(sku, arm, settings, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        plan.render(sku, arm, settings=settings)


def test_the_contract_is_the_pinned_wheels():
    """Every clause of arms.toml's contracts, as the wheel states it (a changed wheel fails here)."""
    c = profiles.contracts()["nv_cutedsl"]
    source = wheel_source(KDA_BACKEND)
    gate = source[source.index("def _can_run_dspark_cutedsl_mtp") :]
    gate = gate[: gate.index("\n    def ", 10)]
    assert f'find_spec("{c["python_module"]}") is None' in gate
    assert f"get_device_capability()[0] != {c['gpu_capability_major']}" in gate
    assert f"if not {c['draft_tokens'][0]} <= draft_token_num <= {c['draft_tokens'][1]}:" in gate
    assert "retrieve_parent_token is not None" in gate  # chain only
    assert gate.count(f"!= {c['head_dim']}") == 3
    assert gate.count(f"!= torch.{c['activation_dtype']}") == 3
    hook = wheel_source("sglang/srt/arg_groups/attention_hook.py")
    r = profiles.contracts()["replayssm_spec"]
    assert "if decode not in ({}):".format(", ".join(f'"{b}"' for b in r["decode_backends"])) in hook
    verify = re.search(r"verify not in \(\s*([^)]*)\)", hook).group(1)
    assert [v.strip().strip('"') for v in verify.split(",") if v.strip()] == r["verify_backends"]
    assert "speculative_eagle_topk not in (None, 1)" in hook


def test_preflight_refuses_the_arm_before_any_host_is_asked():
    r = subprocess.run(
        [sys.executable, "kdakit/checks/preflight.py", "cluster", "--sku", "h200", "--inventory", "/none",
         "--ansible-inventory", "/bin/false", "--playbook", "none", "--arm", "triton", "--arm", "cutedsl"],
        capture_output=True, text=True, cwd=Path(__file__).parents[1],
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stdout.strip().startswith("preflight: arm cutedsl: the CuTe DSL verify cannot run on h200")


@pytest.mark.parametrize(
    ("capability", "cutlass", "refused"),
    [("10.0", True, None), ("10.3", False, "cannot import cutlass"), ("9.0", True, "the GPU's is 9.0")],
)
def test_serve_refuses_on_its_own_gpu_where_the_cute_verify_would_not_run(capability, cutlass, refused):
    p = plan.render("b200", "cutedsl")
    check = lambda: serve.check_kernel_contracts(  # noqa: E731
        p, gpu=lambda: (capability, "GPU 0"), module_found=lambda name: cutlass
    )
    if refused is None:
        check()
    else:
        with pytest.raises(UsageError, match=refused):
            check()


@pytest.mark.parametrize(
    ("arm", "facts", "cutlass", "status", "text"),
    [
        ("cutedsl", {"gpu": True, "gpu_name": "NVIDIA B200", "capability": "10.0"}, True, "PASS",
         "SGLang's CuTe DSL verify"),
        ("cutedsl", {"gpu": True, "gpu_name": "NVIDIA H200", "capability": "9.0"}, True, "FAIL",
         "SGLang's Triton verify (nv_cutedsl falls back: it needs compute capability 10.x"),
        ("cutedsl", {"gpu": False}, True, "SKIP", "SGLang's Triton verify (nv_cutedsl falls back"),
        ("triton-replayssm", {"gpu": False}, False, "PASS", "SGLang's Triton verify with the ReplaySSM ring"),
        ("triton", {"gpu": False}, False, "PASS", "SGLang's Triton verify with intermediate-state snapshots"),
    ],
)  # fmt: skip
def test_selftest_says_which_verify_kernel_runs(arm, facts, cutlass, status, text):
    check = selftest.verify_kernel_check(arm, facts, environ={}, module_found=lambda name: cutlass)
    assert (check.status, check.detail.startswith(text)) == (status, True), check


def test_verify_kernel_words_cover_every_arms_verify_backend():
    for arm in profiles.arms():
        backend = profiles.backend_flags(arm)[kernel_contracts.VERIFY_FLAG]
        assert backend in kernel_contracts.VERIFY_KERNELS, arm
