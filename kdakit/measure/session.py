"""One measuring session against a running server: what `kdakit eval gsm8k` and `kdakit bench serving` do
around their own tool, in the same order.

open: the server answers its probe paths (else one line), its /server_info is read (keys blanked), and the
record's host, SKU, arm and result folder are settled. Per measured run: a fresh run folder, the telemetry
window and the request-counter window around the tool, the keys scrubbed from what the tool wrote, one
line when a limit stopped it or a foreign request reached the server, and the record written atomically.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kdakit.facts.errors import UsageError
from kdakit.launch import access
from kdakit.measure import bounded, context, integrity, telemetry
from kdakit.records import results


def pick_protocol(protocols: dict, name: str):
    """The protocol of that name, or a one-line usage error naming the known ones."""
    if name not in protocols:
        raise UsageError(f"unknown protocol {name!r}; known: {', '.join(sorted(protocols))}")
    return protocols[name]


@dataclass
class Session:
    kind: str  # the record kind: gsm8k or serving
    base_url: str
    info: dict | None  # the server's /server_info, keys blanked
    where: dict  # context.resolve: host, sku, arm, run id, result folder

    @classmethod
    def open(cls, args: argparse.Namespace, kind: str, probe_paths: tuple[str, ...]) -> Session:
        base_url = context.normalize_base_url(args.base_url)
        bounded.require_server(base_url, probe_paths, context.host_name(args))
        info = context.server_info(base_url)
        where = context.resolve(args, kind, info)
        where["out"].mkdir(parents=True, exist_ok=True)
        return cls(kind, base_url, info, where)

    @property
    def out(self) -> Path:
        return self.where["out"]

    @property
    def host(self) -> str:
        return self.where["host"]

    @property
    def arm(self) -> str:
        return self.where["arm"]

    def run_folder(self, name: str) -> tuple[str, Path]:
        """(stem, folder): a fresh `<name>` (or `<name>-2`, ...) for one run's raw files and its record."""
        stem = context.fresh_stem(self.out, name)
        folder = self.out / stem
        folder.mkdir(parents=True)
        return stem, folder

    @contextmanager
    def measured(self, recorder: telemetry.Recorder, label: str) -> Iterator[integrity.Window]:
        """The telemetry window and the server's request counter around one measured run."""
        with recorder.window(label), integrity.Window(self.base_url) as window:
            yield window

    def scrub(self, folder: Path) -> None:
        """The run's keys out of everything the tool wrote (SGLang's /server_info copies hold them)."""
        access.scrub_tree(folder)

    def limit_line(self, what: str, outcome: bounded.Outcome, request_s: float, run_s: float) -> str:
        """The one line for a run a limit stopped."""
        return bounded.hung_line(what, self.host, self.base_url, outcome, request_s, run_s)

    def foreign_line(self, what: str, foreign: int) -> str:
        """The one line for requests the kit did not send that reached the server during a run."""
        return integrity.foreign_line(f"{self.host}: {what}", foreign)

    def flush_cache(self) -> bool:
        return context.flush_cache(self.base_url)

    def accept_length(self) -> float | None:
        return context.accept_length(context.server_info(self.base_url))

    def write(self, stem: str, protocol: str, metrics: dict, notes: list[str], artifacts: list[str]) -> Path:
        record = context.new_record(
            self.kind, self.where, protocol=protocol, metrics=metrics, notes=notes, artifacts=artifacts
        )
        return results.write_result(self.out / f"{stem}.result.json", record)
