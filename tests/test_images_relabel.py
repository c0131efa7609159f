"""tests/infra/relabel_dist.py, which the Docker tests use to make torch report another version: after it,
importlib.metadata (the build's base check) and torch.__version__ (the self-test) both see the new version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "infra" / "relabel_dist.py"


def test_relabel_changes_what_both_version_checks_read(tmp_path):
    site = tmp_path / "site"
    info = site / "torch-2.14.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\nSummary: x\n")
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text("__version__ = '2.14.1+cu130'\ncuda = '13.0'\n")
    (site / "torch" / "__init__.py").write_text("from torch.version import __version__\n")
    probe = (
        f"import sys; sys.path.insert(0, {str(site)!r}); import runpy; sys.argv = ['x', 'torch', '2.13.0'];"
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__');"
        "import importlib.metadata as m, importlib; import torch;"
        "print(m.version('torch'), torch.__version__)"
    )
    proc = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["2.13.0", "2.13.0"]
    assert (site / "torch-2.13.0.dist-info").is_dir() and not info.exists()
