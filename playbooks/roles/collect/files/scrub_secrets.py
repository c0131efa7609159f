#!/usr/bin/env python3
"""Replace every value of an env file (the kit's 0600 secrets file: HF token, the run's keys) wherever it
occurs in the files under a folder, before the folder is fetched. SGLang logs its server args, keys
included, at start-up; this keeps them out of the collected server log.

Standard library only: it runs with the host's python3. Prints the files it changed, one a line. With
--stream it filters stdin to stdout instead (a diagnostic scrubbed as it is written; a secret never spans a
line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REDACTED = b"<redacted>"
SHORTEST = 16  # shorter values would redact ordinary text; the kit's keys are 43 characters


def secret_values(env_file: Path) -> list[bytes]:
    try:
        lines = env_file.read_bytes().splitlines()
    except OSError:
        return []
    values = [line.partition(b"=")[2].strip() for line in lines if b"=" in line]
    return [v for v in values if len(v) >= SHORTEST]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--env-file", required=True, type=Path)
    p.add_argument("--stream", action="store_true", help="filter stdin to stdout")
    p.add_argument("folder", type=Path, nargs="?")
    args = p.parse_args(argv)
    secrets = secret_values(args.env_file)
    if args.stream:
        for line in sys.stdin.buffer:
            for s in secrets:
                line = line.replace(s, REDACTED)
            sys.stdout.buffer.write(line)
        return 0
    if args.folder is None:
        p.error("a folder, or --stream")
    for path in sorted(args.folder.rglob("*")) if secrets else []:
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if any(s in data for s in secrets):
            for s in secrets:
                data = data.replace(s, REDACTED)
            path.write_bytes(data)
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
