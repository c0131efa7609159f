"""Make an installed distribution report another version (its dist-info folder and METADATA, and for torch
`torch.__version__`), without installing anything: what the version checks of the kdakit build and its
self-test see after someone swapped torch. Run inside an image: python3 relabel_dist.py torch 2.13.0
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import sys
from pathlib import Path


def relabel(name: str, version: str) -> Path:
    dist = importlib.metadata.distribution(name)
    info = Path(dist._path)  # the .dist-info folder
    meta = info / "METADATA"
    meta.write_text(re.sub(r"^Version: .*$", f"Version: {version}", meta.read_text(), count=1, flags=re.M))
    version_py = Path(dist.locate_file(f"{name}/version.py"))
    if version_py.is_file():
        text = version_py.read_text()
        version_py.write_text(re.sub(r"^__version__ = .*$", f"__version__ = '{version}'", text, flags=re.M))
    renamed = info.with_name(f"{info.name.split('-')[0]}-{version}.dist-info")
    # copy + remove, not rename: overlayfs refuses to rename a folder of a lower image layer (EXDEV)
    shutil.copytree(info, renamed)
    shutil.rmtree(info)
    return renamed


if __name__ == "__main__":
    print(relabel(sys.argv[1], sys.argv[2]))
