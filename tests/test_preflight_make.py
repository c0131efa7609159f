"""`make preflight` and the gate in front of `make reproduce`, on this machine (CI has no GPUs): one table of
checks within 30 s, a non-zero exit and nothing heavy started; an inventory without hosts for the SKU is one
line; a saved image tarball built from another source tree is refused with one line (REBUILD=0)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdakit.checks import preflight as pf

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "images"))
import build_steps  # noqa: E402

# A failing preflight is one Ansible play on localhost: seconds on a quiet machine, 47 s seen on a 2-core one
# under two test sessions; an image build or pull takes many minutes.
PREFLIGHT_BOUND_S = 90


def make(*args: str, timeout: float = 180) -> tuple[subprocess.CompletedProcess, float]:
    if not (Path(sys.executable).parent / "ansible-playbook").exists():
        pytest.skip("ansible-playbook not installed (pip install -e '.[controller]')")
    t0 = time.monotonic()
    # -o: the venv is made already (never let a test run `make setup`)
    cmd = ["make", "--no-print-directory", "-o", ".venv/.setup-done", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def test_preflight_without_gpus_is_one_table_and_fails_fast(tmp_path):
    proc, seconds = make(
        "preflight", "SKU=h200", "PREFLIGHT_BUILD=1", "EXTRA=-e kdakit_nvidia_smi=/nonexistent"
    )
    assert proc.returncode != 0 and seconds < PREFLIGHT_BOUND_S
    out = proc.stdout.splitlines()
    assert out[0].split() == ["host", "check", "status", "value", "fix"]
    rows = {(line.split()[0], line.split()[1]): line.split()[2] for line in out[1:-1]}
    for check in ("gpus", "docker", "nvidia-runtime", "disk", "model", "bench-data"):
        assert ("localhost", check) in rows, (check, proc.stdout)
    assert rows[("localhost", "gpus")] == "FAIL" and ("controller", "builder") in rows
    assert out[-1].startswith("preflight: ") and out[-1].endswith("0 of 1 host(s) ready")


def test_an_inventory_without_hosts_for_the_sku_is_one_line():
    proc, _ = make("preflight", "SKU=b200")
    assert proc.returncode != 0
    assert proc.stdout.strip() == (
        "preflight: the inventory playbooks/inventories/localhost.yml has no hosts in group b200; list them"
        " in a copy of playbooks/inventories/examples/b200.yml and pass INVENTORY=path/to/it"
    )


def test_reproduce_stops_at_preflight_before_any_build(tmp_path):
    proc, seconds = make("reproduce", f"FILE={tmp_path / 'kdakit-h200.tar.zst'}", "DOCKER=/bin/false",
                         "EXTRA=-e kdakit_nvidia_smi=/nonexistent")  # fmt: skip
    assert proc.returncode != 0 and seconds < PREFLIGHT_BOUND_S
    assert "preflight: stopping before any image build, pull or load" in proc.stdout
    assert "docker" not in proc.stderr.lower() and "full image build" not in proc.stdout


def test_reproduce_refuses_a_tarball_of_another_source(tmp_path):
    tarball = tmp_path / "kdakit-h200.tar.zst"
    tarball.write_bytes(b"\x28\xb5\x2f\xfd")
    Path(f"{tarball}.source").write_text("0123456789abcdef" * 4 + "\n")
    proc, _ = make("reproduce", f"FILE={tarball}", "REBUILD=0")
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.splitlines()[0].startswith(
        f"image: {tarball} was built from source 0123456789ab, this tree is "
    )
    assert "refusing (REBUILD=0)" in proc.stderr


def test_source_hash_follows_the_build_context(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(REPO / "images", root / "images", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "pins.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    (root / "kdakit").mkdir()
    (root / "kdakit" / "a.py").write_text("x = 1\n")
    first = build_steps.source_hash(root, ["h200"])
    assert build_steps.source_hash(root, ["h200"]) == first
    assert build_steps.source_hash(root, ["b200"]) != first
    (root / "kdakit" / "__pycache__").mkdir()
    (root / "kdakit" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (root / "notes.txt").write_text("not in the image\n")
    assert build_steps.source_hash(root, ["h200"]) == first  # the dockerignore leaves these out
    (root / "kdakit" / "a.py").write_text("x = 2\n")
    assert build_steps.source_hash(root, ["h200"]) != first


def test_builder_check():
    assert pf.check_builder("20.10.24+dfsg1", None).ok
    assert pf.check_builder("28.2.2", "github.com/docker/buildx v0.23.0 28c90ea").ok
    no_buildx = pf.check_builder("28.2.2", None)
    assert not no_buildx.ok and "buildx" in no_buildx.fix
    assert not pf.check_builder(None, None).ok


def test_host_lines_parse_back():
    verdicts = [pf.Verdict("gpu-count", False, "nvidia-smi lists 2 GPU(s), expected 4", "use a host"),
                pf.Verdict("disk", True, "9.0 GB free")]  # fmt: skip
    text = "\n".join(v.line("h1") for v in verdicts) + "\nFAIL h1: preflight: 1 of 2 checks failed\n"
    assert pf.parse_lines(text) == [verdicts[0], pf.Verdict("disk", True, "9.0 GB free", "")]


# ("pr", 1) adds nothing to "" (one visit) and "rigorous" (the protocol passed); the sequential protocol's
# loop has its own test below
@pytest.mark.parametrize(("protocol", "visits"), [("", 1), ("rigorous", 5)])
def test_ab_visits_the_arms_interleaved_as_the_bench_protocol_asks(tmp_path, protocol, visits):
    """ab-* runs every step per arm once for `pr`; for `rigorous` its `repeats` visits per arm, interleaved
    (triton, helion, triton, ...), GSM8K on the first visit only, the protocol passed to every step; unset,
    nothing is passed, so the inventory's or EXTRA's protocol holds."""
    log = tmp_path / "calls.log"
    fake = (
        tmp_path / "ansible-playbook"
    )  # logs each step's playbook and what the controller's facts file says
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\nargs = sys.argv[1:]\n"
        "values = [json.load(open(args[i + 1][1:])) for i, a in enumerate(args) if a == '-e' and"
        " args[i + 1].startswith('@')][0]\n"
        f"open({str(log)!r}, 'a').write(json.dumps([os.path.basename(args[0]), values['kdakit_arm'],"
        " values.get('kdakit_bench_protocol'), values.get('kdakit_visit')]) + '\\n')\n"
    )
    fake.chmod(0o755)
    proc, _ = make(
        "ab-h200", "PREFLIGHT_DONE=1", f"BENCH_PROTOCOL={protocol}", f"ANSIBLE_PLAYBOOK={fake}",
        f"RESULTS={tmp_path / 'results'}", "RUN_ID=t1",
    )  # fmt: skip
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    per_visit = ["deploy", "bench", "collect", "teardown"]
    expected = []
    for visit in range(visits):
        for arm in ("triton", "helion"):
            steps = per_visit[:1] + ["eval-gsm8k"] * (visit == 0) + per_visit[1:]
            expected += [[f"{step}.yml", arm, protocol or None, visit + 1] for step in steps]
    assert rows == expected, proc.stdout + proc.stderr


def test_deploy_refuses_when_the_controller_cannot_hold_the_results(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "LATEST").write_text("earlier-run\n")
    env_var = "KDAKIT_RESULTS_MB_PER_HOST_ARM=100000000"  # 95 TiB a host arm: no disk here holds that
    proc, seconds = make("deploy-h200", f"RESULTS={results}", "RUN_ID=new-run", env_var)
    assert proc.returncode != 0 and seconds < PREFLIGHT_BOUND_S
    line = (proc.stdout + proc.stderr).strip().splitlines()
    refusal = [x for x in line if x.startswith("controller: ")]
    assert len(refusal) == 1, proc.stdout + proc.stderr
    assert refusal[0].startswith(f"controller: results {results} has ")
    assert (
        "the run needs about 97656.2 GiB (1 host(s) x 1 arm(s)); free space there or pass RESULTS="
        in (refusal[0])
    )
    assert (results / "LATEST").read_text() == "earlier-run\n"  # nothing written, nothing started
    assert "PLAY [" not in proc.stdout


def test_ab_with_a_sequential_protocol_visits_until_the_stopping_rule_says_stop(tmp_path):
    """BENCH_PROTOCOL=decisive: after each visit (both arms collected) the stopping rule reads the run's
    records; the loop ends when it says stop (here: the records' own budget of 3 visits), not after the
    protocol file's 20."""
    import random

    from kdakit.facts.protocols import PROTOCOLS_FILE, load_protocols, protocol_definition
    from kdakit.records import results

    protocol = load_protocols()["decisive"]
    kept = {**protocol_definition(protocol, PROTOCOLS_FILE), "max_visits": 3, "min_visits": 3}
    staged, rng = tmp_path / "staged", random.Random(5)
    run = {"index": 1, "completed": 8, "num_prompts": 8, "output_throughput": 1000.0,
           "total_throughput": 5e3, "duration_s": 10.0, "raw_file": "x/run1.jsonl"}  # fmt: skip
    for visit in range(1, 5):  # what each visit's collect brings back (a 4th: never reached)
        for k, arm in enumerate(("triton", "helion")):
            points = [
                {
                    "input_len": p.input_len,
                    "output_len": p.output_len,
                    "concurrency": p.concurrency,
                    "num_prompts": p.num_prompts,
                    "status": "ok",
                    "runs": [run],
                    "median_output_throughput": 1000.0 * (1 + rng.gauss(0, 0.05)),
                }
                for p in protocol.points
            ]
            metrics = {"dataset": "random-ids", "runs_per_point": 2, "visit": visit, "points": points,
                       "protocol_definition": kept}  # fmt: skip
            record = results.new_record("serving", run_id="t1", host="h1", sku="H200", arm=arm,
                                        protocol="decisive", metrics=metrics,
                                        provenance={"kdakit_version": "t", "git_sha": None, "image_id": None,
                                                    "pins": {}, "gpus": [], "driver": None,
                                                    "server_command": None})  # fmt: skip
            record["created"] = f"2026-12-01T{visit:02d}:{k:02d}:00+00:00"
            results.write_result(staged / str(visit) / "h1" / arm / f"serving-{visit}.result.json", record)
    log, out = tmp_path / "calls.log", tmp_path / "results" / "t1"
    fake = (
        tmp_path / "ansible-playbook"
    )  # logs each step's visit; helion's collect brings that visit's records
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, shutil, sys\nargs = sys.argv[1:]\n"
        "values = [json.load(open(args[i + 1][1:])) for i, a in enumerate(args) if a == '-e' and"
        " args[i + 1].startswith('@')][0]\nvisit = str(values['kdakit_visit'])\n"
        f"open({str(log)!r}, 'a').write(visit + '\\n')\n"
        "if os.path.basename(args[0]) == 'collect.yml' and values['kdakit_arm'] == 'helion':\n"
        f"    shutil.copytree(os.path.join({str(staged)!r}, visit), {str(out)!r}, dirs_exist_ok=True)\n"
    )
    fake.chmod(0o755)
    proc, _ = make("ab-h200", "PREFLIGHT_DONE=1", "BENCH_PROTOCOL=decisive", f"ANSIBLE_PLAYBOOK={fake}",
                   f"RESULTS={tmp_path / 'results'}", "RUN_ID=t1", timeout=120)  # fmt: skip
    visits = set(log.read_text().split())
    assert visits == {"1", "2", "3"}, proc.stdout + proc.stderr
    assert "== decisive after visit 3: budget of 3 visits spent: " in proc.stdout, proc.stdout


@pytest.mark.parametrize("limit", ["--limit h1", "-l h1", "--limit=h1"])
def test_the_space_check_counts_the_hosts_the_limit_selects(tmp_path, limit):
    inventory = tmp_path / "two.yml"
    inventory.write_text(
        "h200:\n  hosts:\n    h1: {ansible_connection: local}\n    h2: {ansible_connection: local}\n"
    )
    env_var = "KDAKIT_RESULTS_MB_PER_HOST_ARM=100000000"
    proc, _ = make("deploy-h200", f"INVENTORY={inventory}", f"RESULTS={tmp_path / 'results'}", "RUN_ID=r",
                   env_var, f"EXTRA={limit}")  # fmt: skip
    (refusal,) = [x for x in proc.stdout.splitlines() if x.startswith("controller: ")]
    assert "(1 host(s) x 1 arm(s))" in refusal, refusal
    whole, _ = make("deploy-h200", f"INVENTORY={inventory}", f"RESULTS={tmp_path / 'results'}", "RUN_ID=r",
                    env_var)  # fmt: skip
    assert "(2 host(s) x 1 arm(s))" in whole.stdout, whole.stdout


def test_reproduce_says_when_the_next_step_is_a_full_image_build(tmp_path):
    # a preflight that passes (KDAKIT=/bin/true) and a builder that fails at once (DOCKER=/bin/false)
    tarball = tmp_path / "kdakit-h200.tar.zst"
    proc, _ = make("reproduce", f"FILE={tarball}", "KDAKIT=/bin/true", "DOCKER=/bin/false")
    assert proc.returncode != 0
    first = proc.stdout.splitlines()[0]
    full = "the next step is a full image build (make image image-save SKU=h200: pulls "
    assert first.startswith(f"image: no {tarball} yet: {full}"), first
    assert first.endswith("Ctrl-C now to stop, or pass FILE=<a saved tarball>")


def test_slurm_preflight_without_a_site_says_which_file_to_create(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text("")
    for settings, note in (("SLURM_SETTINGS=", True), (f"SLURM_SETTINGS={site}", False)):
        # KDAKIT=/bin/true: the Slurm side (kdakit slurm preflight) is tests/test_slurm.py's
        proc, _ = make("slurm-preflight", "KDAKIT=/bin/true", settings, f"RESULTS={tmp_path / 'results'}")
        assert proc.returncode == 0, proc.stderr
        said = "create slurm/site.toml from slurm/site.example.toml (or pass SLURM_SETTINGS=<file>)"
        assert (said in proc.stderr) is note, proc.stderr
