"""A strict unified-diff applier (`patch -p1` without fuzz): a hunk applies only where its context and
removed lines stand exactly at its stated line, so a patch meant for another SGLang never half-applies.
Reverse application tells an already patched file from an unpatched one."""

from __future__ import annotations

import re
from dataclasses import dataclass


class PatchError(RuntimeError):
    """The patch does not apply cleanly (wrong SGLang version, or the file was changed)."""


@dataclass
class Hunk:
    old_start: int
    new_start: int
    old: list[str]
    new: list[str]


@dataclass
class FilePatch:
    path: str  # relative to site-packages, prefix a/ b/ stripped (patch -p1)
    hunks: list[Hunk]


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse(text: str) -> list[FilePatch]:
    files: list[FilePatch] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            target = lines[i + 1][4:].split("\t")[0].strip()
            files.append(FilePatch(target.split("/", 1)[1] if "/" in target else target, []))
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not files:
                raise PatchError("hunk before any file header")
            old_count = int(match.group(2) or 1)
            new_count = int(match.group(4) or 1)
            hunk = Hunk(int(match.group(1)), int(match.group(3)), [], [])
            i += 1
            while (len(hunk.old) < old_count or len(hunk.new) < new_count) and i < len(lines):
                body = lines[i]
                tag, rest = (body[:1], body[1:]) if body else (" ", "")
                if tag == " ":
                    hunk.old.append(rest)
                    hunk.new.append(rest)
                elif tag == "-":
                    hunk.old.append(rest)
                elif tag == "+":
                    hunk.new.append(rest)
                elif tag != "\\":
                    raise PatchError(f"malformed hunk line {i + 1}: {body!r}")
                i += 1
            if len(hunk.old) != old_count or len(hunk.new) != new_count:
                raise PatchError(f"truncated hunk at line {i}")
            files[-1].hunks.append(hunk)
            continue
        i += 1
    if not files or not all(f.hunks for f in files):
        raise PatchError("patch has no file with hunks")
    return files


def apply_hunks(lines: list[str], hunks: list[Hunk], reverse: bool = False) -> list[str] | None:
    """New lines, or None when any hunk's context is not found exactly at its place."""
    out = list(lines)
    shift = 0
    for hunk in hunks:
        old, new = (hunk.new, hunk.old) if reverse else (hunk.old, hunk.new)
        at = (hunk.new_start if reverse else hunk.old_start) - 1 + shift
        if at < 0 or out[at : at + len(old)] != old:
            return None
        out[at : at + len(old)] = new
        shift += len(new) - len(old)
    return out
