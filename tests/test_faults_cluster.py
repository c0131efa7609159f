"""Rollout faults on real SSH hosts (network namespaces, one sshd and one dockerd each) with the test-double
server and a stub kdakit image (tests/infra/stub_kdakit_image.py), one cluster shared by every case. Each
case asserts the one line the user sees, what is kept for the healthy hosts, and that nothing is left over.

Three runs share five hosts (each playbook run costs seconds, so faults that can share a run do):
- run A (h1-h3): a host unreachable at deploy, and skipped later; SIGTERM during eval and SIGINT during
  bench (the step's containers removed on every host; the re-run works); SSH lost before bench; a later
  collect that must not upgrade the lost host;
- run B (h1-h5, one deploy): Docker down on h1, weights missing on h2, a server that never answers on h3
  (bounded readiness wait), a truncated image tarball whose .sha256 matches on h4, h5 healthy; then the
  controller's results disk full during teardown;
- run C (h3, h5; one arm): A/B after a failed deploy: later steps skipped, one roll-up table, the exit status.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from kdakit.launch import hostlock
from tests.infra import dockerd, fake_server_image, images, keyscan, sshhosts, stub_kdakit_image

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REPO = Path(__file__).resolve().parent.parent
HOSTS_ROOT = images.CACHE / "fault-hosts"
MODEL_MOUNT = "/models/GLM-5.3-Flash"
# Every run's secrets, noted from the hosts' env files while each make runs (tests/infra/keyscan.py).
KEYS = keyscan.Ledger()
LINE = re.compile(r'^\s*"msg": "((h\d): [a-z0-9-]+ (?:ok|failed|unreachable|skipped).*)"$', re.M)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = sshhosts.unavailable_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("faults")
    engine = images.start_engine(stub_kdakit_image.ENGINE_ROOT)
    try:
        tag = stub_kdakit_image.build(engine)
        variant_tag = stub_kdakit_image.build(engine, variant=1)
        tarball = images.image_tarball(engine, tag)
        truncated_src = images.image_tarball(engine, variant_tag)
        stub_kdakit_image.keep_only(engine, [tag, variant_tag, fake_server_image.build(engine)])
    finally:
        engine.stop()
    # A truncated archive whose .sha256 and .id were made from the broken file, as a bad copy job leaves it.
    truncated = work / "kdakit-truncated.tar.zst"
    truncated.write_bytes(truncated_src.read_bytes()[: truncated_src.stat().st_size // 2])
    subprocess.run(f"sha256sum {truncated.name} > {truncated.name}.sha256", shell=True, cwd=work, check=True)
    Path(f"{truncated}.id").write_text(Path(f"{truncated_src}.id").read_text())

    hosts = sshhosts.up(
        work / "hosts", [(f"h{i}", 4, "NVIDIA H200") for i in (1, 2, 3, 4, 5)], engine_root=HOSTS_ROOT
    )
    try:
        for h in hosts:
            h.engine.cli("rmi", "-f", "kdakit-ci/stub:test", check=False)  # the load path runs every time
        settings = {
            "kdakit_require_nvidia_runtime": False,
            "kdakit_use_gpus": False,
            "kdakit_server_ulimits": [],
            "kdakit_min_free_gb": 1,
            "kdakit_docker_cli": dockerd.DOCKER_CLI,
            "kdakit_image": "kdakit-ci/stub:test",
            "kdakit_image_tarball": str(tarball),
            "kdakit_image_tarball_on_host": True,
            "kdakit_server_entrypoint": ["python3", "/srv/kdakit/tests/fakes/openai_server.py"],
            "kdakit_server_command": ["--host", "127.0.0.1", "--port", "30000", "--model-name", "llm"],
            "kdakit_model_mount": MODEL_MOUNT,
            "kdakit_server_ready_timeout": 30,
            "kdakit_server_shm_size": "64M",
            "kdakit_bench_dataset": "random",
        }
        inv = work / "inventory.yml"
        inv.write_text(yaml.safe_dump(sshhosts.inventory(hosts, work / "hosts", "h200")))
        (work / "settings.yml").write_text(yaml.safe_dump(settings))
        yield {"hosts": {h.name: h for h in hosts}, "inventory": inv, "work": work, "truncated": truncated,
               "tarball": tarball}  # fmt: skip
    finally:
        sshhosts.down(hosts)


def _env_roots(cluster) -> list[Path]:
    return [h.root / "state" for h in cluster["hosts"].values()]


def _run_roots(cluster) -> list[Path]:
    """Every run directory: the controller's results and each host's."""
    return [cluster["work"] / "results"] + [h.root / "results" for h in cluster["hosts"].values()]


@pytest.fixture(autouse=True)
def no_key_in_any_run_directory(cluster):
    """After each case: no file of any run (faults included) holds a key of any run."""
    yield
    keyscan.check_run_roots(KEYS, *_run_roots(cluster))


def make(cluster, target: str, *variables: str, results: Path | None = None, timeout: float = 600, env=None):
    extra = f"-e @{cluster['work'] / 'settings.yml'}"
    variables = [f"EXTRA={extra} {v[6:]}" if v.startswith("EXTRA=") else v for v in variables]
    if not any(v.startswith("EXTRA=") for v in variables):
        variables.append(f"EXTRA={extra}")
    cmd = ["make", "--no-print-directory", "-o", ".venv/.setup-done", target,
           f"INVENTORY={cluster['inventory']}", f"RESULTS={results or cluster['work'] / 'results'}",
           *variables]  # fmt: skip
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json", **(env or {}))
    proc = keyscan.run_noting(KEYS, cmd, _env_roots(cluster), timeout, cwd=REPO, env=env)
    (cluster["work"] / f"{target}-{time.monotonic_ns()}.log").write_text(proc.stdout + proc.stderr)
    return proc


def lines(proc) -> dict[str, str]:
    return {host: line for line, host in LINE.findall(proc.stdout)}


def provenance(cluster, run_id: str, host: str, arm: str = "helion", results: Path | None = None) -> dict:
    root = results or cluster["work"] / "results"
    return json.loads((root / run_id / host / arm / "provenance.json").read_text())


def containers(host) -> list[str]:
    return host.engine.cli("ps", "-a", "--format", "{{.Names}}").stdout.decode().split()


def stage(cluster, name: str, values: dict) -> str:
    """An extra-vars file (the last -e wins over settings.yml); returns the EXTRA text for it."""
    path = cluster["work"] / f"{name}.yml"
    path.write_text(yaml.safe_dump(values))
    return f"-e @{path}"


def kit_containers(host) -> list[str]:
    return sorted(c for c in containers(host) if c.startswith("kdakit-"))


def _sigint_as_at_a_terminal() -> None:
    """SIGINT at its default in the make under test, as in a terminal: a test session started with `&` from a
    script has SIGINT ignored, which its children inherit and a shell's trap then cannot take."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(
    cluster, step: str, run_id: str, sig: int, container: str, limit: str
) -> subprocess.CompletedProcess:
    key = "kdakit_bench_args" if step == "bench" else "kdakit_gsm8k_args"
    slow = stage(cluster, f"slow-{step}", {key: ["--stub-sleep", "300"]})
    extra = f"EXTRA=-e @{cluster['work'] / 'settings.yml'} --limit {limit} {slow}"
    cmd = ["make", "--no-print-directory", "-o", ".venv/.setup-done", step,
           f"INVENTORY={cluster['inventory']}", f"RESULTS={cluster['work'] / 'results'}", f"RUN_ID={run_id}",
           extra]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_sigint_as_at_a_terminal,
                            env=dict(os.environ, ANSIBLE_NOCOLOR="1"))  # fmt: skip
    hosts = [cluster["hosts"][h] for h in limit.split(":")]
    deadline = time.monotonic() + 120
    while not all(container in containers(h) for h in hosts):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.5)
    os.killpg(proc.pid, sig)  # what Ctrl-C (or a scheduler's SIGTERM) does to the whole job
    # The cleanup (containers removed on every host, then the interrupted record written) is two controller
    # plays; on a 2-core CI machine under two test workers each can take a minute. Still well under the stub's
    # 300 s: a job the signal did not stop cannot end in time.
    out, err = proc.communicate(timeout=270)
    KEYS.note(*_env_roots(cluster))
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_run_a_unreachable_interrupted_and_lost_hosts(cluster):
    h1, h2, h3 = (cluster["hosts"][n] for n in ("h1", "h2", "h3"))
    run = "RUN_ID=f-a"
    sshhosts.stop_sshd(h3)
    try:
        deploy = make(cluster, "deploy-h200", run, "EXTRA=--limit h1:h2:h3")
        got = lines(deploy)
        assert deploy.returncode != 0
        assert got["h1"] == "h1: deploy ok" and got["h2"] == "h2: deploy ok", got
        unreachable = rf"h3: deploy unreachable \(ssh: connect to host {h3.address} port 22: .+\)"
        assert re.fullmatch(unreachable, got["h3"]), got
        assert provenance(cluster, "f-a", "h3")["outcome"] == "unreachable"
        recap = re.search(r"^h3\s+: .*$", deploy.stdout, re.M)
        assert recap and " unreachable=1 " in recap[0] and " failed=0 " in recap[0], deploy.stdout[-2000:]

        # SIGTERM during eval, SIGINT during bench: the step's containers go on every host, the server stays
        for step, sig, container in (("eval-gsm8k", signal.SIGTERM, "kdakit-gsm8k-helion"),
                                     ("bench", signal.SIGINT, "kdakit-bench-helion")):  # fmt: skip
            stopped = _interrupt(cluster, step, "f-a", sig, container, "h1:h2")
            assert stopped.returncode != 0
            assert f"interrupted: removing the containers {step} started, on every host" in stopped.stderr
            for h in (h1, h2):
                assert kit_containers(h) == ["kdakit-sglang"], (step, h.name)
                folder = (
                    h.root / "results" / "f-a" / "helion" / {"eval-gsm8k": "gsm8k", "bench": "bench"}[step]
                )
                record = json.loads((folder / "interrupted.json").read_text())
                assert (record["step"], record["signal"]) == (step, signal.Signals(sig).name), record
        gsm8k = make(cluster, "eval-gsm8k", run, "EXTRA=--limit h1:h2:h3")  # the re-run works
        assert lines(gsm8k) == {
            "h1": "h1: eval-gsm8k ok",
            "h2": "h2: eval-gsm8k ok",
            "h3": "h3: eval-gsm8k skipped (after an earlier failure: deploy unreachable)",
        }

        sshhosts.stop_sshd(h2)  # SSH lost before bench
        bench = make(cluster, "bench", run, "EXTRA=--limit h1:h2:h3")
        got = lines(bench)
        assert bench.returncode != 0
        assert got["h1"] == "h1: bench ok"
        assert got["h2"].startswith(f"h2: bench unreachable (ssh: connect to host {h2.address} port 22: "), (
            got
        )
        assert got["h3"] == "h3: bench skipped (after an earlier failure: deploy unreachable)"
    finally:
        for h in (h2, h3):
            sshhosts.start_sshd(h, wait=10)
    collect = make(cluster, "collect", run, "EXTRA=--limit h1:h2:h3")
    assert lines(collect) == {"h1": "h1: collect ok", "h2": "h2: collect ok", "h3": "h3: collect ok"}
    lost = provenance(cluster, "f-a", "h2")
    assert (lost["outcome"], lost["step"]) == ("unreachable", "bench"), lost  # not upgraded by collect
    kept = cluster["work"] / "results" / "f-a" / "h1" / "helion"
    assert (
        provenance(cluster, "f-a", "h1")["outcome"] == "ok" and (kept / "diag" / "kdakit-sglang.log").exists()
    )
    down = make(cluster, "teardown", run, "EXTRA=--limit h1:h2:h3")
    assert down.returncode == 0, down.stdout[-3000:]
    for h in (h1, h2, h3):
        assert kit_containers(h) == [], h.name


def test_run_b_deploy_faults_on_four_hosts_and_a_full_results_disk(cluster, tmp_path):
    h1, h4, h5 = (cluster["hosts"][n] for n in ("h1", "h4", "h5"))
    results = tmp_path / "results"
    results.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(results)], check=True)
    serve = "['python3', '/srv/kdakit/tests/fakes/openai_server.py']"
    # never answers, but ends at teardown's SIGTERM (PID 1 without a handler waits out the 10 s stop timeout)
    never = (
        "['python3', '-c', 'import signal, sys, time;"
        " signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(3600)']"
    )
    truncated = cluster["truncated"]
    faults = stage(cluster, "faults-b", {
        "kdakit_model_path": "{{ '/nonexistent/GLM' if inventory_hostname == 'h2' else"
                             " (kdakit_host_state_dir | dirname) ~ '/model' }}",
        "kdakit_server_entrypoint": f"{{{{ {never} if inventory_hostname == 'h3' else {serve} }}}}",
        "kdakit_server_ready_timeout": 8,
        "kdakit_image": "{{ 'kdakit-ci/stub:trunc' if inventory_hostname == 'h4' else"
                        " 'kdakit-ci/stub:test' }}",
        "kdakit_image_tarball": f"{{{{ '{truncated}' if inventory_hostname == 'h4' else"
                                f" '{cluster['tarball']}' }}}}",
        "kdakit_image_tarball_on_host": "{{ inventory_hostname != 'h4' }}",
    })  # fmt: skip
    root = h1.engine.root
    h1.engine.stop()
    try:
        t0 = time.monotonic()
        # the space preflight expects 200 MiB a host arm: this run states its own size, so that the 4 MiB
        # disk lets the deploy start and fills up later, at teardown (the fault under test)
        small = {"KDAKIT_RESULTS_MB_PER_HOST_ARM": "0.1"}
        deploy = make(cluster, "deploy-h200", "RUN_ID=f-b", f"EXTRA={faults}", results=results, env=small)
        # bounded: every fault ends the host's deploy by the kit's own timeouts (207 s seen on a loaded
        # 2-core CI machine, where each controller play takes up to a minute)
        assert time.monotonic() - t0 < 300
        got = lines(deploy)
        assert got["h1"].startswith(
            "h1: deploy failed (preflight: h1: docker: cannot reach the Docker engine. Fix: start dockerd"
        ), got
        assert got["h2"].startswith(
            "h2: deploy failed (preflight: h2: model: model path /nonexistent/GLM does not exist. Fix: "
        ), got
        assert got["h3"].startswith(
            "h3: deploy failed (server: http://127.0.0.1:30000/health did not answer within 8 s while"
            " kdakit-sglang kept running."
        ), got
        staged = h4.root / "state" / "images" / truncated.name
        assert got["h4"].startswith(f"h4: deploy failed (image: {staged} is truncated or corrupt (zstd: "), (
            got
        )
        assert "removed from the host" in got["h4"] and not staged.exists()
        assert h4.engine.image_id("kdakit-ci/stub:trunc") is None
        assert got["h5"] == "h5: deploy ok"
        assert kit_containers(cluster["hosts"]["h2"]) == []  # nothing started after a failed preflight
        assert (results / "f-b" / "h3" / "helion" / "diag" / "kdakit-sglang.inspect.json").exists()
        before = {p: p.read_bytes() for p in results.rglob("provenance.json")}
        with open(results / "filler", "ab", buffering=0) as f:  # the controller's results disk is now full
            try:
                while f.write(b"\0" * 4096):
                    pass
            except OSError:
                pass
        down = make(cluster, "teardown", "RUN_ID=f-b", f"EXTRA={faults}", results=results)
        assert down.returncode != 0
        assert lines(down)["h1"] == (
            f"h1: teardown failed (cannot reach the Docker engine at {h1.engine.host} (is dockerd running?))"
        ), lines(down)
        # each host's line names its own record
        record = rf"{results}/f-b/(h\d)/helion/provenance\.json"
        full = re.findall(rf"kdakit provenance: (h\d): cannot write {record}: No space left", down.stdout)
        assert full and all(a == b for a, b in full), down.stdout[-3000:]
        assert {p: p.read_bytes() for p in results.rglob("provenance.json")} == before  # whole, unchanged
        half = [p for p in results.rglob("*") if p.suffix in (".json", ".tmp") and p.stat().st_size == 0]
        assert not half and not list(results.rglob("*.tmp"))  # no 0-byte record, no temp file left
        # the failed host's diagnostics could not be fetched: said in one line; every file the controller
        # holds is the host's whole copy, and no staging folder stays
        not_written = (
            rf"collect: \d+ file\(s\) not written \(.+ free on {results}\), the host's copies stay in h1:"
        )
        assert re.search(not_written, down.stdout), down.stdout[-3000:]
        assert not list(results.rglob(".collect-staged"))
        for name, h in cluster["hosts"].items():
            for kept in (results / "f-b" / name / "helion").rglob("*"):
                rel = kept.relative_to(results / "f-b" / name / "helion")
                if kept.is_file() and kept.name != "provenance.json":
                    assert kept.read_bytes() == (h.root / "results" / "f-b" / "helion" / rel).read_bytes(), (
                        kept
                    )
        for h in cluster["hosts"].values():
            if h is not h1:  # its engine is down
                assert kit_containers(h) == [], h.name
        KEYS.assert_clean(results)  # this run's results disk goes with the test
    finally:
        h1.engine = dockerd.start(root, netns=h1.netns)
        subprocess.run(["umount", "-l", str(results)], check=False)
    assert kit_containers(h1) == []


def test_run_c_ab_skips_after_a_failed_deploy_and_ends_with_a_rollup(cluster):
    eight = stage(
        cluster, "eight", {"kdakit_expect_gpu_count": "{{ 8 if inventory_hostname == 'h3' else 4 }}"}
    )
    # both arms are the same loop: one keeps the case short
    ab = make(cluster, "ab-h200", "RUN_ID=f-c", "ARMS=helion", f"EXTRA=--limit h3:h5 {eight}")
    assert ab.returncode != 0
    table = ab.stdout[ab.stdout.index("== h200 roll-up") :].splitlines()
    assert table[1].split() == ["host", "arm", "step", "outcome", "cause"]
    rows = {(r.split()[0], r.split()[1], r.split()[2]): r.split()[3] for r in table[2:] if r.startswith("h")}
    for arm in ("helion",):
        assert rows[("h3", arm, "deploy")] == "failed"
        assert rows[("h3", arm, "eval-gsm8k")] == rows[("h3", arm, "bench")] == "skipped"
        assert rows[("h3", arm, "collect")] == rows[("h3", arm, "teardown")] == "ok"
        for step in ("deploy", "eval-gsm8k", "bench", "collect", "teardown"):
            assert rows[("h5", arm, step)] == "ok"
    assert "rollout: 3 of 10 steps not ok" in table
    for h in (cluster["hosts"]["h3"], cluster["hosts"]["h5"]):
        assert kit_containers(h) == []


def test_run_d_a_tarball_whose_sha256_differs_is_removed_from_the_host(cluster):
    h4 = cluster["hosts"]["h4"]
    work, good = cluster["work"], cluster["tarball"]
    mismatched = work / "kdakit-mismatch.tar.zst"
    mismatched.write_bytes(good.read_bytes())
    Path(f"{mismatched}.sha256").write_text(f"{'0' * 64}  {mismatched.name}\n")  # another file's sum
    Path(f"{mismatched}.id").write_text(Path(f"{good}.id").read_text())
    staged = h4.root / "state" / "images" / mismatched.name
    faults = stage(cluster, "faults-d", {"kdakit_image": "kdakit-ci/stub:mismatch",
                                         "kdakit_image_tarball": str(mismatched),
                                         "kdakit_image_tarball_on_host": False})  # fmt: skip
    deploy = make(cluster, "deploy-h200", "RUN_ID=f-d", f"EXTRA=--limit h4 {faults}")
    assert deploy.returncode != 0
    line = lines(deploy)["h4"]
    assert line.startswith(f"h4: deploy failed (image: {staged} has sha256 "), line
    assert f"expected {'0' * 64} from {mismatched}.sha256, removed from the host. Fix: " in line
    assert not staged.exists() and mismatched.exists()  # the controller's tarball stays
    assert kit_containers(h4) == []


def test_run_e_a_host_another_run_holds_is_busy_and_a_dead_runs_lock_is_taken_over(cluster):
    h5 = cluster["hosts"]["h5"]
    lock = h5.root / "state" / "run.lock.json"
    me = socket.gethostname()
    holder = {"run_id": "other-run", "step": "bench", "controller": me, "user": "ops", "pid": os.getpid(),
              "pid_start": hostlock.process_start(os.getpid()), "boot_id": hostlock.boot_id(),
              "since": "2026-01-01T10:00:00+00:00", "refreshed": "2026-01-01T10:00:00+00:00"}  # fmt: skip
    lock.write_text(json.dumps(holder))
    try:
        busy = make(cluster, "deploy-h200", "RUN_ID=f-e", "EXTRA=--limit h5")
        assert busy.returncode != 0
        line = lines(busy)["h5"].replace("\\u2014", "—")  # the JSON callback may escape the dash
        since = "2026-01-01T10:00:00+00:00"
        assert line == f"h5: deploy failed (h5: busy — run other-run step bench by ops@{me} since {since})"
        assert kit_containers(h5) == [] and json.loads(lock.read_text()) == holder
        dead = subprocess.Popen(["true"])
        dead.wait()
        lock.write_text(json.dumps(dict(holder, pid=dead.pid, pid_start="1")))
        taken = make(cluster, "deploy-h200", "RUN_ID=f-e", "EXTRA=--limit h5")
        assert lines(taken)["h5"] == "h5: deploy ok", taken.stdout[-3000:]
        assert (
            f"warning: h5: taking over the lock of run other-run (step bench by ops@{me} since "
            f"2026-01-01T10:00:00+00:00): its process {dead.pid} on {me} is gone" in taken.stdout
        )
        assert json.loads(lock.read_text())["run_id"] == "f-e"
    finally:
        down = make(cluster, "teardown", "RUN_ID=f-e", "EXTRA=--limit h5")
    assert down.returncode == 0 and not lock.exists()  # teardown releases it
    assert kit_containers(h5) == []
