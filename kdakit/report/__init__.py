"""`kdakit report RESULTS_DIR`: the PR's tables with our numbers, the published ones beside, and verdicts.

Walks RESULTS_DIR for *.result.json (results/<run-id>/<host>/...), validates every record (an unreadable
or invalid one is named, with why, and skipped), and writes report.md (plots as PNG files beside it) and a
self-contained report.html (the same content, plots inlined as base64 PNG, no external resources).
Missing points are shown as "missing", failed ones as "failed: <cause>"; nothing is dropped.

Every record counts: re-runs of a serving point are repeats, pooled with kdakit.records.stats (the table says
how many each arm has); the `pr` protocol's number stays the PR's median, with a 95 % interval saying what its
runs can resolve; the `rigorous` protocol's interleaved visits give paired intervals and verdicts, and the
sequential `decisive` protocol's an always-valid confidence sequence, with the visit each verdict took. The
page opens with the answer: each claim, its verdict, the visits it took and what would change it. GSM8K
published numbers are matched on protocol, GPU and arm, and a limited run is never compared with them.
GPU telemetry kept with a record is plotted, with its throttle and power-cap warnings.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kdakit.records.controller_files import WriteFailed, write_atomic
from kdakit.report.model import PLOTS_DIR, Plot, collect
from kdakit.report.render import to_html, to_markdown
from kdakit.report.sections import build


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
