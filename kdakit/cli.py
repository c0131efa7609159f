"""The `kdakit` command line. Each area registers its own subcommands; this file only wires them."""

from __future__ import annotations

import argparse
import importlib
import sys

from kdakit.facts.errors import UsageError

# Subcommand -> module exposing `register(subparsers)`, which adds that subcommand and sets `func`.
COMMAND_MODULES = {
    "pins": "kdakit.facts.pins",
    "skus": "kdakit.facts.profiles",
    "plan": "kdakit.launch.plan",
    "serve": "kdakit.launch.serve",
    "sglang-args": "kdakit.launch.sglang_args",
    "preflight": "kdakit.checks.preflight",
    "health": "kdakit.checks.health",
    "eval": "kdakit.evals.gsm8k",
    "bench": "kdakit.bench.serving",
    "report": "kdakit.report",
    "kernels": "kdakit.kernels.tools.cli",
    "selftest": "kdakit.checks.selftest",
    "slurm": "kdakit.slurm.cli",
    "run": "kdakit.run.cli",
}


def _unavailable(command: str, error: ImportError):
    def explain(args) -> int:
        raise UsageError(
            f"`kdakit {command}` cannot run here: {error}. Install the kdakit extra it needs "
            "(see pyproject.toml) or run it inside the kdakit image"
        )

    return explain


DESCRIPTION = (
    "kdakit: validate and deploy SGLang with kdakit's Helion KDA kernels. Plan and serve an arm, run the "
    "accuracy and serving benchmarks against it, time and tune the kernels, and build the report. "
    "`kdakit COMMAND --help` describes each command."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kdakit", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, module in COMMAND_MODULES.items():
        try:
            importlib.import_module(module).register(sub)
        except ImportError as exc:
            # One missing optional dependency (e.g. jsonschema on a bare GPU box) must not take down
            # every other command: this one says what is missing when it is used.
            p = sub.add_parser(command, help=f"(unavailable here: {exc})")
            p.add_argument("rest", nargs=argparse.REMAINDER)
            p.set_defaults(func=_unavailable(command, exc))
    _describe(sub)
    return parser


def _describe(sub: argparse._SubParsersAction) -> None:
    """A (sub)command without its own description shows its one-line help at the top of its --help."""
    helps = {action.dest: action.help for action in sub._choices_actions}
    for name, parser in sub.choices.items():
        if parser.description is None and helps.get(name):
            text = helps[name]
            parser.description = text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _describe(action)


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
