"""Where SGLang 0.5.23 runs the kernel an arm asks for (arms.toml's `contracts`); which verify kernel runs.

Outside its contract SGLang runs another kernel without a word (an `nv_cutedsl` verify becomes Triton's), so a
measurement would name a kernel that never ran. `kdakit plan` (from the SKU registry's GPU), preflight and
`kdakit serve` (on the GPU itself) refuse with one line; `kdakit selftest` says which verify kernel runs.
"""

from __future__ import annotations

from kdakit.facts import profiles

VERIFY_FLAG = "--linear-attn-verify-backend"
DECODE_FLAG = "--linear-attn-decode-backend"
TOPK_FLAG = "--speculative-eagle-topk"
DRAFT_FLAG = "--speculative-num-draft-tokens"
SPEC_FLAG = "--speculative-algorithm"
VERIFY_KERNELS = {
    "triton": "SGLang's Triton verify",
    "nv_cutedsl": "SGLang's CuTe DSL verify",
    "helion": "the Helion verify",
    "flashinfer": "FlashInfer's recurrent_kda verify",
}


def _major(capability: str | None) -> int | None:
    return None if capability is None else int(str(capability).split(".")[0])


def cutedsl_problems(
    flags: dict, model: dict, gpu_capability: str | None, gpu: str, has_module: bool | None = None
) -> list[str]:
    """Why the CuTe DSL verify would not run: each broken clause of its contract (empty: it runs).
    has_module None: not known here (the controller); the image's `kdakit serve` and selftest know."""
    c = profiles.contracts()["nv_cutedsl"]
    found = []
    major = _major(gpu_capability)
    if major is None:
        found.append(f"no compute capability is known for {gpu}")
    elif major != c["gpu_capability_major"]:
        found.append(
            f"it needs compute capability {c['gpu_capability_major']}.x (SM{c['gpu_capability_major']}0), "
            f"the GPU's is {gpu_capability}"
        )
    if has_module is False:
        found.append(f"python cannot import {c['python_module']} here")
    if not flags.get(SPEC_FLAG):
        found.append(f"no {SPEC_FLAG}: no verify runs at all")
    low, high = c["draft_tokens"]
    drafts = flags.get(DRAFT_FLAG)
    if drafts is None or not low <= int(drafts) <= high:
        found.append(f"it takes {low}–{high} draft tokens, {DRAFT_FLAG} is {drafts}")
    if int(flags.get(TOPK_FLAG) or 1) > c["max_eagle_topk"]:
        found.append(f"it verifies a chain only, {TOPK_FLAG} is {flags.get(TOPK_FLAG)}")
    if model.get("kda_head_dim") != c["head_dim"]:
        found.append(f"it takes head dim {c['head_dim']}, the model's is {model.get('kda_head_dim')}")
    if model.get("activation_dtype") != c["activation_dtype"]:
        found.append(f"it takes {c['activation_dtype']}, the model runs {model.get('activation_dtype')}")
    return found


def replayssm_problems(flags: dict) -> list[str]:
    """Why ReplaySSM spec-verify cannot run as asked (empty: it can)."""
    c = profiles.contracts()["replayssm_spec"]
    if not flags.get(c["flag"]):
        return []
    found = []
    if int(flags.get(TOPK_FLAG) or 1) > c["max_eagle_topk"]:
        found.append(f"it needs a linear draft chain, {TOPK_FLAG} is {flags.get(TOPK_FLAG)}")
    if flags.get(DECODE_FLAG) not in c["decode_backends"]:
        wanted = " or ".join(c["decode_backends"])
        found.append(f"it needs {DECODE_FLAG} {wanted}, not {flags.get(DECODE_FLAG)}")
    if flags.get(VERIFY_FLAG) not in c["verify_backends"]:
        found.append(
            f"only {' or '.join(c['verify_backends'])} verify writes its ring, not {flags.get(VERIFY_FLAG)}"
        )
    return found


def refusal(
    arm: str,
    flags: dict,
    model: dict,
    gpu_capability: str | None,
    gpu: str,
    has_module: bool | None = None,
) -> str | None:
    """One line saying why the arm's kernels cannot run as planned, or None.

    flags: the final sglang flags by their primary spelling."""
    if flags.get(VERIFY_FLAG) == "nv_cutedsl":
        problems = cutedsl_problems(flags, model, gpu_capability, gpu, has_module)
        if problems:
            what = profiles.contracts()["nv_cutedsl"]["what"]
            return (
                f"arm {arm}: {what} cannot run on {gpu}: {'; '.join(problems)} "
                f"(SGLang 0.5.23 would run its Triton verify instead, without saying so)"
            )
    problems = replayssm_problems(flags)
    if problems:
        what = profiles.contracts()["replayssm_spec"]["what"]
        return f"arm {arm}: {what} cannot run as planned: {'; '.join(problems)}"
    return None


def verify_kernel(
    flags: dict, model: dict, gpu_capability: str | None, gpu: str, has_module: bool | None = None
) -> str:
    """Which verify kernel SGLang runs for these flags on this GPU, in words."""
    backend = flags.get(VERIFY_FLAG)
    if not flags.get(SPEC_FLAG):
        return "none (no speculative decoding)"
    name = VERIFY_KERNELS.get(str(backend), f"verify backend {backend}")
    if backend == "nv_cutedsl":
        problems = cutedsl_problems(flags, model, gpu_capability, gpu, has_module)
        if problems:
            return f"SGLang's Triton verify (nv_cutedsl falls back: {'; '.join(problems)})"
    ring = profiles.contracts()["replayssm_spec"]["flag"]
    mode = "the ReplaySSM ring write" if flags.get(ring) else "intermediate-state snapshots"
    return f"{name} with {mode}"
