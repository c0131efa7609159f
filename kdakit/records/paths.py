"""A run's identity and every path of its results: the one module that spells them.

The controller keeps `results/<run id>/<host>/<arm>/` (records, provenance, the collected files), the run's
scheduler state in `results/<run id>/slurm/` and the last run id in `results/LATEST`; a measurement made
without `--out` writes to `results/<run id>/<host>/<kind>/`; a host keeps its own copy in
`<host results root>/<run id>/<arm>/`. The playbooks get these as templates in the controller's facts file
(`{host}` filled in per host), so that no YAML spells them again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from kdakit.facts import profiles

LATEST_FILE = "LATEST"
PROVENANCE_FILE = "provenance.json"
SLURM_DIR = "slurm"  # <run dir>/slurm/: job scripts, job output, step status, the env file (0700 state/)
RUN_ID_ENV = "KDAKIT_RUN_ID"


def path_below(folder: str, *parts: str) -> property:
    """A read-only property: the path `parts` below the Path attribute `folder` of its object, for a class
    that names the files of one of its folders."""
    return property(lambda obj: getattr(obj, folder).joinpath(*parts), doc=f"{folder}/{'/'.join(parts)}")


def new_run_id(now: datetime | None = None) -> str:
    """A run id made of the UTC time: 20261202T093000Z."""
    return (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def env_or_new_run_id() -> str:
    """A measurement's run id: the one the scheduler exported ($KDAKIT_RUN_ID), else a new one."""
    return os.environ.get(RUN_ID_ENV) or new_run_id()


def resolve_run_id(results: Path | str, given: str | None, *, new: bool) -> str:
    """A step that starts a run (deploy, an A/B) makes a run id unless given; a later step reuses the one
    results/LATEST names."""
    if given:
        return given
    if new:
        return new_run_id()
    latest = read_latest(results)
    if latest is None:
        from kdakit.facts.errors import UsageError

        raise UsageError(f"no RUN_ID given and no {latest_path(results)}: run make deploy-<sku> first")
    return latest


def run_dir(results: Path | str, run_id: str) -> Path:
    return Path(results) / run_id


def host_dir(results: Path | str, run_id: str, host: str, arm: str) -> Path:
    """The controller's folder of one host's arm: records, provenance.json, the collected files."""
    return run_dir(results, run_id) / host / arm


def provenance_path(results: Path | str, run_id: str, host: str, arm: str) -> Path:
    return host_dir(results, run_id, host, arm) / PROVENANCE_FILE


def slurm_dir(results: Path | str, run_id: str) -> Path:
    return run_dir(results, run_id) / SLURM_DIR


def latest_path(results: Path | str) -> Path:
    return Path(results) / LATEST_FILE


def read_latest(results: Path | str) -> str | None:
    """The run id results/LATEST names, None without one."""
    try:
        text = latest_path(results).read_text().strip()
    except OSError:
        return None
    return text or None


def measurement_dir(run_id: str, host: str, kind: str, results: Path | str = "results") -> Path:
    """Where `kdakit eval` / `kdakit bench` write without --out."""
    return run_dir(results, run_id) / host / kind


def host_run_dir(host_results_root: str, run_id: str, arm: str) -> str:
    """A host's own copy of its arm's results (the folder its containers mount as /results)."""
    return f"{host_results_root}/{run_id}/{arm}"


def ansible_templates(results: Path | str, run_id: str, arm: str) -> dict[str, str]:
    """The paths the playbooks need, `{host}` standing for the inventory host and `{root}` for the host's
    results root (kdakit_host_results_root), filled in per host."""
    results = Path(results).resolve()
    return {
        "results_dir": str(results),
        "run_dir": str(run_dir(results, run_id)),
        "host_dir": str(host_dir(results, run_id, "{host}", arm)),
        "provenance": str(provenance_path(results, run_id, "{host}", arm)),
        "host_run_dir": host_run_dir("{root}", run_id, arm),
    }


@dataclass(frozen=True)
class RunContext:
    """Who a step runs for: the run, and as far as known the host, its SKU (a registry name), the arm and
    the visit. Every path comes from here."""

    results: Path
    run_id: str
    host: str = ""
    sku: str = ""
    arm: str = ""
    visit: int = 0

    def __post_init__(self) -> None:
        if self.sku and self.sku not in profiles.skus():
            profiles.sku(self.sku)  # raises the registry's one line

    def but(self, **changes) -> RunContext:
        return replace(self, **changes)

    @property
    def run_dir(self) -> Path:
        return run_dir(self.results, self.run_id)

    @property
    def host_dir(self) -> Path:
        return host_dir(self.results, self.run_id, self.host, self.arm)

    @property
    def provenance_path(self) -> Path:
        return provenance_path(self.results, self.run_id, self.host, self.arm)

    @property
    def slurm_dir(self) -> Path:
        return slurm_dir(self.results, self.run_id)
