"""The run's secrets in the files a cluster test's runs leave: every run directory, on the controller and on
the hosts, Ansible and Slurm runs alike, faults included.

A run's keys live only in its 0600 env file (`state/*.env`: the host's kdakit-sglang.env on the Ansible path,
the run's slurm/state/server.env on the Slurm path). Keys change with every run, so a test notes the env
files after each make call (`Ledger.note`), and `Ledger.leaks` then reads every other file under the run
roots for every key noted so far.
"""

from __future__ import annotations

import os
from pathlib import Path

from kdakit.launch import access
from tests.infra import images

# The env file's secrets (the run id beside them is no secret and appears in every path).
SECRET_NAMES = (access.API_KEY_ENV, access.ADMIN_API_KEY_ENV, "HF_TOKEN")


def files_under(root: Path) -> list[Path]:
    """Every file under root (links not followed). A run writes while a test walks its folders (a collect
    stages and removes a folder within one step): os.walk skips a folder that vanished, where Path.rglob
    raises FileNotFoundError and ends the test."""
    found = []
    for folder, _, names in os.walk(root):
        found += [Path(folder) / name for name in names]
    return sorted(p for p in found if p.is_file() and not p.is_symlink())


def is_env_file(path: Path) -> bool:
    """A run's 0600 env file (`state/*.env`): the only file a secret may be in."""
    return path.name.endswith(".env") and path.parent.name == "state"


def env_files(root: Path) -> list[Path]:
    """The env files under root."""
    return [p for p in files_under(root) if is_env_file(p)]


class Ledger:
    def __init__(self, *secrets: str):
        self.secrets: dict[str, str] = {s: "given" for s in secrets}

    def note(self, *roots: Path) -> None:
        for root in roots:
            for env in env_files(root):
                try:
                    values = access.parse_env_text(env.read_text())
                except OSError:
                    continue
                for name in SECRET_NAMES:
                    if len(values.get(name, "")) >= 16:
                        self.secrets.setdefault(values[name], f"{name} of {env}")

    def leaks(self, *roots: Path) -> list[str]:
        """One line per file (outside the env files) that holds a noted secret."""
        found = []
        encoded = {s.encode(): where for s, where in self.secrets.items()}
        for root in roots:
            for path in files_under(root):
                if is_env_file(path):
                    continue
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                for secret, where in encoded.items():
                    if secret in data:
                        mode = path.stat().st_mode & 0o777
                        found.append(f"{path} (mode {mode:04o}) holds the {where}")
        return found

    def assert_clean(self, *roots: Path) -> int:
        """Fails naming every leaking file; returns how many files were read (for the test's log line)."""
        leaks = self.leaks(*roots)
        assert not leaks, "a run's secret outside its env file:\n" + "\n".join(leaks)
        return sum(len(files_under(r)) for r in roots)


def check_run_roots(ledger: Ledger, *roots: Path) -> None:
    """A cluster test's closing check: no file under the run roots holds a noted secret, and one line of what
    was read, which the session's summary repeats (tests/conftest.py)."""
    files, secrets = ledger.assert_clean(*roots), len(ledger.secrets)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0] or "a cluster test"
    line = f"key scan, {test}: {secrets} secret(s) of its runs, {files} file(s) of its run directories: none"
    print(line)
    scans = session_scans()
    if scans is not None:
        scans.parent.mkdir(parents=True, exist_ok=True)
        with scans.open("a") as out:
            out.write(line + "\n")


def session_scans() -> Path | None:
    """This test session's key-scan lines (every xdist worker appends to it)."""
    return images.session_file("key-scans.txt")


def run_noting(ledger: Ledger, cmd: list[str], roots: list[Path], timeout: float, **popen_kw):
    """subprocess.run(cmd, capture_output=True, text=True) that notes the env files under roots every half
    second while cmd runs: a make target that deploys and tears down (ab-*) writes and removes a run's env
    file within one call."""
    import subprocess
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kw)
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = proc.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            ledger.note(*roots)
            if time.monotonic() > deadline:
                proc.kill()
                out, err = proc.communicate()
                raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    ledger.note(*roots)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
