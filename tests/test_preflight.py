"""kdakit preflight: verdicts from nvidia-smi CSV, docker info and the file system, one line each."""

import subprocess
import sys
from pathlib import Path

import pytest

from kdakit.checks import preflight as pf

FOUR_H200 = "\n".join(f"{i}, NVIDIA H200, 580.95.05, 0, 143771" for i in range(4)) + "\n"


def _by_check(verdicts):
    return {v.check: v for v in verdicts}


def test_parse_gpus():
    gpus = pf.parse_gpus(FOUR_H200)
    assert len(gpus) == 4 and gpus[3].index == 3 and gpus[0].name == "NVIDIA H200"
    assert gpus[0].memory_total_mib == 143771
    with pytest.raises(ValueError):
        pf.parse_gpus("0, NVIDIA H200\n")


def test_four_idle_h200_pass():
    v = _by_check(pf.check_gpus(pf.parse_gpus(FOUR_H200), 4, "H200", 580, 1024, []))
    assert all(x.ok for x in v.values()), v


def test_two_gpus_fail_with_host_cause_and_fix():
    two = "".join(FOUR_H200.splitlines(keepends=True)[:2])
    v = _by_check(pf.check_gpus(pf.parse_gpus(two), 4, "H200", 580, 1024, []))
    assert not v["gpu-count"].ok
    line = v["gpu-count"].line("gpu-7")
    assert line.startswith("FAIL gpu-7: gpu-count: nvidia-smi lists 2 GPU(s), expected 4. Fix: ")
    assert "\n" not in line


def test_wrong_model_old_driver_busy():
    rows = "0, NVIDIA B200, 575.51.03, 30000, 183359\n"
    v = _by_check(pf.check_gpus(pf.parse_gpus(rows), 1, "H200", 580, 1024, ["4242"]))
    assert not v["gpu-model"].ok and "B200" in v["gpu-model"].detail
    assert not v["driver"].ok and "575.51.03" in v["driver"].detail
    assert not v["gpu-idle"].ok and "4242" in v["gpu-idle"].detail and "30000 MiB" in v["gpu-idle"].detail


def test_unknown_memory_is_not_idle():
    v = _by_check(
        pf.check_gpus(pf.parse_gpus("0, NVIDIA H200, 580.1, [N/A], [N/A]\n"), 1, "H200", 580, 1024, [])
    )
    assert not v["gpu-idle"].ok


def test_docker_runtime():
    assert not pf.check_docker(None, True)[0].ok
    # the client's half only: `docker info` printed it although no engine answered
    down = {"ServerErrors": ["Cannot connect to the Docker daemon at unix:///x.sock"], "Runtimes": {}}
    assert [v.ok for v in pf.check_docker(down, True)] == [False, False]
    v = _by_check(pf.check_docker({"ServerVersion": "28.2", "Runtimes": {"runc": {}}}, True))
    assert v["docker"].ok and not v["nvidia-runtime"].ok
    v = _by_check(pf.check_docker({"ServerVersion": "28.2", "Runtimes": {"runc": {}, "nvidia": {}}}, True))
    assert v["nvidia-runtime"].ok
    assert "nvidia-runtime" not in _by_check(pf.check_docker({"Runtimes": {}}, False))


def test_disk_model_dataset():
    assert pf.check_disk("/d", int(150e9), 100).ok
    assert not pf.check_disk("/d", int(50e9), 100).ok
    assert not pf.check_disk("/d", None, 100).ok
    assert pf.check_model("/m", ["config.json", "model-00001.safetensors"]).ok
    assert "config.json" in pf.check_model("/m", ["a.safetensors"]).detail
    assert "weight" in pf.check_model("/m", ["config.json"]).detail
    assert not pf.check_model("/m", None).ok
    assert pf.check_dataset("random", "", False).ok
    assert not pf.check_dataset("sharegpt", "/s.json", False).ok


def test_standalone_script_with_stand_in_nvidia_smi(tmp_path):
    """The role runs this file with a bare python3 (no kdakit installed): prove it works that way."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in *compute-apps*) exit 0;; esac\n'
        "printf '0, NVIDIA H200, 580.95.05, 0, 143771\\n1, NVIDIA H200, 580.95.05, 0, 143771\\n'\n"
    )
    smi.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "w.safetensors").write_text("")
    docker = tmp_path / "docker"
    docker.write_text('#!/bin/sh\necho \'{"ServerVersion": "20.10", "Runtimes": {"runc": {}}}\'\n')
    docker.chmod(0o755)
    script = Path(pf.__file__)
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            str(script),
            "--host",
            "h9",
            "--expect-gpus",
            "4",
            "--expect-model",
            "H200",
            "--min-driver",
            "580",
            "--nvidia-smi",
            str(smi),
            "--docker",
            str(docker),
            "--no-require-nvidia-runtime",
            "--disk-path",
            str(tmp_path),
            "--min-free-gb",
            "0",
            "--model-path",
            str(model),
            "--bench-dataset",
            "random",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    fails = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert fails[0] == (
        "FAIL h9: gpu-count: nvidia-smi lists 2 GPU(s), expected 4. Fix: use a host with the "
        "profile's GPU count, or fix missing GPUs (nvidia-smi -L, dmesg | grep -i xid)"
    )
    assert fails[-1] == "FAIL h9: preflight: 1 of 10 checks failed"


def test_each_fix_that_points_elsewhere_names_the_variable():
    assert "kdakit_image_disk_path" in pf.check_disk("/d", None, 100).fix
    assert "kdakit_image_disk_path" in pf.check_disk("/d", int(5e9), 100).fix
    assert "kdakit_model_path" in pf.check_model("/m", None).fix
    assert "kdakit_sharegpt_path" in pf.check_dataset("sharegpt", "/s.json", False).fix
    assert "kdakit_docker_host" in pf.check_docker(None, False)[0].fix
