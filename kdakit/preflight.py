"""Host preflight: is this machine ready to serve the kit's profile? One line per check, naming cause and fix.

Standard library only, on purpose: the playbooks' preflight role ships this very file to each GPU host
(`ansible.builtin.script`) and runs it with the host's own python3, where kdakit is not installed.
The checks are pure functions over command output, so they are unit-tested without GPUs or Ansible.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

GPU_QUERY = "index,name,driver_version,memory.used,memory.total"
MIN_PYTHON = (3, 9)


@dataclass(frozen=True)
class Verdict:
    check: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self, host: str) -> str:
        if self.ok:
            return f"OK   {host}: {self.check}: {self.detail}"
        return f"FAIL {host}: {self.check}: {self.detail}. Fix: {self.fix}"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    driver: str
    memory_used_mib: float
    memory_total_mib: float


def parse_gpus(csv_text: str) -> list[Gpu]:
    """Rows of `nvidia-smi --query-gpu=<GPU_QUERY> --format=csv,noheader,nounits`."""
    gpus = []
    for raw in csv_text.splitlines():
        if not raw.strip():
            continue
        parts = [p.strip() for p in raw.split(",")]
        if len(parts) != 5:
            raise ValueError(f"unexpected nvidia-smi row {raw!r} (want {GPU_QUERY})")
        index, name, driver, used, total = parts
        gpus.append(Gpu(int(index), name, driver, _number(used), _number(total)))
    return gpus


def _number(text: str) -> float:
    text = text.replace("MiB", "").strip()
    try:
        return float(text)
    except ValueError:
        return float("nan")  # "[N/A]" on some boards; treated as unknown, never as idle


def check_python(version: tuple[int, int], has_requests: bool) -> list[Verdict]:
    found = f"{version[0]}.{version[1]}"
    out = [
        Verdict(
            "python",
            version >= MIN_PYTHON,
            f"python3 {found}" if version >= MIN_PYTHON else f"python3 is {found}, need >= 3.9",
            "install python3 >= 3.9 (Debian/Ubuntu: apt-get install python3)",
        )
    ]
    out.append(
        Verdict(
            "python-requests",
            has_requests,
            "requests importable"
            if has_requests
            else "python3 cannot import requests (Ansible's docker modules need it)",
            "apt-get install python3-requests (or pip install requests for the host's python3)",
        )
    )
    return out


def check_gpus(
    gpus: list[Gpu],
    expect_count: int,
    expect_model: str,
    min_driver: int,
    max_idle_mib: float,
    busy_pids: list[str],
) -> list[Verdict]:
    if not gpus:
        return [Verdict("gpus", False, "nvidia-smi lists no GPU", "check the NVIDIA driver (nvidia-smi -L)")]
    names = sorted({g.name for g in gpus})
    out = [
        Verdict(
            "gpu-count",
            len(gpus) == expect_count,
            f"nvidia-smi lists {len(gpus)} GPU(s), expected {expect_count}",
            "use a host with the profile's GPU count, or fix missing GPUs "
            "(nvidia-smi -L, dmesg | grep -i xid)",
        ),
        Verdict(
            "gpu-model",
            all(expect_model.lower() in g.name.lower() for g in gpus),
            f"GPU model {', '.join(names)}, expected {expect_model}",
            f"run the {expect_model} profile only on {expect_model} hosts (check the inventory group)",
        ),
    ]
    drivers = sorted({g.driver for g in gpus})
    majors = []
    for d in drivers:
        try:
            majors.append(int(d.split(".")[0]))
        except ValueError:
            majors.append(-1)
    out.append(
        Verdict(
            "driver",
            min(majors) >= min_driver,
            f"driver {', '.join(drivers)}, need >= {min_driver}",
            f"install NVIDIA driver >= {min_driver} (CUDA 13 needs it)",
        )
    )
    busy = [g for g in gpus if not (g.memory_used_mib <= max_idle_mib)]
    detail = "GPUs idle"
    if busy or busy_pids:
        parts = [f"GPU {g.index} uses {g.memory_used_mib:.0f} MiB" for g in busy]
        if busy_pids:
            parts.append(f"compute processes {', '.join(busy_pids)}")
        detail = "GPUs busy: " + "; ".join(parts)
    out.append(
        Verdict(
            "gpu-idle",
            not busy and not busy_pids,
            detail,
            "stop what runs on the GPUs (nvidia-smi --query-compute-apps=pid,name --format=csv), then retry",
        )
    )
    return out


def check_docker(info: dict | None, require_nvidia_runtime: bool) -> list[Verdict]:
    if info is None:
        return [
            Verdict("docker", False, "cannot reach the Docker engine", "start dockerd and check DOCKER_HOST")
        ]
    out = [Verdict("docker", True, f"Docker {info.get('ServerVersion', '?')}")]
    if require_nvidia_runtime:
        runtimes = sorted((info.get("Runtimes") or {}).keys())
        out.append(
            Verdict(
                "nvidia-runtime",
                "nvidia" in runtimes,
                f"Docker runtimes: {', '.join(runtimes) or 'none'}",
                "install the NVIDIA Container Toolkit and run: nvidia-ctk runtime configure --runtime=docker",
            )
        )
    return out


def check_disk(path: str, free_bytes: int | None, min_free_gb: float) -> Verdict:
    if free_bytes is None:
        return Verdict(
            "disk", False, f"{path} does not exist", f"create {path} or point the kit at another disk"
        )
    free_gb = free_bytes / 1e9
    return Verdict(
        "disk",
        free_gb >= min_free_gb,
        f"{free_gb:.1f} GB free at {path}, need {min_free_gb:g} GB",
        f"free space under {path} (docker system prune) or set the Docker data root on a larger disk",
    )


def check_model(path: str, listing: list[str] | None) -> Verdict:
    fix = f"stage the weights at {path} (hf download MODEL --local-dir {path}) or set kdakit_model_path"
    if listing is None:
        return Verdict("model", False, f"model path {path} does not exist", fix)
    weights = [n for n in listing if n.endswith((".safetensors", ".bin"))]
    ok = "config.json" in listing and bool(weights)
    detail = (
        f"{len(weights)} weight file(s) and config.json at {path}"
        if ok
        else (
            f"{path} lacks "
            + ("config.json" if "config.json" not in listing else "weight files (*.safetensors)")
        )
    )
    return Verdict("model", ok, detail, fix)


def check_dataset(dataset: str, path: str, exists: bool) -> Verdict:
    if dataset == "random":
        return Verdict("bench-data", True, "serving benchmark uses random ids (chosen explicitly)")
    return Verdict(
        "bench-data",
        exists,
        f"ShareGPT data {'at' if exists else 'missing at'} {path}",
        f"copy ShareGPT_V3_unfiltered_cleaned_split.json to {path}, or set kdakit_bench_dataset: random",
    )


# Gathering (only what follows touches the machine).


def _capture(argv: list[str]) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _free_bytes(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def gather_and_check(args: argparse.Namespace) -> list[Verdict]:
    verdicts = []
    try:
        import requests  # noqa: F401

        has_requests = True
    except ImportError:
        has_requests = False
    verdicts += check_python(sys.version_info[:2], has_requests)

    csv_text = _capture([args.nvidia_smi, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    if csv_text is None:
        verdicts.append(
            Verdict(
                "gpus",
                False,
                f"{args.nvidia_smi} failed or is missing",
                "install the NVIDIA driver so that nvidia-smi works",
            )
        )
    else:
        apps = _capture([args.nvidia_smi, "--query-compute-apps=pid", "--format=csv,noheader"]) or ""
        pids = [p.strip() for p in apps.splitlines() if p.strip()]
        try:
            gpus = parse_gpus(csv_text)
        except ValueError as exc:
            verdicts.append(Verdict("gpus", False, str(exc), "check the NVIDIA driver (nvidia-smi -L)"))
        else:
            verdicts += check_gpus(
                gpus, args.expect_gpus, args.expect_model, args.min_driver, args.max_idle_mib, pids
            )

    info_text = _capture([args.docker, "info", "--format", "{{json .}}"])
    try:
        info = json.loads(info_text) if info_text else None
    except json.JSONDecodeError:
        info = None
    verdicts += check_docker(info, args.require_nvidia_runtime)
    verdicts.append(check_disk(args.disk_path, _free_bytes(args.disk_path), args.min_free_gb))
    listing = sorted(os.listdir(args.model_path)) if os.path.isdir(args.model_path) else None
    verdicts.append(check_model(args.model_path, listing))
    verdicts.append(check_dataset(args.bench_dataset, args.sharegpt_path, os.path.isfile(args.sharegpt_path)))
    return verdicts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=os.uname().nodename, help="name printed on every line (inventory name)")
    p.add_argument("--expect-gpus", type=int, required=True)
    p.add_argument("--expect-model", required=True, help="substring of the GPU name, e.g. H200")
    p.add_argument("--min-driver", type=int, required=True, help="minimum driver major version")
    p.add_argument(
        "--max-idle-mib", type=float, default=1024.0, help="GPU memory in use that still counts as idle"
    )
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    p.add_argument("--docker", default="docker")
    p.add_argument("--require-nvidia-runtime", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--disk-path", default="/var/lib/docker", help="where the image will be stored")
    p.add_argument("--min-free-gb", type=float, default=100.0)
    p.add_argument("--model-path", required=True)
    p.add_argument("--bench-dataset", choices=["sharegpt", "random"], default="sharegpt")
    p.add_argument("--sharegpt-path", default="")


def run(args: argparse.Namespace) -> int:
    verdicts = gather_and_check(args)
    for v in verdicts:
        print(v.line(args.host))
    failed = [v for v in verdicts if not v.ok]
    status = "FAIL" if failed else "OK  "
    print(f"{status} {args.host}: preflight: {len(failed)} of {len(verdicts)} checks failed")
    return 1 if failed else 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "preflight", help="check that this host can serve a profile (GPUs, driver, Docker)"
    )
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kdakit-preflight", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
