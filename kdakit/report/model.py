"""The report's model: records collected and pooled, the PR's published numbers, rows and verdicts."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.facts.protocols import BUILT_IN, load_protocols
from kdakit.measure.context import canonical_sku
from kdakit.records import results, sequential, stats

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
class Headline:
    """A claim and its answer, set apart at the top of the page (its colour follows the verdict)."""

    claim: str
    verdict: str
    css: str  # holds, nothold or tell
    lines: list[str]


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)  # str paragraphs, Table, Plot, Headline


def load_published(path: Path = PUBLISHED_FILE) -> dict:
    published = tomllib.loads(path.read_text())
    for table in (*serving_sets(published), published.get("kernels", {})):
        for row in table.get("rows", []):
            row["sku"] = canonical_sku(row["sku"])
    for table in published.get("serving_ab", []):
        for row in table["rows"]:
            row["sku"] = canonical_sku(row["sku"])
    for entry in (*published.get("gsm8k", []), *published.get("claims", [])):
        entry["sku"] = canonical_sku(entry["sku"])
    return published


def serving_sets(published: dict) -> list[dict]:
    """The published serving tables: `[serving]` or `[[serving]]`, each with its source, metric and rows."""
    found = published.get("serving", [])
    return [found] if isinstance(found, dict) else list(found)


def published_serving(published: dict, metric: str = "output_throughput") -> dict:
    """(sku, input_len, output_len, concurrency) -> the published row of that metric, with its source; a
    point is compared beside every protocol that measured it (the first table that publishes it wins)."""
    found = {}
    for table in serving_sets(published):
        if table.get("metric", "output_throughput") != metric:
            continue
        for row in table.get("rows", []):
            key = (row["sku"], row["input_len"], row["output_len"], row["concurrency"])
            found.setdefault(key, {**row, "source": row.get("source", table.get("source", "published"))})
    return found


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


# The per-visit numbers the report gives an interval for: (key, label, the point's field or the runs' field).
VISIT_METRICS = (
    ("output_throughput", "output tok/s", "median_output_throughput", "output_throughput"),
    ("total_throughput", "total tok/s", "median_total_throughput", "total_throughput"),
    ("median_ttft_ms", "median TTFT", None, "median_ttft_ms"),
    ("median_tpot_ms", "median TPOT", None, "median_tpot_ms"),
    ("median_itl_ms", "median ITL", None, "median_itl_ms"),
    ("accept_length", "accept length", "accept_length", "accept_length"),
)
LOWER_IS_BETTER = {"median_ttft_ms", "median_tpot_ms", "median_itl_ms"}


def visit_value(point: dict, metric: str = "output_throughput") -> float | None:
    """One visit's number for a metric: the point's median over its runs (a metric the report does not
    list: the point's field of that name, else the median of the runs' field)."""
    _key, _label, field_name, run_field = next((m for m in VISIT_METRICS if m[0] == metric),
                                               (metric, metric, metric, metric))  # fmt: skip
    if field_name and point.get(field_name) is not None:
        return point[field_name]
    values = [r[run_field] for r in point.get("runs", []) if isinstance(r.get(run_field), int | float)]
    return results.median(values) if values else None


@dataclass
class Visits:
    """One arm's measurements of one point across every record (visit) that has it, oldest first."""

    points: list  # point dicts
    created: list  # the records' creation times
    ids: list = field(default_factory=list)  # each point's visit id (the record's visit, else its repeat)

    @property
    def ok(self) -> list[dict]:
        return [p for p in self.points if p["status"] == "ok"]

    def by_visit(self, metric: str = "output_throughput") -> dict:
        """visit id -> the visit's value, for the visits whose point succeeded."""
        ids = self.ids or list(range(1, len(self.points) + 1))
        found = {}
        for visit, p in zip(ids, self.points, strict=True):
            if p["status"] == "ok":
                found[visit] = visit_value(p, metric)
        return found

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


visit_id = sequential.visit_id  # one rule for the report and the stopping rule


def _visits(records: list[dict], key: tuple) -> Visits:
    found = [(r["created"], _points(r).get(key), visit_id(r, k)) for k, r in enumerate(records, 1)]
    found = [f for f in found if f[1] is not None]
    return Visits([p for _, p, _ in found], [t for t, _, _ in found], [v for _, _, v in found])


def _point_value(point: dict | None) -> tuple[float | None, str]:
    """(median output tok/s, text) of one record's point: 'missing' when never measured, else its status."""
    return Visits([point] if point else [], []).value()


def arm_comparison(
    triton: Visits,
    helion: Visits,
    band_pct: float = 1.0,
    metric: str = "output_throughput",
    confidence: float = stats.CONFIDENCE,
    definition: dict | None = None,
    one_visit_runs: bool | None = None,
) -> tuple[stats.Judgement, str]:
    """helion/triton judged over visits matched by visit id (a visit missing or failed in either arm drops
    its pair), and how it was formed: a sequential protocol's (definition) on its confidence sequence. One
    visit per arm: the runs' interval, never a decisive verdict (one_visit_runs: for this metric; default:
    output throughput only)."""
    definition = definition or {}
    is_sequential = bool(definition.get("sequential"))
    t_by, h_by = triton.by_visit(metric), helion.by_visit(metric)
    if not t_by or not h_by or all(v is None for v in t_by.values()) or all(v is None for v in h_by.values()):
        return stats.Judgement(stats.NO_DATA, "no data"), "not measured for both arms"
    ids = sorted(set(t_by) | set(h_by))
    judged = stats.judge_pairs([t_by.get(v) for v in ids], [h_by.get(v) for v in ids], band_pct,
                               confidence=confidence, sequential=is_sequential,
                               horizon=definition.get("max_visits"))  # fmt: skip
    n = judged.ci.n if judged.ci else 0
    run_field = next(m[3] for m in VISIT_METRICS if m[0] == metric)
    t_runs = [r.get(run_field) for r in triton.ok[0]["runs"]] if len(triton.ok) == 1 else []
    h_runs = [r.get(run_field) for r in helion.ok[0]["runs"]] if len(helion.ok) == 1 else []
    if one_visit_runs is None:
        one_visit_runs = metric == "output_throughput"
    usable = t_runs and h_runs and all(isinstance(v, int | float) for v in t_runs + h_runs)
    if one_visit_runs and usable:
        one = stats.judge_one_visit(t_runs, h_runs, band_pct)
        if one.kind != stats.NO_DATA and judged.kind in (stats.CANNOT_TELL, stats.NO_DATA):
            return one, f"runs {len(t_runs)} vs {len(h_runs)} of one visit per arm (Welch, unpaired)"
    return judged, f"paired by visit id over {n} visit(s), {judged.method}"


def aa_control(*arms: Visits, band_pct: float = 1.0,
               confidence: float = stats.CONFIDENCE) -> tuple[stats.Judgement | None, int]:  # fmt: skip
    """A/A: visits of the same arm across fresh server starts (visit 2 / visit 1, visit 4 / visit 3, ...
    of each arm), judged like an arm comparison, at the claim's family confidence (a false "outside"
    anywhere in the A/A column at most 5 % of the time); and the visits per arm it stands on."""
    first, second = [], []
    for visits in arms:
        by = visits.by_visit()
        ids = sorted(v for v in by if by[v] is not None)
        for a, b in zip(ids[0::2], ids[1::2], strict=False):
            first.append(by[a])
            second.append(by[b])
    if not first:
        return None, 0
    judged = stats.judge_pairs(
        first, second, band_pct, what="A/A pairs", confidence=confidence, visits_needed=False
    )  # a control: what would settle it is not asked
    return judged, len(first)


def interleaved(triton: Visits, helion: Visits) -> bool:
    """Visits alternate between the arms in time (ABAB... or BABA...)."""
    order = [
        arm for _, arm in sorted([(t, "t") for t in triton.created] + [(t, "h") for t in helion.created])
    ]
    return all(a != b for a, b in zip(order, order[1:], strict=False))


def protocol_used(protocol: str, records: list[dict]) -> dict:
    """The protocol definition the runs used: what their records kept (the --protocols file they were
    given), else, for records from before that was kept, the built-in kdakit/facts/protocols.toml's."""
    for record in reversed(records):
        kept = record["metrics"].get("protocol_definition")
        if kept:
            return kept
    found = load_protocols().get(protocol)
    if found is None:
        return {"band_pct": 1.0, "points": [], "source_file": "unknown protocol"}
    return {
        "band_pct": found.band_pct, "repeats": found.repeats, "runs": found.runs,
        "points": [dict(vars(p)) for p in found.points], "source_file": BUILT_IN,
        "sequential": found.sequential, "min_visits": found.min_visits, "max_visits": found.max_visits,
        "max_hours": found.max_hours,
    }  # fmt: skip


def band_of(protocol: str, records: list[dict] = ()) -> float:
    return float(protocol_used(protocol, list(records))["band_pct"])


def protocol_points(name: str, records: list[dict] = ()) -> set[tuple[int, int, int]]:
    """The points of the protocol the runs used, so that a point no arm measured still shows as missing."""
    points = protocol_used(name, list(records))["points"]
    return {(p["input_len"], p["output_len"], p["concurrency"]) for p in points}


# ---- sections


def serving_rows(c: Collected, published: dict) -> list[dict]:
    """One row per (group, point): ours per arm, change, published per arm, deviations, judgements."""
    pub = published_serving(published)
    rows = []
    for (run_id, sku, host, protocol), by_arm in sorted(c.serving.items()):
        if serving_ab_table(protocol, published):
            continue  # a published A/B of other arms: serving_ab_rows
        records = {arm: by_arm.get(arm, []) for arm in ARMS}
        everything = sorted((r for arm in ARMS for r in records[arm]), key=lambda r: r["created"])
        keys = {k for arm in ARMS for r in records[arm] for k in _points(r)}
        keys |= protocol_points(protocol, everything)
        definition = protocol_used(protocol, everything)
        band = float(definition["band_pct"])
        family = stats.family_confidence(len(keys))  # a claim over these points (stats.claim_kinds)
        ids = {arm: {visit_id(r, k) for k, r in enumerate(records[arm], 1)} for arm in ARMS}
        complete = len(ids[ARMS[0]] & ids[ARMS[1]])  # visits with a record of both arms
        for key in sorted(keys):
            visits = {arm: _visits(records[arm], key) for arm in ARMS}
            triton, triton_text = visits["triton"].value()
            helion, helion_text = visits["helion"].value()
            judged, basis = arm_comparison(visits["triton"], visits["helion"], band, definition=definition)
            for_claim, _ = arm_comparison(visits["triton"], visits["helion"], band, confidence=family,
                                          definition=definition)  # fmt: skip
            others = {m[0]: arm_comparison(visits["triton"], visits["helion"], band, m[0],
                                           definition=definition)[0] for m in VISIT_METRICS[1:]}  # fmt: skip
            aa, aa_pairs = aa_control(visits["triton"], visits["helion"], band_pct=band, confidence=family)
            p = pub.get((sku, *key))
            rows.append(
                {
                    "run_id": run_id, "sku": sku, "host": host, "protocol": protocol, "key": key,
                    "triton": triton, "helion": helion,
                    "triton_text": triton_text, "helion_text": helion_text,
                    "visits": visits, "judged": judged, "ci": judged.ci, "ci_basis": basis,
                    "verdict": judged.text, "kind": judged.kind, "band": band, "others": others,
                    "claim_kind": for_claim.kind, "claim_judged": for_claim, "family_confidence": family,
                    "sequential": bool(definition.get("sequential")), "definition": definition,
                    "visits_complete": complete,
                    "aa_judged": aa, "aa": aa.ci if aa else None, "aa_pairs": aa_pairs,
                    "aa_verdict": aa.text if aa else "no A/A: one visit per arm",
                    "interleaved": interleaved(visits["triton"], visits["helion"]),
                    "spread_triton": visits["triton"].spread(), "spread_helion": visits["helion"].spread(),
                    "change": results.change_pct(triton, helion),
                    "pub_source": p["source"] if p else None,
                    "pub_triton": p["triton"] if p else None, "pub_helion": p["helion"] if p else None,
                    "pub_change": results.change_pct(p["triton"], p["helion"]) if p else None,
                    "dev_triton": results.change_pct(p["triton"], triton) if p else None,
                    "dev_helion": results.change_pct(p["helion"], helion) if p else None,
                }
            )  # fmt: skip
    return rows


def serving_ab_table(protocol: str, published: dict) -> dict | None:
    """The published serving A/B (published.toml's `serving_ab`) measured with this protocol, if any."""
    return next((t for t in published.get("serving_ab", []) if t["protocol"] == protocol), None)


def serving_ab_rows(c: Collected, published: dict) -> list[dict]:
    """For a protocol of a published serving A/B: one row per (group, point, metric) with our two arms,
    their change and interval verdict beside the published numbers of the same arms."""
    rows = []
    for (run_id, sku, host, protocol), by_arm in sorted(c.serving.items()):
        table = serving_ab_table(protocol, published)
        if table is None:
            continue
        base, cand = table["arms"]
        records = {arm: by_arm.get(arm, []) for arm in (base, cand)}
        everything = sorted((r for arm in (base, cand) for r in records[arm]), key=lambda r: r["created"])
        used = protocol_used(protocol, everything)
        metrics = used.get("metrics") or [m["metric"] for m in table["rows"]]
        pub = {(r["input_len"], r["output_len"], r["concurrency"], r["metric"]): r for r in table["rows"]}
        keys = {k for arm in (base, cand) for r in records[arm] for k in _points(r)}
        keys |= protocol_points(protocol, everything)
        band = band_of(protocol, everything)
        for key in sorted(keys):
            visits = {arm: _visits(records[arm], key) for arm in (base, cand)}
            for metric in metrics:
                ours = {arm: _median_visit(visits[arm], metric) for arm in (base, cand)}
                judged, basis = arm_comparison(visits[base], visits[cand], band, metric, one_visit_runs=True)
                p = pub.get((*key, metric))
                pub_sku = p["sku"] if p else None
                rows.append(
                    {
                        "run_id": run_id, "sku": sku, "host": host, "protocol": protocol, "key": key,
                        "metric": metric, "arms": (base, cand), "source": table["source"],
                        "ours": ours, "change": results.change_pct(ours[base], ours[cand]),
                        "judged": judged, "ci_basis": basis,
                        "pub": {arm: p[arm] for arm in (base, cand)} if p else None, "pub_sku": pub_sku,
                        "pub_change": results.change_pct(p[base], p[cand]) if p else None,
                    }
                )  # fmt: skip
    return rows


def _median_visit(visits: Visits, metric: str) -> float | None:
    values = [v for v in visits.by_visit(metric).values() if v is not None]
    return results.median(values) if values else None


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


PR_METHOD = "PR's method (medians of runs, no interval)"


def judge(claim: dict, serving: list[dict], kernels: list[dict]) -> tuple[str, str]:
    """(verdict, evidence) for one published claim against our rows of that SKU (and phase).

    A serving claim is judged on the points' interval verdicts only; the PR's method (the medians' change)
    is given beside it in the evidence, labelled, and never decides. Kernel records keep medians without a
    spread, so a kernel claim can only be judged by the PR's method, and its verdict says so."""
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
    if rule == "within":
        ok = [abs(r["change"]) <= claim["limit"] for r in measured]
    elif rule == "below":
        ok = [r["change"] < 0 for r in measured]
    elif rule == "above":
        ok = [r["change"] > 0 for r in measured]
    else:
        raise UsageError(f"published.toml: unknown claim rule {rule!r}")
    changes = ", ".join(fmt_pct(r["change"]) for r in measured)
    pr_method = f"{PR_METHOD}: {sum(ok)} of {len(measured)} measured points agree (changes {changes})"
    missing = f"; {unmeasured} point(s) missing or failed" if unmeasured else ""
    if claim["kind"] == "serving" and rule == "within":
        return _judge_by_intervals(claim, measured, unmeasured, pr_method)
    verdict = ("holds" if not unmeasured else "holds where measured") if all(ok) else "does not hold"
    return f"{verdict} by the PR's method", pr_method + missing


def judged_at_limit(row: dict, limit: float) -> tuple[stats.Judgement, stats.Judgement]:
    """A serving row's point judgement and its judgement at the claim's confidence, for a ±limit claim: the
    row's own are at its protocol's band, which a site's protocol may set apart from the claim's limit."""
    if float(row["band"]) == float(limit):
        return row["judged"], row["claim_judged"]
    triton, helion = row["visits"]["triton"], row["visits"]["helion"]
    point, _ = arm_comparison(triton, helion, limit, definition=row["definition"])
    family, _ = arm_comparison(triton, helion, limit, confidence=row["family_confidence"],
                               definition=row["definition"])  # fmt: skip
    return point, family


def claim_decided_at(verdict: str, measured: list[dict], limit: float) -> int | None:
    """The visit after which a ±limit claim's verdict was known: holds, when its last point became
    decisive; does not hold, when its first point was outside at the claim's confidence (None: not
    decided)."""
    judged = [judged_at_limit(r, limit) for r in measured]
    if verdict.startswith(stats.HOLDS):
        found = [point.decided_at for point, _ in judged]
        return max(found) if found and all(found) else None
    if verdict == stats.DOES_NOT_HOLD:
        found = [family.decided_at for _, family in judged if family.kind == stats.OUTSIDE]
        return min(v for v in found if v) if any(found) else None
    return None


def _judge_by_intervals(
    claim: dict, measured: list[dict], unmeasured: int, pr_method: str
) -> tuple[str, str]:
    """A ±limit claim on the points' verdicts at its limit (stats.claim_kinds, the rule the calibration
    simulates)."""
    judged = [judged_at_limit(r, claim["limit"]) for r in measured]
    kinds = [point.kind for point, _ in judged]
    family_kinds = [family.kind for _, family in judged]
    count = {k: kinds.count(k) for k in stats.KINDS}
    family_outside = family_kinds.count(stats.OUTSIDE)
    b = f"±{claim['limit']:g} %"
    method = judged[0][0].method
    evidence = (
        f"95 % {'confidence sequence' if measured[0]['sequential'] else 'intervals'}: "
        f"{count[stats.WITHIN]} within {b}, {count[stats.INSIDE]} different but inside, "
        f"{count[stats.OUTSIDE]} outside, {count[stats.CANNOT_TELL] + count[stats.NO_DATA]} cannot tell "
        f"(of {len(measured)} measured points); {family_outside} outside at the claim's "
        f"{100 * measured[0]['family_confidence']:.1f} % per point (95 % over its points)"
    )
    if unmeasured:
        evidence += f"; {unmeasured} point(s) missing or failed"
    evidence += f" ({method}). {pr_method}"
    verdict = str(stats.claim_kinds([kinds], [family_kinds])[0])
    if verdict == stats.HOLDS:
        return ("holds" if not unmeasured else "holds where measured"), evidence
    if verdict == stats.DOES_NOT_HOLD:
        return verdict, evidence
    open_ = [point for point, _ in judged if point.kind in (stats.CANNOT_TELL, stats.NO_DATA)]
    more = [j.more_visits for j in open_ if j.more_visits]
    if more and len(more) == len(open_):
        m = max(more)
        chance = min(j.settle_probability for j in open_ if j.settle_probability is not None)
        if m > stats.MAX_MORE_VISITS:
            return (
                f"cannot tell at this noise: more than {stats.MAX_MORE_VISITS} more visits needed",
                evidence,
            )
        return (f"cannot tell at this noise: {m} more visits would settle it (each open point with "
                f"probability at least {100 * chance:.0f} %)"), evidence  # fmt: skip
    if any(r["judged"].ci is not None and not r["judged"].ci.paired for r in measured):
        return "cannot tell at this noise: one visit per arm (a sequential protocol settles it)", evidence
    return "cannot tell at this noise", evidence


def visits_repeats_text(visits: dict) -> str:
    parts = []
    for arm in ARMS:
        v = visits[arm]
        bad = len(v.points) - len(v.ok)
        parts.append(f"{len(v.ok)}" + (f" (+{bad} not ok)" if bad else ""))
    return " / ".join(parts)
