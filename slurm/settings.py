"""The site's Slurm settings: one TOML file (slurm/site.example.toml documents every key) plus `--set
KEY=VALUE` overrides. Unknown keys and wrong types stop here with one line, before anything is submitted."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kdakit.facts.errors import UsageError

RUNTIMES = ("docker", "pyxis")


@dataclass
class SlurmSettings:
    # How each node runs the kit's image: "docker" (a Docker engine on the node) or "pyxis" (srun
    # --container-image from an enroot squashfs on shared storage).
    runtime: str = "docker"
    partition: str = ""  # empty: the cluster's default partition
    account: str = ""
    qos: str = ""
    nodes: int = 1  # nodes per arm visit; each runs its own server, eval and bench
    gpus_per_node: int = 4
    exclusive: bool = True
    requeue: bool = False  # false: --no-requeue (a requeued visit would break the interleaving)
    nodelist: str = ""  # e.g. "gpu[01-02]": must name `nodes` nodes (checked before sbatch)
    # --time: the run's expected duration (the rates below) x (1 + time_margin) + signal_lead_s, capped at
    # max_time (the site's cap; a partition whose MaxTime is smaller refuses the run); time_limit replaces it
    time_limit: str = ""
    time_margin: float = 0.5
    max_time: str = ""
    expected_ready_s: float = 900.0  # image start, weights, CUDA graphs: the server's usual start
    expected_prefill_tok_s: float = 20000.0  # input tokens a second, whole server
    expected_decode_tok_s: float = 40.0  # output tokens a second, one request (MTP on)
    expected_answer_tokens: float = 400.0  # a GSM8K answer's usual length
    # --signal=B:TERM@signal_lead_s: the batch step's trap passes TERM to the steps; each server then gets
    # TERM and up to stop_grace_s for SGLang's graceful shutdown before KILL
    signal_lead_s: int = 180
    stop_grace_s: int = 60
    schedule_memory: bool = False  # true where the site schedules memory: --mem=0 (all of each node's memory)
    pending_timeout_s: float = 1800.0  # a visit still pending after this is cancelled, with Slurm's reason
    poll_s: float = 5.0
    extra_sbatch: list[str] = field(default_factory=list)  # more #SBATCH options, e.g. ["--constraint=h200"]
    image: str = (
        "kdakit:latest"  # docker: the image every node's engine holds (make image-save + docker load)
    )
    # docker: a make image-save tarball (.tar.zst beside its .id) on shared storage, loaded by a node whose
    # engine lacks the image; empty: the image must be there already
    image_tarball: str = ""
    server_image_tarball: str = ""
    squashfs: str = ""  # pyxis: the image as an enroot squashfs on shared storage (make image-squashfs)
    # pyxis: Triton, Helion and Inductor write their caches; a writable container, or a cache folder on node
    # storage mounted at /kdakit-cache (or both)
    container_writable: bool = True
    cache_dir: str = ""
    docker_host: str = "unix:///var/run/docker.sock"  # {node}: the node's Slurm name
    docker_cli: str = "docker"
    use_gpus: bool = True
    server_image: str = ""  # docker: the server's image (empty: image)
    server_entrypoint: list[str] = field(default_factory=lambda: ["kdakit"])
    server_command: list[str] = field(default_factory=list)  # empty: kdakit serve for the SKU and arm
    server_set: list[str] = field(default_factory=list)  # kdakit serve --set FLAG=VALUE
    server_open: bool = False  # true: no keys, 0.0.0.0 (recorded in provenance)
    server_ready_timeout_s: float = 1800.0
    server_shm_size: str = "32G"
    # docker: the server's ulimits (SGLang's advice; raising them needs CAP_SYS_RESOURCE on the node)
    server_ulimits: list[str] = field(default_factory=lambda: ["memlock=-1:-1", "stack=67108864:67108864"])
    model_path: str = "/data/models/GLM-5.3-Flash"  # on every node (shared storage)
    model_mount: str = "/models/GLM-5.3-Flash"  # where the server and bench see it
    bench_dataset: str = "sharegpt"  # sharegpt or random
    sharegpt_path: str = "/data/datasets/ShareGPT_V3_unfiltered_cleaned_split.json"
    sharegpt_mount: str = "/data/sharegpt.json"
    bench_protocols: str = ""  # another protocols.toml on shared storage (custom sweeps); empty: the kit's
    gsm8k_protocol: str = "pr"
    gsm8k_args: list[str] = field(default_factory=list)
    bench_args: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)  # more SRC:DST[:ro] for the eval and bench containers
    nvidia_smi: str = "nvidia-smi"  # {node}: the node's Slurm name

    def check(self) -> SlurmSettings:
        if self.runtime not in RUNTIMES:
            raise UsageError(f"slurm runtime {self.runtime!r}: expected one of {', '.join(RUNTIMES)}")
        if self.runtime == "pyxis" and not self.squashfs:
            raise UsageError(
                "slurm runtime pyxis needs squashfs = the image as an enroot squashfs on shared storage "
                "(make image-squashfs)"
            )
        if self.runtime == "pyxis" and not (self.container_writable or self.cache_dir):
            raise UsageError(
                "slurm runtime pyxis needs a writable Triton/Helion cache: container_writable = true or "
                "cache_dir = a folder on the nodes"
            )
        if self.stop_grace_s + 30 > self.signal_lead_s:
            raise UsageError(
                f"slurm signal_lead_s {self.signal_lead_s} must exceed stop_grace_s {self.stop_grace_s} by "
                "30 s or more: the trap stops the servers within the lead"
            )
        if self.nodes < 1 or self.gpus_per_node < 0:
            raise UsageError(f"slurm nodes {self.nodes} / gpus_per_node {self.gpus_per_node}: out of range")
        if self.bench_dataset not in ("sharegpt", "random"):
            raise UsageError(f"slurm bench_dataset {self.bench_dataset!r}: expected sharegpt or random")
        return self


def _coerce(name: str, kind: type, value):
    if kind is bool and isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise UsageError(f"slurm setting {name}={value!r}: expected true or false")
        return value.lower() in ("true", "1", "yes")
    if kind is list and isinstance(value, str):
        value = json.loads(value) if value.startswith("[") else [v for v in value.split(",") if v]
    try:
        coerced = kind(value)
    except (TypeError, ValueError):
        raise UsageError(f"slurm setting {name}={value!r}: expected {kind.__name__}") from None
    if kind in (int, float) and isinstance(value, bool) or kind is str and not isinstance(value, str):
        raise UsageError(f"slurm setting {name}={value!r}: expected {kind.__name__}")
    return coerced


_KINDS = {"str": str, "int": int, "float": float, "bool": bool}


def _kind(f: dataclasses.Field) -> type:
    text = str(f.type)
    return list if text.startswith("list") else _KINDS[text]


def load(path: Path | str | None = None, overrides: list[str] = ()) -> SlurmSettings:
    """Settings from the TOML file (absent path or file: defaults) and KEY=VALUE overrides."""
    values: dict = {}
    if path:
        p = Path(path)
        if not p.is_file():
            raise UsageError(f"slurm settings file {p} does not exist (start from slurm/site.example.toml)")
        try:
            values = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"slurm settings file {p}: {exc}") from None
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"slurm setting {item!r}: expected KEY=VALUE")
        values[key.strip()] = value
    fields = {f.name: f for f in dataclasses.fields(SlurmSettings)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise UsageError(f"unknown slurm setting(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    return SlurmSettings(**{k: _coerce(k, _kind(fields[k]), v) for k, v in values.items()}).check()
