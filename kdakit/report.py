"""`kdakit report RESULTS_DIR`: the PR's tables with our numbers, the published ones beside, and verdicts.

Walks RESULTS_DIR for *.result.json (results/<run-id>/<host>/...), validates every record (an unreadable
or invalid one is named, with why, and skipped), and writes report.md (plots as PNG files beside it) and a
self-contained report.html (the same content, plots inlined as base64 PNG, no external resources).
Missing points are shown as "missing", failed ones as "failed: <cause>"; nothing is dropped.

Every record counts: re-runs of a serving point are repeats, pooled with kdakit.stats (the table says how
many each arm has); the `pr` protocol's number stays the PR's median, with a 95 % interval saying what its
runs can resolve; the `rigorous` protocol's interleaved visits give paired intervals and verdicts. GSM8K
published numbers are matched on protocol, GPU and arm, and a limited run is never compared with them.
GPU telemetry kept with a record is plotted, with its throttle and power-cap warnings.
"""

from __future__ import annotations

import base64
import html
import io
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kdakit import results, stats, telemetry
from kdakit.context import canonical_sku
from kdakit.controller_files import WriteFailed, write_atomic
from kdakit.errors import UsageError

PUBLISHED_FILE = Path(__file__).parent / "data" / "published.toml"
PLOTS_DIR = "report-plots"
ARMS = ("triton", "helion")
PHASE_ORDER = {"prefill": 0, "decode": 1, "verify": 2}
# Kernel rows may name a variant (kernels/bench.py: triton, triton-packed, helion-upstream, helion-kdakit...).
# The PR compared SGLang's Triton kernel with SGLang's Helion kernel: those fill the main columns, in this
# order of preference; every other variant gets its own column, compared with Triton.
MAIN_VARIANTS = {"triton": ("triton",), "helion": ("helion-upstream", "helion")}


# ---- a tiny document model rendered both as Markdown and as HTML


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Plot:
    title: str
    filename: str
    png: bytes


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)  # str paragraphs, Table, Plot


def load_published(path: Path = PUBLISHED_FILE) -> dict:
    published = tomllib.loads(path.read_text())
    for table in ("serving", "kernels"):
        for row in published.get(table, {}).get("rows", []):
            row["sku"] = canonical_sku(row["sku"])
    for entry in (*published.get("gsm8k", []), *published.get("claims", [])):
        entry["sku"] = canonical_sku(entry["sku"])
    return published


def fmt(value: float | None, digits: int = 2, missing: str = "missing") -> str:
    return missing if value is None else f"{value:.{digits}f}"


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f}%"


def shape_label(shape: str) -> str:
    batch, tokens = shape.split("x")
    return f"{batch} × {tokens}"


# ---- gathering


@dataclass
class Collected:
    serving: dict = field(
        default_factory=dict
    )  # (run_id, sku, host, protocol) -> {arm: [records, oldest first]}
    kernels: dict = field(default_factory=dict)  # (run_id, sku, host) -> {(phase, shape, arm): row}
    gsm8k: list = field(default_factory=list)  # records
    records: list = field(default_factory=list)  # (relative path, record)
    skipped: list = field(default_factory=list)  # (relative path, why)
    paths: dict = field(default_factory=dict)  # id(record) -> absolute path


def collect(root: Path) -> Collected:
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: not a results directory")
    files = sorted(p for p in root.rglob(f"*{results.RESULT_SUFFIX}") if not results.is_staged(p, root))
    if not files:
        raise UsageError(f"{root}: no *{results.RESULT_SUFFIX} files (expected results/<run-id>/<host>/...)")
    c = Collected()
    found = []
    for path in files:
        try:
            found.append((path, results.read_result(path)))
        except (results.ResultError, OSError, UnicodeDecodeError) as exc:
            why = str(exc).removeprefix(f"{path}: ")
            c.skipped.append((str(path.relative_to(root)), why or "empty file"))
    for path, record in sorted(found, key=lambda item: (item[1]["created"], str(item[0]))):
        record["sku"] = canonical_sku(record["sku"])
        c.records.append((str(path.relative_to(root)), record))
        c.paths[id(record)] = path
        key = (record["run_id"], record["sku"], record["host"])
        if record["kind"] == "serving":
            c.serving.setdefault((*key, record["protocol"]), {}).setdefault(record["arm"], []).append(record)
        elif record["kind"] == "kernels":
            rows = c.kernels.setdefault(key, {})
            for row in record["metrics"]["rows"]:
                rows[(row["phase"], row["shape"], row.get("variant") or row["arm"])] = row
        else:
            c.gsm8k.append(record)
    return c


def _points(record: dict | None) -> dict:
    if record is None:
        return {}
    return {(p["input_len"], p["output_len"], p["concurrency"]): p for p in record["metrics"]["points"]}


@dataclass
class Visits:
    """One arm's measurements of one point across every record (repeat) that has it, oldest first."""

    points: list  # point dicts
    created: list  # the records' creation times

    @property
    def ok(self) -> list[dict]:
        return [p for p in self.points if p["status"] == "ok"]

    def value(self) -> tuple[float | None, str]:
        """(output tok/s, text): one visit's median (the PR's number), or the median of the visits' medians;
        'missing' when never measured, else the last visit's status ('failed', 'hung', ...)."""
        ok = self.ok
        if ok:
            value = results.median([p["median_output_throughput"] for p in ok])
            return value, f"{value:.2f}"
        if not self.points or self.points[-1]["status"] == "missing":
            return None, "missing"
        last = self.points[-1]
        # the cause beside the status, in the same cell (it is otherwise only in the JSON)
        cause = " ".join(str(last.get("error") or "").split())
        return None, f"{last['status']}: {cause}" if cause else last["status"]

    def spread(self) -> tuple[float, float] | None:
        """(low, high) of what the value summarises: the visits' medians, or one visit's runs."""
        ok = self.ok
        values = (
            [p["median_output_throughput"] for p in ok]
            if len(ok) > 1
            else [r["output_throughput"] for r in ok[0]["runs"]]
            if ok
            else []
        )
        return (min(values), max(values)) if values else None


def _visits(records: list[dict], key: tuple) -> Visits:
    found = [(r["created"], _points(r).get(key)) for r in records]
    return Visits([p for _, p in found if p is not None], [t for t, p in found if p is not None])


def _point_value(point: dict | None) -> tuple[float | None, str]:
    """(median output tok/s, text) of one record's point: 'missing' when never measured, else its status."""
    return Visits([point] if point else [], []).value()


def arm_comparison(triton: Visits, helion: Visits) -> tuple[stats.RatioCI | None, str]:
    """The helion/triton ratio interval and how it was formed ('paired over k visits', 'runs ...')."""
    t_ok, h_ok = triton.ok, helion.ok
    if not t_ok or not h_ok:
        return None, "not measured for both arms"
    try:
        if len(t_ok) > 1 and len(h_ok) > 1:
            k = min(len(t_ok), len(h_ok))
            t_vals = [p["median_output_throughput"] for p in t_ok[:k]]
            h_vals = [p["median_output_throughput"] for p in h_ok[:k]]
            return stats.paired_ratio_ci(t_vals, h_vals), f"paired over {k} visits"
        t_runs = [r["output_throughput"] for p in t_ok for r in p["runs"]]
        h_runs = [r["output_throughput"] for p in h_ok for r in p["runs"]]
        return stats.unpaired_ratio_ci(t_runs, h_runs), f"runs {len(t_runs)} vs {len(h_runs)} (unpaired)"
    except ValueError:
        return None, "no positive values"


def aa_control(*arms: Visits) -> stats.RatioCI | None:
    """Run 2 / run 1 of the same arm within one visit, over every visit of the given arms."""
    first, second = [], []
    for visits in arms:
        for p in visits.ok:
            if len(p["runs"]) >= 2:
                first.append(p["runs"][0]["output_throughput"])
                second.append(p["runs"][1]["output_throughput"])
    if not first:
        return None
    try:
        return stats.paired_ratio_ci(first, second)
    except ValueError:
        return None


def interleaved(triton: Visits, helion: Visits) -> bool:
    """Visits alternate between the arms in time (ABAB... or BABA...)."""
    order = [
        arm for _, arm in sorted([(t, "t") for t in triton.created] + [(t, "h") for t in helion.created])
    ]
    return all(a != b for a, b in zip(order, order[1:], strict=False))


def band_of(protocol: str) -> float:
    from kdakit.bench.serving import load_protocols

    found = load_protocols().get(protocol)
    return found.band_pct if found else 1.0


# ---- sections


def protocol_points(name: str) -> set[tuple[int, int, int]]:
    """The points a bench protocol defines, so that a point no arm measured still shows as missing."""
    from kdakit.bench.serving import load_protocols

    protocol = load_protocols().get(name)
    return {(p.input_len, p.output_len, p.concurrency) for p in protocol.points} if protocol else set()


def serving_rows(c: Collected, published: dict) -> list[dict]:
    """One row per (group, point): ours per arm, change, published per arm, deviations."""
    pub = {
        (r["sku"], r["input_len"], r["output_len"], r["concurrency"]): r for r in published["serving"]["rows"]
    }
    rows = []
    for (run_id, sku, host, protocol), by_arm in sorted(c.serving.items()):
        records = {arm: by_arm.get(arm, []) for arm in ARMS}
        keys = {k for arm in ARMS for r in records[arm] for k in _points(r)} | protocol_points(protocol)
        compare = protocol == published["serving"]["protocol"]  # published rows only beside their protocol
        if compare:
            keys |= {(i, o, cc) for (s, i, o, cc) in pub if s == sku}
        band = band_of(protocol)
        for key in sorted(keys):
            visits = {arm: _visits(records[arm], key) for arm in ARMS}
            triton, triton_text = visits["triton"].value()
            helion, helion_text = visits["helion"].value()
            ci, basis = arm_comparison(visits["triton"], visits["helion"])
            aa = aa_control(visits["triton"], visits["helion"])
            verdict = stats.verdict(ci, band) if ci else "no data"
            if ci and not ci.paired and ci.half_width_pct is not None:
                verdict += f"; these runs resolve ±{ci.half_width_pct:.2f} %"
            p = pub.get((sku, *key)) if compare else None
            rows.append(
                {
                    "run_id": run_id, "sku": sku, "host": host, "protocol": protocol, "key": key,
                    "triton": triton, "helion": helion,
                    "triton_text": triton_text, "helion_text": helion_text,
                    "visits": visits, "ci": ci, "ci_basis": basis, "verdict": verdict, "band": band,
                    "aa": aa, "aa_verdict": stats.verdict(aa, band) if aa else "no A/A pair",
                    "interleaved": interleaved(visits["triton"], visits["helion"]),
                    "spread_triton": visits["triton"].spread(), "spread_helion": visits["helion"].spread(),
                    "change": results.change_pct(triton, helion),
                    "pub_triton": p["triton"] if p else None, "pub_helion": p["helion"] if p else None,
                    "pub_change": results.change_pct(p["triton"], p["helion"]) if p else None,
                    "dev_triton": results.change_pct(p["triton"], triton) if p else None,
                    "dev_helion": results.change_pct(p["helion"], helion) if p else None,
                }
            )  # fmt: skip
    return rows


def kernel_rows(c: Collected, published: dict) -> list[dict]:
    pub = {(r["sku"], r["phase"], r["shape"]): r for r in published["kernels"]["rows"]}
    rows = []
    for (run_id, sku, host), by_key in sorted(c.kernels.items()):
        keys = {(phase, shape) for (phase, shape, _arm) in by_key}
        keys |= {(phase, shape) for (s, phase, shape) in pub if s == sku}
        main = {v for variants in MAIN_VARIANTS.values() for v in variants}
        extras = sorted({variant for (_p, _s, variant) in by_key} - main)
        phase_variants = {(phase, variant) for (phase, _s, variant) in by_key}
        for phase, shape in sorted(
            keys, key=lambda k: (PHASE_ORDER.get(k[0], 9), *map(int, k[1].split("x")))
        ):
            values, texts = {}, {}
            for arm in ARMS:
                found = [by_key[(phase, shape, v)] for v in MAIN_VARIANTS[arm] if (phase, shape, v) in by_key]
                values[arm], texts[arm] = _kernel_value(found[0] if found else None)
            others = {}
            for variant in extras:
                if (phase, variant) not in phase_variants:
                    others[variant] = "—"  # not a variant of this phase
                    continue
                value, text = _kernel_value(by_key.get((phase, shape, variant)))
                change = results.change_pct(values["triton"], value)
                others[variant] = text if change is None else f"{text} ({fmt_pct(change)})"
            p = pub.get((sku, phase, shape))
            rows.append(
                {
                    "run_id": run_id, "sku": sku, "host": host, "phase": phase, "shape": shape,
                    "triton": values["triton"], "helion": values["helion"],
                    "triton_text": texts["triton"], "helion_text": texts["helion"],
                    "change": results.change_pct(values["triton"], values["helion"]),
                    "pub_triton": p["triton"] if p else None, "pub_helion": p["helion"] if p else None,
                    "pub_change": results.change_pct(p["triton"], p["helion"]) if p else None,
                    "dev_triton": results.change_pct(p["triton"], values["triton"]) if p else None,
                    "dev_helion": results.change_pct(p["helion"], values["helion"]) if p else None,
                    "others": others,
                }
            )  # fmt: skip
    return rows


def _kernel_value(row: dict | None) -> tuple[float | None, str]:
    if row is None:
        return None, "missing"
    if row.get("status", "ok") != "ok" or row["median_us"] is None:
        return None, "failed"
    return row["median_us"], f"{row['median_us']:.2f}"


def judge(claim: dict, serving: list[dict], kernels: list[dict]) -> tuple[str, str]:
    """(verdict, evidence) for one published claim against our rows of that SKU (and phase)."""
    rows = serving if claim["kind"] == "serving" else kernels
    rows = [
        r
        for r in rows
        if r["sku"] == claim["sku"] and r.get("phase", claim.get("phase")) == claim.get("phase")
    ]
    measured = [r for r in rows if r["change"] is not None]
    unmeasured = len(rows) - len(measured)
    if not measured:
        return "no data", f"no {claim['sku']} {claim['kind']} point measured for both arms"
    rule = claim["rule"]
    cis = [r.get("ci") for r in measured]
    if rule == "within" and cis and all(ci is not None and ci.paired and ci.low is not None for ci in cis):
        return _judge_by_ci(claim, measured, unmeasured)
    if rule == "within":
        ok = [abs(r["change"]) <= claim["limit"] for r in measured]
    elif rule == "below":
        ok = [r["change"] < 0 for r in measured]
    elif rule == "above":
        ok = [r["change"] > 0 for r in measured]
    else:
        raise UsageError(f"published.toml: unknown claim rule {rule!r}")
    changes = ", ".join(fmt_pct(r["change"]) for r in measured)
    evidence = f"{sum(ok)} of {len(measured)} measured points agree (changes {changes})"
    if unmeasured:
        evidence += f"; {unmeasured} point(s) missing or failed"
    if rule == "within" and any(r.get("ci") for r in measured):
        verdicts = [r["verdict"].split(" ", 1)[0] for r in measured]
        resolve = [r["ci"].half_width_pct for r in measured if r.get("ci") and r["ci"].half_width_pct]
        evidence += (
            f"; 95 % CIs: {verdicts.count('within')} within, {verdicts.count('different')} different, "
            f"{verdicts.count('inconclusive')} inconclusive"
        )
        if resolve:
            evidence += f" (these runs resolve ±{min(resolve):.2f}–{max(resolve):.2f} %)"
    if all(ok):
        return ("holds" if not unmeasured else "holds where measured"), evidence
    return "does not hold", evidence


def _judge_by_ci(claim: dict, measured: list[dict], unmeasured: int) -> tuple[str, str]:
    """A ±limit claim on paired intervals: a point agrees when its CI lies inside the band, disagrees when
    its CI lies wholly outside it, and is inconclusive otherwise."""
    lo, hi = 1 - claim["limit"] / 100, 1 + claim["limit"] / 100
    inside = [lo <= r["ci"].low and r["ci"].high <= hi for r in measured]
    outside = [r["ci"].high < lo or r["ci"].low > hi for r in measured]
    evidence = (
        f"{sum(inside)} of {len(measured)} points with the 95 % CI inside ±{claim['limit']:g} %, "
        f"{sum(outside)} outside (CIs {', '.join(stats.fmt_ci(r['ci']) for r in measured)})"
    )
    if unmeasured:
        evidence += f"; {unmeasured} point(s) missing or failed"
    if any(outside):
        return "does not hold", evidence
    if all(inside):
        return ("holds" if not unmeasured else "holds where measured"), evidence
    return "inconclusive", evidence


def _throughput_plot(title: str, rows: list[dict], filename: str) -> Plot:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
    lengths = sorted({r["key"][:2] for r in rows})
    styles = {"triton": ("tab:blue", "o"), "helion": ("tab:orange", "s")}
    for arm in ARMS:
        color, marker = styles[arm]
        for i, o in lengths:
            pts = sorted(
                (r["key"][2], r[arm], r.get(f"spread_{arm}")) for r in rows if r["key"][:2] == (i, o)
            )
            xs = [x for x, _, _ in pts]
            ys = [y if y is not None else float("nan") for _, y, _ in pts]
            ax.plot(xs, ys, marker=marker, color=color, linestyle="-" if i == lengths[0][0] else "--",
                    label=f"{arm} {i}/{o}")  # fmt: skip
            bars = [(x, y, sp) for x, y, sp in pts if y is not None and sp]
            if bars:  # the range of the runs (one visit) or of the visits' medians behind each point
                low = [y - sp[0] for _, y, sp in bars]
                high = [sp[1] - y for _, y, sp in bars]
                ax.errorbar([x for x, _, _ in bars], [y for _, y, _ in bars], yerr=[low, high], fmt="none",
                            ecolor=color, capsize=3)  # fmt: skip
            pub = sorted(
                (r["key"][2], r[f"pub_{arm}"]) for r in rows if r["key"][:2] == (i, o) and r[f"pub_{arm}"]
            )
            if pub:
                ax.scatter([x for x, _ in pub], [y for _, y in pub], marker="x", color=color, s=40)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s (median)")
    ax.set_title(title + "  (x: published; bars: range of runs or repeats)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return Plot(title, filename, _png(fig))


def _repeats_text(visits: dict) -> str:
    parts = []
    for arm in ARMS:
        v = visits[arm]
        bad = len(v.points) - len(v.ok)
        parts.append(f"{len(v.ok)}" + (f" (+{bad} not ok)" if bad else ""))
    return " / ".join(parts)


def _ratio_plot(title: str, rows: list[dict], filename: str) -> Plot:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=100)
    shown = [r for r in rows if r["ci"] is not None]
    xs = list(range(len(shown)))
    for x, r in zip(xs, shown, strict=True):
        ci = r["ci"]
        color = "tab:green" if r["verdict"].startswith("within") else (
            "tab:red" if r["verdict"].startswith("different") else "tab:gray")  # fmt: skip
        if ci.low is not None:
            ax.errorbar([x], [ci.ratio], yerr=[[ci.ratio - ci.low], [ci.high - ci.ratio]], fmt="o",
                        color=color, capsize=4)  # fmt: skip
        else:
            ax.plot([x], [ci.ratio], "o", color=color, mfc="none")
        if r["aa"] is not None and r["aa"].low is not None:
            aa = r["aa"]
            ax.errorbar([x + 0.25], [aa.ratio], yerr=[[aa.ratio - aa.low], [aa.high - aa.ratio]], fmt="s",
                        color="tab:purple", capsize=3, markersize=4)  # fmt: skip
    band = rows[0]["band"] / 100 if rows else 0.01
    for y, style in ((1.0, "-"), (1 - band, ":"), (1 + band, ":")):
        ax.axhline(y, color="black", linestyle=style, linewidth=0.8)
    ax.set_xticks(xs, [f"{r['key'][0]}/{r['key'][1]}\nC{r['key'][2]}" for r in shown], fontsize=7)
    ax.set_ylabel("helion / triton (o), A/A run2/run1 (■)", fontsize=8)
    ax.set_title(title + f"  (dotted: ±{band * 100:g} %)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    return Plot(title, filename, _png(fig))


def _telemetry_plot(title: str, rows: list[dict], windows: list[dict], filename: str) -> Plot:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (clock, power) = plt.subplots(2, 1, figsize=(6.4, 4.2), dpi=100, sharex=True)
    for gpu in sorted({r["gpu"] for r in rows}):
        mine = [r for r in rows if r["gpu"] == gpu]
        ts = [r["t_s"] for r in mine]
        clock.plot(ts, [r["sm_mhz"] if r["sm_mhz"] is not None else float("nan") for r in mine],
                   label=f"GPU {gpu:.0f}", linewidth=1)  # fmt: skip
        power.plot(
            ts, [r["power_w"] if r["power_w"] is not None else float("nan") for r in mine], linewidth=1
        )
    limits = [r["power_limit_w"] for r in rows if r.get("power_limit_w")]
    if limits:
        power.axhline(max(limits), color="black", linestyle=":", linewidth=0.8)
    for w in windows:
        for ax in (clock, power):
            ax.axvspan(w["start_s"], w["end_s"], color="tab:orange", alpha=0.12)
    clock.set_ylabel("SM clock (MHz)", fontsize=8)
    power.set_ylabel("power (W)", fontsize=8)
    power.set_xlabel("seconds (shaded: measured runs; dotted: power limit)", fontsize=8)
    clock.set_title(title, fontsize=9)
    clock.legend(fontsize=6, ncol=4)
    for ax in (clock, power):
        ax.grid(alpha=0.3)
    return Plot(title, filename, _png(fig))


def _kernel_plot(title: str, rows: list[dict], filename: str) -> Plot:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 3.8), dpi=100)
    labels = [f"{r['phase']}\n{shape_label(r['shape'])}" for r in rows]
    xs = range(len(rows))
    width = 0.38
    for k, (arm, color) in enumerate((("triton", "tab:blue"), ("helion", "tab:orange"))):
        offs = [x + (k - 0.5) * width for x in xs]
        ax.bar(
            offs,
            [r[arm] if r[arm] is not None else float("nan") for r in rows],
            width,
            color=color,
            label=arm,
        )
        pubs = [(o, r[f"pub_{arm}"]) for o, r in zip(offs, rows, strict=True) if r[f"pub_{arm}"] is not None]
        if pubs:
            ax.scatter([o for o, _ in pubs], [v for _, v in pubs], marker="_", color="black", s=120, zorder=3)
        for o, r in zip(offs, rows, strict=True):
            if r[arm] is None:
                ax.text(o, 0.02, r[f"{arm}_text"], rotation=90, fontsize=6, ha="center", va="bottom",
                        transform=ax.get_xaxis_transform())  # fmt: skip
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median latency (µs, log)")
    ax.set_title(title + "  (—: published)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    return Plot(title, filename, _png(fig))


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def build(root: Path, published: dict | None = None, plots: bool = True) -> list[Section]:
    published = published or load_published()
    c = collect(root)
    serving = serving_rows(c, published)
    kernels = kernel_rows(c, published)
    sections = []

    runs = sorted({r["run_id"] for _, r in c.records})
    hosts = sorted({(r["host"], r["sku"]) for _, r in c.records})
    overview = Section("Overview")
    overview.blocks.append(
        f"{len(c.records)} result records; run ids: {', '.join(runs)}; hosts: "
        + ", ".join(f"{h} ({s})" for h, s in hosts)
        + ". Published numbers: "
        + f"{published['serving']['source']} (serving, kernels); GSM8K sources listed in its table."
    )
    if c.skipped:
        overview.blocks.append(
            f"{len(c.skipped)} unreadable record(s) skipped: {', '.join(path for path, _ in c.skipped)} "
            "(see Unreadable records)."
        )
    tel_warnings = [
        w for _, r in c.records for w in (r["metrics"].get("telemetry") or {}).get("warnings", [])
    ]
    if tel_warnings:
        overview.blocks.append(
            f"GPU telemetry warnings during measured runs: {len(tel_warnings)} (see GPU telemetry)."
        )
    sections.append(overview)

    verdicts = Section("Verdicts")
    vrows = []
    for claim in published.get("claims", []):
        if claim["kind"] != "serving":
            verdict, evidence = judge(claim, serving, kernels)
            vrows.append([claim["text"], claim["source"], verdict, evidence])
            continue
        # a serving claim is judged once per protocol measured (pr: the PR's medians; rigorous: paired CIs)
        measured = sorted({r["protocol"] for r in serving if r["sku"] == claim["sku"]})
        main = published["serving"]["protocol"]
        for protocol in sorted(measured, key=lambda name: (name != main, name)) or [main]:
            mine = [r for r in serving if r["protocol"] == protocol]
            verdict, evidence = judge(claim, mine, kernels)
            text = claim["text"] if protocol == main else f"{claim['text']} (protocol {protocol})"
            vrows.append([text, claim["source"], verdict, evidence])
    for record in c.gsm8k:
        m = record["metrics"]
        label = (
            f"GSM8K {record['protocol']} run {m['run_index']} ({record['arm']}, {record['host']}) "
            f"reaches {m['threshold']:.2f}"
        )
        if m.get("status", "ok") != "ok":
            vrows.append([label, "protocol threshold", "no result", f"{m['status']}: {m.get('error', '')}"])
            continue
        value = m[f"accuracy_{m['verdict_metric']}"]
        limited = " (limited run)" if m.get("limited") else ""
        vrows.append(
            [
                label,
                "protocol threshold",
                "holds" if m["verdict"] == "pass" else "does not hold",
                f"{m['verdict_metric']} accuracy {value:.4f} on {m['n_questions']} questions{limited}",
            ]
        )
    verdicts.blocks.append(Table(["Claim", "Source", "Verdict", "Evidence"], vrows))
    sections.append(verdicts)

    serv = Section("Serving throughput (output tok/s, median of runs; every repeat counted)")
    if not serving:
        serv.blocks.append("No serving results.")
    for run_id, sku, host, protocol in sorted(
        {(r["run_id"], r["sku"], r["host"], r["protocol"]) for r in serving}
    ):
        group = [
            r
            for r in serving
            if (r["run_id"], r["sku"], r["host"], r["protocol"]) == (run_id, sku, host, protocol)
        ]
        by_arm = c.serving[(run_id, sku, host, protocol)]
        serv.blocks.append(f"**{sku} — host {host}, run {run_id}, protocol {protocol}**")
        for arm in ARMS:
            arm_records = by_arm.get(arm, [])
            if not arm_records:
                serv.blocks.append(f"{arm}: no result (every point missing).")
                continue
            record = arm_records[-1]
            m = record["metrics"]
            extra = "; ".join(dict.fromkeys(n for r in arm_records for n in r.get("notes", [])[1:]))
            accept = [p["accept_length"] for r in arm_records for p in r["metrics"]["points"]
                      if p.get("accept_length") is not None]  # fmt: skip
            accept_text = f", accept length {min(accept):.2f}–{max(accept):.2f}" if accept else ""
            runs_text = f"{m.get('runs_per_point', '?')} runs per point"
            repeats = len(arm_records)
            planned = m.get("repeats_planned")
            repeats_text = f", {repeats} repeat(s)" + (f" of {planned} planned" if planned else "")
            serv.blocks.append(
                f"{arm}: dataset {m['dataset']}, {runs_text}{repeats_text}{accept_text}"
                + (f". {extra}" if extra else "")
            )
        paired = [r for r in group if r["ci"] is not None and r["ci"].paired]
        if paired:
            serv.blocks.append(
                "Helion/Triton: 95 % CI over paired visits; visits "
                + ("interleaved (ABAB…)." if all(r["interleaved"] for r in paired) else "NOT interleaved.")
            )
        else:
            serv.blocks.append(
                "Helion/Triton: 95 % CI from the runs of one visit per arm (Welch t on log throughput); "
                "the verdict says how large a difference these runs can resolve."
            )
        serv.blocks.append(
            "A/A: run 2 / run 1 of the same arm in the same visit (every visit, both arms): the noise floor."
        )
        table = Table(
            ["Input / Output", "Concurrency", "Triton tok/s", "Helion tok/s", "Change",
             "Published Triton", "Published Helion", "Published change", "Dev. Triton", "Dev. Helion",
             "Repeats T / H", "Helion/Triton (95 % CI)", "Verdict", "A/A (95 % CI)", "A/A verdict"],
            [
                [f"{r['key'][0]} / {r['key'][1]}", str(r["key"][2]), r["triton_text"], r["helion_text"],
                 fmt_pct(r["change"]), fmt(r["pub_triton"], missing="not published"),
                 fmt(r["pub_helion"], missing="not published"), fmt_pct(r["pub_change"]),
                 fmt_pct(r["dev_triton"]), fmt_pct(r["dev_helion"]), _repeats_text(r["visits"]),
                 stats.fmt_ci(r["ci"]), r["verdict"], stats.fmt_ci(r["aa"]), r["aa_verdict"]]
                for r in group
            ],
        )  # fmt: skip
        serv.blocks.append(table)
        if plots:
            name = f"serving-{run_id}-{host}-{protocol}.png"
            serv.blocks.append(_throughput_plot(f"{sku} {host}: throughput vs concurrency", group, name))
            if any(r["ci"] is not None for r in group):
                name = f"serving-ratio-{run_id}-{host}-{protocol}.png"
                serv.blocks.append(
                    _ratio_plot(f"{sku} {host} {protocol}: helion/triton, 95 % CI", group, name)
                )
    sections.append(serv)

    kern = Section("KDA kernel latency (µs, median)")
    if not kernels:
        kern.blocks.append("No kernel results.")
    for run_id, sku, host in sorted({(r["run_id"], r["sku"], r["host"]) for r in kernels}):
        group = [r for r in kernels if (r["run_id"], r["sku"], r["host"]) == (run_id, sku, host)]
        kern.blocks.append(
            f"**{sku} — host {host}, run {run_id}**. Negative change: Helion has lower latency."
        )
        extras = sorted({v for r in group for v in r["others"]})
        if extras:
            kern.blocks.append(
                "Triton: SGLang's Triton kernel; Helion: SGLang's Helion kernel. Other variants measured in "
                "the same run follow the published columns, with their change against Triton."
            )
        kern.blocks.append(
            Table(
                ["Phase", "Batch × tokens/request", "Triton µs", "Helion µs", "Change",
                 "Published Triton", "Published Helion", "Published change", "Dev. Triton", "Dev. Helion"]
                + [f"{v} µs" for v in extras],
                [
                    [r["phase"], shape_label(r["shape"]), r["triton_text"], r["helion_text"],
                     fmt_pct(r["change"]), fmt(r["pub_triton"], missing="not published"),
                     fmt(r["pub_helion"], missing="not published"), fmt_pct(r["pub_change"]),
                     fmt_pct(r["dev_triton"]), fmt_pct(r["dev_helion"])]
                    + [r["others"].get(v, "missing") for v in extras]
                    for r in group
                ],
            )
        )  # fmt: skip
        if plots:
            kern.blocks.append(
                _kernel_plot(f"{sku} {host}: KDA kernel latency", group, f"kernels-{run_id}-{host}.png")
            )
    sections.append(kern)

    gsm = Section("GSM8K")
    if not c.gsm8k:
        gsm.blocks.append("No GSM8K results.")
    else:
        gsm.blocks.append(
            "Published: the mean of the published runs for the same protocol, GPU and arm; deviation in "
            "percentage points of the verdict metric. A limited run (fewer questions than its protocol) is "
            "never compared. Numeric: SGLang's run_eval (last number); strict/flexible: lm-eval's filters."
        )
        ordered = sorted(c.gsm8k, key=lambda r: (r["run_id"], r["host"], r["arm"], r["protocol"],
                                                 r["metrics"]["run_index"], r["created"]))  # fmt: skip
        gsm.blocks.append(
            Table(
                ["Host", "GPU", "Arm", "Protocol", "Tool", "Run", "Questions", "Strict", "Flexible",
                 "Numeric", "Threshold", "Verdict", "Published", "Dev. (pts)"],
                [
                    [r["host"], r["sku"], r["arm"], r["protocol"], _tool_text(r["metrics"]),
                     str(r["metrics"]["run_index"]), _questions_text(r["metrics"]),
                     _acc(r["metrics"], "strict"), _acc(r["metrics"], "flexible"),
                     _acc(r["metrics"], "numeric"),
                     f"{r['metrics']['threshold']:.2f}",
                     f"{r['metrics']['verdict']} ({r['metrics']['verdict_metric']})"
                     + ("" if r["metrics"].get("status", "ok") == "ok" else f": {r['metrics']['status']}"),
                     *_gsm8k_published(r, published)]
                    for r in ordered
                ],
            )
        )  # fmt: skip
        diffs = gsm8k_arm_differences(c.gsm8k)
        if diffs:
            gsm.blocks.append(
                "Helion vs Triton, same host, protocol and questions: the difference of the mean accuracies "
                "with a 95 % interval from the measured run-to-run noise (binomial when the runs are "
                "identical)."
            )
            gsm.blocks.append(
                Table(
                    ["Host", "GPU", "Protocol", "Questions", "Triton runs", "Helion runs", "Difference",
                     "Noise", "Verdict"],
                    [[d["host"], d["sku"], d["protocol"], str(d["n"]), d["triton"], d["helion"],
                      f"{d['difference_pts']:+.2f} ± {d['half_width_pts']:.2f} pts", d["noise"], d["verdict"]]
                     for d in diffs],
                )
            )  # fmt: skip
    gsm.blocks.append(
        Table(
            ["Published", "Protocol", "GPU", "Arm", "Model", "Runs"],
            [
                [
                    p["source"],
                    p["protocol"],
                    p["sku"],
                    p["arm"],
                    p["model"],
                    ", ".join(f"{v:.4f}" for v in p["runs"]),
                ]
                for p in published.get("gsm8k", [])
            ],
        )
    )
    sections.append(gsm)

    sections.append(telemetry_section(c, plots))
    if c.skipped:
        bad = Section("Unreadable records")
        bad.blocks.append("Named and skipped; everything else in the report is from the readable records.")
        bad.blocks.append(Table(["Record", "Problem"], [[path, why] for path, why in c.skipped]))
        sections.append(bad)

    prov = Section("Provenance")
    prov.blocks.append(
        Table(
            ["Record", "Kind", "Arm", "kdakit git", "Image", "GPUs", "Driver", "Server command"],
            [
                [
                    path,
                    r["kind"],
                    r["arm"],
                    (r["provenance"]["git_sha"] or "unknown")[:12]
                    + (" (dirty)" if r["provenance"].get("git_dirty") else ""),
                    r["provenance"]["image_id"] or "none",
                    _gpus(r["provenance"]["gpus"]),
                    r["provenance"]["driver"] or "none",
                    _command(r["provenance"]["server_command"]),
                ]
                for path, r in c.records
            ],
        )
    )
    sections.append(prov)
    return sections


def _gsm8k_published(record: dict, published: dict) -> list[str]:
    """[published mean, deviation in points] for the record's protocol, GPU and arm, or why there is none."""
    m = record["metrics"]
    if m.get("limited"):
        return [
            f"limited run ({m['n_questions']} of {m.get('protocol_questions', '?')}): not compared",
            "n/a",
        ]
    matches = [
        p
        for p in published.get("gsm8k", [])
        if p["protocol"] == record["protocol"]
        and canonical_sku(p["sku"]) == record["sku"]
        and p["arm"] == record["arm"]
    ]
    if not matches:
        return [f"not published ({record['protocol']}, {record['sku']}, {record['arm']})", "n/a"]
    p = matches[0]
    mean = sum(p["runs"]) / len(p["runs"])
    ours = m.get(f"accuracy_{m['verdict_metric']}")
    if ours is None:
        return [f"{mean:.4f} ({p['source']})", "n/a"]
    return [f"{mean:.4f} ({p['source']})", f"{(ours - mean) * 100:+.2f}"]


def _acc(m: dict, name: str) -> str:
    value = m.get(f"accuracy_{name}")
    return "—" if value is None else f"{value:.4f}"


def _tool_text(m: dict) -> str:
    tool = m.get("tool")
    if tool:
        return f"{tool['name']} {tool['version'] or ''}".strip()
    return "sglang-run-eval" if m["verdict_metric"] == "numeric" else "lm-eval"  # records before "tool"


def _questions_text(m: dict) -> str:
    rows = (m.get("rows") or {}).get("questions")
    text = str(m["n_questions"])
    if rows:
        text += f" (test {rows['first']}–{rows['first'] + rows['count'] - 1})"
    return text + (" limited" if m.get("limited") else "")


def gsm8k_arm_differences(records: list[dict]) -> list[dict]:
    """Per host, protocol and question count with ok runs of both arms: helion - triton vs the noise."""
    groups: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        m = r["metrics"]
        if m.get("status", "ok") != "ok":
            continue
        key = (r["run_id"], r["sku"], r["host"], r["protocol"], m["n_questions"], m["verdict_metric"])
        groups[key][r["arm"]].append(m[f"accuracy_{m['verdict_metric']}"])
    found = []
    for (run_id, sku, host, protocol, n, _metric), by_arm in sorted(groups.items()):
        if not by_arm.get("triton") or not by_arm.get("helion"):
            continue
        d = stats.accuracy_difference(by_arm["triton"], by_arm["helion"], n)
        found.append({"run_id": run_id, "sku": sku, "host": host, "protocol": protocol, "n": n, **d,
                      "triton": ", ".join(f"{v:.4f}" for v in by_arm["triton"]),
                      "helion": ", ".join(f"{v:.4f}" for v in by_arm["helion"])})  # fmt: skip
    return found


def _telemetry_file(c: Collected, record: dict) -> Path | None:
    tel = record["metrics"].get("telemetry") or {}
    if not tel.get("file"):
        return None
    base = c.paths[id(record)].parent
    for artifact in record.get("artifacts", []):
        if Path(artifact).name == tel["file"] and (base / artifact).is_file():
            return base / artifact
    return None


def telemetry_section(c: Collected, plots: bool) -> Section:
    section = Section("GPU telemetry")
    rows, warned = [], []
    for path, record in c.records:
        tel = record["metrics"].get("telemetry")
        if not tel:
            continue
        if tel["source"] == "none":
            rows.append([path, "none", "0", "—", "—", "—", "—", tel.get("note", "")])
            continue
        gpus = tel.get("gpus", {})
        sm = [g["sm_mhz_min"] for g in gpus.values() if g.get("sm_mhz_min") is not None]
        sm_hi = [g["sm_mhz_max"] for g in gpus.values() if g.get("sm_mhz_max") is not None]
        power = [g["power_w_max"] for g in gpus.values() if g.get("power_w_max") is not None]
        temp = [g["temp_c_max"] for g in gpus.values() if g.get("temp_c_max") is not None]
        rows.append([
            path, tel["source"], str(tel["samples"]), str(len(gpus)),
            f"{min(sm):.0f}–{max(sm_hi):.0f}" if sm and sm_hi else "—",
            f"{max(power):.0f}" if power else "—", f"{max(temp):.0f}" if temp else "—",
            f"{len(tel['warnings'])} warning(s)" if tel["warnings"] else "none",
        ])  # fmt: skip
        warned += [f"{path}: {w}" for w in tel["warnings"]]
        file = _telemetry_file(c, record) if plots else None
        if file is not None:
            samples = telemetry.read_csv(file)
            if samples:
                name = "telemetry-" + path.replace("/", "-").removesuffix(results.RESULT_SUFFIX) + ".png"
                section.blocks.append(_telemetry_plot(f"{path}: SM clock and power", samples,
                                                      tel.get("windows", []), name))  # fmt: skip
    if not rows:
        section.blocks.append("No telemetry recorded.")
        return section
    section.blocks.insert(
        0,
        Table(["Record", "Source", "Samples", "GPUs", "SM MHz (min–max)", "Max power W", "Max temp °C",
               "Throttling / power cap in measured runs"], rows),
    )  # fmt: skip
    if warned:
        section.blocks.insert(1, "Warnings (measured runs only): " + "; ".join(warned) + ".")
    return section


def _gpus(names: list[str]) -> str:
    if not names:
        return "none"
    counts: dict[str, int] = defaultdict(int)
    for n in names:
        counts[n] += 1
    return ", ".join(f"{k} × {v}" for k, v in counts.items())


def _command(command: dict | None) -> str:
    if not command:
        return "not recorded"
    argv = command["argv"]
    kda = [f"{a}={argv[i + 1]}" for i, a in enumerate(argv[:-1]) if a.startswith("--linear-attn-")]
    return " ".join(argv[:2]) + (f" … {' '.join(kda)}" if kda else f" … ({len(argv)} args)")


# ---- rendering


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(sections: list[Section], title: str) -> str:
    out = [f"# {title}", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        for b in s.blocks:
            if isinstance(b, Table):
                out.append("| " + " | ".join(_md_cell(h) for h in b.headers) + " |")
                out.append("|" + "|".join("---" for _ in b.headers) + "|")
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            elif isinstance(b, Plot):
                out.append(f"![{b.title}]({PLOTS_DIR}/{b.filename})")
            else:
                out.append(b)
            out.append("")
    return "\n".join(out).rstrip() + "\n"


CSS = """body{font-family:system-ui,sans-serif;margin:2rem;max-width:80rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.9rem}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}.holds{color:#17692c;font-weight:600}
.nothold{color:#b00020;font-weight:600}.missing{color:#999;font-style:italic}img{max-width:100%}"""


def _html_cell(text: str) -> str:
    t = html.escape(str(text))
    text = str(text)
    if text in ("holds", "holds where measured") or text.startswith("within ±"):
        return f'<td class="holds">{t}</td>'
    if text == "does not hold" or text.startswith("different ("):
        return f'<td class="nothold">{t}</td>'
    if text.split(":")[0] in (
        "missing",
        "failed",
        "hung",
        "timed out",
        "not published",
        "n/a",
        "no data",
        "inconclusive",
    ) or (text.startswith("inconclusive at")):
        return f'<td class="missing">{t}</td>'
    return f"<td>{t}</td>"


def _inline_md(text: str) -> str:
    t = html.escape(text)
    while t.count("**") >= 2:
        t = t.replace("**", "<strong>", 1).replace("**", "</strong>", 1)
    return t


def to_html(sections: list[Section], title: str) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for s in sections:
        out.append(f"<h2>{html.escape(s.title)}</h2>")
        for b in s.blocks:
            if isinstance(b, Table):
                out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in b.headers) + "</tr>")
                out += ["<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in b.rows]
                out.append("</table>")
            elif isinstance(b, Plot):
                data = base64.b64encode(b.png).decode()
                out.append(
                    f'<figure><img alt="{html.escape(b.title)}" src="data:image/png;base64,{data}"></figure>'
                )
            else:
                out.append(f"<p>{_inline_md(b)}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(root: Path, out_dir: Path | None = None, plots: bool = True) -> tuple[Path, Path]:
    root = Path(root)
    out_dir = Path(out_dir) if out_dir else root
    sections = build(root, plots=plots)
    title = f"kdakit report: {root.name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    md, page = out_dir / "report.md", out_dir / "report.html"
    plot_dir = out_dir / PLOTS_DIR
    for s in sections:  # plots first: report.md never names a plot that is not there
        for b in s.blocks:
            if isinstance(b, Plot):
                write_atomic(plot_dir / b.filename, b.png)
    write_atomic(md, to_markdown(sections, title))
    write_atomic(page, to_html(sections, title))
    return md, page


def _cmd(args) -> int:
    for path, why in collect(Path(args.results_dir)).skipped:
        print(f"kdakit report: skipped unreadable record {path}: {why}", file=sys.stderr)
    try:
        md, page = write_report(
            Path(args.results_dir), Path(args.out) if args.out else None, plots=not args.no_plots
        )
    except WriteFailed as exc:  # the earlier report stays as it was
        print(f"kdakit report: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {md} and {page}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="report.md + self-contained report.html from a results tree")
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="e.g. results/ or results/<run-id>/")
    p.add_argument("--out", default=None, help="folder for report.md/report.html (default: RESULTS_DIR)")
    p.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib)")
    p.set_defaults(func=_cmd)
