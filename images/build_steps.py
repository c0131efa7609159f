"""Steps images/Dockerfile runs inside the build (standard library only: they run before kdakit is installed).

python3 build_steps.py check-base torch=2.14.1 triton=... sglang=...   refuse a base that breaks the pins
python3 build_steps.py gsm8k SRC_DIR DEST_DIR SHA256_FILE [URL]       copy (or download) and verify GSM8K
python3 build_steps.py integrate                                       apply kdakit's SGLang patch if shipped
python3 build_steps.py source-hash [ROOT [SETTING ...]]                the image source hash (controller)
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata as metadata
import importlib.util
import shutil
import sys
import urllib.request
from pathlib import Path


def check_base(wanted: list[str]) -> int:
    """Every name=version must be installed at exactly that version (a local label like +cu130 aside)."""
    bad = []
    for item in wanted:
        name, _, version = item.partition("=")
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            bad.append(f"{name}: not installed in the base image, pins.toml wants {version}")
            continue
        status = "ok" if found.split("+")[0] == version else "MISMATCH"
        print(f"base image: {name} {found} (pins.toml: {version}) {status}")
        if status != "ok":
            bad.append(f"{name}: the base image has {found}, pins.toml wants {version}")
    if bad:
        print("refusing this base image: " + "; ".join(bad), file=sys.stderr)
        print(
            "use a base built for these pins (see images/README.md) rather than reinstalling torch over it",
            file=sys.stderr,
        )
        return 1
    return 0


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def gsm8k(src: Path, dest: Path, sums: Path, url: str = "") -> int:
    """Bake GSM8K into the image: every file listed in the sha256 file, from src (or url), checked."""
    dest.mkdir(parents=True, exist_ok=True)
    bad = []
    for line in sums.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        expected, name = line.split()
        target = dest / name
        if url:
            with (
                urllib.request.urlopen(f"{url.rstrip('/')}/{name}", timeout=120) as resp,
                open(target, "wb") as f,
            ):
                shutil.copyfileobj(resp, f)
        else:
            shutil.copyfile(src / name, target)
        actual = _sha256(target)
        print(
            f"gsm8k: {name} sha256 {actual} {'ok' if actual == expected else 'MISMATCH, wanted ' + expected}"
        )
        if actual != expected:
            bad.append(name)
    if bad:
        print(
            f"refusing GSM8K files whose sha256 differs from {sums.name}: {', '.join(bad)}", file=sys.stderr
        )
        return 1
    return 0


def integrate() -> int:
    """Apply kdakit's SGLang integration patch when this kdakit ships one; say so either way."""
    try:
        from kdakit.kernels import integration
    except ImportError as exc:
        print(f"kdakit's SGLang integration is not in this build ({exc}); SGLang's own Helion kernels stay")
        return 0
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        print("sglang is not installed: nothing to patch", file=sys.stderr)
        return 1
    site_packages = Path(list(spec.submodule_search_locations)[0]).parent
    integration.apply(site_packages)
    print(f"kdakit's SGLang integration applied under {site_packages}")
    return 0


def context_files(root: Path) -> list[Path]:
    """The files `docker build` sends from root, by images/Dockerfile.dockerignore's rules (its form: ignore
    everything, re-include named paths, then drop a few patterns)."""
    rules = [
        line.strip()
        for line in (root / "images" / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    included = [r[1:].rstrip("/") for r in rules if r.startswith("!")]
    dropped = [r.removeprefix("**/") for r in rules if not r.startswith("!") and r != "*"]
    files = []
    for name in included:
        path = root / name
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            rel = f.relative_to(root)
            if f.is_file() and not any(
                part == d or fnmatch.fnmatch(part, d) for part in rel.parts for d in dropped
            ):
                files.append(f)
    return files


def source_hash(root: Path, extra: list[str] = ()) -> str:
    """sha256 over the image's inputs: every file of the build context (path and content), the Dockerfile,
    and the build's own settings (extra: SKU, base image, ...). Same tree, same hash; any change, another."""
    h = hashlib.sha256()
    for f in [root / "images" / "Dockerfile", *context_files(root)]:
        h.update(str(f.relative_to(root)).encode() + b"\0" + _sha256(f).encode() + b"\n")
    for item in extra:
        h.update(item.encode() + b"\n")
    return h.hexdigest()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    step, args = argv[0], argv[1:]
    if step == "check-base":
        return check_base(args)
    if step == "gsm8k":
        return gsm8k(Path(args[0]), Path(args[1]), Path(args[2]), args[3] if len(args) > 3 else "")
    if step == "integrate":
        return integrate()
    if step == "source-hash":
        print(source_hash(Path(args[0]) if args else Path.cwd(), args[1:]))
        return 0
    print(f"unknown step {step!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
