"""Result records: one versioned JSON Schema, validated on every write and every read.

A record is one JSON file named `*.result.json` under `results/<run-id>/<host>/...`; the report walks that
tree. `new_record()` builds a record with provenance filled in, `write_result()` validates and writes it,
`read_result()` / `iter_results()` reject anything invalid with one clear line naming the file and field.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import jsonschema

from kdakit.facts.errors import UsageError
from kdakit.records.controller_files import WriteFailed, write_json_atomic

SCHEMA_ID = "kdakit.result.v1"
SCHEMA_FILE = Path(__file__).parent / "schema" / "result-v1.json"
RESULT_SUFFIX = ".result.json"
KINDS = ("gsm8k", "serving", "kernels")


class ResultError(UsageError):
    """A result record that does not match the schema (or a file that is not one)."""


@cache
def schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


def _where(error: jsonschema.ValidationError) -> str:
    return "/".join(str(p) for p in error.absolute_path) or "(top level)"


def errors(record: object) -> list[str]:
    """Every schema violation as 'field/path: reason' (empty when valid)."""
    found = sorted(_validator().iter_errors(record), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_where(e)}: {e.message}" for e in found]


def validate(record: object, source: str = "result") -> dict:
    """Return the record if valid, else raise ResultError naming the source and the first violations."""
    problems = errors(record)
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ResultError(f"{source}: invalid {SCHEMA_ID} record: " + "; ".join(problems[:3]) + more)
    return record  # type: ignore[return-value]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_record(
    kind: str,
    *,
    run_id: str,
    host: str,
    sku: str,
    arm: str,
    protocol: str,
    metrics: dict,
    provenance: dict | None = None,
    run_dir: Path | str | None = None,
    notes: list[str] | None = None,
    artifacts: list[str] | None = None,
) -> dict:
    """A complete record; provenance is gathered now unless given (run_dir: where server-command.json is)."""
    if provenance is None:
        from kdakit.records import provenance as prov

        provenance = prov.gather(run_dir)
    record = {
        "schema": SCHEMA_ID,
        "run_id": run_id,
        "host": host,
        "sku": sku,
        "arm": arm,
        "protocol": protocol,
        "kind": kind,
        "created": now(),
        "metrics": metrics,
        "provenance": provenance,
    }
    if notes:
        record["notes"] = list(notes)
    if artifacts:
        record["artifacts"] = list(artifacts)
    return record


def write_result(path: Path | str, record: dict) -> Path:
    """Validate, then write atomically. The name must end in .result.json so the report finds it."""
    path = Path(path)
    if not path.name.endswith(RESULT_SUFFIX):
        raise ResultError(f"{path}: result files must end in {RESULT_SUFFIX}")
    validate(record, str(path))
    try:
        write_json_atomic(path, record)
    except WriteFailed as exc:
        # disk full, read-only or missing destination: one line naming the path; no partial file stays
        raise ResultError(str(exc)) from None
    return path


def read_result(path: Path | str) -> dict:
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultError(f"{path}: no such result file") from None
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return validate(record, str(path))


def iter_results(root: Path | str) -> Iterator[tuple[Path, dict]]:
    """Every *.result.json under root, sorted by path; the first invalid one raises ResultError."""
    root = Path(root)
    if not root.is_dir():
        raise ResultError(f"{root}: not a results directory")
    for path in sorted(root.rglob(f"*{RESULT_SUFFIX}")):
        if not is_staged(path, root):
            yield path, read_result(path)


def is_staged(path: Path, root: Path) -> bool:
    """A temp file or a file in the collect's staging folder (dot names): not (yet) a record."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


# Aggregation shared by the bench and the report.


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def change_pct(baseline: float | None, candidate: float | None) -> float | None:
    """Relative change of candidate vs baseline in percent (None when either is missing or baseline is 0)."""
    if baseline is None or candidate is None or baseline == 0:
        return None
    return (candidate - baseline) / baseline * 100.0
