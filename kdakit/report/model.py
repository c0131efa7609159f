"""The report's model: records collected and pooled, the PR's published numbers, rows and verdicts."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.measure.context import canonical_sku
from kdakit.records import results, stats

PUBLISHED_FILE = Path(__file__).parent / "data" / "published.toml"
PLOTS_DIR = "report-plots"
ARMS = profiles.ab_arms()  # the A/B pair (arms.toml `ab`); the published tables name the same two columns
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


def visits_repeats_text(visits: dict) -> str:
    parts = []
    for arm in ARMS:
        v = visits[arm]
        bad = len(v.points) - len(v.ok)
        parts.append(f"{len(v.ok)}" + (f" (+{bad} not ok)" if bad else ""))
    return " / ".join(parts)
