"""The prefill a server runs: SGLang's own calling code per arm, one KDA layer and a stack of layers.

`kdakit kernels served` (GPU only) measures, for every arm, through `kdakit.kernels.tools.lifecycle`:

- per KDA layer: the layer's extend in SGLang's breakable prefill CUDA graph as served (the extend captured
  on the bucket's static tables, or an eager break between graph segments where SGLang does not capture the
  arm's extend), and eager (prefill graphs off, or more sequences than the graph's tables hold), with the
  eager call's host time;
- a stack of L KDA layers, each after stand-in GPU work of a model layer at TP4 (dense bf16 matmuls: an
  input projection to the layer's q/k/v rows, an output projection, and an up/down pair standing for the
  MoE's per-GPU share), captured and replayed through the same breakable prefill graph protocol: the host
  time of an eager break then overlaps the GPU work queued before it, as in a server;
- the estimated time-to-first-token difference to the triton arm for the PR's input lengths: a prompt
  is prefilled in chunks of the launch profile's `--chunked-prefill-size`, each a stack prefill.

The model's size is not in the kit (no model config); the stand-in's sizes are options with stated defaults
and go into the record. Writes RESULTS_DIR/RUN_ID/HOST/served-prefill.json after every row ("complete"
false until the last, so a run cut short keeps what it measured); `kdakit kernels served-table --write` puts
its table into kernels/BENCH.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from kdakit.facts.errors import UsageError

KIND = "kdakit.served-prefill"
RAW_NAME = "served-prefill.json"
LAYER_CASES = ("1x16", "1x512", "1x4096")  # per-layer: BATCHxTOKENS
STACK_CASES = ("1x16", "8x512", "1x4096", "1x8192")
TTFT_INPUTS = (4096, 32768)  # the PR's serving input lengths
# Targets of the helion arm (kdakit) against the triton arm in SGLang's prefill graph, same run (per layer).
TARGETS = {"1x16": 1.0, "1x512": 0.80, "1x4096": 0.60}
MOONSHOT = {"1x4096": 0.45}
EAGER_TARGET = 1.0  # kdakit eager / triton eager


@dataclass(frozen=True)
class StackConfig:
    """A model layer's stand-in GPU work at TP4 (per GPU); defaults from SGLang 0.5.23's Glm5NextTextConfig
    defaults (45 layers, KDA at i % 4 != 3: 34 KDA layers, hidden 4096, 288 experts top-8 of width 2048):
    the MoE's per-GPU share at EP4 is 8 x 3 x 2048 x 4096 / 4 multiply-adds a token, an up/down pair of
    width 6144. The real checkpoint's config may differ: these are assumptions, stated in the record."""

    layers: int = 34
    hidden: int = 4096
    ffn: int = 6144
    reps: int = 10
    max_seqs: int = 128  # SGLANG_KDA_PREFILL_GRAPH_MAX_SEQS (SGLang's default): the tables' sequence slots


def parse_cases(text: str) -> list[tuple[int, int]]:
    cases = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        batch, sep, tokens = item.partition("x")
        if not sep or not batch.isdigit() or not tokens.isdigit() or int(batch) < 1 or int(tokens) < 1:
            raise UsageError(f"prefill case {item!r}: expected BATCHxTOKENS, e.g. 8x512")
        cases.append((int(batch), int(tokens)))
    if not cases:
        raise UsageError("no prefill cases given")
    return cases


def _label(case: tuple[int, int]) -> str:
    return f"{case[0]}x{case[1]}"


def _stack_body(life, cfg: StackConfig, tokens: int):
    """Replaces the lifecycle's one-layer body by L x (stand-in GPU work, KDA layer); returns the body."""
    import torch

    dev, dt = life.device, torch.bfloat16
    gen = torch.Generator(device="cpu").manual_seed(1)

    def weight(rows, cols):
        return (torch.randn(rows, cols, generator=gen) / math.sqrt(rows)).to(dev, dt)

    kda_out = life.H * life.D
    w_in, w_out = weight(cfg.hidden, life.dim), weight(kda_out, cfg.hidden)
    w_up, w_down = weight(cfg.hidden, cfg.ffn), weight(cfg.ffn, cfg.hidden)
    hidden = torch.randn(tokens, cfg.hidden, generator=gen).to(dev, dt)

    def body(batch, mixed, a, b):
        x = hidden[: mixed.shape[0]]
        for layer in life.layers:
            qkv = x @ w_in  # the layer's pre-conv rows come from the stream, so the KDA waits on the matmul
            out = layer(batch, mixed_qkv=qkv, a=a, b=b)
            x = x + out.reshape(qkv.shape[0], kda_out) @ w_out
            x = x + torch.nn.functional.silu(x @ w_up) @ w_down
        return x

    return body


def measure(
    arms: list[str], layer_cases, stack_cases, cfg: StackConfig, heads: int | None = None, log=print,
    layer_rows: list | None = None, stack_rows: list | None = None, on_row=lambda: None,
    profile_calls: int = 0,
):  # fmt: skip
    """The record's rows: per-layer and stack timings for every arm (see the module docstring), appended
    to layer_rows and stack_rows; on_row() after each row (a cut-short run keeps the rows so far). Every
    arm's per-layer rows come before any stack, so a run cut short still compares the arms layer by layer.
    With profile_calls, each per-layer row also lists the GPU kernels the layer ran
    (Lifecycle.time_prefill)."""
    import torch
    from kdakit.kernels.tools import lifecycle

    layer_rows = [] if layer_rows is None else layer_rows
    stack_rows = [] if stack_rows is None else stack_rows
    for arm in arms:
        shape = lifecycle.served_shape(
            heads, graph_bs=0, prefill_buckets=(1,), prefill_graph_max_seqs=cfg.max_seqs
        )
        with lifecycle.Lifecycle(arm, shape) as life:
            for case in layer_cases:
                for mode in ("graph", "eager"):
                    row = {"arm": arm, "case": _label(case), "mode": mode}
                    try:
                        row.update(
                            life.time_prefill([case[1]] * case[0], mode=mode, profile_calls=profile_calls)
                        )
                    except Exception as exc:  # noqa: BLE001 - a mode that cannot run is a result too
                        row["error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
                        torch.cuda.synchronize()
                    log(f"layer {row}")
                    layer_rows.append(row)
                    on_row()
    stack = lifecycle.served_shape(
        heads, graph_bs=0, prefill_buckets=(1,), prefill_graph_max_seqs=cfg.max_seqs, layers=cfg.layers
    )
    for arm in arms:
        with lifecycle.Lifecycle(arm, stack) as life:
            for case in stack_cases:
                life.body = _stack_body(life, cfg, case[0] * case[1])
                for mode in ("graph", "eager"):
                    row = {"arm": arm, "case": _label(case), "mode": mode}
                    try:
                        row.update(
                            life.time_prefill(
                                [case[1]] * case[0], mode=mode, reps=cfg.reps, metadata_each=True
                            )
                        )
                    except Exception as exc:  # noqa: BLE001
                        row["error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
                        torch.cuda.synchronize()
                    log(f"stack {row}")
                    stack_rows.append(row)
                    on_row()
                life._prefill_graphs.clear()
                torch.cuda.empty_cache()
    return layer_rows, stack_rows


def run(args, save=lambda record: None) -> dict:
    """The record of `kdakit kernels served`; save(record) after each row, with "complete": false until the
    last."""
    from datetime import UTC, datetime

    from kdakit.kernels.tools import bench, profile

    from kdakit.facts import profiles

    cfg = StackConfig(
        layers=args.layers, hidden=args.hidden, ffn=args.ffn, reps=args.reps, max_seqs=args.max_seqs
    )
    known = profiles.kernel_set_arms()  # arms with one backend for all three phases and no other flags
    arms = profile.parse_arms(args.arms, known, "arms it runs") or known
    layer_cases, stack_cases = parse_cases(args.layer_cases), parse_cases(args.stack_cases)
    chunk = int(profiles.load(profiles.default_sku(), profiles.ab_arms()[0]).flags["--chunked-prefill-size"])
    record = {
        "kind": KIND,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "environment": bench.environment(),
        "config": {
            **asdict(cfg),
            "heads": args.heads,
            "chunked_prefill_size": chunk,
            "arms": arms,
            "profile_calls": args.profile_calls,
        },  # fmt: skip
        "complete": False,
        "layer": [],
        "stack": [],
    }
    measure(
        arms, layer_cases, stack_cases, cfg, heads=args.heads, layer_rows=record["layer"],
        stack_rows=record["stack"], on_row=lambda: save(record), profile_calls=args.profile_calls,
    )  # fmt: skip
    record["complete"] = True
    save(record)
    return record


def _find(rows, arm, case, mode):
    return next((r for r in rows if r["arm"] == arm and r["case"] == case and r["mode"] == mode), None)


def ttft_estimates(record: dict) -> list[dict]:
    """Per arm and the PR's input lengths: the prefill's estimated time as served (graph mode), in chunks
    of the chunked-prefill size, each chunk timed as the stack case of that many tokens (the largest stack
    case up to the chunk, scaled to it; later chunks' prefix state is ignored: the KDA cost is linear in new
    tokens). No estimate from a case under half the chunk: scaled further, a prefill's fixed costs would
    count as per-token costs (a 16-token stack scaled to 4096 tokens came out 23 times too slow)."""
    chunk = record["config"]["chunked_prefill_size"]
    stack = record["stack"]
    sizes = sorted({int(r["case"].split("x")[1]) for r in stack if r["case"].startswith("1x")})
    out = []
    for tokens in TTFT_INPUTS:
        per = min(tokens, chunk)
        case_tokens = max((s for s in sizes if per / 2 <= s <= per), default=None)
        if case_tokens is None:
            continue
        chunks = math.ceil(tokens / per)
        scale = per / case_tokens
        for arm in record["config"]["arms"]:
            row = _find(stack, arm, f"1x{case_tokens}", "graph")
            if row and "us" in row:
                out.append({"arm": arm, "tokens": tokens, "ms": round(row["us"] * scale * chunks / 1e3, 2),
                            "chunks": chunks, "case": f"1x{case_tokens}"})  # fmt: skip
    return out


def verdicts(record: dict) -> list[str]:
    """The issue's targets, each met or missed with the measured ratio."""
    lines = []
    rows = record["layer"]
    for case, target in TARGETS.items():
        mine, base = _find(rows, "helion", case, "graph"), _find(rows, "triton", case, "graph")
        if not (mine and base and "us" in mine and "us" in base):
            lines.append(f"- in graph {case}: not measured")
            continue
        ratio = mine["us"] / base["us"]
        goal = f"<= {target:.2f}x" + (f" (moonshot <= {MOONSHOT[case]:.2f}x)" if case in MOONSHOT else "")
        met = "met" if ratio <= target else "MISSED"
        lines.append(f"- in graph {case}: {ratio:.2f}x triton's, target {goal}: {met}")
    for case in TARGETS:
        mine, base = _find(rows, "helion", case, "eager"), _find(rows, "triton", case, "eager")
        if mine and base and "us" in mine and "us" in base:
            ratio = mine["us"] / base["us"]
            met = "met" if ratio <= EAGER_TARGET else "MISSED"
            lines.append(f"- eager {case}: {ratio:.2f}x triton's eager, target <= {EAGER_TARGET:.1f}x: {met}")
    return lines


def render_table(record: dict) -> str:
    cfg = record["config"]
    arms = cfg["arms"]
    out = []
    if record.get("complete") is False:
        out += ["The run stopped before its last row (a time limit): a cell without its row reads n/a.", ""]
    out += ["Per KDA layer (µs; route in brackets; eager: GPU span / host time per call):", ""]
    cases = list(dict.fromkeys(r["case"] for r in record["layer"]))
    out.append("| arm | mode | " + " | ".join(cases) + " |")
    out.append("|---|---|" + "---:|" * len(cases))
    for arm in arms:
        for mode in ("graph", "eager"):
            cells = []
            for case in cases:
                row = _find(record["layer"], arm, case, mode)
                if row is None or "us" not in row:
                    cells.append((row or {}).get("error", "n/a")[:40])
                elif mode == "graph":
                    cells.append(f"{row['us']:.1f} ({row['route']})")
                else:
                    cells.append(f"{row['us']:.1f} / {row.get('host_us', float('nan')):.0f}")
            out.append(
                f"| {arm} | {'prefill graph (as served)' if mode == 'graph' else 'eager'} | "
                + " | ".join(cells)
                + " |"
            )
    out += ["", "Targets (helion = kdakit, ratios to the triton arm, same run):", "", *verdicts(record), ""]
    scases = list(dict.fromkeys(r["case"] for r in record["stack"]))
    out.append(
        f"Stack of {cfg['layers']} KDA layers with stand-in GPU work per layer (hidden {cfg['hidden']}, "
        f"MoE stand-in width {cfg['ffn']}), µs per prefill:"
    )
    out += ["", "| arm | mode | " + " | ".join(scases) + " |", "|---|---|" + "---:|" * len(scases)]
    for arm in arms:
        for mode in ("graph", "eager"):
            cells = []
            for case in scases:
                row = _find(record["stack"], arm, case, mode)
                cells.append(
                    f"{row['us']:.0f}" if row and "us" in row else (row or {}).get("error", "n/a")[:40]
                )
            out.append(
                f"| {arm} | {'prefill graph (as served)' if mode == 'graph' else 'eager'} | "
                + " | ".join(cells)
                + " |"
            )
    est = ttft_estimates(record)
    if est:
        out += [
            "",
            f"Estimated prefill time of the PR's inputs as served ({cfg['layers']} KDA layers, chunks of "
            f"{cfg['chunked_prefill_size']} tokens), ms (difference to triton):",
            "",
        ]
        base = {e["tokens"]: e["ms"] for e in est if e["arm"] == "triton"}
        for e in est:
            diff = f"{e['ms'] - base[e['tokens']]:+.2f}" if e["tokens"] in base else "triton not measured"
            out.append(f"- {e['arm']}, {e['tokens']} tokens: {e['ms']:.2f} ({diff})")
    return "\n".join(out)


def read(path: Path) -> dict:
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable {RAW_NAME} ({exc})") from None
    if record.get("kind") != KIND:
        raise UsageError(f"{path}: not a served-prefill record (kind {record.get('kind')!r})")
    return record


# kernels/BENCH.md's served-prefill section: from the newest record under measurements/served-prefill/
RECORDS = Path(__file__).resolve().parents[2] / "measurements" / "served-prefill"
BEGIN = "<!-- served-table: generated by `kdakit kernels served-table --write`; do not edit by hand -->"
END = "<!-- end served-table -->"


def latest_raw(root: Path | None = None) -> Path:
    from kdakit.kernels.tools import bench_table

    return bench_table.latest_raw(root or RECORDS, RAW_NAME, read)


def section(raw: Path) -> str:
    from kdakit.kernels.tools import bench_table

    record = read(raw)
    line = (
        f"Record `{bench_table.shown(raw)}` ({record.get('created', '?')}): "
        f"{bench_table.environment_line(record.get('environment', {}))}; "
        f"{record['config']['heads'] or 16} heads."
    )
    return "\n".join([BEGIN, "", line, "", render_table(record), "", END])
