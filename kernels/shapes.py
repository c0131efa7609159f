"""The PR's kernel shapes and the kernel tools' defaults, read from shapes.toml beside this file (stdlib only:
the run-time config selection imports it)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

SHAPES_FILE = Path(__file__).with_name("shapes.toml")


@cache
def load(path: Path = SHAPES_FILE) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def get(table: str, key: str):
    """One value, e.g. get("model", "heads")."""
    return load()[table][key]


def csv(table: str, key: str) -> str:
    """A list value as the comma-separated text the command-line options take."""
    return ",".join(str(v) for v in get(table, key))


def prefill_shapes() -> tuple[tuple[int, int], ...]:
    """The bench's prefill shapes as (batch, tokens per sequence)."""
    return tuple(tuple(int(n) for n in s.lower().split("x")) for s in get("bench", "prefill_shapes"))


def prefill_token_totals() -> tuple[int, ...]:
    """The total tokens (batch x tokens) of the bench's prefill shapes: autotune's default prefill buckets."""
    return tuple(sorted({batch * tokens for batch, tokens in prefill_shapes()}))


if __name__ == "__main__":  # `python kernels/shapes.py TABLE KEY`: for scripts that cannot import kdakit
    import sys

    value = get(sys.argv[1], sys.argv[2])
    print(",".join(map(str, value)) if isinstance(value, list) else value)
