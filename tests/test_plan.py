"""Launch profiles as data, rendered into the exact `sglang serve` command and validated against SGLang."""

import json
import subprocess
import sys

import pytest

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.launch import plan

KDA_FLAGS = {"--linear-attn-prefill-backend", "--linear-attn-decode-backend", "--linear-attn-verify-backend"}


def flags_of(p: plan.Plan) -> dict[str, str | None]:
    """The plan's flags (Plan.flags), a switch as None."""
    return {flag: None if value is True else value for flag, value in p.flags().items()}


def changed(a: dict, b: dict) -> set:
    return {k for k in a.keys() | b.keys() if a.get(k, "<unset>") != b.get(k, "<unset>")}


def test_h200_helion_plan_is_the_prs_launch_command():
    f = flags_of(plan.render("h200", "helion"))
    assert plan.render("h200", "helion").argv[:2] == ["sglang", "serve"]
    expected = {
        "--served-model-name": "llm",
        "--trust-remote-code": None,
        "--tp-size": "4",
        "--ep-size": "4",
        "--mem-fraction-static": "0.75",
        "--max-mamba-cache-size": "240",
        "--max-running-requests": "48",
        "--chunked-prefill-size": "8192",
        "--cuda-graph-backend-prefill": "breakable",
        "--cuda-graph-max-bs-prefill": "8192",
        "--cuda-graph-max-bs-decode": "48",
        "--dsa-prefill-backend": "tilelang",
        "--dsa-decode-backend": "tilelang",
        "--linear-attn-prefill-backend": "helion",
        "--linear-attn-decode-backend": "helion",
        "--linear-attn-verify-backend": "helion",
        "--kv-cache-dtype": "bfloat16",
        "--moe-runner-backend": "deep_gemm",
        "--moe-a2a-backend": "none",
        "--speculative-algorithm": "EAGLE",
        "--speculative-num-steps": "5",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "6",
        "--reasoning-parser": "glm45",
        "--tool-call-parser": "glm47",
        "--random-seed": "42",
        "--enable-metrics": None,
        "--host": "127.0.0.1",
        "--port": "30000",
        "--model-path": "/models/GLM-5.3-Flash",
    }
    assert f == expected


def test_triton_and_helion_differ_exactly_in_the_three_kda_flags():
    t, h = plan.render("h200", "triton"), plan.render("h200", "helion")
    assert changed(flags_of(t), flags_of(h)) == KDA_FLAGS
    assert {flags_of(t)[k] for k in KDA_FLAGS} == {"triton"}
    assert t.env == h.env


def test_helion_and_upstream_differ_only_in_the_kernel_switch():
    h, u = plan.render("h200", "helion"), plan.render("h200", "helion-upstream")
    assert h.argv == u.argv
    assert changed(h.env, u.env) == {"KDAKIT_HELION_KERNELS"}
    assert (h.env["KDAKIT_HELION_KERNELS"], u.env["KDAKIT_HELION_KERNELS"]) == ("kdakit", "upstream")


def _plans_on_h200(arm: str) -> bool:
    try:
        plan.render("h200", arm)
    except UsageError:  # an arm whose kernels cannot run there (the refusal: tests/test_kernel_contracts.py)
        return False
    return True


@pytest.mark.parametrize("arm", [a for a in sorted(profiles.arms()) if _plans_on_h200(a)])
def test_b200_differs_from_h200_exactly_in_the_prs_configuration_rows(arm):
    b = flags_of(plan.render("b200", arm))
    h = flags_of(plan.render("h200", arm))
    assert changed(h, b) == {
        "--cuda-graph-max-bs-prefill",
        "--dsa-prefill-backend",
        "--dsa-decode-backend",
        "--kv-cache-dtype",
        "--moe-runner-backend",
    }
    assert (b["--dsa-prefill-backend"], b["--kv-cache-dtype"], b["--moe-runner-backend"]) == (
        "trtllm",
        "fp8_e4m3",
        "flashinfer_trtllm",
    )
    assert b["--cuda-graph-max-bs-prefill"] == "4096"


def test_overrides_replace_in_place_and_aliases_do_not_duplicate():
    p = plan.render(
        "h200",
        "helion",
        settings=["--tensor-parallel-size=8", "mem-fraction-static=0.8", "--enable-cache-report"],
        unset=["--trust-remote-code"],
        model_path="/data/glm",
        port=9000,
    )
    f = flags_of(p)
    assert f["--tp-size"] == "8" and "--tensor-parallel-size" not in f
    assert f["--mem-fraction-static"] == "0.8"
    assert "--enable-cache-report" in f and f["--enable-cache-report"] is None
    assert "--trust-remote-code" not in f
    assert (f["--model-path"], f["--port"]) == ("/data/glm", "9000")
    assert p.argv.count("--tp-size") == 1


@pytest.mark.parametrize(
    "settings, message",
    [
        (["--not-a-flag=1"], "--not-a-flag is not a server argument"),
        (["--kv-cache-dtype=fp9"], "'fp9' is not a valid value for --kv-cache-dtype"),
        (
            ["--linear-attn-decode-backend=helio"],
            "'helio' is not a valid value for --linear-attn-decode-backend",
        ),
        (["--tp-size=four"], "--tp-size takes an int"),
        (["--trust-remote-code=maybe"], "--trust-remote-code is a switch"),
        (["--kv-cache-dtype"], "--kv-cache-dtype needs a value"),
    ],
)
def test_invalid_settings_fail_naming_the_flag(settings, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        plan.render("h200", "helion", settings=settings)


def test_unknown_sku_and_arm_are_rejected():
    with pytest.raises(UsageError, match="unknown SKU 'h100'"):
        plan.render("h100", "helion")
    with pytest.raises(UsageError, match="unknown arm 'cuda'"):
        plan.render("h200", "cuda")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "kdakit", *args], capture_output=True, text=True)


def test_cli_set_with_a_dashed_flag_fails_with_its_name():
    r = run_cli("plan", "--sku", "h200", "--arm", "helion", "--set", "--not-a-flag=1")
    assert r.returncode == 2
    assert "--not-a-flag is not a server argument of sglang 0.5.23" in r.stderr
    r = run_cli("plan", "--sku", "h200", "--arm", "helion", "--set", "--moe-runner-backend=deepgemm")
    assert r.returncode == 2 and "'deepgemm' is not a valid value for --moe-runner-backend" in r.stderr


def test_cli_json_matches_text():
    r = run_cli("plan", "--sku", "b200", "--arm", "triton", "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["argv"] == plan.render("b200", "triton").argv
    text = run_cli("plan", "--sku", "b200", "--arm", "triton").stdout
    assert "  --kv-cache-dtype fp8_e4m3 \\" in text and text.startswith("# container environment")
