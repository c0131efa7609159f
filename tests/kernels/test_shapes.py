"""kernels/shapes.toml states the PR's shapes and the kernel tools' defaults once: the commands take their
defaults from it, the Make targets pass only what a user sets, and no tool file spells a value again."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kdakit.kernels import shapes, tuned
from kdakit.kernels.tools import autotune, bench, timing
from kdakit.kernels.tools.table import DECODE_VS_TRITON

from kdakit.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
# The files that read shapes.toml instead of stating its values.
READERS = sorted(
    [
        *ROOT.glob("kernels/tools/*.py"),
        ROOT / "kernels/tuned.py",
        ROOT / "kdakit/checks/selftest_gpu.py",
        ROOT / "kernels/kernels.mk",
        ROOT / "Makefile",
    ]
)


def _options(*argv: str) -> dict:
    sub = build_parser()._subparsers._group_actions[0].choices["kernels"]
    parser = sub._subparsers._group_actions[0].choices[argv[0]]
    return {a.dest: a.default for a in parser._actions}


def test_the_commands_defaults_are_the_shapes_file():
    model, defaults = shapes.load()["model"], shapes.load()["bench"]
    opts = _options("bench")
    assert opts["heads"] == model["heads"] and opts["head_dim"] == model["head_dim"]
    assert opts["lower_bound"] == model["lower_bound"] and opts["draft_tokens"] == model["draft_tokens"]
    assert opts["decode_batches"] == ",".join(map(str, defaults["decode_batches"]))
    assert (
        opts["prefill_shapes"] == ",".join(defaults["prefill_shapes"])
        and opts["replays"] == defaults["replays"]
    )
    cfg = bench.BenchConfig()
    assert opts["repeats"] == cfg.repeats == defaults["repeats"] and cfg.band_pct == defaults["band_pct"]
    assert cfg.prefill_shapes == bench.parse_prefill_shapes(opts["prefill_shapes"])
    assert cfg.pool_bytes == model["pool_slots"] * model["heads"] * model["head_dim"] ** 2 * 4
    tune = _options("autotune")
    assert tune["batches"] == ",".join(map(str, tuned.BATCH_BUCKETS))
    assert tuple(map(int, tune["tokens"].split(","))) == autotune.DEFAULT_TOKENS == (4096, 8192)
    assert tune["budget_seconds"] == shapes.get("autotune", "budget_seconds")
    assert tuned.PREFILL_TOKEN_BUCKETS == tuple(shapes.get("buckets", "prefill_tokens"))
    assert (autotune.DRAFT_TOKENS, autotune.LOWER_BOUND) == (model["draft_tokens"], model["lower_bound"])
    assert (timing.REPLAYS, timing.PREFILL_CALLS) == (defaults["replays"], defaults["prefill_calls"])
    assert DECODE_VS_TRITON == shapes.get("targets", "decode_vs_triton")


# The names kernel signatures give shapes.toml's keys (H=16, K=128); the gate's bound is caught as a literal.
ALIASES = {"heads": ("H", "HV"), "head_dim": ("K", "V")}


def _copies(text: str) -> list[str]:
    """Spellings of shapes.toml's values in `text`: lists (as a CLI default or a tuple), named scalars and
    negative literals (only the gate's bound is negative)."""
    found = []
    for table, items in shapes.load().items():
        for key, value in items.items():
            negative = isinstance(value, float) and value < 0
            if negative and re.search(rf"(?<![\w.]){re.escape(str(value))}(?![\w.])", text):
                found.append(f"[{table}] {key} = {value} as a literal")
                continue
            if isinstance(value, list) and len(value) > 1:
                for sep in (",", ", "):
                    spelled = sep.join(map(str, value))
                    if re.search(rf"(?<![\w.,]){re.escape(spelled)}(?![\w.]|,\s*\d)", text):
                        found.append(f"[{table}] {key} as {spelled!r}")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                number = re.escape(str(value)).replace(r"\.0", r"(\.0)?")
                aliases = "|".join(ALIASES.get(key, ())) or key
                pattern = rf"((?i:\b{key}\b)|\b({aliases})\b)\w*\s*(:\s*\w+\s*)?[=:]\s*{number}(?![\w.])"
                if re.search(pattern, text) or re.search(rf"default\s*=\s*{number}(?![\w.])", text):
                    found.append(f"[{table}] {key} = {value}")
    return found


def test_no_reader_states_a_value_of_the_shapes_file_again():
    copies = {str(p.relative_to(ROOT)): _copies(p.read_text()) for p in READERS}
    assert {p: c for p, c in copies.items() if c} == {}


@pytest.mark.parametrize(
    "planted",
    [
        'bench.add_argument("--decode-batches", default="1,16,48")',
        "DRAFT_TOKENS = 6",
        "lower_bound: float = -5.0",
        "BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 40, 48)",
        "AUTOTUNE_HEADS ?= 16,8",
        'parser.add_argument("--replays", type=int, default=100)',
        'bench.add_argument("--repeats", type=int, default=5)',
        "band_pct: float = 1.0",
    ],
)
def test_a_planted_copy_is_found(planted):
    assert _copies(planted)


def test_make_passes_only_what_is_set():
    def dry(*args: str) -> str:
        return subprocess.run(
            ["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout

    plain = dry("kernels-bench")
    assert "--phases" not in plain and "--configs" not in plain and "--results-dir results" in plain
    assert "--phases decode" in dry("kernels-bench", "KERNELS_PHASES=decode")
    tune = dry("autotune", "SKU=h200", "AUTOTUNE_BUDGET=5")
    assert "--sku h200" in tune and "--budget-seconds 5" in tune and "--heads" not in tune


def test_the_shapes_file_reads_without_kdakit():
    out = subprocess.run(
        [sys.executable, "-I", str(ROOT / "kernels/shapes.py"), "bench", "decode_batches"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == shapes.csv("bench", "decode_batches")


def _copies_of_names(text: str, names) -> list[str]:
    return [n for n in names if f'"{n}"' in text]


def test_the_entry_points_are_named_only_by_the_integration():
    from kdakit.kernels import integration

    names = [*integration.ENTRY_POINTS.values(), *integration.KDAKIT_MODULES.values()]
    names += integration.UPSTREAM_MODULES.values()
    quoted = {str(p.relative_to(ROOT)): _copies_of_names(p.read_text(), names) for p in READERS}
    assert {p: n for p, n in quoted.items() if n} == {}
    assert _copies_of_names('"kdakit.kernels.decode", "helion_kda_verify"', names)
