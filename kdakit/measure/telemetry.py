"""GPU telemetry beside every eval and bench: one nvidia-smi sample per GPU per second, kept as CSV.

`Recorder` samples in a background thread while a measurement runs; `window(label)` marks the measured runs
(warm-ups are not windows). `stop()` returns the summary the record keeps: per-GPU ranges and warnings for
any measured window in which a GPU reported a throttle reason (power cap, thermal or hardware slowdown),
drew power at its limit, or ran its SM clock well below the highest clock seen in the measured windows.
Without nvidia-smi (a container with no GPU access) the summary says so and nothing is sampled. Where
DCGM's `dcgmi` is present, its `dmon` line is kept too (dcgm.txt), unparsed.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

QUERY = (
    "index", "clocks.sm", "clocks.mem", "power.draw", "power.limit", "temperature.gpu", "utilization.gpu",
    "utilization.memory", "memory.used", "memory.total",
)  # fmt: skip
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # newer name first
COLUMNS = (
    "t_s", "time", "gpu", "sm_mhz", "mem_mhz", "power_w", "power_limit_w", "temp_c", "util_pct",
    "mem_util_pct", "mem_used_mib", "mem_total_mib", "reasons",
)  # fmt: skip
# nvidia-smi's clock event reason bits that mean the GPU was held back (idle, app clocks and sync boost
# are not slowdowns).
SLOWDOWN_BITS = {
    0x4: "software power cap", 0x8: "hardware slowdown", 0x40: "software thermal slowdown",
    0x80: "hardware thermal slowdown", 0x100: "power brake",
}  # fmt: skip
POWER_CAP_FRACTION = 0.98
CLOCK_DROP_FRACTION = 0.90
DCGM_FIELDS = "100,101,140,150,155,203,204"  # SM/mem clock, mem temp, GPU temp, power, GPU/mem util


def nvidia_smi() -> str | None:
    return os.environ.get("KDAKIT_NVIDIA_SMI") or shutil.which("nvidia-smi")


def _number(text: str) -> float | None:
    text = text.strip()
    try:
        return float(int(text, 16)) if text.lower().startswith("0x") else float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


class Recorder:
    def __init__(self, path: Path, interval_s: float = 1.0, command: str | None = None):
        self.path = Path(path)
        self.interval_s = interval_s
        self.command = command if command is not None else nvidia_smi()
        self.dcgmi = shutil.which("dcgmi")
        self.windows: list[dict] = []
        self.rows: list[dict] = []
        self.errors: list[str] = []
        self.failed_queries = 0
        self.queries = 0
        self._reason_field: str | None = REASON_FIELDS[0]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    # sampling
    def _run_query(self, reason_field: str | None) -> subprocess.CompletedProcess | str:
        fields = list(QUERY) + ([reason_field] if reason_field else [])
        argv = [self.command, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"nvidia-smi: {exc}"

    def _query(self) -> list[list[str]] | None:
        """One sample of every GPU. A query that fails with the reason field is tried with the other name
        and without it (an older or newer driver); the field is changed only when another query answers,
        so a failure that has nothing to do with the field (exit 9: no driver) keeps the reasons."""
        candidates = [self._reason_field]
        if self._reason_field is not None:
            candidates += [f for f in REASON_FIELDS if f != self._reason_field] + [None]
        failure = None
        for reason_field in candidates:
            done = self._run_query(reason_field)
            if isinstance(done, str):
                failure = done
                break  # the binary itself did not run: another field would not help
            if done.returncode == 0:
                self._reason_field = reason_field
                return [
                    [p.strip() for p in line.split(",")] for line in done.stdout.splitlines() if line.strip()
                ]
            if failure is None:
                text = (done.stdout.strip() or done.stderr.strip())[-200:]
                failure = f"nvidia-smi exited {done.returncode}: {text}"
        self.errors.append(failure or "nvidia-smi: no answer")
        self.failed_queries += 1
        return None

    def sample(self) -> None:
        t = round(time.monotonic() - self._started, 3)
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        self.queries += 1
        for parts in self._query() or []:
            values = [_number(p) for p in parts]
            values += [None] * (len(QUERY) + 1 - len(values))
            row = {"t_s": t, "time": stamp, "gpu": int(values[0]) if values[0] is not None else -1}
            for column, value in zip(COLUMNS[3:], values[1:], strict=True):
                row[column] = value
            self.rows.append(row)
        if self.dcgmi:
            try:
                done = subprocess.run([self.dcgmi, "dmon", "-e", DCGM_FIELDS, "-c", "1"], capture_output=True,
                                      text=True, timeout=10)  # fmt: skip
                with open(self.path.with_name("dcgm.txt"), "a") as f:
                    f.write(f"# t_s={t}\n{done.stdout}")
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.errors.append(f"dcgmi: {exc}")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def start(self) -> Recorder:
        if self.command:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    @contextmanager
    def window(self, label: str):
        """Mark a measured run; samples taken inside it are judged for throttling."""
        start = time.monotonic() - self._started
        try:
            yield
        finally:
            self.windows.append({"label": label, "start_s": round(start, 3),
                                 "end_s": round(time.monotonic() - self._started, 3)})  # fmt: skip

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self.sample()  # the state at the end of the last run
        if self.rows:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=COLUMNS)
                writer.writeheader()
                writer.writerows(self.rows)
        return summarize(self.rows, self.windows, self.command, self.path.name if self.rows else None,
                         self.interval_s, self.errors, self.queries, self.failed_queries)  # fmt: skip

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.summary = self.stop()


def summarize(rows: list[dict], windows: list[dict], command: str | None, file: str | None,
              interval_s: float, errors: list[str] | None = None, queries: int = 0,
              failed: int = 0) -> dict:  # fmt: skip
    """The record's telemetry block: source, file, per-GPU ranges, windows and warnings. nvidia-smi that is
    there but never answered is source "failed" with a warning, never a healthy run without throttling."""
    if not command:
        return {"source": "none", "file": None, "samples": 0, "warnings": [],
                "note": "no nvidia-smi here (no GPU access): no telemetry"}  # fmt: skip
    errors = errors or []
    if not rows:
        why = errors[0] if errors else "no GPU reported"
        return {"source": "failed", "file": None, "interval_s": interval_s, "samples": 0, "windows": windows,
                "warnings": [f"GPU telemetry failed: {queries} nvidia-smi queries, no sample ({why}); "
                             "throttling and power caps were not observed"],
                "errors": errors[:5], "note": "nvidia-smi is here but did not answer"}  # fmt: skip
    gpus: dict[str, dict] = {}
    for gpu in sorted({r["gpu"] for r in rows}):
        mine = [r for r in rows if r["gpu"] == gpu]

        def values(key: str, mine: list[dict] = mine) -> list[float]:
            return [r[key] for r in mine if r.get(key) is not None]

        sm, power, temp, util = values("sm_mhz"), values("power_w"), values("temp_c"), values("util_pct")
        gpus[str(gpu)] = {
            "sm_mhz_min": min(sm, default=None), "sm_mhz_max": max(sm, default=None),
            "power_w_max": max(power, default=None), "temp_c_max": max(temp, default=None),
            "util_pct_mean": round(sum(util) / len(util), 1) if util else None,
            "mem_used_mib_max": max(values("mem_used_mib"), default=None),
        }  # fmt: skip
    found = warnings(rows, windows)
    if failed:
        found.append(
            f"GPU telemetry incomplete: {failed} of {queries} nvidia-smi queries failed ({errors[0]})"
        )
    return {
        "source": "nvidia-smi", "file": file, "interval_s": interval_s, "samples": len(rows),
        "gpus": gpus, "windows": windows, "warnings": found, "errors": errors[:5],
    }  # fmt: skip


def warnings(rows: list[dict], windows: list[dict]) -> list[str]:
    """One line per GPU and measured window where the GPU was held back."""
    inside = {w["label"]: [r for r in rows if w["start_s"] <= r["t_s"] <= w["end_s"]] for w in windows}
    measured = [r for group in inside.values() for r in group]
    top = {}
    for r in measured:
        if r.get("sm_mhz") is not None:
            top[r["gpu"]] = max(top.get(r["gpu"], 0.0), r["sm_mhz"])
    found = []
    for label, group in inside.items():
        for gpu in sorted({r["gpu"] for r in group}):
            mine = [r for r in group if r["gpu"] == gpu]
            reasons = set()
            for r in mine:
                bits = int(r.get("reasons") or 0)
                reasons |= {name for bit, name in SLOWDOWN_BITS.items() if bits & bit}
            if reasons:
                found.append(f"GPU {gpu} throttled during {label}: {', '.join(sorted(reasons))}")
            capped = [r for r in mine if r.get("power_w") is not None and r.get("power_limit_w")
                      and r["power_w"] >= POWER_CAP_FRACTION * r["power_limit_w"]]  # fmt: skip
            if capped:
                r = max(capped, key=lambda r: r["power_w"])
                found.append(
                    f"GPU {gpu} at its power cap during {label}: {r['power_w']:.0f} W of "
                    f"{r['power_limit_w']:.0f} W in {len(capped)} of {len(mine)} samples"
                )
            low = min((r["sm_mhz"] for r in mine if r.get("sm_mhz") is not None), default=None)
            if low is not None and top.get(gpu) and low < CLOCK_DROP_FRACTION * top[gpu]:
                found.append(
                    f"GPU {gpu} SM clock fell to {low:.0f} MHz during {label} "
                    f"(highest in the measured runs {top[gpu]:.0f} MHz)"
                )
    return found


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: (v if k == "time" else _number(v)) for k, v in row.items()} for row in rows]
