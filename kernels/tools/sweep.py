"""`kdakit kernels sweep`: the small-token prefill PR's sweep of every Helion prefill against SGLang's Triton.

Cases (kernels/shapes.toml [sweep]): lengths x heads x layout x precision: the PR's 216 (18 lengths above one
token x 3 head counts x 2 layouts x 2 precisions) plus a T = 1 probe per group, run first. `fixed` runs
`sequences` sequences of one length as a batch ([B, T, H, K], no cu_seqlens); `varlen` packs lengths L and
L // 2 + 1 into one row with cu_seqlens. Precision is the state pool's dtype; activations are bf16. Every case
passes the Helion arm gate and beta rows padded past the tokens with large values (a CUDA-graph bucket's
padding), which the arm must ignore: its output and final states are compared with SGLang's Triton
`chunk_kda` fed the unpadded rows (relative L2 error, the bench's prefill tolerances).

Each arm runs in fresh processes (several at once: compilation is CPU work), each of whose first prefill is
T = 1, so a size-one specialization leaking into later shapes (Helion traces fold size-one dimensions) shows
as later cases failing. One worker per arm also calls the arm's packed decode with a non-power-of-two head
dim, which must raise one clear ValueError line.

Rows are appended to `sweep.jsonl` as each case finishes (a run cut short keeps what it measured); the run
ends with `sweep.json` (summary and rows) and a table. The case list and the summary are pure Python.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kdakit.kernels import shapes
from kdakit.kernels.tools.bench_inputs import TOLERANCES, rel_err

ROWS_NAME = "sweep.jsonl"
RESULT_NAME = "sweep.json"
ARMS = {"helion-kdakit": "kdakit Helion", "helion-upstream": "SGLang Helion"}
_SWEEP = shapes.load()["sweep"]
_MODEL = shapes.load()["model"]
TOLERANCE = {name: TOLERANCES[name] for name in ("out", "prefill_state")}  # the bench's prefill checks
PADDING_VALUE = 1e4  # what fills the padded gate/beta rows: finite, and ruinous if read
NON_POWER_OF_TWO_DIM = 96
FAILURES_SHOWN = 8  # per arm, under the table (all of them are in sweep.json)


@dataclasses.dataclass(frozen=True)
class Case:
    length: int
    heads: int
    layout: str  # "fixed" or "varlen"
    precision: str  # the state pool's torch dtype name

    def lengths(self, sequences: int) -> list[int]:
        if self.layout == "fixed":
            return [self.length] * sequences
        return [self.length, self.length // 2 + 1][:sequences]

    def key(self) -> str:
        return f"T{self.length} H{self.heads} {self.layout} {self.precision}"


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    lengths: tuple[int, ...] = tuple(_SWEEP["lengths"])
    heads: tuple[int, ...] = tuple(_SWEEP["heads"])
    layouts: tuple[str, ...] = tuple(_SWEEP["layouts"])
    precisions: tuple[str, ...] = tuple(_SWEEP["precisions"])
    sequences: int = _SWEEP["sequences"]
    gate_padding: int = _SWEEP["gate_padding"]
    head_dim: int = _MODEL["head_dim"]
    activations: str = "bfloat16"  # the CPU tests' interpreter needs float32 (its bf16 arithmetic)
    lower_bound: float = _MODEL["lower_bound"]
    seed: int = 0


def reduced() -> SweepConfig:
    """`kdakit selftest`'s sweep: a few lengths around the chunk boundary (T = 1 first), the model's heads,
    both layouts, an fp32 state pool."""
    return SweepConfig(
        lengths=tuple(_SWEEP["selftest_lengths"]), heads=(_MODEL["heads"],), precisions=("float32",)
    )


def cases(cfg: SweepConfig) -> list[Case]:
    """Every case, shortest length first: each (heads, layout, precision) group's first call is T = 1."""
    return [
        Case(length, heads, layout, precision)
        for length in sorted(cfg.lengths)
        for heads in cfg.heads
        for layout in cfg.layouts
        for precision in cfg.precisions
    ]


def make_inputs(case: Case, cfg: SweepConfig, device: str) -> dict:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(cfg.seed + case.length * 1000 + case.heads)
    lens = case.lengths(cfg.sequences)
    H, K = case.heads, cfg.head_dim
    rows, width = (len(lens), lens[0]) if case.layout == "fixed" else (1, sum(lens))
    pad = cfg.gate_padding

    act = getattr(torch, cfg.activations)

    def rnd(*shape, scale=1.0, dtype=act):
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

    g = torch.full((rows, width + pad, H, K), PADDING_VALUE, dtype=act, device=device)
    beta = torch.full((rows, width + pad, H), PADDING_VALUE, dtype=act, device=device)
    g[:, :width] = rnd(rows, width, H, K)
    beta[:, :width] = rnd(rows, width, H)
    slots = 2 * len(lens) + 1
    x = dict(
        q=rnd(rows, width, H, K), k=rnd(rows, width, H, K), v=rnd(rows, width, H, K), g=g, beta=beta,
        A_log=torch.log(torch.empty(H).uniform_(1.0, 16.0, generator=gen)).to(device),
        dt_bias=rnd(H * K, scale=0.5, dtype=torch.float32),
        pool=rnd(slots, H, K, K, scale=0.05, dtype=getattr(torch, case.precision)),
        indices=torch.arange(1, 2 * len(lens), 2, dtype=torch.int32, device=device),
        cu_seqlens=None, width=width,
    )  # fmt: skip
    if case.layout == "varlen":
        offsets = [0]
        for n in lens:
            offsets.append(offsets[-1] + n)
        x["cu_seqlens"] = torch.tensor(offsets, dtype=torch.int32, device=device)
    return x


def run_prefill(fn: Callable, x: dict, cfg: SweepConfig, padded: bool):
    """`fn` (a chunk_kda with SGLang's contract) on fresh copies: (output, the sequences' final states)."""
    width = x["width"]
    g, beta = (x["g"], x["beta"]) if padded else (x["g"][:, :width], x["beta"][:, :width])
    pool = x["pool"].clone()
    out = fn(
        q=x["q"], k=x["k"], v=x["v"].clone(), g=g, beta=beta, initial_state=pool,
        initial_state_indices=x["indices"], use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu_seqlens"],
        A_log=x["A_log"], dt_bias=x["dt_bias"], lower_bound=cfg.lower_bound, beta_is_raw=True,
    )  # fmt: skip
    out = out[0] if isinstance(out, tuple) else out
    return out.float().clone(), pool[x["indices"].long()].float().clone()


def decode_refusal(decode: Callable, device: str) -> dict:
    """The arm's packed decode with K = V = 96: must raise ValueError with one line, before any kernel."""
    import torch

    H = 2
    K = V = NON_POWER_OF_TWO_DIM
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    try:
        decode(
            mixed_qkv=rnd(1, 2 * H * K + H * V), a=rnd(1, H * K), b=rnd(1, H),
            A_log=rnd(H, dtype=torch.float32), dt_bias=rnd(H * K, dtype=torch.float32), scale=K**-0.5,
            initial_state=rnd(4, H, V, K, dtype=torch.float32), out=torch.empty(1, 1, H, V, device=device,
            dtype=torch.bfloat16), ssm_state_indices=torch.tensor([1], dtype=torch.int32, device=device),
            use_qk_l2norm_in_kernel=True, lower_bound=_MODEL["lower_bound"],
        )  # fmt: skip
    except ValueError as exc:
        message = str(exc)
        return {"ok": "\n" not in message.strip() and bool(message), "error": f"ValueError: {message}"}
    except Exception as exc:  # noqa: BLE001 - any other failure is not the clear refusal asked for
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:1000]}
    return {"ok": False, "error": f"K = V = {K} ran without an error"}


def load_arm(arm: str, upstream_source: str = "auto") -> tuple[Callable, Callable, Callable]:
    """(SGLang's Triton chunk_kda, the arm's chunk_kda, the arm's packed decode)."""
    import importlib

    from kdakit.kernels import integration
    from kdakit.kernels.tools import upstream

    up = upstream.load(upstream_source)
    if up.triton_chunk_kda is None:
        raise RuntimeError(f"SGLang's Triton chunk_kda unavailable: {up.missing}")
    if arm == "helion-upstream":
        if up.helion_chunk_kda is None or up.helion_packed_decode is None:
            raise RuntimeError(f"SGLang's Helion kernels unavailable: {up.missing}")
        return up.triton_chunk_kda, up.helion_chunk_kda, up.helion_packed_decode
    if arm != "helion-kdakit":
        raise ValueError(f"unknown sweep arm {arm!r}: one of {', '.join(ARMS)}")
    entry = {
        phase: getattr(importlib.import_module(module), integration.ENTRY_POINTS[phase])
        for phase, module in integration.KDAKIT_MODULES.items()
    }
    return up.triton_chunk_kda, entry["prefill"], entry["decode"]


def shards(case_list: list[Case], n: int) -> list[list[Case]]:
    """`case_list` split over at most `n` worker processes, every one starting with a T = 1 probe (so each
    fresh process meets a size-one prefill first), the longer cases dealt round-robin in length order."""
    probes = [c for c in case_list if c.length == 1]
    rest = [c for c in case_list if c.length != 1]
    n = max(1, min(n, len(probes) or 1))
    return [probes[k::n] + rest[k::n] for k in range(n)]


def default_workers(arms: int) -> int:
    """Worker processes per arm: compilation is CPU work, so half the host's cores shared by the arms
    (at least one, at most the 12 T = 1 probes of the default sweep)."""
    return max(1, min(12, (os.cpu_count() or 2) // (2 * max(arms, 1))))


def worker(
    arm: str,
    cfg: SweepConfig,
    rows_path: Path,
    device: str = "cuda",
    loaded=None,
    case_list=None,
    decode_check: bool = True,
) -> list[dict]:
    """Run `arm`'s cases in this process (the first one T = 1), appending one JSON line per case to
    rows_path as it finishes, then (decode_check) the decode refusal line. `loaded`: load_arm's triple
    (tests)."""
    triton, fn, decode = loaded or load_arm(arm)
    rows = []
    with open(rows_path, "a") as out:

        def emit(row):
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()

        for case in case_list or cases(cfg):
            row = {"arm": arm, **dataclasses.asdict(case), "case": case.key()}
            t0 = time.time()
            try:
                x = make_inputs(case, cfg, device)
                try:
                    ref_out, ref_state = run_prefill(triton, x, cfg, padded=False)
                except Exception as exc:  # noqa: BLE001 - named apart from the arm's own failures
                    raise RuntimeError(
                        f"SGLang's Triton reference failed: {type(exc).__name__}: {exc}"
                    ) from exc
                got_out, got_state = run_prefill(fn, x, cfg, padded=True)
                errors = {"out": rel_err(got_out, ref_out), "prefill_state": rel_err(got_state, ref_state)}
                row.update(status="ok", rel_err=errors, ok=all(errors[k] <= TOLERANCE[k] for k in errors))
            except Exception as exc:  # noqa: BLE001 - a case that raises is recorded, the rest still run
                row.update(status="failed", ok=False, error=f"{type(exc).__name__}: {exc}"[:1000])
            row["seconds"] = round(time.time() - t0, 3)
            emit(row)
        if decode_check:
            emit({"arm": arm, "check": "decode-non-power-of-two", **decode_refusal(decode, device)})
    return rows


def worker_command(arm: str, cfg: SweepConfig, rows_path: Path, shard: int = 0, of: int = 1) -> list[str]:
    """This interpreter, its flags kept (-P), running worker() for `arm`'s shard `shard` of `of` in a fresh
    process (shard 0 also checks the decode refusal); modules the parent preloaded as stand-ins
    (KDAKIT_PRELOAD, comma-separated) are imported first."""
    flags = ["-P"] if sys.flags.safe_path else []
    code = (
        "import importlib, json, os, sys\n"
        "for m in filter(None, os.environ.get('KDAKIT_PRELOAD', '').split(',')): importlib.import_module(m)\n"
        "from pathlib import Path\n"
        "from kdakit.kernels.tools import sweep\n"
        "cfg = sweep.SweepConfig(**json.loads(sys.argv[2]))\n"
        "shard, of = int(sys.argv[4]), int(sys.argv[5])\n"
        "mine = sweep.shards(sweep.cases(cfg), of)[shard]\n"
        "sweep.worker(sys.argv[1], cfg, Path(sys.argv[3]), case_list=mine, decode_check=shard == 0)\n"
    )
    config = json.dumps(dataclasses.asdict(cfg))
    return [sys.executable, *flags, "-c", code, arm, config, str(rows_path), str(shard), str(of)]


def run(
    arms: Iterable[str],
    cfg: SweepConfig,
    out_dir: Path,
    timeout_s: float,
    log: Callable[[str], None] = print,
    workers: int = 1,
) -> dict:
    """Every arm's cases in `workers` fresh processes per arm (each starting with T = 1), all at once
    (compilation is CPU work, the cases are small), bounded together by timeout_s; then the summary,
    written to sweep.json. An arm's processes share its log file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_path = out_dir / ROWS_NAME
    arms = list(arms)
    for arm in arms:
        if arm not in ARMS:
            raise ValueError(f"unknown sweep arm {arm!r}: one of {', '.join(ARMS)}")
    of = len(shards(cases(cfg), workers))
    started = time.time()
    procs: dict[str, list[subprocess.Popen]] = {}
    for arm in arms:
        with open(out_dir / f"sweep-{arm}.log", "w") as log_file:
            procs[arm] = [
                subprocess.Popen(
                    worker_command(arm, cfg, rows_path, shard, of),
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )  # fmt: skip
                for shard in range(of)
            ]
    exits = {}
    for arm, arm_procs in procs.items():
        codes = []
        for proc in arm_procs:
            left = max(1.0, timeout_s - (time.time() - started))
            try:
                codes.append(proc.wait(timeout=left))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes.append(f"cut short after {timeout_s:.0f} s")
        exits[arm] = codes[0] if len(set(map(str, codes))) == 1 else ", ".join(map(str, codes))
        log(f"sweep {arm}: {of} worker(s), exit {exits[arm]}")
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    result = summarize(rows, cfg, arms)
    result.update(duration_s=round(time.time() - started, 1), worker_exits=exits)
    (out_dir / RESULT_NAME).write_text(json.dumps(result, indent=1) + "\n")
    return result


def summarize(rows: list[dict], cfg: SweepConfig, arms: list[str]) -> dict:
    """Per arm: sweep cases (T > 1) expected, run, passed; the T = 1 probes; the first case; the worst errors
    per layout and precision; the failures; the decode refusal."""
    planned = cases(cfg)
    expected = sum(1 for c in planned if c.length > 1)
    probes_expected = len(planned) - expected
    summary = {}
    for arm in arms:
        everything = [r for r in rows if r["arm"] == arm and "case" in r]
        mine = [r for r in everything if r["length"] > 1]
        probes = [r for r in everything if r["length"] == 1]
        worst: dict[str, dict[str, float]] = {}
        for r in mine:
            if r.get("status") == "ok":
                group = worst.setdefault(f"{r['layout']} {r['precision']}", {})
                for name, err in r["rel_err"].items():
                    group[name] = max(group.get(name, 0.0), err)
        refusal = next(
            (r for r in rows if r["arm"] == arm and r.get("check") == "decode-non-power-of-two"), None
        )
        summary[arm] = {
            "expected": expected,
            "run": len(mine),
            "passed": sum(1 for r in mine if r.get("ok")),
            "probes": {
                "expected": probes_expected,
                "run": len(probes),
                "passed": sum(1 for r in probes if r.get("ok")),
            },
            "first_case": everything[0]["case"] if everything else None,
            "worst_rel_err": worst,
            "failures": [
                f"{r['case']}: {r.get('error') or r.get('rel_err')}" for r in everything if not r.get("ok")
            ],
            "decode_refusal": refusal,
        }
    return {
        "kind": "kdakit.kernels-sweep",
        "version": 1,
        "config": dataclasses.asdict(cfg),
        "tolerance": TOLERANCE,
        "summary": summary,
        "rows": rows,
    }


def render(result: dict) -> str:
    lines = [
        f"Prefill sweep against SGLang's Triton chunk_kda (relative L2 error, tolerance "
        f"{result['tolerance']['out']:g}; gate/beta padded by {result['config']['gate_padding']} rows of "
        f"{PADDING_VALUE:g}; each arm in a fresh process, T = 1 first):",
        "",
        "| arm | cases passed | T = 1 probes passed | first case | worst out / state error per layout, "
        f"precision | decode K = V = {NON_POWER_OF_TWO_DIM} |",
        "|---|---:|---:|---|---|---|",
    ]
    for arm, s in result["summary"].items():
        worst = "; ".join(
            f"{group}: {e.get('out', 0):.1e} / {e.get('prefill_state', 0):.1e}"
            for group, e in s["worst_rel_err"].items()
        )
        refusal = s["decode_refusal"]
        decode = (
            "no result"
            if refusal is None
            else ("refused: " if refusal["ok"] else "WRONG: ") + refusal["error"]
        )
        passed = f"{s['passed']} / {s['expected']}" + (
            "" if s["run"] == s["expected"] else f" ({s['run']} run)"
        )
        probes = f"{s['probes']['passed']} / {s['probes']['expected']}"
        lines.append(
            f"| {ARMS.get(arm, arm)} | {passed} | {probes} | {s['first_case']} | {worst or '—'} | {decode} |"
        )
    for arm, s in result["summary"].items():
        shown = s["failures"][:FAILURES_SHOWN]
        lines += [f"- FAIL {arm} {failure[:300]}" for failure in shown]
        if len(s["failures"]) > len(shown):
            lines.append(f"- FAIL {arm}: {len(s['failures']) - len(shown)} more in {RESULT_NAME}")
    return "\n".join(lines)


def any_failure(result: dict) -> bool:
    return any(
        s["passed"] != s["expected"]
        or s["probes"]["passed"] != s["probes"]["expected"]
        or not (s["decode_refusal"] or {}).get("ok")
        for s in result["summary"].values()
    )
