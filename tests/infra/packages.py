"""The Debian packages the integration tests need, by test group, read from .ci/apt-packages.txt (the one
list: `make test-packages` and .ci/run install it). A group starts at a comment line `# NAME (...)`; the
package lines below it are its packages.

`make test` runs a group's tests only where its packages are present (each test skips with a reason that
names a package); its summary then says which groups were skipped and the one command that adds them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

APT_FILE = Path(__file__).resolve().parents[2] / ".ci" / "apt-packages.txt"
INSTALL_COMMAND = "make test-packages"
_GROUP = re.compile(r"^#\s*(\w[\w-]*)\s*\(")


def groups(text: str | None = None) -> dict[str, list[str]]:
    """{group: [package, ...]} in the file's order."""
    out: dict[str, list[str]] = {}
    current = None
    for line in (APT_FILE.read_text() if text is None else text).splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _GROUP.match(line)
            if m:
                current = m[1]
                out.setdefault(current, [])
            continue
        if current is None:
            raise ValueError(f"{APT_FILE}: package {line!r} before any '# group (...)' line")
        out[current] += line.split()
    return out


def group_of(reason: str, table: dict[str, list[str]] | None = None) -> str | None:
    """The group whose package a skip reason names (e.g. 'install openssh-server ...' -> playbooks)."""
    for name, packages in (groups() if table is None else table).items():
        if any(re.search(rf"(?<![\w.-]){re.escape(p)}(?![\w.-])", reason) for p in packages):
            return name
    return None


def missing(packages: list[str]) -> list[str]:
    """The packages dpkg does not list as installed (all of them where there is no dpkg)."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *packages],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {line.split()[0] for line in proc.stdout.splitlines() if line.endswith(" installed")}
    return [p for p in packages if p not in installed]


def summary(skip_reasons: list[str], table: dict[str, list[str]] | None = None) -> list[str]:
    """The lines `make test` ends with when tests were skipped for want of Debian packages."""
    table = groups() if table is None else table
    counts: dict[str, int] = {}
    for reason in skip_reasons:
        name = group_of(reason, table)
        if name:
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return []
    skipped = "; ".join(
        f"{name} ({n} test{'s' if n > 1 else ''}, missing {' '.join(missing(table[name])) or 'nothing now'})"
        for name, n in counts.items()
    )
    return [
        f"kdakit: test groups skipped, their Debian packages are missing: {skipped}",
        f"kdakit: add them (root, Debian; {APT_FILE.relative_to(APT_FILE.parents[1])}), then run make test"
        f" again: {INSTALL_COMMAND}",
    ]
