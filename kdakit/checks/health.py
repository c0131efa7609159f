"""`kdakit health allreduce`: all-reduce sweep across the host's GPUs (NCCL) or CPU processes (gloo).

One process per GPU, like torchrun. Reports algorithm and bus bandwidth per message size with the
nccl-tests convention (busbw = algbw * 2(n-1)/n), checks the reduced values, and gives a verdict against
a minimum bus bandwidth at the largest size. NVLink multicast (NVLS) stays off, as the lent machines need.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kdakit.facts.errors import UsageError

# NVLS / multicast off: the lent multi-GPU hosts do not support it, and a health check must not depend on it.
NO_MULTICAST_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
DEFAULT_SIZES = {"nccl": "1M,4M,16M,64M,256M,1G", "gloo": "4K,64K,1M,4M"}
# A healthy 4-8 GPU NVLink node reaches several hundred GB/s at 1 GiB; PCIe-only paths stay far below 200.
DEFAULT_MIN_BUSBW_GBPS = {"nccl": 200.0, "gloo": 0.0}
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class Point:
    """One message size of the sweep: its time per all-reduce, bandwidths (nccl-tests' definitions), and
    whether every rank got the exact sum."""

    size_bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    correct: bool


def parse_sizes(text: str) -> list[int]:
    sizes = []
    for item in text.split(","):
        item = item.strip().upper().removesuffix("B").removesuffix("I")
        unit = item[-1] if item and item[-1] in UNITS else ""
        number = item[:-1] if unit else item
        try:
            value = int(float(number) * UNITS[unit])
        except ValueError:
            raise UsageError(f"bad message size {item!r}: use e.g. 4K,1M,1G") from None
        if value < 4:
            raise UsageError(f"message size {item!r} is below one float32 element")
        sizes.append(value)
    return sizes


def bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n."""
    return 2.0 * (world_size - 1) / world_size


def to_point(size_bytes: int, seconds: float, world_size: int, correct: bool) -> Point:
    algbw = size_bytes / seconds / 1e9
    return Point(size_bytes, seconds * 1e6, algbw, algbw * bus_factor(world_size), correct)


def verdict(points: list[Point], world_size: int, min_busbw_gbps: float) -> tuple[bool, str]:
    if not all(p.correct for p in points):
        bad = [human(p.size_bytes) for p in points if not p.correct]
        return False, f"FAIL: wrong all-reduce result at {', '.join(bad)}"
    if world_size == 1:
        return True, "PASS (world size 1: values checked; no inter-GPU traffic, so no bandwidth verdict)"
    largest = max(points, key=lambda p: p.size_bytes)
    ok = largest.busbw_gbps >= min_busbw_gbps
    word = "PASS" if ok else "FAIL"
    return ok, (
        f"{word}: bus bandwidth {largest.busbw_gbps:.1f} GB/s at {human(largest.size_bytes)}, "
        f"threshold {min_busbw_gbps:g} GB/s"
    )


def human(n: int) -> str:
    for unit in ("G", "M", "K"):
        if n >= UNITS[unit] and n % UNITS[unit] == 0:
            return f"{n // UNITS[unit]}{unit}"
    return str(n)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(
    rank: int, world_size: int, backend: str, port: int, sizes: list[int], iters: int, warmup: int, queue
) -> None:
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        device_id=device if backend == "nccl" else None,
    )
    try:
        expected = world_size * (world_size + 1) / 2
        results = []
        for size in sizes:
            tensor = torch.empty(size // 4, dtype=torch.float32, device=device)
            for _ in range(warmup):
                dist.all_reduce(tensor)
            tensor.fill_(rank + 1)
            dist.all_reduce(tensor)
            correct = bool(torch.all(tensor == expected).item())
            _sync(backend)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(tensor)
            _sync(backend)
            elapsed = (time.perf_counter() - start) / iters
            # The slowest rank sets the pace, as in nccl-tests.
            stats = torch.tensor([elapsed, 0.0 if correct else 1.0], dtype=torch.float64, device=device)
            dist.all_reduce(stats, op=dist.ReduceOp.MAX)
            results.append((size, float(stats[0]), stats[1].item() == 0.0))
        if rank == 0:
            queue.put(results)
    finally:
        dist.destroy_process_group()


def _sync(backend: str) -> None:
    if backend == "nccl":
        import torch

        torch.cuda.synchronize()


def allreduce_sweep(backend: str, world_size: int, sizes: list[int], iters: int, warmup: int) -> list[Point]:
    import torch.multiprocessing as mp

    for key, value in NO_MULTICAST_ENV.items():
        os.environ[key] = value  # inherited by the spawned ranks
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(
        _worker,
        args=(world_size, backend, _free_port(), sizes, iters, warmup, queue),
        nprocs=world_size,
        join=True,
        start_method="spawn",
    )
    raw = queue.get()
    return [to_point(size, seconds, world_size, correct) for size, seconds, correct in raw]


def _allreduce(args) -> int:
    backend = args.backend
    if backend == "nccl":
        import torch

        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if available == 0:
            raise UsageError("no CUDA GPU visible: use --backend gloo --world-size N for a CPU check")
        world_size = args.world_size or available
        if world_size > available:
            raise UsageError(f"--world-size {world_size} exceeds the {available} visible GPU(s)")
    else:
        world_size = args.world_size or 2
    if world_size < 1:
        raise UsageError("--world-size must be >= 1")
    sizes = parse_sizes(args.sizes or DEFAULT_SIZES[backend])
    threshold = args.min_busbw if args.min_busbw is not None else DEFAULT_MIN_BUSBW_GBPS[backend]
    points = allreduce_sweep(backend, world_size, sizes, args.iters, args.warmup)
    ok, text = verdict(points, world_size, threshold)
    print(
        f"all-reduce sum, float32, backend {backend}, world size {world_size}, "
        f"{args.iters} iterations ({', '.join(f'{k}={v}' for k, v in NO_MULTICAST_ENV.items())})"
    )
    print(f"{'size':>8} {'time_us':>12} {'algbw_GB/s':>11} {'busbw_GB/s':>11} {'values':>7}")
    for p in points:
        print(
            f"{human(p.size_bytes):>8} {p.time_us:>12.1f} {p.algbw_gbps:>11.2f} {p.busbw_gbps:>11.2f} "
            f"{'ok' if p.correct else 'WRONG':>7}"
        )
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "check": "allreduce",
                    "backend": backend,
                    "world_size": world_size,
                    "iters": args.iters,
                    "env": NO_MULTICAST_ENV,
                    "min_busbw_gbps": threshold,
                    "pass": ok,
                    "verdict": text,
                    "points": [asdict(p) for p in points],
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if ok else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("health", help="host health checks (all-reduce bus bandwidth across GPUs)")
    checks = p.add_subparsers(dest="check", required=True, metavar="CHECK")
    a = checks.add_parser(
        "allreduce", help="all-reduce sweep across this host's GPUs (NCCL) or CPU ranks (gloo)"
    )
    a.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    a.add_argument("--world-size", type=int, default=0, help="ranks (default: every visible GPU; gloo: 2)")
    a.add_argument("--sizes", default="", help="message sizes, e.g. 1M,64M,1G (default depends on backend)")
    a.add_argument("--iters", type=int, default=20)
    a.add_argument("--warmup", type=int, default=5)
    a.add_argument(
        "--min-busbw",
        type=float,
        default=None,
        help="GB/s at the largest size for PASS (default: nccl 200, gloo 0)",
    )
    a.add_argument("--json", default="", help="also write the sweep and verdict to this JSON file")
    a.set_defaults(func=_allreduce)
