"""`kdakit report RESULTS_DIR`: the PR's tables with our numbers, the published ones beside, and verdicts.

Walks RESULTS_DIR for *.result.json (results/<run-id>/<host>/...), validates every record (an invalid one
stops the report with a clear line), and writes report.md (plots as PNG files beside it) and a
self-contained report.html (the same content, plots inlined as base64 PNG, no external resources).
Missing points are shown as "missing", failed ones as "failed"; nothing is dropped.
"""

from __future__ import annotations

import base64
import html
import io
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kdakit import results
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
    return tomllib.loads(path.read_text())


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
    serving: dict = field(default_factory=dict)  # (run_id, sku, host, protocol) -> {arm: record}
    kernels: dict = field(default_factory=dict)  # (run_id, sku, host) -> {(phase, shape, arm): row}
    gsm8k: list = field(default_factory=list)  # records
    records: list = field(default_factory=list)  # (relative path, record)


def collect(root: Path) -> Collected:
    found = list(results.iter_results(root))
    if not found:
        raise UsageError(f"{root}: no *{results.RESULT_SUFFIX} files (expected results/<run-id>/<host>/...)")
    c = Collected()
    for path, record in sorted(found, key=lambda item: (item[1]["created"], str(item[0]))):
        c.records.append((str(path.relative_to(root)), record))
        key = (record["run_id"], record["sku"], record["host"])
        if record["kind"] == "serving":
            c.serving.setdefault((*key, record["protocol"]), {})[record["arm"]] = record  # latest wins
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


def _point_value(point: dict | None) -> tuple[float | None, str]:
    """(median output tok/s, text): 'missing' when never measured, 'failed' when it failed."""
    if point is None:
        return None, "missing"
    if point["status"] != "ok":
        return None, "failed"
    return point["median_output_throughput"], f"{point['median_output_throughput']:.2f}"


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
        points = {arm: _points(by_arm.get(arm)) for arm in ARMS}
        keys = set(points["triton"]) | set(points["helion"]) | protocol_points(protocol)
        compare = protocol == published["serving"]["protocol"]  # published rows only beside their protocol
        if compare:
            keys |= {(i, o, cc) for (s, i, o, cc) in pub if s == sku}
        for key in sorted(keys):
            triton, triton_text = _point_value(points["triton"].get(key))
            helion, helion_text = _point_value(points["helion"].get(key))
            p = pub.get((sku, *key)) if compare else None
            rows.append(
                {
                    "run_id": run_id, "sku": sku, "host": host, "protocol": protocol, "key": key,
                    "triton": triton, "helion": helion,
                    "triton_text": triton_text, "helion_text": helion_text,
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
    if all(ok):
        return ("holds" if not unmeasured else "holds where measured"), evidence
    return "does not hold", evidence


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
            pts = sorted((r["key"][2], r[arm]) for r in rows if r["key"][:2] == (i, o))
            xs = [x for x, _ in pts]
            ys = [y if y is not None else float("nan") for _, y in pts]
            ax.plot(xs, ys, marker=marker, color=color, linestyle="-" if i == lengths[0][0] else "--",
                    label=f"{arm} {i}/{o}")  # fmt: skip
            pub = sorted(
                (r["key"][2], r[f"pub_{arm}"]) for r in rows if r["key"][:2] == (i, o) and r[f"pub_{arm}"]
            )
            if pub:
                ax.scatter([x for x, _ in pub], [y for _, y in pub], marker="x", color=color, s=40)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s (median)")
    ax.set_title(title + "  (x: published)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
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
    sections.append(overview)

    verdicts = Section("Verdicts")
    vrows = []
    for claim in published.get("claims", []):
        verdict, evidence = judge(claim, serving, kernels)
        vrows.append([claim["text"], claim["source"], verdict, evidence])
    for record in c.gsm8k:
        m = record["metrics"]
        value = m[f"accuracy_{m['verdict_metric']}"]
        vrows.append(
            [
                f"GSM8K {record['protocol']} run {m['run_index']} ({record['arm']}, {record['host']}) "
                f"reaches {m['threshold']:.2f}",
                "protocol threshold",
                "holds" if m["verdict"] == "pass" else "does not hold",
                f"{m['verdict_metric']} accuracy {value:.4f} on {m['n_questions']} questions",
            ]
        )
    verdicts.blocks.append(Table(["Claim", "Source", "Verdict", "Evidence"], vrows))
    sections.append(verdicts)

    serv = Section("Serving throughput (output tok/s, median of runs)")
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
            record = by_arm.get(arm)
            if record is None:
                serv.blocks.append(f"{arm}: no result (every point missing).")
            else:
                m = record["metrics"]
                extra = "; ".join(record.get("notes", [])[1:])
                accept = [p["accept_length"] for p in m["points"] if p.get("accept_length") is not None]
                accept_text = f", accept length {min(accept):.2f}–{max(accept):.2f}" if accept else ""
                runs_text = f"{m.get('runs_per_point', '?')} runs per point"
                serv.blocks.append(
                    f"{arm}: dataset {m['dataset']}, {runs_text}{accept_text}"
                    + (f". {extra}" if extra else "")
                )
        table = Table(
            ["Input / Output", "Concurrency", "Triton tok/s", "Helion tok/s", "Change",
             "Published Triton", "Published Helion", "Published change", "Dev. Triton", "Dev. Helion"],
            [
                [f"{r['key'][0]} / {r['key'][1]}", str(r["key"][2]), r["triton_text"], r["helion_text"],
                 fmt_pct(r["change"]), fmt(r["pub_triton"], missing="not published"),
                 fmt(r["pub_helion"], missing="not published"), fmt_pct(r["pub_change"]),
                 fmt_pct(r["dev_triton"]), fmt_pct(r["dev_helion"])]
                for r in group
            ],
        )  # fmt: skip
        serv.blocks.append(table)
        if plots:
            name = f"serving-{run_id}-{host}-{protocol}.png"
            serv.blocks.append(_throughput_plot(f"{sku} {host}: throughput vs concurrency", group, name))
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
            "Published: the mean of the published runs for the same protocol; deviation in percentage points "
            "of the verdict metric."
        )
        gsm.blocks.append(
            Table(
                ["Host", "GPU", "Arm", "Protocol", "Run", "Questions", "Strict", "Flexible", "Threshold",
                 "Verdict", "Published", "Dev. (pts)"],
                [
                    [r["host"], r["sku"], r["arm"], r["protocol"], str(r["metrics"]["run_index"]),
                     str(r["metrics"]["n_questions"]), f"{r['metrics']['accuracy_strict']:.4f}",
                     f"{r['metrics']['accuracy_flexible']:.4f}", f"{r['metrics']['threshold']:.2f}",
                     f"{r['metrics']['verdict']} ({r['metrics']['verdict_metric']})",
                     *_gsm8k_published(r, published)]
                    for r in sorted(c.gsm8k, key=lambda r: (r["run_id"], r["host"], r["arm"], r["protocol"],
                                                            r["metrics"]["run_index"]))
                ],
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
    """[published mean, deviation in points] for the record's protocol, or 'not published'."""
    matches = [p for p in published.get("gsm8k", []) if p["protocol"] == record["protocol"]]
    if not matches:
        return ["not published", "n/a"]
    p = matches[0]
    mean = sum(p["runs"]) / len(p["runs"])
    ours = record["metrics"][f"accuracy_{record['metrics']['verdict_metric']}"]
    return [f"{mean:.4f} ({p['source']})", f"{(ours - mean) * 100:+.2f}"]


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
    if text in ("holds", "holds where measured"):
        return f'<td class="holds">{t}</td>'
    if text == "does not hold":
        return f'<td class="nothold">{t}</td>'
    if text in ("missing", "failed", "not published", "n/a", "no data"):
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
    md.write_text(to_markdown(sections, title))
    page.write_text(to_html(sections, title))
    plot_dir = out_dir / PLOTS_DIR
    for s in sections:
        for b in s.blocks:
            if isinstance(b, Plot):
                plot_dir.mkdir(exist_ok=True)
                (plot_dir / b.filename).write_bytes(b.png)
    return md, page


def _cmd(args) -> int:
    md, page = write_report(
        Path(args.results_dir), Path(args.out) if args.out else None, plots=not args.no_plots
    )
    print(f"wrote {md} and {page}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="report.md + self-contained report.html from a results tree")
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="e.g. results/ or results/<run-id>/")
    p.add_argument("--out", default=None, help="folder for report.md/report.html (default: RESULTS_DIR)")
    p.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib)")
    p.set_defaults(func=_cmd)
