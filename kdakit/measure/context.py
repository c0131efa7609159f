"""Who and where a measurement ran (run id, host, SKU, arm) and what the server says about itself.

Shared by `kdakit eval` and `kdakit bench`: the same flags, the same environment fallbacks (set by the
playbooks: KDAKIT_RUN_ID, KDAKIT_HOST, KDAKIT_SKU, KDAKIT_ARM), the same result folder layout
results/<run-id>/<host>/<kind>/.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.launch import access
from kdakit.records import paths, provenance, results

ARMS = (*profiles.arms(), "unknown")  # the launch arms (kdakit/facts/profiles/arms.toml)
KDA_BACKEND_ARGS = ("linear_attn_prefill_backend", "linear_attn_decode_backend", "linear_attn_verify_backend")


def add_record_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("record (defaults from KDAKIT_* environment, then detection)")
    g.add_argument("--run-id", default=None, help="default: $KDAKIT_RUN_ID, else a UTC timestamp")
    g.add_argument("--host", dest="host_name", default=None, help="default: $KDAKIT_HOST, else hostname")
    g.add_argument("--sku", default=None, help="default: $KDAKIT_SKU, else from nvidia-smi, else 'unknown'")
    g.add_argument(
        "--arm", choices=ARMS, default=None, help="default: $KDAKIT_ARM, else the server's KDA flags"
    )
    g.add_argument("--out", default=None, help="result folder (default: results/<run-id>/<host>/<kind>)")
    g.add_argument(
        "--server-command",
        default=None,
        help="server-command.json written by `kdakit serve` (default: looked up in --out and its parents)",
    )


def normalize_base_url(url: str) -> str:
    """Server root, whatever the user pasted: http://h:PORT, http://h:PORT/v1, .../v1/chat/completions."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--base-url must start with http:// or https://, got {url!r}")
    for suffix in ("/v1/chat/completions", "/v1/completions", "/generate", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


def get_json(url: str, timeout: float = 10.0) -> dict | None:
    try:
        request = urllib.request.Request(url, headers=access.auth_headers())
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def server_info(base_url: str) -> dict | None:
    info = get_json(f"{base_url}/server_info")
    if info is None:
        info = get_json(f"{base_url}/get_server_info")
    if isinstance(info, dict) and "decode" in info and isinstance(info["decode"], list) and info["decode"]:
        info = info["decode"][0]  # disaggregated servers report per role
    # SGLang's /server_info holds its keys (api_key, admin_api_key, launch_command): never recorded.
    return access.redact(info) if isinstance(info, dict) else None


def flush_cache(base_url: str, timeout: float = 60.0) -> bool:
    """POST /flush_cache with the admin key (the API key without one): SGLang empties its prefix cache and
    resets its speculative-decoding counters, so the accept length read afterwards covers what follows.
    False when the server refused or could not be reached."""
    api_key, admin_key = access.keys_from_env()
    key = admin_key or api_key
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(f"{base_url}/flush_cache", data=b"", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError):
        return False


def accept_length(info: dict | None) -> float | None:
    """SGLang's average speculative accept length since its counters were last reset (/server_info's
    internal_states[0].avg_spec_accept_length, as SGLang's benchmark client reads it); None without one."""
    try:
        value = (info or {})["internal_states"][0]["avg_spec_accept_length"]
    except (KeyError, IndexError, TypeError):
        return None
    return float(value) if isinstance(value, int | float) else None


def served_model(base_url: str) -> str | None:
    models = get_json(f"{base_url}/v1/models")
    try:
        return models["data"][0]["id"]
    except (TypeError, KeyError, IndexError):
        return None


def arm_from_server_args(info: dict | None) -> str:
    """'helion' or 'triton' when all three KDA backend flags agree, else 'unknown'."""
    if not info:
        return "unknown"
    values = {str(info.get(key)) for key in KDA_BACKEND_ARGS}
    return values.pop() if len(values) == 1 and values <= {"helion", "triton"} else "unknown"


canonical_sku = profiles.canonical_sku  # the report reads it from here


def default_run_id() -> str:
    return paths.env_or_new_run_id()


def host_name(args: argparse.Namespace) -> str:
    return args.host_name or os.environ.get("KDAKIT_HOST") or socket.gethostname()


def resolve(args: argparse.Namespace, kind: str, info: dict | None) -> dict:
    """run_id, host, sku, arm, out (Path), run_dir: server-command.json (or its folder) for provenance."""
    run_id = args.run_id or default_run_id()
    host = host_name(args)
    sku = args.sku or os.environ.get("KDAKIT_SKU") or profiles.sku_of_gpus(provenance.gpus_and_driver()[0])
    arm = args.arm or os.environ.get("KDAKIT_ARM") or arm_from_server_args(info)
    if arm not in ARMS:
        raise UsageError(f"arm must be one of {', '.join(ARMS)}, got {arm!r} (from $KDAKIT_ARM?)")
    out = Path(args.out) if args.out else paths.measurement_dir(run_id, host, kind)
    run_dir = None
    if args.server_command:
        path = Path(args.server_command)
        if not path.is_file():
            raise UsageError(f"--server-command: no such file {path}")
        run_dir = path
    else:
        for folder in (out, *out.resolve().parents[:3]):
            if (folder / provenance.SERVER_COMMAND_FILE).is_file():
                run_dir = folder
                break
    return {
        "run_id": run_id,
        "host": host,
        "sku": canonical_sku(sku),
        "arm": arm,
        "out": out,
        "run_dir": run_dir,
    }


def new_record(kind: str, where: dict, **fields) -> dict:
    """A result record for the run, host, SKU and arm that `resolve()` found; fields go to results."""
    return results.new_record(
        kind,
        run_id=where["run_id"],
        host=where["host"],
        sku=where["sku"],
        arm=where["arm"],
        run_dir=where["run_dir"],
        **fields,
    )


def fresh_stem(folder: Path, stem: str) -> str:
    """stem, or stem-2, stem-3... so that a rerun never overwrites (or appends to) an earlier result."""
    candidate, n = stem, 1
    while (folder / f"{candidate}.result.json").exists() or (folder / candidate).exists():
        n += 1
        candidate = f"{stem}-{n}"
    return candidate


def add_server_command(
    subparsers, group: str, group_help: str, name: str, func, **parser_kwargs
) -> argparse.ArgumentParser:
    """`kdakit GROUP NAME` against a running server (`kdakit eval gsm8k`, `kdakit bench serving`): its parser
    with --base-url, the record options and `func`; the caller adds its own options."""
    parser = subparsers.add_parser(group, help=group_help)
    sub = parser.add_subparsers(dest=f"{group}_name", required=True, metavar=group.upper())
    command = sub.add_parser(name, **parser_kwargs)
    command.add_argument(
        "--base-url", required=True, help="server root: scheme, host and port, e.g. http://127.0.0.1:PORT"
    )
    add_record_options(command)
    command.set_defaults(func=func)
    return command
