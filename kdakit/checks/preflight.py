"""Host preflight: is this machine ready to serve the kit's profile? One line per check, naming cause and fix.

Standard library only, on purpose: the playbooks' preflight role ships this very file to each GPU host
(`ansible.builtin.script`) and runs it with the host's own python3, where kdakit is not installed.
The checks are pure functions over command output, so they are unit-tested without GPUs or Ansible.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

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


def _number(text: str) -> float:
    text = text.replace("MiB", "").strip()
    try:
        return float(text)
    except ValueError:
        return float("nan")  # "[N/A]" on some boards; treated as unknown, never as idle


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
    # `docker info` with no engine behind it still prints the client's half, with ServerErrors
    if info is not None and (info.get("ServerErrors") or not info.get("ServerVersion")):
        info = None
    if info is None:
        out = [
            Verdict(
                "docker",
                False,
                "cannot reach the Docker engine",
                "start dockerd (systemctl start docker); another engine: set kdakit_docker_host",
            )  # fmt: skip
        ]
        if require_nvidia_runtime:
            out.append(
                Verdict(
                    "nvidia-runtime",
                    False,
                    "unknown (no Docker engine to ask)",
                    "start dockerd; then install the NVIDIA Container Toolkit if it lists no nvidia runtime",
                )
            )
        return out
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
            "disk", False, f"{path} does not exist",
            f"create {path}, or set kdakit_image_disk_path to the Docker data root (docker info: Root Dir)",
        )  # fmt: skip
    free_gb = free_bytes / 1e9
    return Verdict(
        "disk",
        free_gb >= min_free_gb,
        f"{free_gb:.1f} GB free at {path}, need {min_free_gb:g} GB",
        f"free space under {path} (docker system prune), or move the Docker data root to a larger disk"
        " and set kdakit_image_disk_path to it (kdakit_min_free_gb: the space asked for)",
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
        f"copy ShareGPT_V3_unfiltered_cleaned_split.json to {path} (elsewhere: set kdakit_sharegpt_path),"
        " or set kdakit_bench_dataset: random",
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
                "install the NVIDIA driver so that nvidia-smi works (elsewhere: set kdakit_nvidia_smi)",
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


# The controller's side: `make preflight` (and reproduce / ab-* before anything heavy) runs the host checks
# above on every host of the SKU's group through the preflight playbook, adds the controller's own checks
# (an image builder, when the image must be built) and prints one table.

HOST_LINE = re.compile(r"^(OK  |FAIL) (\S+): ([a-z0-9-]+): (.*)$")


def parse_lines(stdout: str) -> list[Verdict]:
    """The verdict lines the host script prints, back into Verdicts (the closing tally line left out)."""
    out = []
    for line in stdout.splitlines():
        m = HOST_LINE.match(line.strip())
        if not m or m.group(3) == "preflight":
            continue
        detail, _, fix = m.group(4).partition(". Fix: ")
        out.append(Verdict(m.group(3), m.group(1) == "OK  ", detail, fix))
    return out


def check_builder(docker_version: str | None, buildx_version: str | None) -> Verdict:
    """What `make image` needs on the machine that builds: BuildKit through buildx, or a client (< 23) whose
    built-in builder still does BuildKit (Debian's docker.io 20.10)."""
    fix = "install buildx (Debian/Ubuntu: apt-get install docker-buildx; Docker's repo: docker-buildx-plugin)"
    if docker_version is None:
        return Verdict("builder", False, "no docker client", "install Docker (docker.io or docker-ce)")
    if buildx_version:
        return Verdict("builder", True, f"Docker {docker_version}, {buildx_version}")
    try:
        major = int(docker_version.split(".")[0])
    except ValueError:
        major = 99
    if major < 23:
        return Verdict("builder", True, f"Docker {docker_version} (built-in BuildKit, no buildx needed)")
    return Verdict("builder", False, f"Docker {docker_version} without buildx (BuildKit needs it)", fix)


def controller_checks(docker: str, build: bool) -> list[Verdict]:
    if not build:
        return []
    version = _capture([docker, "version", "--format", "{{.Client.Version}}"])
    if version is None:  # the daemon may be down: the client still reports its own version
        version = _capture([docker, "--version"])
        version = re.search(r"(\d+\.\d+[\w.+-]*)", version).group(1) if version else None
    buildx = _capture([docker, "buildx", "version"])
    verdicts = [check_builder(version.strip() if version else None, buildx.strip() if buildx else None)]
    info = _capture([docker, "info", "--format", "{{json .ServerVersion}}"])
    verdicts.append(
        Verdict(
            "docker",
            info is not None,
            f"Docker engine {info.strip()}" if info else "cannot reach the Docker engine",
            "start dockerd (systemctl start docker) and check DOCKER_HOST",
        )
    )
    return verdicts


def limit_args(extra: str) -> list[str]:
    """The --limit/-l patterns among ansible-playbook's extra arguments, for ansible-inventory: the hosts the
    run will touch (and so the space it needs) are the limited ones."""
    words, out = shlex.split(extra), []
    for i, word in enumerate(words):
        if word in ("--limit", "-l") and i + 1 < len(words):
            out += ["--limit", words[i + 1]]
        elif word.startswith("--limit="):
            out += ["--limit", word.split("=", 1)[1]]
    return out


def hosts_of(inventory: dict, group: str) -> list[str]:
    """Hosts of a group (and its children) in `ansible-inventory --list` output."""
    seen, todo, hosts = set(), [group], []
    while todo:
        g = todo.pop()
        if g in seen:
            continue
        seen.add(g)
        entry = inventory.get(g) or {}
        hosts += [h for h in entry.get("hosts", []) if h not in hosts]
        todo += entry.get("children", [])
    return sorted(hosts)


def step_outputs(folder: Path) -> dict[str, dict]:
    """host -> {'verdicts': [...]} or {'unreachable': msg}: the JSON file playbooks/preflight.yml writes for
    each host (its script's output, or why the host could not be reached)."""
    out: dict[str, dict] = {}
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if "unreachable" in data:
            msg = re.sub(r"\s+", " ", str(data["unreachable"]))
            out[data["host"]] = {"unreachable": re.sub(r"^.*can be reached over ssh: ", "", msg)}
        else:
            out[data["host"]] = {"verdicts": parse_lines(data.get("stdout", ""))}
    return out


def render(rows: list[tuple[str, Verdict]]) -> str:
    header = ("host", "check", "status", "value", "fix")
    cells = [header] + [
        (h, v.check, "ok" if v.ok else "FAIL", v.detail, "" if v.ok else v.fix) for h, v in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    lines = []
    for c in cells:
        lines.append(
            ("  ".join(x.ljust(w) for x, w in zip(c[:4], widths, strict=True)) + "  " + c[4]).rstrip()
        )
    return "\n".join(lines)


def cluster_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m kdakit.checks.preflight cluster", description="preflight of a SKU's hosts"
    )
    p.add_argument("--sku", required=True)
    p.add_argument("--inventory", required=True)
    p.add_argument("--ansible-playbook", default="ansible-playbook")
    p.add_argument("--ansible-inventory", default="ansible-inventory")
    p.add_argument("--playbook", required=True, help="playbooks/preflight.yml")
    p.add_argument("--docker", default="docker", help="the controller's docker client (image build)")
    p.add_argument("--build", action="store_true", help="the image will be built here: check the builder")
    p.add_argument("--gate", action="store_true", help="fail only when nothing could run (see the table)")
    p.add_argument("--extra", default="", help="more ansible-playbook arguments")
    p.add_argument("--hosts-only", action="store_true", help="only check that the group has hosts")
    p.add_argument("--results", help="the controller's results folder: refuse when the run will not fit")
    p.add_argument("--arms", type=int, default=1, help="arm visits the run measures (for --results)")
    p.add_argument(
        "--arm", action="append", default=[], dest="arm_names",
        help="an arm the run serves (repeatable): refuse when its kernels cannot run on the SKU's GPU",
    )  # fmt: skip
    args = p.parse_args(argv)
    for arm in args.arm_names:  # `kdakit plan` refuses an arm whose kernels cannot run on the SKU's GPU
        planned = subprocess.run([sys.executable, "-m", "kdakit", "plan", "--sku", args.sku, "--arm", arm],
                                 capture_output=True, text=True, timeout=120)  # fmt: skip
        if planned.returncode:
            lines = [line for line in planned.stderr.splitlines() if line.strip()]
            last = lines[-1] if lines else f"kdakit plan exited {planned.returncode}"
            print(f"preflight: {last.removeprefix('kdakit plan: error: ')}")
            return 2
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    inv = subprocess.run(
        [args.ansible_inventory, "-i", args.inventory, "--list", *limit_args(args.extra)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    try:
        hosts = hosts_of(json.loads(inv.stdout), args.sku)
    except json.JSONDecodeError:
        print(f"preflight: cannot read the inventory {args.inventory}: {inv.stderr.strip()[-300:]}")
        return 2
    if not hosts:
        print(
            f"preflight: the inventory {args.inventory} has no hosts in group {args.sku}; list them in a copy"
            f" of playbooks/inventories/examples/{args.sku}.yml and pass INVENTORY=path/to/it"
        )
        return 2
    if args.results:
        from kdakit.records.controller_files import preflight_space

        refusal = preflight_space(args.results, len(hosts), args.arms)
        if refusal:
            print(refusal)
            return 2
    if args.hosts_only:
        return 0
    rows = [("controller", v) for v in controller_checks(args.docker, args.build)]
    with tempfile.TemporaryDirectory(prefix="kdakit-preflight-") as outputs:
        cmd = [args.ansible_playbook, "-i", args.inventory, args.playbook, "-e", f"kdakit_hosts={args.sku}",
               "-e", f"kdakit_preflight_output={outputs}", *shlex.split(args.extra)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        results = step_outputs(Path(outputs))
    if not results and proc.returncode != 0:
        print(f"preflight: ansible-playbook {args.playbook} exited {proc.returncode}: "
              f"{(proc.stderr or proc.stdout).strip()[-400:]}")  # fmt: skip
        return 2
    passed = []
    for host in hosts:
        result = results.get(host)
        if result is None:
            rows.append(
                (host, Verdict("reach", False, "no preflight result", "see ansible-playbook's output"))
            )
        elif "unreachable" in result:
            rows.append((host, Verdict("ssh", False, f"unreachable: {result['unreachable']}",
                                       "check the address, user and key in the inventory")))  # fmt: skip
        else:
            rows += [(host, v) for v in result["verdicts"]]
            if result["verdicts"] and all(v.ok for v in result["verdicts"]):
                passed.append(host)
    print(render(rows))
    failed = [r for r in rows if not r[1].ok]
    controller_ok = all(v.ok for h, v in rows if h == "controller")
    print(f"preflight: {len(failed)} check(s) failed; {len(passed)} of {len(hosts)} host(s) ready")
    if args.gate:
        if controller_ok and passed:
            if failed:
                print("preflight: going on with the ready hosts; deploy records the others as failed")
            return 0
        print("preflight: stopping before any image build, pull or load (fix the FAIL rows above)")
        return 1
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cluster"]:
        return cluster_main(argv[1:])
    parser = argparse.ArgumentParser(prog="kdakit-preflight", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
