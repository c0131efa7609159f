"""Who may use the benchmark server: the run's keys, the variables they travel in, and keeping them out of
every record.

SGLang 0.5.23 checks `Authorization: Bearer <key>` against `--api-key` on every endpoint except /health*,
/ready* and /metrics*; when `--admin-api-key` is also set, the admin endpoints (/flush_cache, weight
updates, profiling, ...) take only the admin key. SGLang reads both only from its command line, so
`kdakit serve` appends them to the argv it execs and records that argv with the values redacted.

The controller makes both keys once per run (`python -m kdakit.launch.access env-file`); they reach the host
in the 0600 env file every kit container (server, eval, bench) is started with.

Standard library only: the playbooks and the Slurm job ship this very file to the hosts, whose python3 runs
`access.py scrub` (replace the env file's secrets in a folder's files) and `access.py filter` (in a stream
before it reaches a file: `docker inspect`, the server's log).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

# The variable SGLang's benchmark client, run_eval (through the OpenAI client) and lm-eval read the key from.
API_KEY_ENV = "OPENAI_API_KEY"
ADMIN_API_KEY_ENV = "KDAKIT_ADMIN_API_KEY"
# Which run the keys in an env file belong to (a second deploy of the same run keeps them).
KEYS_RUN_ENV = "KDAKIT_KEYS_RUN_ID"
API_KEY_FLAG = "--api-key"
ADMIN_API_KEY_FLAG = "--admin-api-key"
SECRET_FLAGS = (API_KEY_FLAG, ADMIN_API_KEY_FLAG)
# Fields of SGLang's /server_info (its resolved server args) that hold the keys.
SECRET_FIELDS = ("api_key", "admin_api_key")
REDACTED = "<redacted>"
# An env file's values this long or longer are secrets (the run's keys are 43 characters, an HF token 37);
# shorter ones would redact ordinary text.
SHORTEST_SECRET = 16
# A key flag inside a command line kept as one string (SGLang's launch_command).
_FLAG_IN_TEXT = re.compile(r"(--(?:admin-)?api-key[= ])(?!<redacted>)\S+")


def new_key() -> str:
    return secrets.token_urlsafe(32)


def parse_env_text(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() and not name.lstrip().startswith("#"):
            values[name.strip()] = value
    return values


def env_file_lines(run_id: str, previous: str = "") -> str:
    """The key lines of a run's env file: the previous file's keys when they belong to this run, else new."""
    old = parse_env_text(previous)
    if old.get(KEYS_RUN_ENV) == run_id and old.get(API_KEY_ENV) and old.get(ADMIN_API_KEY_ENV):
        api_key, admin_key = old[API_KEY_ENV], old[ADMIN_API_KEY_ENV]
    else:
        api_key, admin_key = new_key(), new_key()
    return f"{KEYS_RUN_ENV}={run_id}\n{API_KEY_ENV}={api_key}\n{ADMIN_API_KEY_ENV}={admin_key}\n"


def keys_from_env(env: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    env = os.environ if env is None else env
    return env.get(API_KEY_ENV) or None, env.get(ADMIN_API_KEY_ENV) or None


def auth_headers(env: dict[str, str] | None = None) -> dict[str, str]:
    """The header the kit's own requests (readiness, /server_info, /metrics) carry."""
    api_key, _ = keys_from_env(env)
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def known_secrets(env: dict[str, str] | None = None) -> list[str]:
    # "EMPTY" is the OpenAI client's placeholder, not a secret; short values would redact ordinary text.
    return [k for k in keys_from_env(env) if k and k != "EMPTY" and len(k) >= SHORTEST_SECRET]


def env_file_secrets(path: Path | str) -> list[str]:
    """Every value of an env file (the kit's 0600 secrets file: the run's keys, an HF token) long enough
    to be a secret; [] when the file cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    return [v.strip() for v in parse_env_text(text).values() if len(v.strip()) >= SHORTEST_SECRET]


def scrub_bytes(data: bytes, secrets_: list[str]) -> bytes:
    for secret in secrets_:
        data = data.replace(secret.encode(), REDACTED.encode())
    return data


def redact_argv(argv: list[str]) -> list[str]:
    """The argv with the value of every key flag (`--api-key K` or `--api-key=K`) replaced."""
    out, hide_next = [], False
    for item in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif item in SECRET_FLAGS:
            out.append(item)
            hide_next = True
        elif item.split("=", 1)[0] in SECRET_FLAGS and "=" in item:
            out.append(item.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(item)
    return out


def redact(value, secrets_: list[str] | None = None):
    """A copy of a JSON-like value with the key fields blanked and every known key string replaced."""
    hidden = known_secrets() if secrets_ is None else secrets_
    if isinstance(value, dict):
        return {k: (REDACTED if k in SECRET_FIELDS and v else redact(v, hidden)) for k, v in value.items()}
    if isinstance(value, list):
        return (
            redact_argv([redact(v, hidden) for v in value])
            if all(isinstance(v, str) for v in value)
            else [redact(v, hidden) for v in value]
        )
    if isinstance(value, str):
        for secret in hidden:
            value = value.replace(secret, REDACTED)
        return _FLAG_IN_TEXT.sub(rf"\1{REDACTED}", value)
    return value


def scrub_tree(folder: Path, secrets_: list[str] | None = None) -> list[Path]:
    """Replace every known key string in every file under folder (the tools' raw outputs: SGLang's
    /server_info, which its benchmark client copies into its JSONL, holds the keys; SGLang's start-up log).
    Returns the files changed."""
    hidden = known_secrets() if secrets_ is None else secrets_
    changed = []
    if not hidden or not Path(folder).exists():
        return changed
    for path in sorted(Path(folder).rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if any(s.encode() in data for s in hidden):
            tmp = path.with_name(path.name + ".scrub-tmp")
            tmp.touch(mode=path.stat().st_mode & 0o777)
            tmp.write_bytes(scrub_bytes(data, hidden))
            tmp.replace(path)
            changed.append(path)
    return changed


@contextlib.contextmanager
def private_output(target: Path | str, secrets_: list[str] | None = None):
    """A path for a tool's output file that may hold the keys (SGLang's benchmark client copies /server_info
    into its JSONL): in a private 0700 folder outside the results, gone afterwards. On leaving, what the tool
    wrote lands at target with the keys replaced, so that no results file ever holds them."""
    hidden = [s.encode() for s in (known_secrets() if secrets_ is None else secrets_)]
    folder = Path(tempfile.mkdtemp(prefix="kdakit-tool-"))
    written = folder / Path(target).name
    try:
        yield written
    finally:
        try:
            if written.exists():
                data = written.read_bytes()
                for secret in hidden:
                    data = data.replace(secret, REDACTED.encode())
                tmp = Path(target).with_name(Path(target).name + ".scrub-tmp")
                tmp.write_bytes(data)
                tmp.replace(target)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kdakit.launch.access", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    env_file = sub.add_parser(
        "env-file", help="print the key lines of the run's env file; the previous file's text on stdin"
    )
    env_file.add_argument("--run-id", required=True)
    scrub = sub.add_parser("scrub", help="replace the env file's secrets in every file under FOLDER")
    scrub.add_argument("--env-file", required=True)
    scrub.add_argument("folder")
    filt = sub.add_parser("filter", help="copy stdin to stdout with the env file's secrets replaced")
    filt.add_argument("--env-file", required=True)
    args = p.parse_args(argv)
    if args.command == "scrub":
        for path in scrub_tree(Path(args.folder), env_file_secrets(args.env_file)):
            print(path)
        return 0
    if args.command == "filter":
        hidden = env_file_secrets(args.env_file)
        for line in sys.stdin.buffer:  # by line: a long log never sits in memory; a key never spans lines
            sys.stdout.buffer.write(scrub_bytes(line, hidden))
        return 0
    previous = "" if sys.stdin.isatty() else sys.stdin.read()
    sys.stdout.write(env_file_lines(args.run_id, previous))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
