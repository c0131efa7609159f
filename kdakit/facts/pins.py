"""pins.toml: load it, print it, and check that the rest of the repo states the same versions.

The one reader of pins.toml. Its import needs only the standard library, so the Makefile and images/ run it
as a script before kdakit is installed: `python3 kdakit/facts/pins.py TABLE KEY` prints one pin.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PINS_FILE = Path(__file__).with_name("pins.toml")  # a link to the repo root's pins.toml
REPO_ROOT = Path(__file__).resolve().parents[2]
VERSION = r"[0-9][0-9A-Za-z.+\-]*"
_START = r"(?<![A-Za-z0-9.-])"  # `kdakit_torch_version` counts, `libtorch==` does not
SKIPPED_DIRS = {"tests"}  # tests plant other versions on purpose
IGNORE_MARK = "pins: ignore"  # a line carrying this text is not checked (e.g. notes about other machines)


@cache
def load(path: Path = PINS_FILE) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def package(name: str) -> str:
    """The pinned version of a Python package, by its PyPI name."""
    return load()["packages"][name]


def flat(pins: dict | None = None) -> dict[str, str]:
    """Every pin as 'table.key' -> value (as text)."""
    pins = pins if pins is not None else load()
    return {f"{table}.{key}": str(value) for table, items in pins.items() for key, value in items.items()}


@dataclass(frozen=True)
class Mismatch:
    path: str
    line: int
    pin: str
    expected: str
    found: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.pin} is {self.found!r} here but {self.expected!r} in pins.toml"
        )


def _spellings(name: str) -> str:
    """lm-eval also appears as lm_eval and LM_EVAL; match all of them."""
    parts = re.split(r"[-_]", name)
    return r"[-_]".join(re.escape(p) for p in parts)


def _rules(pins: dict) -> list[tuple[str, re.Pattern, str]]:
    """(pin name, pattern whose group 'v' holds a stated value, expected value)."""
    rules = []
    for name, version in pins["packages"].items():
        n = _spellings(name)
        for pattern in (
            rf"{_START}{n}(\[[^\]]*\])?==(?P<v>{VERSION})",  # pip requirement
            rf"(?i){_START}{n}[-_]version\s*[:=]\s*[\"']?(?P<v>{VERSION})",  # ARG/YAML/env
            rf"^\|\s*`?{n}`?\s*\|\s*`?(?P<v>{VERSION})`?\s*\|",  # README table row
        ):
            rules.append((f"packages.{name}", re.compile(pattern, re.M), version))
    cuda, image = pins["cuda"], pins["image"]
    rules += [
        (
            "cuda.version",
            re.compile(rf"(?i){_START}cuda[-_]version\s*[:=]\s*[\"']?(?P<v>{VERSION})"),
            cuda["version"],
        ),
        ("cuda.torch_index", re.compile(r"download\.pytorch\.org/whl/(?P<v>cu\d+)"), cuda["torch_index"]),
        (
            "cuda.min_driver",
            re.compile(r"(?i)" + _START + r"min[-_]driver(?:[-_]version)?\s*[:=]\s*[\"']?(?P<v>\d+)"),
            str(cuda["min_driver"]),
        ),
        (
            "image.base",
            re.compile(
                r"(?i)" + _START + r"base[-_]image\s*[:=]\s*[\"']?(?P<v>[\w./-]+:[\w.-]+(?:@sha256:\w+)?)"
            ),
            image["base"],
        ),
    ]
    return rules


def _repo_files(root: Path) -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        files = [root / p for p in out]
    except (OSError, subprocess.CalledProcessError):
        files = [
            p for p in root.rglob("*") if p.is_file() and ".venv" not in p.parts and ".git" not in p.parts
        ]
    return [
        p
        for p in files
        if p.is_file()
        and not p.is_symlink()
        and p.name != "pins.toml"
        and p.relative_to(root).parts[0] not in SKIPPED_DIRS
    ]


def check(root: Path = REPO_ROOT, pins: dict | None = None) -> list[Mismatch]:
    """Every place under root that states a pinned value differently from pins.toml."""
    pins = pins if pins is not None else load(root / "pins.toml")
    rules = _rules(pins)
    found = []
    for path in sorted(_repo_files(root)):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        lines = text.splitlines()
        for pin, pattern, expected in rules:
            for m in pattern.finditer(text):
                lineno = text.count("\n", 0, m.start()) + 1
                value = m.group("v").rstrip(".,")
                if value != expected and IGNORE_MARK not in lines[lineno - 1]:
                    found.append(Mismatch(str(path.relative_to(root)), lineno, pin, expected, value))
    return sorted(set(found), key=lambda m: (m.path, m.line, m.pin))


def _run(args) -> int:
    from kdakit.facts.errors import UsageError

    if args.check:
        root = Path(args.root).resolve() if args.root else REPO_ROOT
        if not (root / "pins.toml").is_file():
            raise UsageError(f"{root} has no pins.toml: run --check inside a kdakit checkout or pass --root")
        bad = check(root)
        for m in bad:
            print(m)
        print(f"pins check: {len(bad)} mismatch(es)" if bad else "pins check: every stated version agrees")
        return 1 if bad else 0
    for key, value in flat().items():
        print(f"{key:28} {value}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("pins", help="print the pinned versions, or check the repo against them")
    p.add_argument("--check", action="store_true", help="fail (exit 1) when any file states another version")
    p.add_argument("--root", help="repository to check (default: this checkout)")
    p.set_defaults(func=_run)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} TABLE KEY   (e.g. packages sglang)")
    print(load()[sys.argv[1]][sys.argv[2]])
