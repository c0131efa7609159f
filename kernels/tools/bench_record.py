"""What a `kdakit kernels bench` run leaves: the raw JSON (every sample) and the kit's normalized
kdakit.result.v1 `kernels` record, and whether any arm failed.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

RAW_NAME = "kernels-bench.json"

RECORD_NAME = "kernels.result.json"
RECORD_PHASES = ("prefill", "decode", "verify")  # the record schema's kernel phases


def normalized_rows(result: dict) -> list[dict]:
    """Rows for the kdakit.result.v1 `kernels` record: one per (phase, shape, arm)."""
    out = []
    for row in result["rows"]:
        if row["phase"] not in RECORD_PHASES:  # the per-layer verify table stays in the raw JSON only
            continue
        for arm_id, entry in row["arms"].items():
            status = entry.get("status", "failed")
            if status == "ok" and not entry.get("check", {}).get("ok", True):
                status = "failed"
            item = {
                "phase": row["phase"],
                "shape": row["shape"],
                "arm": "helion" if arm_id.startswith("helion") else "triton",  # FLA's is a Triton kernel
                "variant": arm_id,
                "median_us": entry["per_call"]["median"] if entry.get("status") == "ok" else None,
                "samples": entry["per_call"]["n"] if entry.get("status") == "ok" else 0,
                "floor_us": row.get("floor_us"),
                "status": status,
            }
            if entry.get("status") == "ok":
                item["single_call_us"] = entry["single_call"]["median"]
            if entry.get("error") or status == "failed":
                item["error"] = entry.get("error") or f"check against Triton failed: {entry.get('check')}"
            out.append(item)
    return out


def write_outputs(result: dict, out_dir: Path, run_id: str) -> tuple[Path, Path | None]:
    """The raw JSON (every sample) and, where kdakit.records.results imports, a validated `kernels` record."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / RAW_NAME
    raw.write_text(json.dumps(result, indent=1) + "\n")
    try:
        return raw, write_record(result, out_dir, run_id)
    except ImportError:  # no jsonschema on the bench host: `kdakit kernels record` writes it later
        return raw, None


def write_record(result: dict, out_dir: Path, run_id: str) -> Path:
    """The normalized kdakit.result.v1 `kernels` record; GPU, driver, host and versions come from the
    bench run itself (so a record written later, on another machine, still describes the bench host)."""
    from kdakit.facts import profiles
    from kdakit.records import provenance, results

    env = result["environment"]
    prov = provenance.gather()
    prov.update(gpus=[env["gpu"]] if env.get("gpu") else [], driver=env.get("driver"))
    prov.update(git_sha=env.get("git_sha"), git_dirty=env.get("git_dirty"))
    prov["hostname"] = env.get("hostname") or prov.get("hostname")
    prov["python"] = env.get("versions", {}).get("python") or prov.get("python")
    prov["tools"] = {k: v for k, v in env.get("versions", {}).items() if k != "python"}
    record = results.new_record(
        "kernels",
        run_id=run_id,
        host=env.get("hostname") or socket.gethostname(),
        sku=profiles.canonical_sku(profiles.sku_of_gpus([env["gpu"]] if env.get("gpu") else [])),
        arm="both",
        protocol="kernels-bench",
        metrics={
            "gpu": env.get("gpu") or "unknown",
            "rows": normalized_rows(result),
            "copy_bandwidth_bytes_per_s": result["copy_bandwidth"].get("bytes_per_s"),
            "versions": env.get("versions", {}),
        },
        provenance=prov,
        notes=result.get("notes", []),
        artifacts=[RAW_NAME],
    )
    return results.write_result(Path(out_dir) / RECORD_NAME, record)


def any_failure(result: dict) -> bool:
    return any(
        entry.get("status") == "failed" or not entry.get("check", {}).get("ok", True)
        for row in result["rows"]
        for entry in row["arms"].values()
    )
