"""The SGLang integration patch: applies cleanly to the pinned wheel's files, and the patched Helion adapter
calls kdakit's kernels (or SGLang's with KDAKIT_HELION_KERNELS=upstream). CPU only: the adapter is imported
for real from the wheel; only the two SGLang base modules it imports are stood in for."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from kdakit.kernels import integration
from kdakit.kernels.tools import upstream

ADAPTER_STANDINS = {
    "sglang/srt/layers/__init__.py": "",
    "sglang/srt/layers/attention/__init__.py": "",
    "sglang/srt/layers/attention/linear/__init__.py": "",
    "sglang/srt/layers/attention/linear/kernels/__init__.py": "",
    "sglang/srt/layers/attention/linear/kernels/kernel_backend.py": "class LinearAttnKernelBase:\n    pass\n",
    "sglang/srt/layers/attention/linear/kernels/kda_triton.py": "class TritonKDAKernel:\n    pass\n",
}


@pytest.fixture(scope="module")
def wheel() -> Path:
    return upstream.find_wheel(download=True)


@pytest.fixture()
def tree(tmp_path: Path, wheel: Path) -> Path:
    """SGLang's kernel modules and its unmodified Helion adapter from the wheel, as a sys.path root."""
    root = upstream.extract(tmp_path / "site", wheel=wheel)
    with zipfile.ZipFile(wheel) as zf:
        for path in integration.patched_files():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(zf.read(path))
    for name, text in ADAPTER_STANDINS.items():
        (root / name).write_text(text)
    return root


def _resolve_in(root: Path, value: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(integration.ENV_VAR, None)
    if value is not None:
        env[integration.ENV_VAR] = value
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    code = "import json; from kdakit.kernels.integration import resolve; print(json.dumps(resolve()))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_patch_applies_cleanly_to_the_pinned_wheel(tree: Path):
    adapter = tree / integration.ADAPTER
    backend = tree / integration.BACKEND
    before = adapter.read_text()
    assert "from sglang.kernels.ops.attention.helion.kda_decode import" in before
    assert integration.check(tree) == "applies"
    graph = tree / integration.PREFILL_GRAPH
    assert "core_attn_out.masked_fill_(" in graph.read_text()
    assert integration.apply(tree) == [graph, backend, adapter]
    assert '"takes_prefill_graph_tables"' in backend.read_text()
    assert '"zeroes_padded_rows"' in graph.read_text() and '"zeroes_padded_rows"' in adapter.read_text()
    assert '"writes_track_slots"' in graph.read_text() and '"writes_track_slots"' in adapter.read_text()
    assert '"writes_into_output"' in graph.read_text() and '"writes_into_output"' in adapter.read_text()
    assert 'output=kwargs.get("linear_attn_output")' in backend.read_text()
    after = adapter.read_text()
    assert "KDAKIT_HELION_MODULES = helion_kda_modules()" in after
    assert "from sglang.kernels.ops.attention.helion.kda_decode import" not in after
    assert "from sglang.kernels.ops.attention.helion.kda_verify import" not in after
    assert integration.check(tree) == "applied"
    assert integration.apply(tree) == []  # idempotent
    assert adapter.read_text() == after


def test_patch_refuses_a_changed_file(tree: Path):
    adapter = tree / integration.ADAPTER
    line = "self._chunk_kda = chunk_kda"
    changed = adapter.read_text().replace(line, line + "  # edited")
    adapter.write_text(changed)
    assert integration.check(tree) == "conflict"
    with pytest.raises(integration.PatchError, match="does not apply cleanly"):
        integration.apply(tree)
    assert adapter.read_text() == changed


def test_patched_adapter_resolves_to_kdakit_by_default(tree: Path):
    integration.apply(tree)
    result = _resolve_in(tree, None)
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout.strip().splitlines()[-1])
    assert resolved["kernels"] == "kdakit"
    assert resolved["decode"] == "kdakit.kernels.decode"
    assert resolved["verify"] == "kdakit.kernels.verify"
    has_prefill = importlib.util.find_spec("kdakit.kernels.prefill") is not None
    expected_prefill = "kdakit.kernels.prefill" if has_prefill else integration.UPSTREAM_MODULES["prefill"]
    assert resolved["prefill"] == expected_prefill
    assert "Helion KDA kernels from kdakit" in result.stderr  # the choice is logged


def test_patched_adapter_resolves_to_upstream_on_request(tree: Path):
    integration.apply(tree)
    result = _resolve_in(tree, "upstream")
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout.strip().splitlines()[-1])
    assert resolved.pop("prefill_graph") is not True  # SGLang's Helion prefill declares no graph tables
    assert resolved == {"kernels": "upstream", **integration.UPSTREAM_MODULES}


def test_unpatched_adapter_reports_upstream(tree: Path):
    result = _resolve_in(tree, None)
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout.strip().splitlines()[-1])
    assert resolved.pop("prefill_graph") is not True
    assert resolved == {"kernels": "unpatched", **integration.UPSTREAM_MODULES}


def test_invalid_switch_value_fails_clearly(tree: Path, monkeypatch):
    integration.apply(tree)
    result = _resolve_in(tree, "fla")
    assert result.returncode != 0
    assert "KDAKIT_HELION_KERNELS must be one of kdakit, upstream; got 'fla'" in result.stderr
    monkeypatch.setenv(integration.ENV_VAR, "Kdakit")
    with pytest.raises(ValueError, match="must be one of"):
        integration.selected_kernels()


def test_startup_refuses_another_sglang(monkeypatch):
    from importlib import metadata

    monkeypatch.setattr(metadata, "version", lambda name: "0.5.22" if name == "sglang" else "0")
    with pytest.raises(integration.KernelResolutionError, match="needs SGLang 0.5.23.*has 0.5.22"):
        integration.helion_kda_modules(quiet=True)


def test_startup_names_a_kernel_module_that_does_not_import(monkeypatch):
    monkeypatch.setitem(integration.KDAKIT_MODULES, "verify", "kdakit.kernels.no_such_module")
    monkeypatch.setenv(integration.ENV_VAR, "kdakit")
    with pytest.raises(integration.KernelResolutionError) as info:
        integration.helion_kda_modules(quiet=True)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("kdakit: verify kernel module kdakit.kernels.no_such_module")
    assert "ModuleNotFoundError" in message
