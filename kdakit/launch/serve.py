"""`kdakit serve` (inside the image): render the plan, record it for provenance, then exec SGLang."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path

from kdakit import __version__
from kdakit.facts import pins
from kdakit.facts.errors import UsageError
from kdakit.launch import access
from kdakit.launch.plan import Plan, add_plan_arguments, plan_from_args

COMMAND_FILE = "server-command.json"


def check_with_live_parser(plan: Plan) -> bool:
    """Parse the argv with the installed SGLang's own parser (also checks custom value types).

    Returns False when SGLang is not importable here (the snapshot check in `plan` still ran)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from sglang.srt.server_args import ServerArgs
    except Exception:  # noqa: BLE001 - any import failure means: no live SGLang here
        return False
    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False, exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    try:
        parser.parse_args(plan.argv[2:])
    except (argparse.ArgumentError, SystemExit) as exc:
        raise UsageError(f"SGLang's own parser rejects the command: {exc}") from None
    return True


def check_helion_kernels(plan: Plan) -> None:
    """For a Helion arm: resolve and import its kernels as the patched adapter will at start-up, under the
    plan's environment, so a wrong SGLang or a broken kernel module stops here with one line."""
    from kdakit.facts import profiles

    if profiles.arms()[plan.arm]["kda_backend"] != "helion":
        return
    code = "from kdakit.kernels.integration import helion_kda_modules; helion_kda_modules(quiet=True)"
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **plan.env}, capture_output=True, text=True
    )
    if proc.returncode:
        lines = [line for line in proc.stderr.splitlines() if line.strip()] or [f"exit {proc.returncode}"]
        last = lines[-1]
        raise UsageError(last[last.find("kdakit: ") :] if "kdakit: " in last else last)


def gpu_here() -> tuple[str | None, str]:
    """(compute capability "major.minor" of GPU 0, its name), or (None, why not) without a usable GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, "this host (no CUDA GPU visible)"
        major, minor = torch.cuda.get_device_capability(0)
        return f"{major}.{minor}", torch.cuda.get_device_name(0)
    except Exception as exc:  # noqa: BLE001 - no torch or no driver: nothing to say about the GPU
        return None, f"this host (torch cannot see a GPU: {type(exc).__name__})"


def check_kernel_contracts(plan: Plan, gpu=gpu_here, module_found=None) -> None:
    """On the server's own GPU and python: refuse when a kernel the arm asks for would not run
    (kdakit/facts/kernel_contracts.py), instead of letting SGLang run another one without a word."""
    import importlib.util

    from kdakit.facts import kernel_contracts, profiles

    flags = plan.flags()
    if flags.get(kernel_contracts.VERIFY_FLAG) != "nv_cutedsl":
        return
    module = profiles.contracts()["nv_cutedsl"]["python_module"]
    has_module = (module_found or (lambda name: importlib.util.find_spec(name) is not None))(module)
    capability, name = gpu()
    model = profiles.load(plan.sku, plan.arm).model_facts
    refused = kernel_contracts.refusal(plan.arm, flags, model, capability, name, has_module)
    if refused:
        raise UsageError(refused)


def key_flags(open_: bool, env: dict[str, str] | None = None) -> list[str]:
    """The key flags `kdakit serve` appends (SGLang reads the keys only from its command line)."""
    api_key, admin_key = access.keys_from_env(env)
    if open_:
        return []
    if not api_key or not admin_key:
        raise UsageError(
            f"no API key in ${access.API_KEY_ENV} and no admin key in ${access.ADMIN_API_KEY_ENV} (the "
            "playbooks put both in the server's env file); pass --open to serve without keys on purpose"
        )
    return [access.API_KEY_FLAG, api_key, access.ADMIN_API_KEY_FLAG, admin_key]


def write_record(plan: Plan, results: Path, open_: bool = False) -> Path:
    results.mkdir(parents=True, exist_ok=True)
    record = {
        **plan.as_dict(),
        "argv": access.redact_argv(plan.argv),
        "access": "open" if open_ else "keys",
        "kdakit_version": __version__,
        "pins": pins.load(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "image_id": os.environ.get("KDAKIT_IMAGE_ID"),
    }
    path = results / COMMAND_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)
    return path


def _run(args) -> int:
    plan = plan_from_args(args)
    live = check_with_live_parser(plan)
    plan.argv += key_flags(args.open)
    path = write_record(plan, Path(args.results), args.open)
    print(
        f"kdakit serve: {plan.sku}/{plan.arm}; command recorded in {path}"
        f"{'' if live else ' (SGLang not importable here: validated against the snapshot only)'}",
        file=sys.stderr,
        flush=True,
    )
    if args.dry_run:
        print(Plan(plan.sku, plan.arm, access.redact_argv(plan.argv), plan.env).text())
        return 0
    if shutil.which(plan.argv[0]) is None:
        raise UsageError(f"{plan.argv[0]!r} is not on PATH: run `kdakit serve` inside the kdakit image")
    check_helion_kernels(plan)
    check_kernel_contracts(plan)
    os.execvpe(plan.argv[0], plan.argv, {**os.environ, **plan.env})
    return 0  # not reached


def register(sub) -> None:
    p = sub.add_parser("serve", help="inside the image: record the launch, then exec `sglang serve`")
    add_plan_arguments(p)
    p.add_argument("--results", required=True, help="run folder that receives server-command.json")
    p.add_argument("--dry-run", action="store_true", help="record and print, but do not start SGLang")
    p.add_argument(
        "--open",
        action="store_true",
        help=f"serve without keys (default: --api-key from ${access.API_KEY_ENV}, --admin-api-key from "
        f"${access.ADMIN_API_KEY_ENV}); recorded in server-command.json",
    )
    p.set_defaults(func=_run)
