"""`kdakit selftest`: is this environment (normally the kdakit image) what pins.toml and the arm say it is?

Checks, each PASS, FAIL or SKIP (never a PASS for something not checked):
- every pinned package of the image (torch, triton, helion, sglang, lm-eval, sgl-eval) is installed at its
  pin, and torch was built for the pinned CUDA;
- SGLang's Helion KDA backend resolves to the kernels the arm asks for (arms:
  kdakit/facts/profiles/arms.toml; an arm without the Helion backend: SGLang's Triton adapter is importable);
- tuned kernel configs shipped for this GPU's SKU: listed, and FAIL where their kernel source hash or helion
  version differ from what is installed (they would not be used); one tuned with another triton/torch is
  used, and listed as "active, tuned with other triton/torch: re-tune in the image";
- with a GPU: a quick numerical parity of each Helion KDA kernel the arm runs against SGLang's Triton
  kernel for the same phase, and the arm's whole request lifecycle through SGLang's own KDA backend
  (`kdakit.kernels.tools.lifecycle`: prefill, decode, chain verify, commit, a second verify round and
  CUDA-graph replay with padded rows, at the PR's heads and head dim) against the fp64 reference, so an
  ops team learns before serving that the arm works on its GPUs; and a reduced small-token prefill sweep of
  the arm's Helion prefill against Triton in a fresh process (`kdakit kernels sweep`). Without a GPU these
  rows are SKIP.
Exit code 1 when any check fails.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from kdakit.facts import pins
from kdakit.kernels.integration import DEFAULT as KDAKIT_KERNELS
from kdakit.kernels.integration import ENV_VAR, KDAKIT_MODULES

IMAGE_PACKAGES = ("torch", "triton", "helion", "sglang", "lm-eval", "sgl-eval")


def arm_kernels() -> dict[str, str | None]:
    """arm -> the KDAKIT_HELION_KERNELS value that selects its kernels (None: no Helion backend), from
    kdakit/facts/profiles/arms.toml."""
    from kdakit.facts import profiles
    from kdakit.kernels.tools.lifecycle import arm_settings

    settings = {name: arm_settings(name) for name in profiles.arms()}
    return {name: kernels if backend == "helion" else None for name, (backend, kernels) in settings.items()}


ARMS = arm_kernels()
PHASES = tuple(KDAKIT_MODULES)
TRITON_ADAPTER = "sglang.srt.layers.attention.linear.kernels.kda_triton"
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class Check:
    name: str
    status: str
    detail: str


def _base_version(version: str) -> str:
    return version.split("+")[0]


def check_packages(pinned: dict, version_of: Callable[[str], str] = metadata.version) -> list[Check]:
    checks = []
    for name in IMAGE_PACKAGES:
        want = pinned["packages"][name]
        try:
            found = version_of(name)
        except metadata.PackageNotFoundError:
            checks.append(Check(f"{name} version", FAIL, f"not installed; pinned {want}"))
            continue
        ok = _base_version(found) == want
        checks.append(Check(f"{name} version", PASS if ok else FAIL, f"installed {found}, pinned {want}"))
    return checks


def torch_facts() -> dict:
    """torch's own view: version, CUDA it was built for, whether a GPU is usable and its name."""
    try:
        import torch
    except Exception as exc:  # a broken torch is a finding, not a crash
        return {"error": f"import torch failed: {type(exc).__name__}: {exc}"}
    gpu = bool(torch.cuda.is_available())
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": gpu,
        "gpu_name": torch.cuda.get_device_name(0) if gpu else None,
        "capability": "{}.{}".format(*torch.cuda.get_device_capability(0)) if gpu else None,
    }


def check_torch_cuda(pinned: dict, facts: dict) -> Check:
    want = str(pinned["cuda"]["version"])
    if "error" in facts:
        return Check("torch CUDA version", FAIL, facts["error"])
    found = facts["cuda"]
    if found is None:
        detail = f"torch {facts['version']} is a CPU build; pinned CUDA {want}"
        return Check("torch CUDA version", FAIL, detail)
    ok = found == want or found.startswith(want + ".")
    return Check("torch CUDA version", PASS if ok else FAIL, f"torch built for CUDA {found}, pinned {want}")


_RESOLVE_SCRIPT = """
import json, sys
try:
    from kdakit.kernels import integration
except ImportError as exc:
    print(json.dumps({"absent": str(exc)}))
    sys.exit(0)
print(json.dumps(integration.resolve()))
"""


def resolve_in_subprocess(kernels_value: str) -> dict:
    """What SGLang's Helion adapter calls with KDAKIT_HELION_KERNELS=kernels_value (a fresh interpreter:
    the adapter chooses its modules once, at import)."""
    env = dict(os.environ, **{ENV_VAR: kernels_value})
    proc = subprocess.run([sys.executable, "-c", _RESOLVE_SCRIPT], env=env, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"resolving SGLang's Helion adapter failed: {tail}"}
    return json.loads(lines[-1])


def module_importable(name: str) -> tuple[bool, str]:
    """Import name in a fresh interpreter (SGLang's package imports are heavy and have side effects)."""
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True)
    tail = (proc.stderr.strip().splitlines() or [""])[-1]
    return proc.returncode == 0, tail


def expected_modules(arm: str) -> dict[str, str]:
    """Phase -> the package prefix the arm's Helion kernels must come from."""
    return dict.fromkeys(PHASES, "sglang." if ARMS[arm] == "upstream" else "kdakit.")


def check_arm(
    arm: str,
    resolver: Callable[[str], dict] = resolve_in_subprocess,
    importable: Callable[[str], tuple[bool, str]] = module_importable,
    environ: dict | None = None,
) -> list[Check]:
    environ = os.environ if environ is None else environ
    if ARMS[arm] is None:
        ok, why = importable(TRITON_ADAPTER)
        detail = f"{TRITON_ADAPTER} imports" if ok else f"{TRITON_ADAPTER} does not import: {why}"
        return [Check("arm triton: SGLang Triton KDA adapter", PASS if ok else FAIL, detail)]
    value = ARMS[arm]
    checks = []
    current = environ.get(ENV_VAR)
    if current is not None and current != value:
        checks.append(
            Check(
                ENV_VAR, FAIL, f"is {current!r} here, but arm {arm} runs with {value!r}: set it for the arm"
            )
        )
    resolved = resolver(value)
    if "error" in resolved:
        return [*checks, Check(f"arm {arm}: Helion KDA kernels", FAIL, resolved["error"])]
    if "absent" in resolved:
        status = SKIP if ARMS[arm] == KDAKIT_KERNELS else PASS
        detail = (
            "kdakit's SGLang integration is not in this build: "
            "the Helion backend runs SGLang's upstream kernels"
        )
        return [*checks, Check(f"arm {arm}: Helion KDA kernels", status, detail)]
    if resolved.get("kernels") == "unpatched" and ARMS[arm] == KDAKIT_KERNELS:
        checks.append(
            Check(
                "arm helion: SGLang patched",
                FAIL,
                "SGLang's Helion adapter is not patched: the helion arm would run upstream kernels "
                "(apply it: kdakit.kernels.integration.apply)",
            )
        )
    for phase, prefix in expected_modules(arm).items():
        module = resolved.get(phase, "?")
        ok = module.startswith(prefix)
        detail = f"{module} (wanted {prefix}*)"
        checks.append(Check(f"arm {arm}: {phase} kernel", PASS if ok else FAIL, detail))
    if "prefill_graph" in resolved:
        checks.append(prefill_graph_check(arm, resolved["prefill_graph"]))
    return checks


def prefill_graph_check(arm: str, joins: bool | str) -> Check:
    """Whether SGLang's breakable prefill CUDA graph (the PR's `--cuda-graph-backend-prefill breakable`)
    captures the arm's KDA extend, as SGLang's KDAAttnBackend decides it: kdakit's extend must join it;
    SGLang's own Helion extend runs eagerly between the graph's segments, as upstream does."""
    name = f"arm {arm}: KDA extend in the prefill CUDA graph"
    if not isinstance(joins, bool):
        return Check(name, SKIP, str(joins))
    if joins:
        return Check(name, PASS, "captured in SGLang's breakable prefill graph (no eager break per layer)")
    detail = "runs eagerly between the breakable prefill graph's segments, at every KDA layer"
    if ARMS[arm] != KDAKIT_KERNELS:
        return Check(name, PASS, detail + " (SGLang's own Helion prefill, as upstream)")
    if os.environ.get("SGLANG_DISABLE_KDA_PREFILL_GRAPH_EXTEND", "").lower() in ("1", "true", "yes"):
        return Check(name, PASS, detail + " (SGLANG_DISABLE_KDA_PREFILL_GRAPH_EXTEND is set)")
    return Check(name, FAIL, detail + ": SGLang's kda_backend.py lacks kdakit's patch")


def gpu_checks(arm: str, facts: dict) -> list[Check]:
    names = [f"GPU parity: {phase} vs Triton" for phase in PHASES]
    if ARMS[arm] is None:
        return [Check(n, SKIP, "arm triton runs no Helion kernel") for n in names]
    if not facts.get("gpu"):
        return [Check(n, SKIP, "no GPU here") for n in names]
    from kdakit.checks import selftest_gpu

    results = selftest_gpu.parity(arm)
    return [Check(n, status, detail) for n, (status, detail) in zip(names, results, strict=True)]


def lifecycle_check(arm: str, facts: dict, run=None) -> Check:
    """The arm's request lifecycle through SGLang's own KDA backend on this GPU (see the module docstring)."""
    name = f"server lifecycle: arm {arm} through SGLang's KDA backend"
    if not facts.get("gpu"):
        return Check(name, SKIP, "no GPU here")
    from kdakit.kernels.tools import lifecycle

    run = run or lifecycle.run
    try:
        report = run(arm, lifecycle.served_shape())
    except Exception as exc:  # noqa: BLE001 - any failure of the lifecycle is this check's FAIL
        first = (str(exc).strip().splitlines() or [""])[0]
        return Check(name, FAIL, f"{type(exc).__name__}: {first}")
    found = lifecycle.problems(report, device="cuda")
    if found:
        more = f" (+{len(found) - 3} more)" if len(found) > 3 else ""
        return Check(name, FAIL, "; ".join(found[:3]) + more)
    return Check(name, PASS, lifecycle.summary(report))


def sweep_check(arm: str, facts: dict, run=None, timeout_s: float = 300.0) -> Check:
    """A reduced small-token prefill sweep of the arm's Helion prefill against SGLang's Triton (fresh process,
    T = 1 first, padded gate rows) and its decode refusing a non-power-of-two head dim."""
    import tempfile
    from pathlib import Path

    name = f"prefill sweep: arm {arm} vs Triton (T = 1 first, padded gate rows)"
    if ARMS[arm] is None:
        return Check(name, SKIP, "arm triton runs no Helion kernel")
    if not facts.get("gpu"):
        return Check(name, SKIP, "no GPU here")
    from kdakit.kernels.tools import sweep

    helion_arm = {"kdakit": "helion-kdakit", "upstream": "helion-upstream"}[ARMS[arm]]
    run = run or sweep.run
    with tempfile.TemporaryDirectory(prefix="kdakit-sweep-") as tmp:
        try:
            result = run([helion_arm], sweep.reduced(), Path(tmp), timeout_s, log=lambda m: None)
        except Exception as exc:  # noqa: BLE001 - any failure of the sweep is this check's FAIL
            return Check(name, FAIL, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}")
    s = result["summary"][helion_arm]
    probes, refusal = s["probes"], (s["decode_refusal"] or {}).get("error", "no result")
    detail = (
        f"{s['passed']}/{s['expected']} cases, {probes['passed']}/{probes['expected']} T = 1 probes; "
        f"decode K = V = {sweep.NON_POWER_OF_TWO_DIM}: {refusal}"
    )
    if s["failures"]:
        detail += f"; first failure {s['failures'][0]}"
    return Check(name, FAIL if sweep.any_failure(result) else PASS, detail)


def config_checks(arm: str, facts: dict, environ: dict | None = None) -> list[Check]:
    """Tuned kernel configs: one row per shipped file for this GPU's SKU (PASS: used at run time, flagged in
    its text when tuned with another triton/torch; FAIL: refused, its kernel source or helion differ from what
    is installed). Without a GPU, every shipped SKU's files are checked; with none shipped for the GPU, one
    SKIP row says the defaults run."""
    name = "tuned kernel configs"
    if ARMS[arm] is None:
        return [Check(name, SKIP, "arm triton runs no kdakit kernel")]
    environ = os.environ if environ is None else environ
    try:
        from kdakit.kernels import tuned
    except ImportError as exc:
        return [Check(name, SKIP, f"kdakit's kernels are not installed here ({exc})")]
    gpu = facts.get("gpu_name") if facts.get("gpu") else None
    sku = environ.get(tuned.ENV_SKU) or (tuned.sku_of(gpu) if gpu else None)
    directory = tuned.config_dir()
    shipped = tuned.shipped_skus(directory)
    ignored = environ.get(tuned.ENV_MODE) == "default"
    checks = []
    if sku is not None and sku not in shipped:
        checks.append(
            Check(
                name,
                SKIP,
                f"none shipped for {sku} in {directory}: kdakit's decode, verify and prefill kernels run "
                f"their default configs (tune on this GPU: kdakit kernels autotune --sku {sku}, or make "
                f"autotune SKU={sku})",
            )
        )
    elif sku is None and not shipped:
        checks.append(Check(name, SKIP, f"no GPU here and no configs shipped in {directory}"))
    for each in [sku] if sku is not None else shipped:
        try:
            rows = tuned.inventory(each, directory)
        except ImportError as exc:
            return [*checks, Check(name, SKIP, f"cannot hash kdakit's kernels here ({exc})")]
        for row in rows:
            label = f"config {each}/{os.path.basename(row['path'])}"
            if row["problems"]:
                detail = "; ".join(row["problems"]) + " -> not used, the default config runs"
                checks.append(Check(label, FAIL, detail))
                continue
            t = row.get("tuning", {})
            timing = ""
            if t.get("autotuned_per_call_us") is not None:
                timing = (
                    f": {t.get('chosen')} config, {t.get('autotuned_per_call_us')} us tuned vs "
                    f"{t.get('default_per_call_us')} us default"
                )
            elif "default_per_call_us" in t:
                timing = (
                    f": default config ({t.get('default_per_call_us')} us), search: {t.get('search_error')}"
                )
            use = (
                "ignored (KDAKIT_KERNEL_CONFIGS=default)"
                if ignored
                else ("active" if each == sku else "valid (no GPU to select it)")
            )
            if row.get("flags"):
                use += f", {tuned.FLAG_LABEL} ({'; '.join(row['flags'])})"
            checks.append(Check(label, PASS, f"{use}{timing}"))
    return checks


def verify_kernel_check(arm: str, facts: dict, environ: dict | None = None, module_found=None) -> Check:
    """Which verify kernel SGLang runs for the arm here (kdakit/facts/kernel_contracts.py): on this GPU and
    python, or, without a GPU, on the SKU registry's GPU of the image's SKU. FAIL: the arm names a kernel that
    would not run (SGLang would run another without a word)."""
    import importlib.util

    from kdakit.facts import kernel_contracts, profiles

    environ = os.environ if environ is None else environ
    name = f"arm {arm}: the verify kernel SGLang runs"
    found = profiles.sku_of_gpus(facts["gpu_name"]) if facts.get("gpu") else None
    sku = environ.get("KDAKIT_SKU") or (found if found in profiles.skus() else profiles.default_sku())
    profile = profiles.load(sku, arm)
    module = profiles.contracts()["nv_cutedsl"]["python_module"]
    has_module = (module_found or (lambda m: importlib.util.find_spec(m) is not None))(module)
    if facts.get("gpu"):
        capability, gpu = facts["capability"], facts["gpu_name"]
    else:
        capability, gpu = profile.gpu_capability, f"{profile.gpu_model} ({sku}'s GPU in the SKU registry)"
    runs = kernel_contracts.verify_kernel(profile.flags, profile.model_facts, capability, gpu, has_module)
    wanted = profile.flags.get(kernel_contracts.VERIFY_FLAG)
    falls_back = wanted == "nv_cutedsl" and not runs.startswith(kernel_contracts.VERIFY_KERNELS["nv_cutedsl"])
    status = (FAIL if facts.get("gpu") else SKIP) if falls_back else PASS
    where = "" if facts.get("gpu") else " (no GPU here: as on the registry's GPU)"
    return Check(name, status, f"{runs}{where}")


def run_checks(arm: str) -> tuple[list[Check], dict]:
    pinned = pins.load()
    facts = torch_facts()
    checks = check_packages(pinned)
    checks.append(check_torch_cuda(pinned, facts))
    checks += check_arm(arm)
    checks.append(verify_kernel_check(arm, facts))
    checks += config_checks(arm, facts)
    checks += gpu_checks(arm, facts)
    checks.append(lifecycle_check(arm, facts))
    checks.append(sweep_check(arm, facts))
    return checks, facts


def render(checks: list[Check], arm: str, facts: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    colour = {PASS: "green", FAIL: "bold red", SKIP: "yellow"}
    gpu = facts.get("gpu_name") or "none"
    table = Table(title=f"kdakit selftest (arm {arm}, GPU: {gpu})")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for c in checks:
        table.add_row(c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail)
    console = Console(width=max(120, Console().width))
    console.print(table)
    counts = {s: sum(c.status == s for c in checks) for s in (PASS, FAIL, SKIP)}
    verdict = "FAILED" if counts[FAIL] else "passed"
    console.print(f"selftest {verdict}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped")


IMAGE_ENV = ("KDAKIT_IMAGE_REVISION", "KDAKIT_IMAGE_CREATED", "KDAKIT_IMAGE_BASE", "KDAKIT_SKU")


def image_provenance(environ: dict | None = None) -> dict[str, str]:
    """What images/Dockerfile recorded about the build (empty outside the image)."""
    environ = os.environ if environ is None else environ
    return {k.removeprefix("KDAKIT_").lower(): environ[k] for k in IMAGE_ENV if k in environ}


def _run(args) -> int:
    checks, facts = run_checks(args.arm)
    image = image_provenance()
    if args.json:
        report = {"arm": args.arm, "image": image, "torch": facts, "checks": [asdict(c) for c in checks]}
        print(json.dumps(report, indent=2))
    else:
        if image:
            print("image: " + ", ".join(f"{k}={v}" for k, v in image.items()))
        render(checks, args.arm, facts)
    return 1 if any(c.status == FAIL for c in checks) else 0


def register(sub) -> None:
    p = sub.add_parser("selftest", help="check pins, the arm's kernels and (with a GPU) kernel parity")
    p.add_argument("--arm", choices=sorted(ARMS), default="helion", help="the arm to check (default: helion)")
    p.add_argument("--json", action="store_true", help="print the checks as JSON instead of a table")
    p.set_defaults(func=_run)
