"""The sbatch script of one arm visit: readable bash that `DRY_RUN=1` prints and `sbatch --test-only` checks.

sbatch runs it on the allocation's first node; it starts itself again on every node (srun, one task per
node: `script node STEP...`), and each node runs its own server from the kit's image, waits for it with the
playbooks' bounded readiness wait (wait_ready.py), runs eval and bench against it, and writes results to
<run dir>/<node>/<arm>/ on the shared file system, the layout `make collect` gives on the Ansible path. Each
step appends `step<TAB>outcome<TAB>cause` to slurm/steps/<job id>/<node>.tsv, which the controller turns
into provenance outcomes. An EXIT trap keeps the server's log and stops every container the node started
(cancel, node failure and time limit send SIGTERM first: Slurm's KillWait is the trap's time).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.slurm.settings import SlurmSettings

STEPS = ("deploy", "eval-gsm8k", "bench", "hold")
SERVER_CONTAINER = "kdakit-sglang"  # + job id; the diag log keeps the Ansible path's name
STATE_DIR = "slurm"  # <run dir>/slurm/: scripts, job output, step status, the env file (0700 state/)
MARGIN_S = 600  # image start, diagnostics and the trap on top of the protocols' bounds


@dataclass
class Visit:
    run_id: str
    arm: str
    sku: str
    run_dir: Path  # <results>/<run id>, on storage every node mounts at the same path
    steps: tuple[str, ...]
    visit: int = 1
    visits: int = 1
    bench_protocol: str = "pr"
    nodelist: str = ""  # the first visit's nodes, for the later visits of an interleaved protocol
    time_limit: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def job_name(self) -> str:
        tail = f"-v{self.visit}" if "hold" not in self.steps else "-held"
        return f"kdakit-{self.run_id}-{self.arm}{tail}"

    @property
    def slurm_dir(self) -> Path:
        return self.run_dir / STATE_DIR

    @property
    def script_path(self) -> Path:
        return self.slurm_dir / f"{self.job_name}.sbatch"

    @property
    def env_file(self) -> Path:
        return self.slurm_dir / "state" / "server.env"

    @property
    def wait_ready(self) -> Path:
        return self.slurm_dir / "wait_ready.py"


def slurm_time(seconds: float) -> str:
    """Seconds -> Slurm's D-HH:MM:SS (rounded up to a whole minute: Slurm counts minutes)."""
    minutes = -(-int(seconds) // 60)
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def bound_seconds(settings: SlurmSettings, steps: tuple[str, ...], bench_protocol: str) -> float:
    """The longest the visit's steps may take under their own limits: readiness wait, every GSM8K run and
    every bench client run (with warm-up) at their run_timeout_s, plus MARGIN_S."""
    total = MARGIN_S + (settings.server_ready_timeout_s if "deploy" in steps else 0)
    if "eval-gsm8k" in steps:
        from kdakit.evals.gsm8k import load_protocols as gsm8k_protocols

        protocol = gsm8k_protocols()[1].get(settings.gsm8k_protocol)
        if protocol is None:
            raise UsageError(f"unknown GSM8K protocol {settings.gsm8k_protocol!r}")
        total += protocol.runs * protocol.run_timeout_s
    if "bench" in steps:
        protocol = bench_protocol_table(settings).get(bench_protocol)
        if protocol is None:
            raise UsageError(f"unknown bench protocol {bench_protocol!r}")
        total += len(protocol.points) * (protocol.runs + int(protocol.warmup)) * protocol.run_timeout_s
    return total


def bench_protocol_table(settings: SlurmSettings) -> dict:
    from kdakit.bench.serving import PROTOCOLS_FILE, load_protocols

    return load_protocols(Path(settings.bench_protocols) if settings.bench_protocols else PROTOCOLS_FILE)


def server_argv(settings: SlurmSettings, visit: Visit, results: str) -> list[str]:
    """What follows the server's entrypoint: `kdakit serve` for the SKU and arm, as the playbooks start it."""
    if settings.server_command:
        return list(settings.server_command)
    port = profiles.load(visit.sku, visit.arm).deploy["port"]
    argv = ["serve", "--sku", visit.sku, "--arm", visit.arm, "--port", str(port), "--results", results]
    if settings.server_open:
        argv += ["--open", "--host", "0.0.0.0"]
    return argv + [f"--set={s}" for s in settings.server_set]


def sbatch_options(settings: SlurmSettings, visit: Visit) -> list[str]:
    opts = [
        f"--job-name={visit.job_name}",
        f"--nodes={settings.nodes}",
        "--ntasks-per-node=1",
    ]
    if settings.gpus_per_node:
        opts.append(f"--gpus-per-node={settings.gpus_per_node}")
    if settings.exclusive:
        opts.append("--exclusive")
    limit = visit.time_limit or settings.time_limit
    opts.append(f"--time={limit or slurm_time(bound_seconds(settings, visit.steps, visit.bench_protocol))}")
    for key, value in (
        ("partition", settings.partition),
        ("account", settings.account),
        ("qos", settings.qos),
    ):
        if value:
            opts.append(f"--{key}={value}")
    if visit.nodelist:
        opts.append(f"--nodelist={visit.nodelist}")
    opts.append("--requeue" if settings.requeue else "--no-requeue")
    opts.append(f"--output={visit.slurm_dir / visit.job_name}-%j.out")
    return opts + list(settings.extra_sbatch)


def pyxis_mounts(settings: SlurmSettings, visit: Visit) -> list[str]:
    mounts = [f"{visit.run_dir}:{visit.run_dir}", f"{settings.model_path}:{settings.model_mount}:ro"]
    if settings.bench_dataset == "sharegpt":
        mounts.append(f"{settings.sharegpt_path}:{settings.sharegpt_mount}:ro")
    if settings.bench_protocols:
        mounts.append(f"{settings.bench_protocols}:{settings.bench_protocols}:ro")
    return mounts + list(settings.mounts)


def srun_node_command(settings: SlurmSettings, visit: Visit) -> list[str]:
    """The batch step's srun: one task per node, each running this script's node part (inside the image
    on pyxis)."""
    argv = ["srun", "--nodes=$SLURM_JOB_NUM_NODES", "--ntasks-per-node=1", "--kill-on-bad-exit=0"]
    if settings.runtime == "pyxis":
        argv += container_flags(settings, visit)
    return argv + ["bash", str(visit.script_path), "node", *visit.steps]


def container_flags(settings: SlurmSettings, visit: Visit) -> list[str]:
    """pyxis: the kit's squashfs, the shared mounts, and one named container per job (a later srun of a held
    job joins the same file system)."""
    return [
        f"--container-image={settings.squashfs}",
        f"--container-mounts={','.join(pyxis_mounts(settings, visit))}",
        "--container-name=kdakit-$SLURM_JOB_ID",
        "--container-workdir=/",
        "--no-container-mount-home",
    ]


def enroot_import_command(tarball: str, ref: str, squashfs: str, docker: str = "docker") -> str:
    """make image-squashfs: the image-save tarball into a local engine, then enroot's squashfs of it."""
    load = (
        f"zstd -dc {shlex.quote(tarball)} | {docker} load"
        if tarball.endswith(".zst")
        else (f"{docker} load -i {shlex.quote(tarball)}")
    )
    return f"{load} && enroot import --output {shlex.quote(squashfs)} {shlex.quote('dockerd://' + ref)}"


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _array(name: str, items: list[str]) -> str:
    return f"{name}=(" + " ".join(_q(i) for i in items) + ")"


def render(settings: SlurmSettings, visit: Visit) -> str:
    unknown = [s for s in visit.steps if s not in STEPS]
    if unknown:
        raise UsageError(f"unknown step(s) {', '.join(unknown)}; known: {', '.join(STEPS)}")
    port = profiles.load(visit.sku, visit.arm).deploy["port"]
    pyxis = settings.runtime == "pyxis"
    results_in_server = "$OUT" if pyxis else "/results"
    header = [
        "#!/bin/bash",
        f"# kdakit on Slurm: run {visit.run_id}, arm {visit.arm}, visit {visit.visit} of {visit.visits}"
        f" (bench protocol {visit.bench_protocol}): {' '.join(visit.steps)}; runtime {settings.runtime}.",
        "# Made by `kdakit slurm` (kdakit/slurm/script.py). sbatch runs it on the first node; it runs",
        "# again on every node (srun, `node STEP...`): server, readiness wait, eval, bench; results in",
        f"# {visit.run_dir}/<node>/{visit.arm}/; the EXIT trap stops the node's server.",
        *(f"#SBATCH {o}" for o in sbatch_options(settings, visit)),
        "set -uo pipefail",
        "",
        "# The visit",
        f"RUN_DIR={_q(visit.run_dir)}",
        f"RUN_ID={_q(visit.run_id)}",
        f"ARM={_q(visit.arm)}",
        f"SKU={_q(visit.sku)}",
        f"SCRIPT={_q(visit.script_path)}",
        f"ENV_FILE={_q(visit.env_file)}",
        f"WAIT_READY={_q(visit.wait_ready)}",
        f"URL=http://127.0.0.1:{port}",
        f"READY_TIMEOUT_S={int(settings.server_ready_timeout_s)}",
        f"MODEL_PATH={_q(settings.model_path)}",
        f"MODEL_MOUNT={_q(settings.model_mount)}",
        f"NVIDIA_SMI={_q(settings.nvidia_smi)}",
        _array("SERVER_ENTRYPOINT", settings.server_entrypoint),
        _array("SERVER_ARGS", server_argv(settings, visit, results_in_server)),
        _array("GSM8K_ARGS", ["--protocol", settings.gsm8k_protocol, *settings.gsm8k_args]),
        _array("BENCH_ARGS", _bench_args(settings, visit)),
    ]
    if not pyxis:
        header += [
            f"IMAGE={_q(settings.image)}",
            f"SERVER_IMAGE={_q(settings.server_image or settings.image)}",
            f"IMAGE_TARBALL={_q(settings.image_tarball)}",
            f"SERVER_IMAGE_TARBALL={_q(settings.server_image_tarball)}",
            f"DOCKER={_q(settings.docker_cli)}",
            f"DOCKER_HOST_TEMPLATE={_q(settings.docker_host)}",
            f"SHM_SIZE={_q(settings.server_shm_size)}",
            _array("GPU_FLAGS", ["--gpus", "all"] if settings.use_gpus else []),
            _array("ULIMITS", [f"--ulimit={u}" for u in settings.server_ulimits]),
            _array("BENCH_MOUNTS", _docker_bench_mounts(settings)),
        ]
    body = [
        "",
        "# The batch step: the node part on every node of the allocation.",
        'if [ "${1:-}" != node ]; then',
        f"  exec {' '.join(srun_node_command(settings, visit))}",
        "fi",
        "shift",
        "",
        _COMMON,
        _PYXIS if pyxis else _DOCKER,
        _MAIN,
    ]
    return "\n".join(header + body).rstrip() + "\n"


def _bench_args(settings: SlurmSettings, visit: Visit) -> list[str]:
    args = ["--protocol", visit.bench_protocol]
    if settings.bench_dataset == "sharegpt":
        args += ["--dataset", "sharegpt", "--dataset-path", settings.sharegpt_mount]
    else:
        args += ["--dataset", "random-ids"]
    if settings.bench_protocols:
        args += ["--protocols", settings.bench_protocols]
    return args + list(settings.bench_args)


def _docker_bench_mounts(settings: SlurmSettings) -> list[str]:
    mounts = [f"{settings.model_path}:{settings.model_mount}:ro"]
    if settings.bench_protocols:
        mounts.append(f"{settings.bench_protocols}:{settings.bench_protocols}:ro")
    if settings.bench_dataset == "sharegpt":
        mounts.append(f"{settings.sharegpt_path}:{settings.sharegpt_mount}:ro")
    out = []
    for m in mounts + list(settings.mounts):
        out += ["-v", m]
    return out


_COMMON = r"""# The node part: each step's output goes to diag/slurm-<step>.log, its outcome to the status
# file.
NODE=${SLURMD_NODENAME:-$(hostname -s)}
OUT=$RUN_DIR/$NODE/$ARM
STATUS=$RUN_DIR/slurm/steps/$SLURM_JOB_ID/$NODE.tsv
SERVER=kdakit-sglang-$SLURM_JOB_ID
GSM8K=kdakit-gsm8k-$ARM-$SLURM_JOB_ID
BENCH=kdakit-bench-$ARM-$SLURM_JOB_ID
STARTED_SERVER=
CURRENT=
STEP_PID=
mkdir -p "$OUT/diag" "${STATUS%/*}"
chmod 0700 "$OUT/diag"
# The run's keys (the 0600 env file) out of a diagnostic before it reaches a file: SGLang's start-up log and
# the container's inspect output hold them.
scrub_keys() {
  python3 -c 'import sys
keys = ("OPENAI_API_KEY", "KDAKIT_ADMIN_API_KEY")
try:
    pairs = [line.partition("=") for line in open(sys.argv[1])]
except OSError:  # no env file: no keys were handed out
    pairs = []
values = [v.strip() for k, _, v in pairs if k in keys and v.strip()]
text = sys.stdin.read()
for value in values:
    text = text.replace(value, "<redacted>")
sys.stdout.write(text)' "$ENV_FILE"
}
status() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >> "$STATUS"; }
NVIDIA_SMI=${NVIDIA_SMI//\{node\}/$NODE}
export KDAKIT_RUN_ID=$RUN_ID KDAKIT_HOST=$NODE KDAKIT_SKU=$SKU KDAKIT_ARM=$ARM
"""

_DOCKER = r"""# Docker on the node: the server detached, eval and bench in the foreground, all from the kit's
# image.
export DOCKER_HOST=${DOCKER_HOST_TEMPLATE//\{node\}/$NODE}
image_id() { "$DOCKER" image inspect --format '{{.Id}}' "$1" 2>/dev/null; }

ensure_image() {  # REF TARBALL: the image's ID; loads the tarball first when the engine lacks that ID
  local id want
  id=$(image_id "$1")
  want=$id
  [ -n "$2" ] && want=$(cat "$2.id" 2>/dev/null)
  if [ -n "$id" ] && [ "$id" = "$want" ]; then echo "$id"; return 0; fi
  if [ -z "$2" ]; then
    echo "image $1 is not in $NODE's Docker engine ($DOCKER_HOST): docker load the make image-save" \
      "tarball there, or set image_tarball" >&2
    return 1
  fi
  echo "loading $2 into $NODE's engine" >&2
  { case "$2" in *.zst) zstd -dc "$2" | "$DOCKER" load ;; *) "$DOCKER" load -i "$2" ;; esac } >&2 \
    && "$DOCKER" tag "$want" "$1" >&2 && image_id "$1" \
    || { echo "image: loading $2 into $NODE's engine failed" >&2; return 1; }
}

step_deploy() {
  "$DOCKER" rm -f "$SERVER" >/dev/null 2>&1
  local id
  id=$(ensure_image "$SERVER_IMAGE" "$SERVER_IMAGE_TARBALL") || return 1
  ensure_image "$IMAGE" "$IMAGE_TARBALL" >/dev/null || return 1
  "$DOCKER" run -d --name "$SERVER" --label io.kdakit.run-id="$RUN_ID" --label io.kdakit.arm="$ARM" \
    --label io.kdakit.slurm-job="$SLURM_JOB_ID" --network host --ipc host --shm-size "$SHM_SIZE" \
    "${GPU_FLAGS[@]}" "${ULIMITS[@]}" -v "$OUT:/results" -v "$MODEL_PATH:$MODEL_MOUNT:ro" \
    --env-file "$ENV_FILE" \
    -e KDAKIT_RUN_ID -e KDAKIT_HOST -e KDAKIT_SKU -e KDAKIT_ARM -e HF_HUB_OFFLINE=1 -e KDAKIT_IMAGE_ID="$id" \
    --entrypoint "${SERVER_ENTRYPOINT[0]}" "$SERVER_IMAGE" "${SERVER_ENTRYPOINT[@]:1}" "${SERVER_ARGS[@]}" \
    >/dev/null || return 1
  python3 "$WAIT_READY" --url "$URL/health" --docker-host "$DOCKER_HOST" --container "$SERVER" \
    --timeout "$READY_TIMEOUT_S"
}

server_answers() {
  python3 "$WAIT_READY" --url "$URL/health" --docker-host "$DOCKER_HOST" --container "$SERVER" \
    --timeout 10 >/dev/null \
    || { echo "no server answers at $URL/health on $NODE: run the deploy step first"; return 1; }
}

in_image() {  # NAME ARGS...: kdakit ARGS in the kit's image, on the host network, removed when done
  local name=$1 id; shift
  "$DOCKER" rm -f "$name" >/dev/null 2>&1
  id=$(ensure_image "$IMAGE" "$IMAGE_TARBALL") || return 1
  "$DOCKER" run --rm --name "$name" --network host -v "$OUT:/results" --env-file "$ENV_FILE" \
    -e KDAKIT_RUN_ID -e KDAKIT_HOST -e KDAKIT_SKU -e KDAKIT_ARM -e KDAKIT_IMAGE_ID="$id" \
    --entrypoint kdakit "$@"
}

step_eval_gsm8k() {
  server_answers || return 1
  in_image "$GSM8K" "$IMAGE" eval gsm8k --base-url "$URL" --out /results/gsm8k "${GSM8K_ARGS[@]}"
}

step_bench() {
  server_answers || return 1
  in_image "$BENCH" "${BENCH_MOUNTS[@]}" "$IMAGE" bench serving --base-url "$URL" --out /results/bench \
    "${BENCH_ARGS[@]}"
}

stop_containers() {
  if [ -n "$STARTED_SERVER" ] && "$DOCKER" container inspect "$SERVER" >/dev/null 2>&1; then
    (umask 027; "$DOCKER" logs --timestamps "$SERVER" 2>&1 | scrub_keys > "$OUT/diag/kdakit-sglang.log")
    (umask 027; "$DOCKER" container inspect "$SERVER" 2>/dev/null | scrub_keys \
      > "$OUT/diag/kdakit-sglang.inspect.json")
    "$DOCKER" rm -f "$SERVER" >/dev/null 2>&1
  fi
  "$DOCKER" rm -f "$GSM8K" "$BENCH" >/dev/null 2>&1
}
"""

_PYXIS = r"""# pyxis/enroot: this node part already runs inside the kit's image; the server is a process
# beside it.
SERVER_PID_FILE=$OUT/diag/server-$SLURM_JOB_ID.pid
SERVER_ARGS=("${SERVER_ARGS[@]//\$OUT/$OUT}")  # the node's results folder, as the server sees it
set -a; . "$ENV_FILE"; set +a
export HF_HUB_OFFLINE=1

step_deploy() {
  "${SERVER_ENTRYPOINT[@]}" "${SERVER_ARGS[@]}" >> "$OUT/diag/kdakit-sglang.log" 2>&1 &
  echo $! > "$SERVER_PID_FILE"
  python3 "$WAIT_READY" --url "$URL/health" --pid "$(cat "$SERVER_PID_FILE")" --timeout "$READY_TIMEOUT_S"
}

server_answers() {
  python3 "$WAIT_READY" --url "$URL/health" --timeout 10 >/dev/null \
    || { echo "no server answers at $URL/health on $NODE: run the deploy step first"; return 1; }
}

step_eval_gsm8k() {
  server_answers || return 1
  kdakit eval gsm8k --base-url "$URL" --out "$OUT/gsm8k" "${GSM8K_ARGS[@]}"
}

step_bench() {
  server_answers || return 1
  kdakit bench serving --base-url "$URL" --out "$OUT/bench" "${BENCH_ARGS[@]}"
}

stop_containers() {
  if [ -n "$STARTED_SERVER" ] && [ -s "$SERVER_PID_FILE" ]; then
    local pid; pid=$(cat "$SERVER_PID_FILE")
    kill -TERM "$pid" 2>/dev/null; sleep 2; kill -KILL "$pid" 2>/dev/null
    rm -f "$SERVER_PID_FILE"
  fi
  # the server wrote its own log (keys included) inside the 0700 diag folder: scrubbed before the job ends
  if [ -f "$OUT/diag/kdakit-sglang.log" ]; then
    scrub_keys < "$OUT/diag/kdakit-sglang.log" > "$OUT/diag/kdakit-sglang.log.tmp" \
      && chmod 0640 "$OUT/diag/kdakit-sglang.log.tmp" \
      && mv -f "$OUT/diag/kdakit-sglang.log.tmp" "$OUT/diag/kdakit-sglang.log"
  fi
}
"""

_MAIN = r"""step_hold() {  # keep the server up until the job is cancelled (make teardown) or its time ends
  echo "server up on $NODE at $URL (job $SLURM_JOB_ID)"
  exec sleep infinity
}

# Slurm signals a step more than once (slurmstepd, then srun): a second SIGTERM must not cut the cleanup.
on_signal() {
  trap '' TERM INT HUP
  [ -n "$CURRENT" ] && status "$CURRENT" interrupted "signal"
  exit 143
}

on_exit() {
  trap '' TERM INT HUP
  [ -n "$STEP_PID" ] && kill "$STEP_PID" 2>/dev/null
  "$NVIDIA_SMI" -q > "$OUT/diag/nvidia-smi-q.txt" 2>&1
  stop_containers
  [ -n "$STARTED_SERVER" ] && status server stopped
}
trap on_exit EXIT
trap on_signal TERM INT HUP

failed=
for step in "$@"; do
  if [ -n "$failed" ]; then status "$step" skipped "after $failed failed"; continue; fi
  [ "$step" = deploy ] && STARTED_SERVER=1
  CURRENT=$step
  status "$step" started
  log=$OUT/diag/slurm-$step.log
  "step_${step//-/_}" >> "$log" 2>&1 &
  STEP_PID=$!
  wait "$STEP_PID"; rc=$?
  STEP_PID=
  CURRENT=
  if [ "$rc" = 0 ]; then
    status "$step" ok
  else
    status "$step" failed "$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c 1-400)"
    failed=$step
  fi
  echo "$NODE: $step $( [ "$rc" = 0 ] && echo ok || echo failed )"
done
[ -z "$failed" ]
"""


def job_name_pattern(run_id: str) -> re.Pattern:
    return re.compile(rf"^kdakit-{re.escape(run_id)}-")


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import subprocess

    p = argparse.ArgumentParser(prog="python -m kdakit.slurm.script", description="make image-squashfs")
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("enroot-import", help="the image-save tarball as an enroot squashfs")
    q.add_argument("--tarball", required=True)
    q.add_argument("--ref", required=True)
    q.add_argument("--squashfs", required=True)
    q.add_argument("--docker", default="docker")
    args = p.parse_args(argv)
    import shutil

    missing = [t for t in ("enroot", args.docker, "zstd") if shutil.which(t) is None]
    if missing:
        print(f"image-squashfs: {', '.join(missing)} not on PATH (run it where Docker and enroot are)")
        return 2
    command = enroot_import_command(args.tarball, args.ref, args.squashfs, args.docker)
    print(command, flush=True)
    return subprocess.run(["bash", "-o", "pipefail", "-c", command]).returncode


if __name__ == "__main__":
    raise SystemExit(_main())
