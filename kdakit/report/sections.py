"""The report's sections: the model's rows and verdicts laid out as tables, text and plots."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from kdakit.facts.protocols import load_protocols
from kdakit.measure import telemetry
from kdakit.measure.context import canonical_sku
from kdakit.records import results, stats
from kdakit.report.model import (
    ARMS,
    VISIT_METRICS,
    Collected,
    Headline,
    Section,
    Table,
    claim_decided_at,
    collect,
    fmt,
    fmt_pct,
    judge,
    judged_at_limit,
    kernel_rows,
    load_published,
    published_serving,
    serving_ab_rows,
    serving_rows,
    serving_sets,
    shape_label,
    visits_repeats_text,
)
from kdakit.report.plots import kernel_plot, ratio_plot, telemetry_plot, throughput_plot


def build(root: Path, published: dict | None = None, plots: bool = True) -> list[Section]:
    """The report's sections, the answer first: summary, verdicts, serving, kernels, GSM8K, telemetry, the
    unreadable records (if any) and provenance."""
    published = published or load_published()
    c = collect(root)
    serving = serving_rows(c, published)
    serving_ab = serving_ab_rows(c, published)
    kernels = kernel_rows(c, published)
    claims = claim_rows(c, published, serving, kernels)
    sections = [
        summary_section(claims),
        overview_section(c, published),
        verdicts_section(claims, c),
        serving_section(c, serving, published, plots, other_prs=bool(serving_ab)),
    ]
    if serving_ab:
        sections.append(serving_ab_section(serving_ab, published))
    sections += [
        kernels_section(kernels, plots),
        gsm8k_section(c, published),
        telemetry_section(c, plots),
    ]
    if c.skipped:
        sections.append(unreadable_section(c))
    sections.append(provenance_section(c))
    return sections


def claim_rows(c: Collected, published: dict, serving: list[dict], kernels: list[dict]) -> list[dict]:
    """Every published claim judged on our rows: a serving claim once per protocol that measured its SKU
    (the decisive answers first), a kernel claim by the PR's method."""
    found = []
    for claim in published.get("claims", []):
        if claim["kind"] != "serving":
            verdict, evidence = judge(claim, serving, kernels)
            found.append({"claim": claim, "text": claim["text"], "protocol": None, "verdict": verdict,
                          "evidence": evidence, "rows": []})  # fmt: skip
            continue
        measured = sorted({r["protocol"] for r in serving if r["sku"] == claim["sku"]})
        main = serving_sets(published)[0].get("protocol") if serving_sets(published) else None
        mine = []
        for protocol in measured or [None]:
            rows = [r for r in serving if r["protocol"] == protocol and r["sku"] == claim["sku"]]
            verdict, evidence = judge(claim, rows, kernels)
            text = claim["text"] if protocol in (main, None) else f"{claim['text']} (protocol {protocol})"
            mine.append({"claim": claim, "text": text, "protocol": protocol, "verdict": verdict,
                         "evidence": evidence, "rows": rows})  # fmt: skip
        found += sorted(mine, key=_answer_order)
    return found


def _answer_order(row: dict) -> tuple:
    """Decisive answers first, then a sequential protocol's, then more visits."""
    decisive = row["verdict"].startswith((stats.HOLDS, stats.DOES_NOT_HOLD))
    rows = row["rows"]
    return (not decisive, not (rows and rows[0]["sequential"]), -(rows[0]["visits_complete"] if rows else 0))


def visits_text(row: dict) -> str:
    """How many visits a claim's verdict took, and why the run stopped where it did."""
    rows = row["rows"]
    measured = [r for r in rows if r["change"] is not None]
    if not rows:
        return "—"
    complete = rows[0]["visits_complete"]
    definition = rows[0]["definition"]
    decided = claim_decided_at(row["verdict"], measured, row["claim"]["limit"]) if measured else None
    if not rows[0]["sequential"]:
        planned = definition.get("repeats") or 1
        return f"{complete} of {planned} planned visit(s)"
    text = (
        f"decided after {decided} of {complete} visits" if decided else f"undecided after {complete} visits"
    )
    budget = definition.get("max_visits")
    if not decided and budget and complete >= budget:
        text += f" (budget of {budget} spent)"
    return text


def _claim_class(verdict: str) -> str:
    if verdict.startswith(stats.HOLDS):
        return "holds"
    if verdict.startswith(stats.DOES_NOT_HOLD):
        return "nothold"
    return "missing" if verdict == stats.NO_DATA else "tell"


def _what_would_change_it(row: dict) -> str:
    verdict, rows = row["verdict"], row["rows"]
    if not rows:
        return "A run of the protocol on this SKU."
    family = 100 * rows[0]["family_confidence"]
    new_run = "Changed kernels, images or hosts need a new run."
    if verdict.startswith(stats.HOLDS):
        return (
            "Only an error of the intervals: every point's 95 % interval lies inside the band, so a false "
            f'claim reads "holds" at most 5 % of the time. {new_run}'
        )
    if verdict == stats.DOES_NOT_HOLD:
        limit = row["claim"]["limit"]
        outside = ", ".join(
            _point_label(r) for r in rows if judged_at_limit(r, limit)[1].kind == stats.OUTSIDE
        )
        return (
            f"Only an error of the interval of {outside} (judged at {family:.1f} % per point, so identical "
            f'arms read "does not hold" at most 5 % of the time). {new_run}'
        )
    if rows[0]["sequential"]:
        return (
            "More visits: raise the protocol's max_visits (or max_hours) and run it again on the same run "
            "id; " + verdict.split(": ", 1)[-1] + "."
        )
    found = [p for p in load_protocols().values() if p.sequential]
    if not found:
        return "More visits per arm, interleaved."
    return (
        f"The sequential protocol: `make ab-<sku> BENCH_PROTOCOL={found[0].name}` visits until every point "
        f"and the claim are decisive (at most {found[0].max_visits} visits)."
    )


def _point_label(r: dict) -> str:
    return f"{r['key'][0]}/{r['key'][1]} C{r['key'][2]}"


def summary_section(claims: list[dict]) -> Section:
    """The answer first: each claim with its verdict, the visits it took, and what would change it."""
    section = Section("Summary")
    shown = set()
    for row in claims:
        if row["claim"]["text"] in shown:
            continue  # a serving claim's first row is its most decisive answer
        shown.add(row["claim"]["text"])
        lines = []
        if row["protocol"]:
            others = [f"{o['protocol']}: {o['verdict'].split(':')[0]}" for o in claims
                      if o["claim"] is row["claim"] and o is not row]  # fmt: skip
            lines.append(f"Protocol {row['protocol']}, {visits_text(row)}."
                         + (f" Also measured: {'; '.join(others)}." if others else ""))  # fmt: skip
            lines.append("What would change it: " + _what_would_change_it(row))
        else:
            lines.append(row["evidence"] + ".")
        section.blocks.append(
            Headline(row["claim"]["text"], row["verdict"], _claim_class(row["verdict"]), lines)
        )
    if not claims:
        section.blocks.append("No published claim to judge.")
    return section


def overview_section(c: Collected, published: dict) -> Section:
    runs = sorted({r["run_id"] for _, r in c.records})
    hosts = sorted({(r["host"], r["sku"]) for _, r in c.records})
    sources = ", ".join(dict.fromkeys(t.get("source", "?") for t in serving_sets(published)))
    overview = Section("Overview")
    overview.blocks.append(
        f"{len(c.records)} result records; run ids: {', '.join(runs)}; hosts: "
        + ", ".join(f"{h} ({s})" for h, s in hosts)
        + f". Published numbers: {sources} (serving), {published.get('kernels', {}).get('source', '?')} "
        "(kernels); GSM8K sources listed in its table."
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
    return overview


def verdicts_section(claims: list[dict], c: Collected) -> Section:
    verdicts = Section("Verdicts")
    vrows = [[row["text"], row["claim"]["source"], row["verdict"], visits_text(row), row["evidence"]]
             for row in claims]  # fmt: skip
    for record in c.gsm8k:
        m = record["metrics"]
        label = (
            f"GSM8K {record['protocol']} run {m['run_index']} ({record['arm']}, {record['host']}) "
            f"reaches {m['threshold']:.2f}"
        )
        if m.get("status", "ok") != "ok":
            vrows.append(
                [label, "protocol threshold", "no result", "—", f"{m['status']}: {m.get('error', '')}"]
            )
            continue
        value = m[f"accuracy_{m['verdict_metric']}"]
        limited = " (limited run)" if m.get("limited") else ""
        vrows.append(
            [
                label,
                "protocol threshold",
                "holds" if m["verdict"] == "pass" else "does not hold",
                "—",
                f"{m['verdict_metric']} accuracy {value:.4f} on {m['n_questions']} questions{limited}",
            ]
        )
    verdicts.blocks.append(Table(["Claim", "Source", "Verdict", "Visits", "Evidence"], vrows))
    return verdicts


def serving_section(
    c: Collected, serving: list[dict], published: dict, plots: bool, other_prs: bool = False
) -> Section:
    serv = Section("Serving throughput (output tok/s, median of runs; every repeat counted)")
    if not serving and not other_prs:
        serv.blocks.append("No serving results.")
    for group_key in sorted({(r["run_id"], r["sku"], r["host"], r["protocol"]) for r in serving}):
        group = [r for r in serving if (r["run_id"], r["sku"], r["host"], r["protocol"]) == group_key]
        serv.blocks += serving_group_blocks(c, group_key, group, published, plots)
    return serv


def serving_group_blocks(c: Collected, group_key: tuple, group: list[dict], published: dict,
                         plots: bool) -> list:  # fmt: skip
    run_id, sku, host, protocol = group_key
    by_arm = c.serving[group_key]
    blocks: list = [f"**{sku} — host {host}, run {run_id}, protocol {protocol}**"]
    for arm in ARMS:
        arm_records = by_arm.get(arm, [])
        if not arm_records:
            blocks.append(f"{arm}: no result (every point missing).")
            continue
        m = arm_records[-1]["metrics"]
        extra = "; ".join(dict.fromkeys(n for r in arm_records for n in r.get("notes", [])[1:]))
        accept = [p["accept_length"] for r in arm_records for p in r["metrics"]["points"]
                  if p.get("accept_length") is not None]  # fmt: skip
        accept_text = f", accept length {min(accept):.2f}–{max(accept):.2f}" if accept else ""
        runs_text = f"{m.get('runs_per_point', '?')} runs per point"
        planned = m.get("repeats_planned")
        bound = "at most " if group[0]["sequential"] else ""
        repeats_text = f", {len(arm_records)} visit(s)" + (f" of {bound}{planned} planned" if planned else "")
        blocks.append(
            f"{arm}: dataset {m['dataset']}, {runs_text}{repeats_text}{accept_text}"
            + (f". {extra}" if extra else "")
        )
    band = group[0]["band"] if group else 1.0
    used = group[0]["definition"]
    blocks.append(
        f"Protocol {protocol} as the runs used it ({used.get('source_file', 'unknown')}): "
        f"band ±{band:g} %, {len(used.get('points', []))} points"
        + (
            f", sequential: {used.get('min_visits')} to {used.get('max_visits')} visits, at most "
            f"{used.get('max_hours')} hours."
            if group[0]["sequential"]
            else "."
        )  # fmt: skip
    )
    paired = [r for r in group if r["ci"] is not None and r["ci"].paired]
    if paired:
        blocks.append(
            "Helion/Triton: 95 % "
            + ("confidence sequence" if group[0]["sequential"] else "interval")
            + " over the paired log ratios of the visits (both arms of a visit, matched by visit id; a visit "
            "missing or failed in either arm drops its pair); visits "
            + ("interleaved (ABAB…)." if all(r["interleaved"] for r in paired) else "NOT interleaved.")
        )
    blocks.append(_verdict_words(group[0], band))
    blocks.append(
        Table(
            ["Input / Output", "C", "Triton tok/s", "Helion tok/s", "Change (PR's method)",
             "Published Triton", "Published Helion", "Published change", "Dev. Triton", "Dev. Helion"],
            [
                [f"{r['key'][0]} / {r['key'][1]}", str(r["key"][2]), r["triton_text"], r["helion_text"],
                 fmt_pct(r["change"]), fmt(r["pub_triton"], missing="not published"),
                 fmt(r["pub_helion"], missing="not published"), fmt_pct(r["pub_change"]),
                 fmt_pct(r["dev_triton"]), fmt_pct(r["dev_helion"])]
                for r in group
            ],
        )
    )  # fmt: skip
    sources = sorted({r["pub_source"] for r in group if r["pub_source"]})
    if sources:
        blocks.append(f"Published: {', '.join(sources)} (matched on GPU and point, whatever the protocol).")
    blocks.append(
        Table(
            ["Input / Output", "C", "Visits T / H", "Helion/Triton (95 % CI)", "Verdict", "Decided at visit",
             "A/A (95 % CI)", "A/A verdict"],
            [
                [f"{r['key'][0]} / {r['key'][1]}", str(r["key"][2]), visits_repeats_text(r["visits"]),
                 stats.fmt_ci(r["ci"]), r["verdict"], _decided_text(r), stats.fmt_ci(r["aa"]),
                 r["aa_verdict"]]
                for r in group
            ],
        )
    )  # fmt: skip
    blocks.append(
        "Other metrics, helion/triton per visit (95 % CI and verdict; TTFT, TPOT and ITL: below 1 is faster):"
    )
    blocks.append(
        Table(
            ["Input / Output", "C"] + [label for _k, label, _f, _r in VISIT_METRICS[1:]],
            [
                [f"{r['key'][0]} / {r['key'][1]}", str(r["key"][2])]
                + [_metric_cell(r["others"][k]) for k, _l, _f, _r in VISIT_METRICS[1:]]
                for r in group
            ],
        )
    )  # fmt: skip
    blocks += published_metric_blocks(group, published)
    if plots:
        name = f"serving-{run_id}-{host}-{protocol}.png"
        blocks.append(throughput_plot(f"{sku} {host} {protocol}: throughput vs concurrency", group, name))
        if any(r["ci"] is not None for r in group):
            name = f"serving-ratio-{run_id}-{host}-{protocol}.png"
            blocks.append(ratio_plot(f"{sku} {host} {protocol}: helion/triton, 95 % CI", group, name))
    return blocks


def _verdict_words(row: dict, band: float) -> str:
    spread = (
        "the spread is that of the paired log ratios (what drifts between visits cancels in each pair), "
        f"at least {100 * stats.SPREAD_FLOOR_LOG:.1f} % (a constant floor, marked where it applied)"
    )
    if row["sequential"]:
        method = (
            "The interval is an always-valid 95 % confidence sequence (it holds at every visit at once), "
            "intersected over the visits so far, so the protocol may stop as soon as every point and the "
            f"claim are decisive; {spread}. Decided at visit: the visit after which the verdict was known."
        )
    else:
        method = f"The interval is Student t over the visits, planned ahead; {spread}."
    return (
        f"Verdicts: within ±{band:g} % (the interval lies inside the band and includes 1), "
        f"different but inside ±{band:g} % (inside the band, excludes 1), outside ±{band:g} % (wholly "
        "outside the band), or cannot tell at this noise (with the visits that would settle it, by a power "
        "calculation on the paired spread, and the probability that they do). "
        f"{method} No verdict is decisive with fewer than {stats.MIN_PAIRS} paired visits. One visit per arm "
        "(the PR's protocol) measures no visit-to-visit noise: its runs' interval is shown, never decisive. "
        "A/A: visit 2 / visit 1, visit 4 / visit 3, ... of the same arm, at the claim's confidence per point."
    )


def _decided_text(r: dict) -> str:
    decided = r["judged"].decided_at
    if r["kind"] not in stats.DECISIVE or not decided:
        return "—"
    return str(decided)


def published_metric_blocks(group: list[dict], published: dict) -> list:
    """Published numbers of any other metric at the group's points, beside our medians: data (each table of
    published.toml names its metric), so a new published table shows without a change here."""
    blocks = []
    for table in serving_sets(published):
        metric = table.get("metric", "output_throughput")
        if metric == "output_throughput":
            continue  # in the main table
        rows = []
        for r in group:
            p = published_serving({"serving": [table]}, metric).get((r["sku"], *r["key"]))
            if not p:
                continue
            ours = {arm: _median_of(r["visits"][arm], metric) for arm in ARMS}
            rows.append([f"{r['key'][0]} / {r['key'][1]}", str(r["key"][2]),
                         fmt(p.get("triton"), missing="not published"), fmt(ours["triton"]),
                         fmt_pct(results.change_pct(p.get("triton"), ours["triton"])),
                         fmt(p.get("helion"), missing="not published"), fmt(ours["helion"]),
                         fmt_pct(results.change_pct(p.get("helion"), ours["helion"]))])  # fmt: skip
        if rows:
            blocks.append(
                f"Published {metric} ({table.get('source', '?')}) beside ours (median of the visits):"
            )
            blocks.append(Table(["Input / Output", "C", "Published Triton", "Triton", "Dev. Triton",
                                 "Published Helion", "Helion", "Dev. Helion"], rows))  # fmt: skip
    return blocks


def _median_of(visits, metric: str) -> float | None:
    values = [v for v in visits.by_visit(metric).values() if v is not None]
    return results.median(values) if values else None


def kernels_section(kernels: list[dict], plots: bool) -> Section:
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
                kernel_plot(f"{sku} {host}: KDA kernel latency", group, f"kernels-{run_id}-{host}.png")
            )
    return kern


def gsm8k_section(c: Collected, published: dict) -> Section:
    gsm = Section("GSM8K")
    if not c.gsm8k:
        gsm.blocks.append("No GSM8K results.")
    else:
        gsm.blocks.append(
            "Published: the mean of the published runs for the same protocol, GPU and arm; deviation in "
            "percentage points of the verdict metric. A limited run (fewer questions than its protocol) is "
            "never compared. Numeric: SGLang's run_eval (last number); strict/flexible: lm-eval's filters; "
            "symbolic: sgl-eval's math grader (the \\boxed{} answer). Accept length: SGLang's average "
            "speculative accept length over the run (its counters reset by a flush before it), beside the "
            "published one of the same protocol and arm on the GPU named."
        )
        ordered = sorted(c.gsm8k, key=lambda r: (r["run_id"], r["host"], r["arm"], r["protocol"],
                                                 r["metrics"]["run_index"], r["created"]))  # fmt: skip
        gsm.blocks.append(
            Table(
                ["Host", "GPU", "Arm", "Protocol", "Tool", "Run", "Questions", "Strict", "Flexible",
                 "Numeric", "Symbolic", "Verdict (threshold)", "Published (dev. pts)",
                 "Accept length (published)"],
                [
                    [r["host"], r["sku"], r["arm"], r["protocol"], _tool_text(r["metrics"]),
                     str(r["metrics"]["run_index"]), _questions_text(r["metrics"]),
                     _acc(r["metrics"], "strict"), _acc(r["metrics"], "flexible"),
                     _acc(r["metrics"], "numeric"), _acc(r["metrics"], "symbolic"),
                     f"{r['metrics']['verdict']} ({r['metrics']['verdict_metric']} ≥ "
                     f"{r['metrics']['threshold']:.2f})"
                     + ("" if r["metrics"].get("status", "ok") == "ok" else f": {r['metrics']['status']}"),
                     _published_cell(r, published),
                     f"{fmt(r['metrics'].get('accept_length'), 3, '—')} "
                     f"({_published_accept_length(r, published)})"]
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
            [[p["source"], p["protocol"], p["sku"], p["arm"], p["model"],
              ", ".join(f"{v:.4f}" for v in p["runs"])] for p in published.get("gsm8k", [])],
        )
    )  # fmt: skip
    return gsm


def unreadable_section(c: Collected) -> Section:
    bad = Section("Unreadable records")
    bad.blocks.append("Named and skipped; everything else in the report is from the readable records.")
    bad.blocks.append(Table(["Record", "Problem"], [[path, why] for path, why in c.skipped]))
    return bad


def provenance_section(c: Collected) -> Section:
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
    return prov


METRIC_LABELS = {key: label for key, label, _f, _r in VISIT_METRICS}


def serving_ab_section(rows: list[dict], published: dict) -> Section:
    """Published serving A/Bs of other PRs: every published metric, ours beside theirs."""
    section = Section("Serving A/B of other PRs (every published metric, ours beside theirs)")
    for run_id, sku, host, protocol in sorted(
        {(r["run_id"], r["sku"], r["host"], r["protocol"]) for r in rows}
    ):
        group = [
            r
            for r in rows
            if (r["run_id"], r["sku"], r["host"], r["protocol"]) == (run_id, sku, host, protocol)
        ]
        base, cand = group[0]["arms"]
        table = next(t for t in published["serving_ab"] if t["protocol"] == protocol)
        gpus = sorted({r["pub_sku"] for r in group if r["pub_sku"]})
        section.blocks.append(
            f"**{sku} — host {host}, run {run_id}, protocol {protocol}**: {table['title']} "
            f"({table['source']}). Published on {', '.join(gpus) or 'no GPU'}, ours on {sku}: compare each "
            f"side's {base} → {cand} change, not the absolute numbers across GPUs. Ours: the median of the "
            "visits' medians; interval and verdict of the change as in the serving section (ms metrics: "
            "below 1 is faster)."
        )
        section.blocks.append(
            Table(
                ["Input / Output", "C", "Metric", f"Ours {base}", f"Ours {cand}", "Change",
                 f"{cand}/{base} (95 % CI)", f"Published {base}", f"Published {cand}", "Published change"],
                [
                    [f"{r['key'][0]} / {r['key'][1]}", str(r["key"][2]),
                     METRIC_LABELS[r["metric"]] + (" (ms)" if r["metric"].endswith("_ms") else ""),
                     fmt(r["ours"][base], 3), fmt(r["ours"][cand], 3), fmt_pct(r["change"]),
                     _metric_cell(r["judged"]),
                     fmt(r["pub"][base] if r["pub"] else None, 3, missing="not published"),
                     fmt(r["pub"][cand] if r["pub"] else None, 3, missing="not published"),
                     fmt_pct(r["pub_change"])]
                    for r in group
                ],
            )
        )  # fmt: skip
    return section


def _metric_cell(judged: stats.Judgement) -> str:
    if judged.kind == stats.NO_DATA or judged.ci is None:
        return "no data"
    if judged.ci.n < stats.MIN_PAIRS or judged.ci.low is None:
        return f"{judged.ci.ratio:.4f} ({judged.ci.n} paired visit(s): cannot tell)"
    return f"{stats.fmt_ci(judged.ci)} {judged.text}"


def _published_cell(record: dict, published: dict) -> str:
    """The published mean with our deviation in points, or why there is none."""
    mean, deviation = _gsm8k_published(record, published)
    return mean if deviation == "n/a" else f"{mean} ({deviation})"


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


def _published_accept_length(record: dict, published: dict) -> str:
    """The published average accept length of the same protocol and arm, with the GPU it ran on."""
    found = [
        f"published {p['accept_length']:.3f}, {p['sku']}, {p['source']}"
        for p in published.get("gsm8k", [])
        if p["protocol"] == record["protocol"] and p["arm"] == record["arm"] and "accept_length" in p
    ]
    return "; ".join(found) or "not published"


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
            "not observed: telemetry failed" if tel["source"] == "failed"
            else f"{len(tel['warnings'])} warning(s)" if tel["warnings"] else "none",
        ])  # fmt: skip
        warned += [f"{path}: {w}" for w in tel["warnings"]]
        file = _telemetry_file(c, record) if plots else None
        if file is not None:
            samples = telemetry.read_csv(file)
            if samples:
                name = "telemetry-" + path.replace("/", "-").removesuffix(results.RESULT_SUFFIX) + ".png"
                section.blocks.append(telemetry_plot(f"{path}: SM clock and power", samples,
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
