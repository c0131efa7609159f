"""`kdakit serve` records the launch and execs exactly the planned command with the planned environment."""

import json
import os
import stat
import subprocess
import sys

from kdakit.launch import access, plan

API_KEY = "test-api-key-" + "a" * 24
ADMIN_KEY = "test-admin-key-" + "b" * 24
KEYS = {access.API_KEY_ENV: API_KEY, access.ADMIN_API_KEY_ENV: ADMIN_KEY}


def fake_sglang(bin_dir, dump):
    bin_dir.mkdir()
    exe = bin_dir / "sglang"
    exe.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(dump)!r}, 'w'))\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def serve(tmp_path, *args, env=None):
    """`kdakit serve` with the run's keys in its environment (as the env file gives them), unless env says."""
    return subprocess.run(
        [sys.executable, "-m", "kdakit", "serve", *args, "--results", str(tmp_path / "run")],
        env={**KEYS, **os.environ} if env is None else env,
        capture_output=True,
        text=True,
    )


def test_serve_records_then_execs_the_plan(tmp_path):
    dump = tmp_path / "exec.json"
    fake_sglang(tmp_path / "bin", dump)
    env = {
        **os.environ,
        **KEYS,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "KDAKIT_IMAGE_ID": "sha256:abc",
    }
    r = serve(tmp_path, "--sku", "h200", "--arm", "helion-upstream", "--set", "--port=9001", env=env)
    assert r.returncode == 0, r.stderr
    expected = plan.render("h200", "helion-upstream", settings=["--port=9001"])
    record = json.loads((tmp_path / "run" / "server-command.json").read_text())
    key_flags = ["--api-key", "<redacted>", "--admin-api-key", "<redacted>"]
    assert record["argv"] == expected.argv + key_flags and record["env"] == expected.env
    assert record["access"] == "keys"
    assert record["image_id"] == "sha256:abc" and record["pins"]["packages"]["sglang"] == "0.5.23"
    ran = json.loads(dump.read_text())
    # SGLang takes the keys only as flags: they are in the argv it runs with, nowhere in the record or output.
    assert ran["argv"] == expected.argv[1:] + ["--api-key", API_KEY, "--admin-api-key", ADMIN_KEY]
    assert {k: ran["env"][k] for k in expected.env} == expected.env
    for text in ((tmp_path / "run" / "server-command.json").read_text(), r.stdout, r.stderr):
        assert API_KEY not in text and ADMIN_KEY not in text


def test_serve_refuses_to_start_an_open_server_unless_asked(tmp_path):
    dump = tmp_path / "exec.json"
    fake_sglang(tmp_path / "bin", dump)
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env["PATH"] = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    r = serve(tmp_path, "--sku", "h200", "--arm", "triton", env=env)
    assert r.returncode == 2 and not dump.exists()
    assert r.stderr.strip().splitlines()[-1] == (
        "kdakit serve: error: no API key in $OPENAI_API_KEY and no admin key in $KDAKIT_ADMIN_API_KEY "
        "(the playbooks put both in the server's env file); pass --open to serve without keys on purpose"
    )
    r = serve(tmp_path, "--sku", "h200", "--arm", "triton", "--open", env=env)
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "run" / "server-command.json").read_text())
    assert record["access"] == "open" and "--api-key" not in record["argv"]
    assert "--api-key" not in json.loads(dump.read_text())["argv"]


def test_a_key_given_with_set_is_redacted_in_the_record(tmp_path):
    r = serve(tmp_path, "--sku", "h200", "--arm", "triton", "--open", "--set", f"--api-key={API_KEY}",
              "--dry-run")  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "run" / "server-command.json").read_text()
    assert API_KEY not in text and API_KEY not in r.stdout + r.stderr


def test_serve_refuses_an_invalid_flag_before_recording(tmp_path):
    r = serve(tmp_path, "--sku", "h200", "--arm", "helion", "--set", "--no-such-flag")
    assert r.returncode == 2 and "--no-such-flag is not a server argument" in r.stderr
    assert not (tmp_path / "run").exists()


def test_serve_without_sglang_on_path_says_where_to_run(tmp_path):
    env = {**os.environ, **KEYS, "PATH": str(tmp_path)}
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
        **KEYS,
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
