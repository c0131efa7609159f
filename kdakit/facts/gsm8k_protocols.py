"""The GSM8K protocols (gsm8k_protocols.toml beside this file): their one reader.

`kdakit eval gsm8k` runs them and kdakit.slurm times a job by them; both read them here, so the Slurm backend
needs no harness. The [data] table's paths are relative to evals/ (kdakit.evals), where the splits live.
Imports only the standard library.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kdakit.facts.errors import UsageError

PROTOCOLS_FILE = Path(__file__).with_name("gsm8k_protocols.toml")
# tool -> the distribution that carries it
TOOLS = {"sglang-run-eval": "sglang", "lm-eval": "lm_eval", "sgl-eval": "sgl-eval"}
METRICS = {"sglang-run-eval": ("numeric",), "lm-eval": ("strict", "flexible"), "sgl-eval": ("symbolic",)}


@dataclass(frozen=True)
class Protocol:
    name: str
    source: str
    limit: int  # 0 = all questions
    num_fewshot: int
    num_concurrent: int
    runs: int
    max_gen_toks: int
    temperature: float
    threshold: float
    verdict_metric: str
    tool: str = "lm-eval"
    top_p: float | None = None
    extra_gen_kwargs: dict = field(default_factory=dict)
    request_timeout_s: float = 900.0  # longest silence (no request finishing) before the run counts as hung
    run_timeout_s: float = 14400.0

    def gen_kwargs(self) -> dict:
        kwargs = {"temperature": self.temperature, "max_gen_toks": self.max_gen_toks}
        kwargs["do_sample"] = self.temperature > 0
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        kwargs.update(self.extra_gen_kwargs)
        return kwargs


def load_protocols(path: Path = PROTOCOLS_FILE) -> tuple[dict, dict[str, Protocol]]:
    """(the [data] table, protocols by name)."""
    doc = tomllib.loads(Path(path).read_text())
    protocols = {}
    for name, table in doc.get("protocol", {}).items():
        try:
            protocols[name] = Protocol(name=name, **table)
        except TypeError as exc:
            raise UsageError(f"{path}: protocol {name!r}: {exc}") from None
        protocol = protocols[name]
        if protocol.tool not in TOOLS:
            raise UsageError(f"{path}: protocol {name!r}: tool must be one of {', '.join(TOOLS)}")
        if protocol.verdict_metric not in METRICS[protocol.tool]:
            raise UsageError(
                f"{path}: protocol {name!r}: verdict_metric for {protocol.tool} must be one of "
                f"{', '.join(METRICS[protocol.tool])}"
            )
    return doc.get("data", {}), protocols
