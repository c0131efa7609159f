"""`kdakit serve` records the launch and execs exactly the planned command with the planned environment."""

import json
import os
import stat
import subprocess
import sys

from kdakit import plan


def fake_sglang(bin_dir, dump):
    bin_dir.mkdir()
    exe = bin_dir / "sglang"
    exe.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(dump)!r}, 'w'))\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def serve(tmp_path, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "kdakit", "serve", *args, "--results", str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
    )


def test_serve_records_then_execs_the_plan(tmp_path):
    dump = tmp_path / "exec.json"
    fake_sglang(tmp_path / "bin", dump)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "KDAKIT_IMAGE_ID": "sha256:abc"}
    r = serve(tmp_path, "--sku", "h200", "--arm", "helion-upstream", "--set", "--port=9001", env=env)
    assert r.returncode == 0, r.stderr
    expected = plan.render("h200", "helion-upstream", settings=["--port=9001"])
    record = json.loads((tmp_path / "run" / "server-command.json").read_text())
    assert record["argv"] == expected.argv and record["env"] == expected.env
    assert record["image_id"] == "sha256:abc" and record["pins"]["packages"]["sglang"] == "0.5.23"
    ran = json.loads(dump.read_text())
    assert ran["argv"] == expected.argv[1:]
    assert {k: ran["env"][k] for k in expected.env} == expected.env


def test_serve_refuses_an_invalid_flag_before_recording(tmp_path):
    r = serve(tmp_path, "--sku", "h200", "--arm", "helion", "--set", "--no-such-flag")
    assert r.returncode == 2 and "--no-such-flag is not a server argument" in r.stderr
    assert not (tmp_path / "run").exists()


def test_serve_without_sglang_on_path_says_where_to_run(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    r = serve(tmp_path, "--sku", "b200", "--arm", "triton", env=env)
    assert r.returncode == 2 and "inside the kdakit image" in r.stderr


def test_serve_stops_at_startup_when_the_helion_kernels_do_not_import(tmp_path):
    """A Helion arm whose kernels cannot import (here: a broken helion shadows the real one) never starts
    SGLang: one line names the module and the cause."""
    dump = tmp_path / "exec.json"
    fake_sglang(tmp_path / "bin", dump)
    broken = tmp_path / "shadow" / "helion"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('this helion is broken')\n")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "PYTHONPATH": f"{tmp_path / 'shadow'}:{os.environ.get('PYTHONPATH', '')}",
    }
    r = serve(tmp_path, "--sku", "h200", "--arm", "helion", env=env)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last == (
        "kdakit serve: error: kdakit: decode kernel module kdakit.kernels.decode "
        "(KDAKIT_HELION_KERNELS=kdakit) does not import: ImportError: this helion is broken"
    )
    assert not dump.exists(), "SGLang was started"
