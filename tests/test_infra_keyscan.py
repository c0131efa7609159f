"""The key scan of the cluster tests (tests/infra/keyscan.py) while a run still writes: a folder that a step
creates and removes between the scan's listing and its visit is skipped, not an error that ends the test."""

from __future__ import annotations

import os
import shutil

from kdakit.launch import access
from tests.infra import keyscan

KEY = "k" * 40


def _run_tree(tmp_path):
    root = tmp_path / "results"
    (root / "ci" / "h1" / "state").mkdir(parents=True)
    (root / "ci" / "h1" / "state" / "kdakit-sglang.env").write_text(f"{access.API_KEY_ENV}={KEY}\n")
    staged = root / "ci" / "h1" / "helion" / ".collect-staged" / "bench"
    staged.mkdir(parents=True)
    (staged / "bench.json").write_text("{}")
    (root / "ci" / "h1" / "helion" / "provenance.json").write_text("{}")
    return root, staged.parent


def test_a_folder_removed_during_the_walk_is_skipped(tmp_path, monkeypatch):
    root, staged = _run_tree(tmp_path)
    real_scandir = os.scandir

    def scandir_after_the_collect_removed_its_staging(path="."):
        if not isinstance(path, int) and os.fspath(path) == os.fspath(staged / "bench") and staged.exists():
            shutil.rmtree(staged)  # the collect step finishes between the listing and this visit
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir_after_the_collect_removed_its_staging)
    ledger = keyscan.Ledger()
    ledger.note(root)
    assert not staged.exists()
    assert KEY in ledger.secrets
    files = keyscan.files_under(root)
    assert root / "ci" / "h1" / "helion" / "provenance.json" in files
    assert keyscan.env_files(root) == [root / "ci" / "h1" / "state" / "kdakit-sglang.env"]


def test_a_secret_outside_the_env_file_is_found_and_a_missing_root_reads_nothing(tmp_path):
    root, _ = _run_tree(tmp_path)
    ledger = keyscan.Ledger()
    ledger.note(root, tmp_path / "no-such-root")
    assert ledger.leaks(root) == []
    leak = root / "ci" / "h1" / "helion" / "server.log"
    leak.write_text("auth " + KEY)
    [line] = ledger.leaks(root, tmp_path / "no-such-root")
    assert line.startswith(f"{leak} (mode ") and f"holds the {access.API_KEY_ENV} of " in line
