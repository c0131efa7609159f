"""The `kdakit` command line. Each area registers its own subcommands; this file only wires them."""

from __future__ import annotations

import argparse
import importlib
import sys

from kdakit.errors import UsageError

# Modules exposing `register(subparsers)`. Each adds one subcommand and sets `func` on its parser.
COMMAND_MODULES = [
    "kdakit.pins",
    "kdakit.plan",
    "kdakit.serve",
    "kdakit.sglang_args",
    "kdakit.preflight",
    "kdakit.health",
    "kdakit.evals.gsm8k",
    "kdakit.bench.serving",
    "kdakit.report",
    "kdakit.kernels.cli",
    "kdakit.selftest",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kdakit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _join_set_values(argv: list[str]) -> list[str]:
    """`--set --flag=1` -> `--set=--flag=1`: argparse would take `--flag=1` for an option of ours."""
    out, it = [], iter(argv)
    for token in it:
        if token in ("--set", "--unset"):
            value = next(it, None)
            out.append(token if value is None else f"{token}={value}")
        else:
            out.append(token)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_join_set_values(sys.argv[1:] if argv is None else list(argv)))
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"kdakit {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
