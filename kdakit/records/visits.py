"""An A/B's visits: which steps each visit runs, and how many visits a serving protocol makes (`repeats`, or
a sequential protocol's budget)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kdakit.facts.errors import UsageError
from kdakit.facts.protocols import load_protocols, protocols_file

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
    """The protocol's visits, read by load_protocols from the protocols file the bench is given (a site's
    own, or the built-in kdakit/facts/protocols.toml): the run plans what the bench would accept."""
    path = protocols_file(path)
    protocols = load_protocols(path)
    if protocol not in protocols:
        raise UsageError(f"unknown bench protocol {protocol!r} ({path}); known: {', '.join(protocols)}")
    chosen = protocols[protocol]
    if chosen.sequential:
        return Plan(protocol, chosen.max_visits, True, chosen.max_hours)
    return Plan(protocol, chosen.repeats)
