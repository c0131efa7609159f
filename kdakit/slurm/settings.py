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
    time_limit: str = ""  # Slurm time (e.g. "2:00:00"); empty: from the protocols' bounds
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
