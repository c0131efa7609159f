"""The sbatch script of a run on Slurm: readable bash that `DRY_RUN=1` prints and `sbatch --test-only` checks.

An A/B is ONE allocation (`kdakit-<run>-ab`): its batch step only holds the nodes, and the controller runs
every arm's visit as a job step of it (`srun --jobid`, one task per node: `script node ARM VISIT STEP...`),
so every visit runs on the same nodes and nothing queues between the arms. A held server (`make deploy-<sku>
SCHEDULER=slurm`) is a job whose batch step runs `node ARM 1 deploy hold`; later single steps join it.

Each node part runs its own server from the kit's image on the GPUs Slurm allocated, waits for it with the
bounded readiness wait (kdakit/launch/wait_ready.py), runs eval and bench against it, and writes results to
<run dir>/<node>/<arm>/ on the shared file system, the layout `make collect` gives on the Ansible path. Each
step appends `step<TAB>outcome<TAB>cause` to slurm/steps/<job id>/<node>.tsv, which the controller turns
into provenance outcomes. Its EXIT trap stops the server gracefully (TERM, then KILL after stop_grace_s) and
keeps its log and `docker inspect` with the run's keys replaced before they reach a file. `--signal=B:TERM`
gives the batch step signal_lead_s before the time limit to pass TERM to the steps, whose traps then run
well before Slurm's KILL.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from kdakit.slurm import timing
from kdakit.slurm.settings import SlurmSettings

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.records import paths

STEPS = ("deploy", "eval-gsm8k", "bench", "hold")
SERVER_CONTAINER = "kdakit-sglang"  # + job id; the diag log keeps the Ansible path's name
STATE_DIR = paths.SLURM_DIR
CACHE_MOUNT = "/kdakit-cache"  # pyxis: where cache_dir appears in the image (Triton, Helion, Inductor caches)


@dataclass
class Visit:
    """A job's script: an A/B's allocation (steps empty: the controller runs each arm's visit in it) or a
    held server (steps deploy, hold)."""

    run_id: str
    arm: str  # the held server's arm; an allocation's first arm
    sku: str
    run_dir: Path  # <results>/<run id>, on storage every node mounts at the same path
    steps: tuple[str, ...] = ()
    arms: tuple[str, ...] = ()
    visits: int = 1
    bench_protocol: str = "pr"
    time_limit: str = ""  # empty: from the expected duration (kdakit.slurm.timing)
    time_note: str = ""  # how the time limit was found, for the script's header

    @property
    def allocation(self) -> bool:
        return not self.steps

    @property
    def job_name(self) -> str:
        return f"kdakit-{self.run_id}-ab" if self.allocation else f"kdakit-{self.run_id}-{self.arm}-held"

    slurm_dir = paths.path_below("run_dir", STATE_DIR)
    env_file = paths.path_below("slurm_dir", "state", "server.env")
    wait_ready = paths.path_below("slurm_dir", "wait_ready.py")
    access = paths.path_below("slurm_dir", "access.py")

    @property
    def script_path(self) -> Path:
        return self.slurm_dir / f"{self.job_name}.sbatch"

    def release_file(self, job_id: str) -> Path:
        """The file whose appearance ends an allocation's batch step (the run is done)."""
        return self.slurm_dir / "state" / f"release-{job_id}"


slurm_time = timing.slurm_time


def bench_protocol_table(settings: SlurmSettings) -> dict:
    from kdakit.facts.protocols import load_protocols

    return load_protocols(settings.bench_protocols)


def server_argv(settings: SlurmSettings, visit: Visit, results: str) -> list[str]:
    """What follows the server's entrypoint: `kdakit serve` for the SKU and arm, as the playbooks start it."""
    if settings.server_command:
        return list(settings.server_command)
    port = profiles.load(visit.sku, visit.arm).deploy["port"]
    argv = ["serve", "--sku", visit.sku, "--arm", "{arm}", "--port", str(port), "--results", results]
    if settings.server_open:
        argv += ["--open", "--host", "0.0.0.0"]
    return argv + [f"--set={s}" for s in settings.server_set]


def server_env(settings: SlurmSettings, visit: Visit) -> list[str]:
    """The bench protocol's server environment (KEY=VALUE), as the deploy role passes it: e.g. the CuTe-verify
    PR's simulated accept length."""
    protocol = bench_protocol_table(settings).get(visit.bench_protocol)
    return [f"{k}={v}" for k, v in sorted(protocol.server_env.items())] if protocol else []


def expected_seconds(settings: SlurmSettings, visit: Visit) -> tuple[float, str]:
    """(seconds, what) the job is expected to take: every visit of every arm (an allocation) or one arm's
    deploy, GSM8K and bench (a held server)."""
    from kdakit.facts.gsm8k_protocols import load_protocols as gsm8k_protocols

    bench = bench_protocol_table(settings).get(visit.bench_protocol)
    if bench is None:
        raise UsageError(f"unknown bench protocol {visit.bench_protocol!r}")
    gsm8k = gsm8k_protocols()[1].get(settings.gsm8k_protocol)
    if gsm8k is None:
        raise UsageError(f"unknown GSM8K protocol {settings.gsm8k_protocol!r}")
    if not visit.allocation:
        return timing.expected_visit_s(settings, bench, gsm8k, True), f"one {visit.arm} visit"
    arms = len(visit.arms) or 1
    total = sum(
        arms * timing.expected_visit_s(settings, bench, gsm8k, k == 1) for k in range(1, visit.visits + 1)
    )
    return total, f"{visit.visits} visit(s) x {arms} arms ({visit.bench_protocol})"


def time_limit(settings: SlurmSettings, visit: Visit) -> tuple[str, str]:
    if visit.time_limit:
        return visit.time_limit, visit.time_note or f"--time: {visit.time_limit}"
    return timing.time_limit(settings, *expected_seconds(settings, visit))


def signals_before_limit(settings: SlurmSettings, limit: str) -> bool:
    """--signal only when the job is long enough for it: Slurm may send it up to a minute early, and a
    lead near the whole limit would stop the job as it starts."""
    seconds = timing.parse_slurm_time(limit)
    return seconds is None or seconds >= 3 * settings.signal_lead_s


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
    if settings.schedule_memory:
        opts.append("--mem=0")
    limit = time_limit(settings, visit)[0]
    opts.append(f"--time={limit}")
    if signals_before_limit(settings, limit):
        opts.append(f"--signal=B:TERM@{settings.signal_lead_s}")
    for key, value in (
        ("partition", settings.partition),
        ("account", settings.account),
        ("qos", settings.qos),
        ("nodelist", settings.nodelist),
    ):
        if value:
            opts.append(f"--{key}={value}")
    opts.append("--requeue" if settings.requeue else "--no-requeue")
    opts.append(f"--output={visit.slurm_dir / visit.job_name}-%j.out")
    return opts + list(settings.extra_sbatch)


def pyxis_mounts(settings: SlurmSettings, visit: Visit) -> list[str]:
    mounts = [f"{visit.run_dir}:{visit.run_dir}", f"{settings.model_path}:{settings.model_mount}:ro"]
    if settings.bench_dataset == "sharegpt":
        mounts.append(f"{settings.sharegpt_path}:{settings.sharegpt_mount}:ro")
    if settings.bench_protocols:
        mounts.append(f"{settings.bench_protocols}:{settings.bench_protocols}:ro")
    if settings.cache_dir:
        mounts.append(f"{settings.cache_dir}:{CACHE_MOUNT}")
    return mounts + list(settings.mounts)


def node_argv(
    settings: SlurmSettings, visit: Visit, arm: str, visit_no: int, steps, job_id: str = "", nodes: int = 0
) -> list[str]:
    """A job step on every node of the job (inside the image on pyxis): this script's node part."""
    argv = ["srun"]
    if job_id:  # from the controller, into the running job
        argv += [f"--jobid={job_id}", "--overlap", f"--nodes={nodes or settings.nodes}"]
    else:
        argv += ["--nodes=$SLURM_JOB_NUM_NODES"]
    argv += ["--ntasks-per-node=1", "--kill-on-bad-exit=0"]
    if settings.runtime == "pyxis":
        argv += [
            f.replace("$SLURM_JOB_ID", job_id) if job_id else f for f in container_flags(settings, visit)
        ]
    return argv + ["bash", str(visit.script_path), "node", arm, str(visit_no), *steps]


def container_flags(settings: SlurmSettings, visit: Visit) -> list[str]:
    """pyxis: the kit's squashfs, the shared mounts, one named container per job (a later step of the job
    joins the same file system), writable for the kernels' caches when the site allows it."""
    flags = [
        f"--container-image={settings.squashfs}",
        f"--container-mounts={','.join(pyxis_mounts(settings, visit))}",
        "--container-name=kdakit-$SLURM_JOB_ID",
        "--container-workdir=/",
        "--no-container-mount-home",
    ]
    return flags + (["--container-writable"] if settings.container_writable else [])


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
    timing.check_nodes(settings)
    port = profiles.load(visit.sku, visit.arm).deploy["port"]
    gpu_count = profiles.sku(visit.sku).gpu_count
    pyxis = settings.runtime == "pyxis"
    results_in_server = "$OUT" if pyxis else "/results"
    limit, limit_note = time_limit(settings, visit)
    if not signals_before_limit(settings, limit):
        limit_note += f"; no --signal: the limit is under 3 x the {settings.signal_lead_s} s lead"
    what = (
        f"A/B of {' '.join(visit.arms)}, {visit.visits} visit(s) (bench protocol {visit.bench_protocol}) as "
        "job steps of this one allocation"
        if visit.allocation
        else f"arm {visit.arm}: {' '.join(visit.steps)} (bench protocol {visit.bench_protocol})"
    )
    header = [
        "#!/bin/bash",
        f"# kdakit on Slurm: run {visit.run_id}, {what}; runtime {settings.runtime}.",
        "# Made by `kdakit run`/`kdakit slurm` (slurm/script.py). Every node runs `node ARM VISIT STEP...`:",
        "# its server on the GPUs Slurm allocated, readiness wait, eval, bench; results in",
        f"# {visit.run_dir}/<node>/<arm>/; the EXIT trap stops the server (TERM, KILL after"
        f" {settings.stop_grace_s} s).",
        f"# {limit_note}",
        *(f"#SBATCH {o}" for o in sbatch_options(settings, visit)),
        "set -uo pipefail",
        "umask 027",
        "",
        "# The run",
        f"RUN_DIR={_q(visit.run_dir)}",
        f"RUN_ID={_q(visit.run_id)}",
        f"SKU={_q(visit.sku)}",
        f"SCRIPT={_q(visit.script_path)}",
        f"ENV_FILE={_q(visit.env_file)}",
        f"WAIT_READY={_q(visit.wait_ready)}",
        f"ACCESS={_q(visit.access)}",
        f"RELEASE={_q(visit.slurm_dir)}/state/release-$SLURM_JOB_ID",
        f"URL=http://127.0.0.1:{port}",
        f"READY_TIMEOUT_S={int(settings.server_ready_timeout_s)}",
        f"STOP_GRACE_S={int(settings.stop_grace_s)}",
        f"SIGNAL_LEAD_S={int(settings.signal_lead_s)}",
        f"GPU_COUNT={gpu_count if settings.use_gpus else 0}",
        f"MODEL_PATH={_q(settings.model_path)}",
        f"MODEL_MOUNT={_q(settings.model_mount)}",
        f"NVIDIA_SMI={_q(settings.nvidia_smi)}",
        _array("SERVER_ENTRYPOINT", settings.server_entrypoint),
        _array("SERVER_ARGS", server_argv(settings, visit, results_in_server)),
        _array("GSM8K_ARGS", ["--protocol", settings.gsm8k_protocol, *settings.gsm8k_args]),
        _array("BENCH_ARGS", _bench_args(settings, visit)),
        _array("SERVER_ENV", server_env(settings, visit)),
    ]
    if pyxis:
        header += [f"CACHE_DIR={_q(CACHE_MOUNT if settings.cache_dir else '')}"]
    else:
        header += [
            f"IMAGE={_q(settings.image)}",
            f"SERVER_IMAGE={_q(settings.server_image or settings.image)}",
            f"IMAGE_TARBALL={_q(settings.image_tarball)}",
            f"SERVER_IMAGE_TARBALL={_q(settings.server_image_tarball)}",
            f"DOCKER={_q(settings.docker_cli)}",
            f"DOCKER_HOST_TEMPLATE={_q(settings.docker_host)}",
            f"SHM_SIZE={_q(settings.server_shm_size)}",
            _array("ULIMITS", [f"--ulimit={u}" for u in settings.server_ulimits]),
            _array("BENCH_MOUNTS", _docker_bench_mounts(settings)),
        ]
    if visit.allocation:
        batch = [
            "",
            "# The batch step holds the allocation: the controller runs each arm's visit in it as a job",
            "# step (srun --jobid=$SLURM_JOB_ID ... node ARM VISIT STEP...). At the time limit's signal",
            "# lead, or when cancelled, it passes TERM to those steps (their traps stop the servers) and",
            "# removes what is left.",
            'if [ "${1:-}" != node ] && [ "${1:-}" != stop ]; then',
            "  on_batch_signal() {",
            "    trap '' TERM INT HUP",
            '    echo "kdakit: TERM for job $SLURM_JOB_ID: stopping every node\'s server"',
            '    scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null',
            '    for _ in $(seq "$(( STOP_GRACE_S + 10 ))"); do  # until the visit steps have ended',
            '      squeue -h -s -j "$SLURM_JOB_ID" -o %i 2>/dev/null \\',
            '        | grep -qv -e "\\.batch$" -e "\\.extern$" || break',
            "      sleep 1",
            "    done",
            f'    timeout "$(( SIGNAL_LEAD_S - STOP_GRACE_S - 20 ))" {" ".join(_stop_argv(settings, visit))}',
            "    exit 143",
            "  }",
            "  trap on_batch_signal TERM INT HUP",
            '  echo "kdakit: allocation $SLURM_JOB_ID on $SLURM_JOB_NODELIST holds for run $RUN_ID"',
            "  # the controller's word that the run is done: the release file",
            '  while [ ! -e "$RELEASE" ]; do sleep 2 & wait $!; done',
            '  rm -f "$RELEASE"',
            "  exit 0",
            "fi",
        ]
    else:
        batch = [
            "",
            "# The batch step: the node part on every node of the allocation.",
            'if [ "${1:-}" != node ] && [ "${1:-}" != stop ]; then',
            f"  exec {' '.join(node_argv(settings, visit, visit.arm, 1, visit.steps))}",
            "fi",
        ]
    body = [*batch, "", _COMMON, _PYXIS if pyxis else _DOCKER, _MAIN]
    return "\n".join(header + body).rstrip() + "\n"


def _stop_argv(settings: SlurmSettings, visit: Visit) -> list[str]:
    argv = [
        "srun",
        "--overlap",
        "--nodes=$SLURM_JOB_NUM_NODES",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
    ]
    if settings.runtime == "pyxis":
        argv += container_flags(settings, visit)
    return argv + ["bash", "$SCRIPT", "stop"]


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


_COMMON = r"""# The node part: `node ARM VISIT STEP...` (or `stop`: remove what the job left on this node).
# Each step's output goes to diag/slurm-<step>.log, its outcome to the status file; files 0640, diag/ 0700.
MODE=$1
shift
ARM=${1:-}
VISIT=${2:-1}
[ "$MODE" = node ] && shift 2
NODE=${SLURMD_NODENAME:-$(hostname -s)}
OUT=$RUN_DIR/$NODE/$ARM
STATUS=$RUN_DIR/slurm/steps/$SLURM_JOB_ID/$NODE.tsv
SERVER=kdakit-sglang-$SLURM_JOB_ID
GSM8K=kdakit-gsm8k-$SLURM_JOB_ID
BENCH=kdakit-bench-$SLURM_JOB_ID
STARTED_SERVER=
CURRENT=
STEP_PID=
SERVER_ARGS=("${SERVER_ARGS[@]//\{arm\}/$ARM}")
BENCH_ARGS+=(--visit "$VISIT")
if [ "$MODE" = node ]; then
  mkdir -p "$OUT/diag" "${STATUS%/*}"
  chmod 700 "$OUT/diag"
fi
status() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >> "$STATUS"; }
# the run's keys never reach a file: logs and inspect output pass through this filter first
scrubbed() { python3 "$ACCESS" filter --env-file "$ENV_FILE"; }
NVIDIA_SMI=${NVIDIA_SMI//\{node\}/$NODE}
# the GPUs Slurm allocated to this step (global indices), the only ones the server may use
ALLOCATED_GPUS=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}
gpus_allocated() {
  [ "$GPU_COUNT" = 0 ] && return 0
  local n
  n=$(tr ',' '\n' <<< "$ALLOCATED_GPUS" | grep -c .)
  [ "$n" = "$GPU_COUNT" ] && return 0
  echo "Slurm allocated ${n} GPU(s) (${ALLOCATED_GPUS:-none}) on $NODE; SKU $SKU needs" \
    "$GPU_COUNT: set gpus_per_node"
  return 1
}
export KDAKIT_RUN_ID=$RUN_ID KDAKIT_HOST=$NODE KDAKIT_SKU=$SKU KDAKIT_ARM=$ARM
"""

_DOCKER = r"""# Docker on the node: the server detached on the allocated GPUs, eval and bench in the
# foreground, all from the kit's image.
export DOCKER_HOST=${DOCKER_HOST_TEMPLATE//\{node\}/$NODE}
GPU_FLAGS=()
[ "$GPU_COUNT" != 0 ] && GPU_FLAGS=(--gpus "\"device=$ALLOCATED_GPUS\"")
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
  gpus_allocated || return 1
  "$DOCKER" rm -f "$SERVER" >/dev/null 2>&1
  local id
  id=$(ensure_image "$SERVER_IMAGE" "$SERVER_IMAGE_TARBALL") || return 1
  ensure_image "$IMAGE" "$IMAGE_TARBALL" >/dev/null || return 1
  "$DOCKER" run -d --name "$SERVER" --label io.kdakit.run-id="$RUN_ID" --label io.kdakit.arm="$ARM" \
    --label io.kdakit.slurm-job="$SLURM_JOB_ID" --network host --ipc host --shm-size "$SHM_SIZE" \
    --stop-timeout "$STOP_GRACE_S" "${GPU_FLAGS[@]}" "${ULIMITS[@]}" -v "$OUT:/results" \
    -v "$MODEL_PATH:$MODEL_MOUNT:ro" --env-file "$ENV_FILE" "${SERVER_ENV[@]/#/--env=}" \
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
  "$DOCKER" run --rm --name "$name" --label io.kdakit.slurm-job="$SLURM_JOB_ID" --network host \
    -v "$OUT:/results" --env-file "$ENV_FILE" \
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

# SGLang's graceful shutdown (TERM, up to STOP_GRACE_S), then its log and inspect, keys replaced
stop_containers() {
  if [ -n "$STARTED_SERVER" ] && "$DOCKER" container inspect "$SERVER" >/dev/null 2>&1; then
    "$DOCKER" stop --time "$STOP_GRACE_S" "$SERVER" >/dev/null 2>&1
    (umask 027; "$DOCKER" logs --timestamps "$SERVER" 2>&1 | scrubbed > "$OUT/diag/kdakit-sglang.log")
    (umask 027
     "$DOCKER" container inspect "$SERVER" 2>/dev/null | scrubbed > "$OUT/diag/kdakit-sglang.inspect.json")
    "$DOCKER" rm -f "$SERVER" >/dev/null 2>&1
  fi
  "$DOCKER" rm -f "$GSM8K" "$BENCH" >/dev/null 2>&1
}

stop_job_leftovers() {  # `stop`: every container of this job on this node
  local ids
  ids=$("$DOCKER" ps -aq --filter "label=io.kdakit.slurm-job=$SLURM_JOB_ID" 2>/dev/null)
  [ -n "$ids" ] && "$DOCKER" stop --time "$STOP_GRACE_S" $ids >/dev/null 2>&1
  [ -n "$ids" ] && "$DOCKER" rm -f $ids >/dev/null 2>&1
  return 0
}
"""

_PYXIS = r"""# pyxis/enroot: this node part already runs inside the kit's image (enroot exposes only the GPUs
# Slurm allocated); the server is a process beside it.
SERVER_PID_FILE=$RUN_DIR/slurm/state/server-$SLURM_JOB_ID-$NODE.pid
SERVER_ARGS=("${SERVER_ARGS[@]//\$OUT/$OUT}")  # the node's results folder, as the server sees it
set -a; . "$ENV_FILE"; set +a
export HF_HUB_OFFLINE=1
if [ -n "$CACHE_DIR" ]; then
  export TRITON_CACHE_DIR=$CACHE_DIR/triton HELION_CACHE_DIR=$CACHE_DIR/helion \
    TORCHINDUCTOR_CACHE_DIR=$CACHE_DIR/inductor
fi

step_deploy() {
  gpus_allocated || return 1
  env "${SERVER_ENV[@]}" "${SERVER_ENTRYPOINT[@]}" "${SERVER_ARGS[@]}" \
    > >(scrubbed >> "$OUT/diag/kdakit-sglang.log") 2>&1 &
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

stop_server_pid() {  # SGLang's graceful shutdown: TERM, up to STOP_GRACE_S, then KILL
  local pid=$1 waited=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$STOP_GRACE_S" ]; do
    sleep 1
    waited=$((waited + 1))
  done
  kill -KILL "$pid" 2>/dev/null
  return 0
}

stop_containers() {
  if [ -n "$STARTED_SERVER" ] && [ -s "$SERVER_PID_FILE" ]; then
    stop_server_pid "$(cat "$SERVER_PID_FILE")"
    rm -f "$SERVER_PID_FILE"
  fi
  # (the server's output reached its log through the key filter: step_deploy)
}

stop_job_leftovers() {
  [ -s "$SERVER_PID_FILE" ] && stop_server_pid "$(cat "$SERVER_PID_FILE")"
  rm -f "$SERVER_PID_FILE"
  return 0
}
"""

_MAIN = r"""if [ "$MODE" = stop ]; then stop_job_leftovers; exit 0; fi

step_hold() {  # keep the server up until the job is cancelled (make teardown) or its time ends
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
