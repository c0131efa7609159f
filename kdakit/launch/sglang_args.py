"""SGLang's server arguments, as data: extracted from the pinned wheel, used to validate every plan.

The snapshot `data/sglang-server-args.json` is produced by `kdakit sglang-args --write` in an environment
where the pinned sglang is importable (it builds SGLang's own argparse parser, the one `sglang serve` uses).
A test regenerates it from the pinned wheel and fails when the committed snapshot differs, so a controller
without SGLang still validates against SGLang's real definitions.
"""

from __future__ import annotations

import argparse
import json
import warnings
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from kdakit.facts import pins
from kdakit.facts.errors import UsageError

SNAPSHOT = Path(__file__).parent / "data" / "sglang-server-args.json"


def _type_name(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return "flag"
    t = action.type
    if t in (int, float, str):
        return t.__name__
    return "str" if t is None else "other"


def extract() -> dict:
    """Build SGLang's real server-argument parser and describe every option."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    options = []
    for action in parser._actions:
        if not action.option_strings:
            continue
        options.append(
            {
                "options": list(action.option_strings),
                "dest": action.dest,
                "type": _type_name(action),
                "nargs": action.nargs if isinstance(action.nargs, str | type(None)) else int(action.nargs),
                # sorted: some choice lists come from sets, whose order changes between processes
                "choices": None if action.choices is None else sorted(str(c) for c in action.choices),
            }
        )
    return {"sglang_version": metadata.version("sglang"), "options": options}


@dataclass(frozen=True)
class Option:
    name: str  # the primary spelling, e.g. --tp-size
    dest: str
    type: str
    nargs: str | int | None
    choices: tuple[str, ...] | None

    @property
    def is_flag(self) -> bool:
        return self.type == "flag"


class ServerArgSpec:
    def __init__(self, data: dict):
        self.sglang_version = data["sglang_version"]
        self._by_spelling: dict[str, Option] = {}
        for o in data["options"]:
            opt = Option(
                o["options"][0],
                o["dest"],
                o["type"],
                o["nargs"],
                tuple(o["choices"]) if o["choices"] is not None else None,
            )
            for spelling in o["options"]:
                self._by_spelling[spelling] = opt

    def lookup(self, flag: str) -> Option:
        try:
            return self._by_spelling[flag]
        except KeyError:
            raise UsageError(
                f"{flag} is not a server argument of sglang {self.sglang_version}"
                f"{_did_you_mean(flag, self._by_spelling)}"
            ) from None

    def check_value(self, flag: str, value: str | None) -> Option:
        """Raise UsageError unless `flag value` is accepted by SGLang's parser."""
        opt = self.lookup(flag)
        if opt.is_flag:
            if value is not None:
                raise UsageError(f"{flag} is a switch in sglang {self.sglang_version}; it takes no value")
            return opt
        if value is None:
            raise UsageError(f"{flag} needs a value")
        values = value.split() if opt.nargs in ("+", "*") else [value]
        for v in values:
            if opt.choices is not None and v not in opt.choices:
                raise UsageError(
                    f"{v!r} is not a valid value for {flag} in sglang {self.sglang_version}; "
                    f"choose from: {', '.join(opt.choices)}"
                )
            if opt.type in ("int", "float"):
                try:
                    (int if opt.type == "int" else float)(v)
                except ValueError:
                    raise UsageError(f"{flag} takes an {opt.type}, not {v!r}") from None
        return opt


def _did_you_mean(flag: str, known) -> str:
    import difflib

    close = difflib.get_close_matches(flag, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


@cache
def spec() -> ServerArgSpec:
    data = json.loads(SNAPSHOT.read_text())
    if data["sglang_version"] != pins.package("sglang"):
        raise UsageError(
            f"{SNAPSHOT} describes sglang {data['sglang_version']} but pins.toml pins "
            f"{pins.package('sglang')}: regenerate it with `make sglang-args`"
        )
    return ServerArgSpec(data)


def _run(args) -> int:
    data = extract()
    if data["sglang_version"] != pins.package("sglang"):
        raise UsageError(
            f"the importable sglang is {data['sglang_version']}, pins.toml pins {pins.package('sglang')}"
        )
    text = json.dumps(data, indent=1) + "\n"
    if args.write:
        SNAPSHOT.write_text(text)
        print(f"wrote {SNAPSHOT} ({len(data['options'])} options)")
        return 0
    same = SNAPSHOT.exists() and SNAPSHOT.read_text() == text
    print(
        f"{SNAPSHOT.name} matches sglang {data['sglang_version']} ({len(data['options'])} options)"
        if same
        else f"{SNAPSHOT} differs from sglang {data['sglang_version']}'s parser: run `make sglang-args`"
    )
    return 0 if same else 1


def register(sub) -> None:
    p = sub.add_parser("sglang-args", help="check (or --write) the snapshot of SGLang's server arguments")
    p.add_argument("--write", action="store_true", help="rewrite the snapshot from the importable sglang")
    p.set_defaults(func=_run)
