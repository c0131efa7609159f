"""An A/B's visits: which steps each visit runs, and how many visits a serving protocol makes (`repeats`, or
a sequential protocol's budget)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from kdakit.facts.errors import UsageError
from kdakit.facts.protocols import protocols_file

# Every step of one arm's visit, in order; collect and teardown run whatever happened before.
VISIT_STEPS = ("deploy", "eval-gsm8k", "bench", "collect", "teardown")
FIRST_VISIT_ONLY = ("eval-gsm8k",)


def visit_steps(visit: int) -> tuple[str, ...]:
    return tuple(s for s in VISIT_STEPS if visit == 1 or s not in FIRST_VISIT_ONLY)


@dataclass(frozen=True)
class Plan:
    """How many visits a protocol makes, and whether it may stop early."""

    protocol: str
    visits: int  # a fixed protocol's repeats; a sequential one's most visits
    sequential: bool = False
    max_hours: float | None = None


def plan_of(protocol: str, path: str | Path | None = None) -> Plan:
    """The protocol's visits from the protocols file the bench is given (a site's own, or the built-in
    kdakit/facts/protocols.toml)."""
    path = protocols_file(path)
    table = tomllib.loads(Path(path).read_text()).get("protocol", {}).get(protocol)
    if table is None:
        known = ", ".join(tomllib.loads(Path(path).read_text()).get("protocol", {}))
        raise UsageError(f"unknown bench protocol {protocol!r} ({path}); known: {known}")
    if table.get("sequential"):
        visits = int(table.get("max_visits") or 0)
        hours = table.get("max_hours")
        if visits < 1 and not hours:
            raise UsageError(f"{path}: sequential protocol {protocol!r} needs max_visits or max_hours")
        return Plan(protocol, visits or 10**6, True, float(hours) if hours else None)
    return Plan(protocol, int(table.get("repeats", 1)))
