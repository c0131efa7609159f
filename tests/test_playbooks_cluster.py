"""The playbooks against a real local cluster: 3 SSH hosts (netns + veth + sshd), each with its own dockerd,
a stand-in nvidia-smi (h1, h2: 4 x H200; h3: 2 x H200), the test-double server image and the kdakit image
(tests/infra/images.py, plus the benchmark client's imports that SGLang's real image carries:
tests/infra/bench_client_image.py). h1's and h2's engines start on a copy of the image-building engine's
image store (tests/infra/dockerd.py copy_images: its layers hard-linked, seconds where saving and loading the
7 GB image took minutes), so the image role finds the kdakit image present (registry source: nothing to
pull). The role's tarball path runs here for the small server image (copy, sha256 and load on every host),
and in tests/test_faults_cluster.py for a stub kdakit image as the main image (a tarball on the host; a
truncated and a mismatched one).

Flow, through the make targets: deploy (h3 fails preflight, the others deploy) -> deploy again (nothing
changes) -> eval-gsm8k (SGLang's run_eval in the image) -> bench (SGLang's benchmark client in the image)
-> collect -> teardown (twice) -> kdakit report on the collected tree. Then a second run whose server
container exits at start on h2: reported, its log collected, while h1 deploys.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kdakit.launch import access
from kdakit.report.model import load_published
from tests.infra import (
    dockerd,
    images,
    keyscan,
    prebuild,
    slurmcluster,
    sshhosts,
)

_spec = importlib.util.spec_from_file_location(
    "kdakit_test_tiny_tokenizer_pb", Path(__file__).parent / "fakes" / "tiny_tokenizer.py"
)
tiny_tokenizer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny_tokenizer)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REPO = Path(__file__).resolve().parent.parent
HOSTS_ROOT = images.CACHE / "playbook-hosts"  # the hosts' engines (h1 and h2 start on copied image stores)
SECRET = "hf_kdakitTestSecret0123456789"
MODEL_MOUNT = "/models/GLM-5.3-Flash"
DEPLOY_REF = "kdakit-ci/deploy:ci"  # the kdakit image plus the benchmark client's imports, as hosts run it
BENCH_PROTOCOLS = """
[protocol.smoke]
source = "kdakit CI"
backend = "sglang"
dataset = "random-ids"
random_range_ratio = 1.0
seed = 42
temperature = 0.0
runs = 1
warmup = false
metric = "output_throughput"
points = [{ input_len = 48, output_len = 12, concurrency = 2, num_prompts = 4 }]
"""  # must never reach a log or a result
# Every secret any run of this module wrote into an env file (noted while each make runs), and the HF token.
KEYS = keyscan.Ledger(SECRET)
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def _skip_reason() -> str | None:
    if sys.platform != "linux":
        return "Linux only"
    return sshhosts.unavailable_reason()


@pytest.fixture(scope="module")
def built():
    """The images from the image-building engine (cached): for h1 and h2 a data root each holding the kdakit
    image tagged DEPLOY_REF, and the fake server's tarball and tag."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    t0 = time.monotonic()
    engine = images.start_engine()
    try:
        client_tag, fake_tag, fake_tar = prebuild.cluster_images(engine)
        engine.cli("tag", client_tag, DEPLOY_REF)
    finally:
        engine.stop()
    # beside the hosts' engine roots: moved into them as they start (one file system)
    seeds = HOSTS_ROOT / f"seeds-{os.getpid()}"
    try:
        data_roots = {name: dockerd.copy_images(images.ENGINE_ROOT, seeds / name) for name in ("h1", "h2")}
        print(f"images ready in {time.monotonic() - t0:.1f} s")
        yield data_roots, fake_tar, fake_tag
    finally:
        shutil.rmtree(seeds, ignore_errors=True)  # what no host took


@pytest.fixture(scope="module")
def cluster(built, tmp_path_factory):
    data_roots, fake_tar, fake_tag = built
    work = tmp_path_factory.mktemp("cluster")
    hosts = sshhosts.up(
        work / "hosts",
        [("h1", 4, "NVIDIA H200"), ("h2", 4, "NVIDIA H200"), ("h3", 2, "NVIDIA H200")],
        engine_root=HOSTS_ROOT,
        engine_data_from=data_roots,
    )
    try:
        for h in hosts:  # the small server image goes through copy + sha256 + load on every run
            h.engine.cli("rmi", "-f", "kdakit-ci/fake-sglang:test", check=False)
        for h in hosts:  # the bench client reads the tokenizer from the model folder, as on a real host
            tiny_tokenizer.build(h.model_path)
        protocols = work / "bench-protocols.toml"
        protocols.write_text(BENCH_PROTOCOLS)
        settings = {
            "kdakit_require_nvidia_runtime": False,
            "kdakit_use_gpus": False,
            "kdakit_server_ulimits": [],  # raising memlock needs CAP_SYS_RESOURCE, which CI lacks
            "kdakit_min_free_gb": 1,
            "kdakit_docker_cli": dockerd.DOCKER_CLI,
            "kdakit_image": DEPLOY_REF,
            "kdakit_image_source": "registry",  # h1 and h2 hold it already: nothing is pulled
            "kdakit_extra_images": [
                {
                    "ref": "kdakit-ci/fake-sglang:test",
                    "source": "tarball",
                    "tarball": str(fake_tar),
                    "tarball_on_host": False,
                }
            ],
            "kdakit_server_image": "kdakit-ci/fake-sglang:test",
            "kdakit_server_entrypoint": ["python3", "/srv/kdakit/tests/fakes/openai_server.py"],
            "kdakit_server_command": [
                "--host",
                "127.0.0.1",
                "--port",
                "30000",
                "--error-rate",
                "0.1",
                "--model-name",
                "llm",
                "--server-arg",
                f"model_path={MODEL_MOUNT}",
                # Started in place of `kdakit serve`, the double reads the run's keys from the env file's
                # variables (kdakit serve would pass them as SGLang's --api-key/--admin-api-key).
                "--api-key-env",
                access.API_KEY_ENV,
                "--admin-api-key-env",
                access.ADMIN_API_KEY_ENV,
                "--enable-metrics",
            ],
            "kdakit_model_mount": MODEL_MOUNT,
            "kdakit_server_ready_timeout": 60,
            "kdakit_server_shm_size": "64M",
            "kdakit_hf_token": SECRET,
            "kdakit_bench_dataset": "random",
            # The whole pr protocol (SGLang's run_eval, test rows 5-104, two runs), 10 of 100 answered wrong
            # (error rate 0.1): 0.9 a run, set beside the published H200 helion runs in the report.
            "kdakit_gsm8k_args": ["--threshold", "0.85"],
            "kdakit_bench_protocol": "smoke",
            "kdakit_bench_args": ["--protocols", "/config/bench-protocols.toml"],
            "kdakit_bench_protocols_file": str(protocols),
            "kdakit_bench_volumes": [f"{protocols}:/config/bench-protocols.toml:ro"],
            "kdakit_preflight_allreduce": True,
            "kdakit_allreduce_args": [
                "--backend",
                "gloo",
                "--world-size",
                "2",
                "--sizes",
                "4K,64K",
                "--iters",
                "3",
            ],
        }
        inv = work / "inventory.yml"
        inv.write_text(yaml.safe_dump(sshhosts.inventory(hosts, work / "hosts", "h200")))
        (work / "settings.yml").write_text(yaml.safe_dump(settings))
        yield {"hosts": hosts, "inventory": inv, "results": work / "results", "work": work}
    finally:
        sshhosts.down(hosts)
        sshhosts.down(hosts)  # idempotent


def _env_roots(cluster) -> list[Path]:
    """Where the runs' env files are: each host's state folder, and the results (Slurm's run state)."""
    return [h.root / "state" for h in cluster["hosts"]] + [cluster["results"]]


def _run_roots(cluster) -> list[Path]:
    """Every run directory: the controller's results and each host's."""
    return [cluster["results"]] + [h.root / "results" for h in cluster["hosts"]]


@pytest.fixture(autouse=True)
def no_key_in_any_run_directory(cluster):
    """After each test: no file of any run (Ansible or Slurm, faults included) holds a key of any run."""
    yield
    keyscan.check_run_roots(KEYS, *_run_roots(cluster))


def make(cluster, target: str, *variables: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`make TARGET` from the repo root, as a user runs it (setup is done: -o keeps make from redoing it)."""
    extra = f"-e @{cluster['work'] / 'settings.yml'}"
    variables = [f"EXTRA={extra} {v[6:]}" if v.startswith("EXTRA=") else v for v in variables]
    if not any(v.startswith("EXTRA=") for v in variables):
        variables.append(f"EXTRA={extra}")
    cmd = ["make", "--no-print-directory", "-o", ".venv/.setup-done", target,
           f"INVENTORY={cluster['inventory']}", f"RESULTS={cluster['results']}", *variables]  # fmt: skip
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", PYTHONUNBUFFERED="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks")  # fmt: skip
    t0 = time.monotonic()
    proc = keyscan.run_noting(KEYS, cmd, _env_roots(cluster), timeout, cwd=REPO, env=env)
    proc.seconds = time.monotonic() - t0
    log = cluster["work"] / f"{target}-{int(t0)}.log"
    log.write_text(proc.stdout + proc.stderr)
    print(f"make {target}: rc={proc.returncode} in {proc.seconds:.1f} s (log {log})")
    assert SECRET not in proc.stdout + proc.stderr, f"the HF token leaked into the output of make {target}"
    return proc


def recap(proc) -> dict[str, dict[str, int]]:
    return {
        m[1]: {"ok": int(m[2]), "changed": int(m[3]), "unreachable": int(m[4]), "failed": int(m[5])}
        for m in RECAP.finditer(proc.stdout)
    }


def summary_lines(proc) -> list[str]:
    outcome = "(?:ok|failed|unreachable|skipped)"
    return re.findall(rf'^\s*"msg": "(h\d: [a-z0-9-]+ {outcome}.*)"$', proc.stdout, re.M)


def test_full_flow_and_faults(cluster):
    run_id = "ci-flow"
    results = cluster["results"]

    deploy = make(cluster, "deploy-h200", f"RUN_ID={run_id}", "ARM=helion")
    assert deploy.returncode != 0, "h3 has 2 GPUs: the deploy must report a failure"
    r = recap(deploy)
    assert r["h1"]["failed"] == 0 and r["h2"]["failed"] == 0, "\n".join(
        summary_lines(deploy) + [_engine_log_tail(h) for h in cluster["hosts"][:2]]
    )
    assert r["h3"]["failed"] == 1
    lines = summary_lines(deploy)
    assert "h1: deploy ok" in lines and "h2: deploy ok" in lines, lines
    h3 = [line for line in lines if line.startswith("h3:")]
    assert (
        h3 and "h3: deploy failed (preflight: h3: gpu-count: nvidia-smi lists 2 GPU(s), expected 4" in h3[0]
    )
    assert "Fix:" in h3[0]
    # The failed host's diagnostics and outcome were collected anyway.
    h3_dir = results / run_id / "h3" / "helion"
    prov = json.loads((h3_dir / "provenance.json").read_text())
    assert prov["outcome"] == "failed" and "gpu-count" in prov["cause"]
    assert "Attached GPUs : 2" in (h3_dir / "diag" / "nvidia-smi-q.txt").read_text()
    # The optional all-reduce ran inside the kdakit image on the deployed hosts.
    assert (
        "PASS"
        in (cluster["hosts"][0].root / "results" / run_id / "helion" / "diag" / "allreduce.json").read_text()
    )
    env_file = cluster["hosts"][0].root / "state" / "kdakit-sglang.env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    # The run's keys, made on the controller, reach the host only in that file; without them the server
    # refuses the request path (from the host itself: it listens on 127.0.0.1 inside h1's namespace).
    run_keys = access.parse_env_text(env_file.read_text())
    h2_keys = access.parse_env_text((cluster["hosts"][1].root / "state" / "kdakit-sglang.env").read_text())
    keys = [
        env[name] for env in (run_keys, h2_keys) for name in (access.API_KEY_ENV, access.ADMIN_API_KEY_ENV)
    ]
    assert run_keys[access.KEYS_RUN_ENV] == run_id and all(len(k) >= 40 for k in keys)
    assert len(set(keys)) == 4  # each host its own
    for text in (deploy.stdout, deploy.stderr):
        assert not any(k in text for k in keys), "a key leaked into the deploy's output"

    again = make(
        cluster, "deploy-h200", f"RUN_ID={run_id}", "ARM=helion", "EXTRA=-e kdakit_preflight_allreduce=false"
    )
    r = recap(again)
    assert r["h1"]["changed"] == 0 and r["h2"]["changed"] == 0, again.stdout[-4000:]
    assert access.parse_env_text(env_file.read_text()) == run_keys  # same run, same keys
    # (h3 is left out: its provenance.json records the controller's git HEAD, which may move between runs.)

    # DRY_RUN=1 for another run id: check mode reports the changes (new run folder, new server container)
    # and makes none: the running container still carries the first run's id.
    dry = make(cluster, "deploy-h200", "RUN_ID=ci-dry", "ARM=helion", "DRY_RUN=1",
               "EXTRA=-e kdakit_preflight_allreduce=false")  # fmt: skip
    assert recap(dry)["h1"]["changed"] > 0, dry.stdout[-3000:]
    labels = cluster["hosts"][0].engine.cli("inspect", "--format", "{{json .Config.Labels}}", "kdakit-sglang")
    assert json.loads(labels.stdout)["io.kdakit.run-id"] == run_id
    assert not (cluster["hosts"][0].root / "results" / "ci-dry").exists()

    gsm8k = make(cluster, "eval-gsm8k", f"RUN_ID={run_id}", "ARM=helion", "HOSTS=h1:h2")
    assert gsm8k.returncode == 0, gsm8k.stdout[-4000:]
    bench = make(cluster, "bench", f"RUN_ID={run_id}", "ARM=helion", "HOSTS=h1:h2")
    assert bench.returncode == 0, bench.stdout[-4000:]
    collect = make(cluster, "collect", f"RUN_ID={run_id}", "ARM=helion", "HOSTS=h1:h2")
    assert collect.returncode == 0, collect.stdout[-4000:]
    for name in ("h1", "h2"):
        host_dir = results / run_id / name / "helion"
        records = sorted(host_dir.rglob("*.result.json"))
        by_kind = {json.loads(p.read_text())["kind"]: json.loads(p.read_text()) for p in records}
        assert sorted(by_kind) == ["gsm8k", "serving"], records
        gsm8k_metrics = by_kind["gsm8k"]["metrics"]
        assert gsm8k_metrics["n_questions"] == 100 and gsm8k_metrics["accuracy_numeric"] == pytest.approx(0.9)
        assert not gsm8k_metrics.get("limited")
        assert by_kind["gsm8k"]["host"] == name and by_kind["gsm8k"]["run_id"] == run_id
        assert "kdakit-fake-openai listening" in (host_dir / "diag" / "kdakit-sglang.log").read_text()
        inspect = json.loads((host_dir / "diag" / "kdakit-sglang.inspect.json").read_text())
        assert inspect[0]["HostConfig"]["IpcMode"] == "host"
        image_id = json.loads((host_dir / "provenance.json").read_text())["image_id"]
        assert image_id.startswith("sha256:")
        # eval and bench ran in that image and say so in their records
        assert {r["provenance"]["image_id"] for r in by_kind.values()} == {image_id}
        # Every measured run was checked against the server's own request counter.
        serving = by_kind["serving"]["metrics"]["points"]
        assert all(r["requests"]["foreign"] == 0 for p in serving for r in p["runs"])
        assert by_kind["gsm8k"]["metrics"]["requests"]["foreign"] == 0
        prov = json.loads((host_dir / "provenance.json").read_text())
        assert prov["server_access"].startswith("kit only: 127.0.0.1")
    for proc in (gsm8k, bench, collect):
        assert not any(k in proc.stdout + proc.stderr for k in keys), "a key leaked into a step's output"
    for path in results.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"the HF token leaked into {path}"
            assert not any(k.encode() in path.read_bytes() for k in keys), f"a run key leaked into {path}"

    down = make(cluster, "teardown", f"RUN_ID={run_id}", "ARM=helion")
    assert down.returncode == 0, down.stdout[-3000:]
    assert recap(down)["h1"]["changed"] > 0
    down_again = make(cluster, "teardown", f"RUN_ID={run_id}", "ARM=helion")
    assert all(v["changed"] == 0 for v in recap(down_again).values()), down_again.stdout[-3000:]

    report_dir = cluster["work"] / "report"
    report = subprocess.run(
        [sys.executable, "-m", "kdakit", "report", str(results / run_id), "--out", str(report_dir),
         "--no-plots"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    text = (report_dir / "report.md").read_text()
    # The playbook path's records (SKU from group_vars) meet the published runs of protocol, GPU and arm.
    (pub,) = [p for p in load_published()["gsm8k"] if p["protocol"] == "pr" and p["arm"] == "helion"]
    mean = sum(pub["runs"]) / len(pub["runs"])
    for name in ("h1", "h2"):
        rows = [line for line in text.splitlines() if line.startswith(f"| {name} | H200 | helion | pr |")]
        assert len(rows) == 2, text  # one per run
        for row in rows:
            assert f"| {mean:.4f} ({pub['source']}) ({(0.9 - mean) * 100:+.2f}) |" in row, row

    # Fault: h2's server container exits at start; h1 deploys normally in the same run.
    fault_id = "ci-fault"
    fault = make(
        cluster,
        "deploy-h200",
        f"RUN_ID={fault_id}",
        "ARM=triton",
        f"EXTRA=--limit h1:h2 -e kdakit_preflight_allreduce=false -e @{_fault_vars(cluster)}",
    )
    assert fault.returncode != 0
    lines = summary_lines(fault)
    assert "h1: deploy ok" in lines, lines
    h2 = [line for line in lines if line.startswith("h2:")][0]
    assert "server: container kdakit-sglang exited with code 3" in h2, h2
    log = (results / fault_id / "h2" / "triton" / "diag" / "kdakit-sglang.log").read_text()
    assert "failing at start as asked" in log, log
    assert "failing at start as asked" in h2  # the summary names the container's last log line
    make(cluster, "teardown", f"RUN_ID={fault_id}", "ARM=triton")


def _engine_log_tail(host) -> str:
    """The end of a test host's dockerd log (why a load or a container start failed there)."""
    text = host.engine.log_path.read_text(errors="replace") if host.engine is not None else ""
    return f"--- {host.name} dockerd log, last lines:\n" + "\n".join(text.splitlines()[-15:])


def _fault_vars(cluster) -> Path:
    """Host vars making h2's server exit at start (the fake server's --fail-at-start)."""
    path = cluster["work"] / "fault-vars.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "kdakit_server_command": "{{ ['--fail-at-start'] if inventory_hostname == 'h2' else "
                "['--host', '127.0.0.1', '--port', '30000'] }}"
            }
        )
    )
    return path


# The same A/B as Slurm jobs (SCHEDULER=slurm) on these hosts: slurmctld here, slurmd in h1's and h2's
# namespaces (tests/infra/slurmcluster.py), each node's own dockerd running the test-double server and the
# kdakit image's real clients. Then three faults while a bench runs: a node set DOWN, a job cancelled, a time
# limit hit.
SLURM_PROTOCOLS = BENCH_PROTOCOLS + BENCH_PROTOCOLS.replace("[protocol.smoke]", "[protocol.slow]").replace(
    "num_prompts = 4", "num_prompts = 16"
)


def _slurm_settings(cluster, built, path: Path, protocols: Path, server_extra: list[str]) -> Path:
    hosts, work = cluster["hosts"], cluster["work"]
    sockets = work / "slurm-sockets"  # {node} -> that node's engine (h1's runs on the image-building root)
    sockets.mkdir(exist_ok=True)
    for h in hosts:
        link = sockets / f"{h.name}.sock"
        link.unlink(missing_ok=True)
        link.symlink_to(h.engine.socket)
    _, fake_tar, _ = built
    settings = {
        "nodes": 1, "partition": "gpu", "exclusive": True, "poll_s": 1.0, "pending_timeout_s": 60.0,
        "image": DEPLOY_REF, "image_tarball": "",  # h1's and h2's engines hold it
        "server_image": "kdakit-ci/fake-sglang:test", "server_image_tarball": str(fake_tar),
        "docker_host": f"unix://{sockets}/{{node}}.sock", "docker_cli": dockerd.DOCKER_CLI,
        "use_gpus": False, "server_ulimits": [], "server_shm_size": "64M", "server_ready_timeout_s": 60.0,
        "server_entrypoint": ["python3", "/srv/kdakit/tests/fakes/openai_server.py"],
        "server_command": ["--host", "127.0.0.1", "--port", "30000", "--error-rate", "0.1",
                           "--model-name", "llm", "--server-arg", f"model_path={MODEL_MOUNT}",
                           "--api-key-env", access.API_KEY_ENV, "--admin-api-key-env",
                           access.ADMIN_API_KEY_ENV, "--enable-metrics", *server_extra],
        "model_path": str(hosts[0].model_path), "model_mount": MODEL_MOUNT,
        "bench_dataset": "random", "bench_protocols": str(protocols),
        # 10 questions, one run: the real client, at a fraction of the pr protocol's time
        "gsm8k_args": ["--threshold", "0.85", "--limit", "10", "--runs", "1"],
        "nvidia_smi": f"{work / 'hosts'}/{{node}}/bin/nvidia-smi",
    }  # fmt: skip
    lines = [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_slurm(cluster, slurm, target: str, *variables: str, timeout: float = 600, background: bool = False):
    """make TARGET SCHEDULER=slurm from the login node (this namespace), as a user runs it."""
    cmd = ["make", "--no-print-directory", "-o", ".venv/.setup-done", target, "SCHEDULER=slurm",
           f"RESULTS={cluster['results']}", *variables]  # fmt: skip
    env = dict(slurm.env, PYTHONUNBUFFERED="1")
    if background:
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    t0 = time.monotonic()
    proc = keyscan.run_noting(KEYS, cmd, _env_roots(cluster), timeout, cwd=REPO, env=env)
    print(f"make {target} SCHEDULER=slurm: rc={proc.returncode} in {time.monotonic() - t0:.1f} s")
    (cluster["work"] / f"slurm-{target}-{int(t0)}.log").write_text(proc.stdout + proc.stderr)
    return proc


def _kit_containers(hosts) -> dict[str, list[str]]:
    """The kit's Slurm containers still present on each node's engine (running or not)."""
    out = {}
    for h in hosts:
        listed = h.engine.cli("ps", "-a", "--filter", "label=io.kdakit.slurm-job", "--format", "{{.Names}}")
        out[h.name] = listed.stdout.decode().split()
    return out


def _wait_for_step(run_dir: Path, step: str, timeout: float = 120) -> str:
    """Job id of the first job whose node reports `step` started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for tsv in (run_dir / "slurm" / "steps").glob("*/*.tsv"):
            if f"{step}\tstarted" in tsv.read_text():
                return tsv.parent.name
        time.sleep(0.5)
    raise AssertionError(f"no node of {run_dir.name} started {step} within {timeout:.0f} s")


def _wait_for_text(path: Path, text: str, timeout: float = 120) -> None:
    """Until the file holds text (a step's log as it grows)."""
    deadline = time.monotonic() + timeout
    while text not in (path.read_text(errors="replace") if path.exists() else ""):
        assert time.monotonic() < deadline, f"{path} held no {text!r} within {timeout:.0f} s"
        time.sleep(0.5)


def test_slurm_ab_and_faults(cluster, built):
    reason = slurmcluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    t_start = time.monotonic()
    nodes, work, results = cluster["hosts"], cluster["work"], cluster["results"]
    hosts = nodes[:2]  # the 4-GPU nodes; h3 (2 GPUs) takes the time-limit fault beside the A/B
    protocols = work / "slurm-protocols.toml"
    protocols.write_text(SLURM_PROTOCOLS)
    ab_settings = _slurm_settings(cluster, built, work / "slurm-ab.toml", protocols, [])
    # 2 s a token: a bench of 16 prompts runs for minutes, long enough to be interrupted
    fault_settings = _slurm_settings(cluster, built, work / "slurm-faults.toml", protocols,
                                     ["--token-delay-ms", "2000"])  # fmt: skip
    slurm = slurmcluster.up(work / "slurm", nodes)
    try:
        # The time limit (a minute; slurmctld checks limits every 30 s) runs out on h3 during the A/B: a held
        # server of the small test-double image only (h3 never loads the kdakit image).
        common = [f"SLURM_SETTINGS={fault_settings}", "BENCH_PROTOCOL=slow", "ARM=helion"]
        timed = make_slurm(cluster, slurm, "deploy-h200", "RUN_ID=ci-slurm-time", *common,
                           "SLURM_SET=time_limit=1 gpus_per_node=2 extra_sbatch=--nodelist=h3 "
                           "image=kdakit-ci/fake-sglang:test image_tarball=")  # fmt: skip
        assert timed.returncode == 0, timed.stdout[-3000:] + timed.stderr[-2000:] + slurm.log_tails()
        timed_job = json.loads((results / "ci-slurm-time" / "slurm" / "held-helion.json").read_text())[
            "job_id"
        ]

        # DRY_RUN=1 prints the allocation's script and each visit's job step, and submits nothing.
        dry = make_slurm(cluster, slurm, "ab-h200", "RUN_ID=ci-slurm-dry", f"SLURM_SETTINGS={ab_settings}",
                         "SLURM_SET=nodes=2", "BENCH_PROTOCOL=smoke", "DRY_RUN=1")  # fmt: skip
        assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
        assert dry.stdout.count("#SBATCH --nodes=2") == 1 and "#SBATCH --gpus-per-node=4" in dry.stdout
        assert dry.stdout.count("srun --jobid=<job id> --overlap --nodes=2") == 2  # triton, helion
        # nodes and nodelist that disagree: refused in one line before sbatch
        bad = make_slurm(cluster, slurm, "ab-h200", "RUN_ID=ci-slurm-bad", f"SLURM_SETTINGS={ab_settings}",
                         "SLURM_SET=nodes=1 nodelist=h[1-2]", "BENCH_PROTOCOL=smoke")  # fmt: skip
        assert bad.returncode != 0 and "slurm: nodes = 1 but nodelist h[1-2] names 2 node(s)" in bad.stderr
        assert slurm.cli("squeue", "-h", "-o", "%j").stdout.split() == ["kdakit-ci-slurm-time-helion-held"]

        # A visit that cannot start: pending past its bound, cancelled, with Slurm's reason.
        slurm.cli("scontrol", "update", "partitionname=gpu", "state=down")
        try:
            pending = make_slurm(cluster, slurm, "deploy-h200", "RUN_ID=ci-slurm-pending", *common,
                                 "SLURM_SET=pending_timeout_s=3")  # fmt: skip
        finally:
            slurm.cli("scontrol", "update", "partitionname=gpu", "state=up")
        assert pending.returncode != 0
        assert re.search(
            r"^slurm: deploy failed \(job \d+ still pending after \d+ s \(Slurm's reason: "
            r"PartitionDown\); cancelled\. Fix: ",
            pending.stdout,
            re.M,
        ), pending.stdout[-2000:]

        # The A/B: ONE allocation on both nodes; each arm's visit (triton, then helion) a job step of it
        # (tests/test_slurm.py checks the interleaving of a rigorous protocol's visits).
        t0 = time.monotonic()
        ab = make_slurm(cluster, slurm, "ab-h200", "RUN_ID=ci-slurm", f"SLURM_SETTINGS={ab_settings}",
                        "SLURM_SET=nodes=2", "BENCH_PROTOCOL=smoke")  # fmt: skip
        ab_s = time.monotonic() - t0
        assert ab.returncode == 0, ab.stdout[-5000:] + ab.stderr[-3000:] + slurm.log_tails()
        assert "rollout: all 20 steps ok" in ab.stdout, ab.stdout[-3000:]
        run_dir = results / "ci-slurm"
        scripts = sorted((run_dir / "slurm").glob("*.sbatch"))
        assert [p.name for p in scripts] == ["kdakit-ci-slurm-ab.sbatch"]
        assert "#SBATCH --signal=B:TERM@180" in scripts[0].read_text()
        job_ids = set()
        for h in hosts:
            for arm in ("triton", "helion"):
                node_dir = run_dir / h.name / arm
                records = [json.loads(p.read_text()) for p in node_dir.rglob("*.result.json")]
                kinds = sorted(r["kind"] for r in records)
                assert kinds == ["gsm8k", "serving"], (node_dir, kinds)
                gsm8k = next(r for r in records if r["kind"] == "gsm8k")
                assert gsm8k["metrics"]["n_questions"] == 10 and gsm8k["metrics"]["limited"]
                assert gsm8k["host"] == h.name and gsm8k["run_id"] == "ci-slurm"
                prov = json.loads((node_dir / "provenance.json").read_text())
                assert prov["outcome"] == "ok" and prov["scheduler"] == "slurm"
                facts = prov["slurm"]
                assert facts["partition"] == "gpu" and facts["node_list"] == "h[1-2]"
                assert re.fullmatch(r"\d+\.\d+\.\d+", facts["slurm_version"]) and facts["job_id"].isdigit()
                assert [j["job_name"] for j in prov["slurm_jobs"]] == ["kdakit-ci-slurm-ab"]
                job_ids.add(facts["job_id"])
                assert "kdakit-fake-openai listening" in (node_dir / "diag" / "kdakit-sglang.log").read_text()
        assert len(job_ids) == 1, job_ids  # both arms in the one allocation
        (job_id,) = job_ids
        state = slurm.cli("scontrol", "show", "job", "-o", job_id).stdout
        assert "JobState=COMPLETED" in state, state  # released by the controller, not cancelled
        assert (run_dir / "report.md").exists(), ab.stdout[-2000:]
        assert _kit_containers(hosts) == {"h1": [], "h2": []}

        # Faults while a bench runs in a held job on h2 (make deploy, then make bench): the node set DOWN,
        # then the job cancelled.
        t0 = time.monotonic()
        lines = {}
        for fault, run_id in (("down", "ci-slurm-down"), ("cancel", "ci-slurm-cancel")):
            deploy = make_slurm(cluster, slurm, "deploy-h200", f"RUN_ID={run_id}", *common,
                                "SLURM_SET=extra_sbatch=--nodelist=h2")  # fmt: skip
            assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-2000:]
            bench = make_slurm(cluster, slurm, "bench", f"RUN_ID={run_id}", *common, background=True)
            job_id = _wait_for_step(results / run_id, "bench")
            # the bench is into its runs (its first progress line), however long its imports took
            _wait_for_text(results / run_id / "h2" / "helion" / "diag" / "slurm-bench.log", "[bench] ")
            if fault == "down":
                slurm.cli("scontrol", "update", "nodename=h2", "state=down", "reason=kdakit fault test")
            else:
                slurm.cli("scancel", job_id)
            out, _ = bench.communicate(timeout=120)
            (work / f"slurm-fault-{fault}.log").write_text(out)
            assert bench.returncode != 0, out[-3000:]
            lines[fault] = [line for line in out.splitlines() if line.startswith("h2: bench ")]
            if fault == "down":
                slurm.resume("h2")
                slurm.wait_nodes_idle(timeout=60)
        # The held server on h3 has met its time limit by now (bounded wait): the next step says so.
        deadline = time.monotonic() + 120
        while "JobState=RUNNING" in slurm.cli("scontrol", "show", "job", "-o", timed_job).stdout:
            assert time.monotonic() < deadline, "the one-minute job on h3 is still running"
            time.sleep(1)
        timed_bench = make_slurm(cluster, slurm, "bench", "RUN_ID=ci-slurm-time", *common)
        assert timed_bench.returncode != 0
        lines["time"] = [line for line in timed_bench.stdout.splitlines() if line.startswith("h3: bench ")]
        faults_s = time.monotonic() - t0
        print("fault lines:", json.dumps(lines, indent=1))

        (down,) = lines["down"]
        # ReturnToService=2 may bring h2 back before its state is read: then the line names the node only (the
        # node's reason line is pinned by tests/test_slurm.py)
        assert re.fullmatch(
            r"h2: bench failed \(job \d+ ended NODE_FAIL: node failure "
            r"\((h2 down\S*, reason: kdakit fault test|a node of h2[^)]*)\) during bench\)",
            down), down  # fmt: skip
        (cancel,) = lines["cancel"]
        assert re.fullmatch(r"h2: bench failed \(job \d+ was cancelled \(scancel or an administrator\) "
                            r"during bench\)", cancel), cancel  # fmt: skip
        (timeout_line,) = lines["time"]
        assert timeout_line == (
            f"h3: bench failed (job {timed_job} hit its time limit of 00:01:00. Fix: raise time_limit in the "
            "Slurm settings (empty: the expected duration with its margin); the server is gone: run make "
            "deploy-h200 again)"
        ), timeout_line
        for run_id, node in (("ci-slurm-down", "h2"), ("ci-slurm-cancel", "h2"), ("ci-slurm-time", "h3")):
            node_dir = results / run_id / node / "helion"
            prov = json.loads((node_dir / "provenance.json").read_text())
            # the partial results stay: the deploy's outcome and the server's log (kept by the trap)
            assert prov["steps"]["deploy"]["outcome"] == "ok", prov
            assert prov["steps"]["bench"]["outcome"] == "failed", prov
            assert "kdakit-fake-openai listening" in (node_dir / "diag" / "kdakit-sglang.log").read_text()
            if node == "h2":  # and the bench's log so far
                assert "bench" in (node_dir / "diag" / "slurm-bench.log").read_text()
        # every node's trap stopped its server and clients
        assert _kit_containers(nodes) == {"h1": [], "h2": [], "h3": []}
        down_teardown = make_slurm(cluster, slurm, "teardown", "RUN_ID=ci-slurm-down")
        assert "no job of run ci-slurm-down is queued or running" in down_teardown.stdout
        # no run's key in any file of any run (the env files in state/ aside), diag/ 0700
        for env_file in results.glob("*/slurm/state/server.env"):
            keys = run_secrets_of(env_file.parents[2])
            for path in results.rglob("*"):
                if path.is_file() and "state" not in path.parts:
                    assert not any(k.encode() in path.read_bytes() for k in keys), (
                        f"a run key leaked into {path}"
                    )
        for diag in results.glob("ci-slurm*/h*/*/diag"):
            assert diag.stat().st_mode & 0o777 == 0o700, diag
        print(f"slurm: A/B {ab_s:.0f} s, faults {faults_s:.0f} s, all {time.monotonic() - t_start:.0f} s")
    finally:
        for h in nodes:  # nothing of ours may outlive the test on the shared engines
            for name in _kit_containers([h])[h.name]:
                h.engine.cli("rm", "-f", name, check=False)
        slurm.down()


def run_secrets_of(run_dir: Path) -> list[str]:
    values = access.parse_env_text((run_dir / "slurm" / "state" / "server.env").read_text())
    return [values[access.API_KEY_ENV], values[access.ADMIN_API_KEY_ENV]]
