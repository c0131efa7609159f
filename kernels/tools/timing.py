"""The one timing method of kdakit's kernel tools: `kdakit kernels bench` and `kdakit kernels autotune`.

Per-call time is the median over replays of a CUDA graph holding N back-to-back calls, divided by N, after
eager warm-up (compilation and autotuning stay outside the graph). Decode and verify calls rotate over
disjoint slot sets of a state pool much larger than L2, so one graph cycle moves >= L2_COLD_BYTES of state
and the cache is not what is measured. A call that overwrites its input (prefill writes o over v) is
preceded by an in-graph restore whose own per-call time is subtracted. The single-call latency is one call
per graph with L2 flushed before each replay. The HBM floor divides the bytes a call must move by the
device-to-device copy bandwidth of `measure_copy_bandwidth`.

The slot rotation is pure Python (testable anywhere); the timers need an NVIDIA GPU.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from typing import Any

from kdakit.kernels import shapes

from kdakit.facts.errors import UsageError

MIB = 1 << 20
L2_COLD_BYTES = 128 * MIB  # state touched per graph cycle: >= 2x the H200's 60 MB L2
REPLAYS = shapes.get("bench", "replays")
SINGLE_REPLAYS = shapes.get("bench", "single_replays")
PREFILL_CALLS = shapes.get("bench", "prefill_calls")


def calls_per_graph(batch: int, state_bytes_per_request: int, minimum: int = 32) -> int:
    """Enough back-to-back calls that one graph cycle touches >= L2_COLD_BYTES of distinct state."""
    per_call = max(batch * state_bytes_per_request, 1)
    return max(minimum, math.ceil(L2_COLD_BYTES / per_call))


def slot_sets(pool_slots: int, batch: int, calls: int, seed: int) -> list[list[int]]:
    """`calls` slot lists of size `batch`; consecutive lists are disjoint and drawn from a permutation."""
    if batch > pool_slots:
        raise UsageError(f"batch {batch} exceeds the state pool ({pool_slots} slots)")
    rng = random.Random(seed)
    order = list(range(pool_slots))
    rng.shuffle(order)
    distinct = pool_slots // batch
    return [order[(i % distinct) * batch : (i % distinct + 1) * batch] for i in range(calls)]


def _torch():
    import torch

    return torch


def measure_copy_bandwidth(nbytes: int = 2 << 30, samples: int = 30) -> dict:
    """Device-to-device copy, counting bytes read plus written."""
    torch = _torch()
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    med = statistics.median(times)
    del src, dst
    bytes_per_s = 2 * nbytes / (med * 1e-6)
    return {"bytes": 2 * nbytes, "samples_us": times, "median_us": med, "bytes_per_s": bytes_per_s}


def measure_matmul_rate(n: int = 8192, samples: int = 20) -> dict:
    """The GPU's bf16 tensor-core rate as a large square matmul reaches it (FLOP/s, median of samples): the
    rate of the prefill's compute floor, measured in the same run as the kernels."""
    torch = _torch()
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b, out=out)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del a, b, out
    seconds = statistics.median(times)
    return {"flops_per_s": 2 * n**3 / seconds, "n": n, "dtype": "bfloat16", "samples_s": times}


class GraphTimer:
    """Times callables inside CUDA graphs (per-call median over replays) and as single-call replays."""

    def __init__(self, replays: int, single_replays: int, flush_bytes: int = 256 * MIB):
        self.replays = replays
        self.single_replays = single_replays
        self.flush_bytes = flush_bytes
        self.flush = None  # allocated by the first single_call: per_call alone needs no flush buffer

    def _capture(self, calls: list[Callable[[], Any]]):
        torch = _torch()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            calls[0]()  # one eager call on the capture stream (lazy inits stay out of the graph)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for call in calls:
                call()
        torch.cuda.synchronize()
        return graph

    def per_call(self, calls: list[Callable[[], Any]]) -> list[float]:
        torch = _torch()
        graph = self._capture(calls)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(self.replays)
        ]
        for start, end in events:
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        samples = [start.elapsed_time(end) * 1e3 / len(calls) for start, end in events]
        del graph
        return samples

    def single_call(self, call: Callable[[], Any]) -> list[float]:
        torch = _torch()
        if self.flush is None:
            self.flush = torch.empty(self.flush_bytes // 4, dtype=torch.float32, device="cuda")
        graph = self._capture([call])
        graph.replay()
        torch.cuda.synchronize()
        samples = []
        for _ in range(self.single_replays):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
        del graph
        return samples


def restored_per_call_us(
    timer: GraphTimer, run: Callable[[], Any], restore: Callable[[], Any], calls: int = PREFILL_CALLS
) -> float:
    """Per-call median (us) of `run` when each call must be preceded by `restore` (it overwrites an input):
    the graph holds restore-then-run `calls` times, and the restore's own per-call median is subtracted."""

    def both() -> None:
        restore()
        run()

    with_restore = statistics.median(timer.per_call([both] * calls))
    return with_restore - statistics.median(timer.per_call([restore] * calls))


# ---------------------------------------------------------------------------------------------------------
# Statistics of samples, and rounds: every arm timed once per round, the order rotated.


def summarize(samples: list[float]) -> dict[str, Any]:
    """Median and spread of per-call samples (µs)."""
    if not samples:
        return {"n": 0, "median": None, "p20": None, "p80": None, "min": None}
    ordered = sorted(samples)

    def quantile(q: float) -> float:
        pos = q * (len(ordered) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "p20": quantile(0.2),
        "p80": quantile(0.8),
        "min": ordered[0],
    }


def time_rounds(
    arms: list[str],
    time_arm: Callable[[str], dict],
    repeats: int,
    on_round: Callable[[str, int, dict], None] | None = None,
) -> tuple[dict[str, list[dict]], dict[str, Exception]]:
    """`repeats` rounds, each timing every arm once, the order rotated by one arm per round (ABC, BCA, CAB,
    ...). Returns each arm's rounds ({"round", "position", **time_arm(arm)}) and the arms that raised (left
    out of the later rounds). on_round(arm, round, samples), if given, follows each timing."""
    rounds: dict[str, list[dict]] = {arm: [] for arm in arms}
    errors: dict[str, Exception] = {}
    for r in range(repeats):
        shift = r % len(arms) if arms else 0
        for position, arm in enumerate(arms[shift:] + arms[:shift]):
            if arm in errors:
                continue
            try:
                samples = time_arm(arm)
            except Exception as exc:
                errors[arm] = exc
                continue
            rounds[arm].append({"round": r, "position": position, **samples})
            if on_round is not None:
                on_round(arm, r, samples)
    return rounds, errors


def teller(progress: Callable[[str, dict], None] | None, row: dict) -> Callable[[str], None]:
    """tell(message): progress(message, row) where a caller asked for progress, else nothing (the bench's
    phases report each check and each timed round this way)."""

    def tell(message: str) -> None:
        if progress is not None:
            progress(message, row)

    return tell


def rounds_so_far(row: dict, repeats: int, tell: Callable[[str], None]) -> Callable[[str, int, dict], None]:
    """An on_round for time_rounds that keeps each arm's per-call medians so far in
    row["arms"][arm]["timed_rounds_us"] (a run cut short keeps them; drop the key once the rounds are
    summarized) and tells a line per round."""

    def on_round(arm: str, r: int, samples: dict) -> None:
        so_far = row["arms"][arm].setdefault("timed_rounds_us", [])
        so_far.append(statistics.median(samples["samples_us"]))
        tell(f"{arm} timed, round {r + 1} of {repeats}: {so_far[-1]:.2f} µs")

    return on_round


def _median_of(samples: list[float]) -> float | None:
    return statistics.median(samples) if samples else None


def arm_timing(rounds: list[dict]) -> dict:
    """An arm's timing fields from its rounds: every sample list pooled in round order, per_call and
    single_call summarizing the pooled samples except for the median, which is the median over rounds of
    each round's median (with one round, that round's median: the fields of a record without rounds)."""
    timing = {k: [x for r in rounds for x in r[k]] for k, v in rounds[0].items() if isinstance(v, list)}
    for summary, samples in (("per_call", "samples_us"), ("single_call", "single_samples_us")):
        timing[summary] = summarize(timing.get(samples, []))
        medians = [statistics.median(r[samples]) for r in rounds if r.get(samples)]
        if medians:
            timing[summary]["median"] = statistics.median(medians)
    timing["rounds"] = [
        {
            "round": r["round"],
            "position": r["position"],
            "per_call_us": _median_of(r.get("samples_us", [])),
            "single_call_us": _median_of(r.get("single_samples_us", [])),
        }
        for r in rounds
    ]
    return timing
