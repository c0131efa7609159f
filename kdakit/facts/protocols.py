"""The serving protocols (protocols.toml beside this file): their one reader.

`kdakit bench serving` runs them, the report judges by them, the run loop and kdakit.slurm plan their visits
from them; all read them here, so none of those needs the bench harness. Imports only the standard library.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from kdakit.facts.errors import UsageError

PROTOCOLS_FILE = Path(__file__).with_name("protocols.toml")
BUILT_IN = "kdakit/facts/protocols.toml (built in)"  # a record's source_file when it used the file above
DATASETS = ("sharegpt", "random-ids")


@dataclass(frozen=True)
class Point:
    input_len: int
    output_len: int
    concurrency: int
    num_prompts: int

    @property
    def label(self) -> str:
        return f"i{self.input_len}-o{self.output_len}-c{self.concurrency}"


@dataclass(frozen=True)
class Protocol:
    name: str
    source: str
    backend: str
    dataset: str
    random_range_ratio: float
    seed: int
    temperature: float
    runs: int
    warmup: bool
    metric: str
    points: tuple[Point, ...] = field(default_factory=tuple)
    flush_cache: bool = True
    request_timeout_s: float = 900.0  # longest the client may print nothing (a request hung)
    run_timeout_s: float = 7200.0  # one client run
    repeats: int = 1  # visits per arm the protocol asks for (interleaved triton, helion, triton, ...)
    band_pct: float = 1.0  # the "within" band of the arm-against-arm verdicts
    metrics: tuple[str, ...] = ()  # the client's numbers the report judges (empty: `metric` alone)
    server_env: dict = field(default_factory=dict)  # the server's environment for this protocol
    # A sequential protocol visits until every point and the claim are decisive (kdakit.records.sequential):
    # at least min_visits, at most max_visits (its `repeats` then) and max_hours.
    sequential: bool = False
    min_visits: int = 1
    max_visits: int | None = None
    max_hours: float | None = None


def protocols_file(given: str | Path | None = None) -> Path:
    """The protocols file a run uses: the one given (a site's own), else the built-in one."""
    return Path(given) if given else PROTOCOLS_FILE


def load_protocols(path: str | Path | None = None) -> dict[str, Protocol]:
    """The protocols of `path` (default: the built-in file), by name."""
    path = protocols_file(path)
    doc = tomllib.loads(path.read_text())
    protocols = {}
    for name, table in doc.get("protocol", {}).items():
        table = dict(table)
        try:
            points = tuple(Point(**p) for p in table.pop("points"))
            table["metrics"] = tuple(table.get("metrics") or (table["metric"],))
            table["server_env"] = {k: str(v) for k, v in table.get("server_env", {}).items()}
            protocols[name] = Protocol(name=name, points=points, **table)
        except (TypeError, KeyError) as exc:
            raise UsageError(f"{path}: protocol {name!r}: {exc}") from None
        if protocols[name].sequential:
            if "repeats" in table:
                raise UsageError(
                    f"{path}: protocol {name!r}: a sequential protocol gives max_visits, not repeats"
                )
            if not table.get("max_visits"):
                raise UsageError(
                    f"{path}: protocol {name!r}: a sequential protocol needs max_visits (its most visits; "
                    "max_hours may bound its time as well)"
                )
            protocols[name] = replace(protocols[name], repeats=protocols[name].max_visits)
        if protocols[name].dataset not in DATASETS:
            raise UsageError(f"{path}: protocol {name!r}: dataset must be one of {', '.join(DATASETS)}")
    return protocols


def protocol_definition(protocol: Protocol, path: Path) -> dict:
    """What the report needs of the protocol this run used (its band and points), kept in the record: the
    report must judge by the file the run was given, not by the built-in one."""
    return {
        "source_file": BUILT_IN if Path(path) == PROTOCOLS_FILE else str(path),
        "band_pct": protocol.band_pct, "repeats": protocol.repeats,
        "runs": protocol.runs, "points": [dict(vars(p)) for p in protocol.points],
        "sequential": protocol.sequential, "min_visits": protocol.min_visits,
        "max_visits": protocol.max_visits, "max_hours": protocol.max_hours,
        "metrics": list(protocol.metrics), "server_env": dict(protocol.server_env),
    }  # fmt: skip


def server_env_lines(name: str, path: str | Path | None = None) -> list[str]:
    """The protocol's server environment as NAME=VALUE (what the deploy passes to `kdakit serve --env`)."""
    protocols = load_protocols(path)
    if name not in protocols:
        raise UsageError(f"unknown protocol {name!r}; known: {', '.join(sorted(protocols))}")
    return [f"{key}={value}" for key, value in sorted(protocols[name].server_env.items())]
