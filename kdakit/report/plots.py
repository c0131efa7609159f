"""The report's plots (matplotlib, PNG bytes), drawn from the model's rows."""

from __future__ import annotations

import io

from kdakit.report.model import ARMS, Plot, shape_label

# Every series differs from every other in colour AND marker: per arm, one (colour, marker) per input
# length; filled for triton, hollow for helion; arms drawn side by side (x offset on the log axis).
SERIES_STYLE = {
    "triton": (("tab:blue", "o"), ("tab:purple", "D"), ("tab:cyan", "v")),
    "helion": (("tab:orange", "s"), ("tab:red", "^"), ("tab:brown", "P")),
}
ARM_OFFSET = {"triton": 0.93, "helion": 1.07}
LINES = ("-", "--", ":")  # the measured series' line per input length
FIGURE_WIDTH_IN = 7.4  # shown at its own size in an 800 px window: no shrinking of its text
FONT_PT = 9  # at 100 dpi, 12.5 px: legible in an 800 px window
SMALL_PT = 8
VERDICT_STYLE = {  # verdict: (colour, marker, words)
    "within": ("tab:green", "o", "within the band"),
    "inside": ("tab:blue", "D", "different but inside"),
    "outside": ("tab:red", "X", "outside the band"),
    "cannot tell": ("tab:gray", "v", "cannot tell"),
}
AA_STYLE = ("tab:purple", "s", "A/A (same arm, two visits)")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": FONT_PT, "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT,
                         "xtick.labelsize": SMALL_PT, "ytick.labelsize": SMALL_PT,
                         "legend.fontsize": SMALL_PT})  # fmt: skip
    return plt


def series_style(arm: str, length_index: int) -> tuple[str, str, bool]:
    """(colour, marker, filled) of one arm's series at one input/output length."""
    styles = SERIES_STYLE.get(arm, (("tab:gray", "x"),))
    colour, marker = styles[length_index % len(styles)]
    return colour, marker, arm == "triton"


def throughput_figure(title: str, rows: list[dict]):
    """Measured output tok/s per arm against concurrency (arms side by side, bars: the range of the runs or
    visits behind each value) and, below on its own axis, measured / published per arm (near 1: as
    published); each arm and length its own colour and marker."""
    plt = _pyplot()
    published = any(r.get(f"pub_{arm}") for r in rows for arm in ARMS)
    fig, axes = plt.subplots(2 if published else 1, 1, figsize=(FIGURE_WIDTH_IN, 7.0 if published else 3.9),
                             dpi=100, squeeze=False)  # fmt: skip
    ax = axes[0][0]
    lengths = sorted({r["key"][:2] for r in rows})
    _arm_series(ax, rows, lengths, per_published=False)
    _log2_axes(ax, "concurrency (arms drawn side by side)", "output tok/s (median)",
               "measured (bars: range of runs or visits)")  # fmt: skip
    if published:
        ax = axes[1][0]
        _arm_series(ax, rows, lengths, per_published=True)
        ax.axhline(1.0, color="black", linewidth=0.8)
        _log2_axes(ax, "concurrency", "measured / published",
                   "against the published numbers (1: as published)")  # fmt: skip
    fig.suptitle(title, fontsize=FONT_PT + 1)
    return fig


def _arm_series(ax, rows: list[dict], lengths: list[tuple], per_published: bool) -> None:
    """Each arm's values against concurrency, one series per input/output length, bars: the range of the runs
    or visits behind each value. per_published: each divided by its published number (points without one
    left out), markers without lines."""
    for arm in ARMS:
        for n, (i, o) in enumerate(lengths):
            color, marker, filled = series_style(arm, n)
            pts = []
            for r in rows:
                scale = r.get(f"pub_{arm}") if per_published else 1.0
                if r["key"][:2] != (i, o) or r[arm] is None or not scale:
                    continue
                sp = r.get(f"spread_{arm}")
                bars = (sp[0] / scale, sp[1] / scale) if sp else None
                pts.append((r["key"][2] * ARM_OFFSET[arm], r[arm] / scale, bars))
            if not pts:
                continue
            pts.sort()
            low = [y - sp[0] if sp else 0.0 for _, y, sp in pts]
            high = [sp[1] - y if sp else 0.0 for _, y, sp in pts]
            line = {"fmt": marker} if per_published else {"marker": marker, "linestyle": LINES[n % 3]}
            ax.errorbar([x for x, _, _ in pts], [y for _, y, _ in pts], yerr=[low, high], color=color,
                        capsize=3, mfc=color if filled else "white", label=f"{arm} {i}/{o}",
                        **line)  # fmt: skip


def _log2_axes(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(ncol=2)


def throughput_plot(title: str, rows: list[dict], filename: str) -> Plot:
    return Plot(title, filename, _png(throughput_figure(title, rows)))


def ratio_figure(title: str, rows: list[dict]):
    """helion/triton per point with its 95 % interval (colour and marker by verdict) and the A/A interval
    beside it; the legend below the plot says which is which."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.2), dpi=100)
    shown = [r for r in rows if r["ci"] is not None or r.get("aa") is not None]
    used = set()
    for x, r in enumerate(shown):
        verdict = VERDICT_STYLE.get(r.get("kind"), VERDICT_STYLE["cannot tell"])
        for ci, dx, (color, marker, words) in ((r["ci"], -0.12, verdict), (r.get("aa"), 0.12, AA_STYLE)):
            if ci is None:
                continue
            used.add(words)
            if ci.low is not None:
                ax.errorbar([x + dx], [ci.ratio], yerr=[[ci.ratio - ci.low], [ci.high - ci.ratio]],
                            fmt=marker, color=color, capsize=4, markersize=6)  # fmt: skip
            else:  # no interval (one visit): a hollow mark, no bar to draw
                ax.plot([x + dx], [ci.ratio], marker, color=color, mfc="none", markersize=6)
    band = rows[0]["band"] / 100 if rows else 0.01
    for y, style in ((1.0, "-"), (1 - band, ":"), (1 + band, ":")):
        ax.axhline(y, color="black", linestyle=style, linewidth=0.8)
    ax.set_xticks(range(len(shown)), [f"{r['key'][0]}/{r['key'][1]}\nC{r['key'][2]}" for r in shown])
    ax.set_ylabel("helion / triton")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    handles = [Line2D([], [], color=c, marker=m, linestyle="none", label=w)
               for c, m, w in (*VERDICT_STYLE.values(), AA_STYLE) if w in used]  # fmt: skip
    handles.append(Line2D([], [], color="black", linestyle=":", label=f"±{band * 100:g} % band"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    return fig


def ratio_plot(title: str, rows: list[dict], filename: str) -> Plot:
    return Plot(title, filename, _png(ratio_figure(title, rows)))


def telemetry_plot(title: str, rows: list[dict], windows: list[dict], filename: str) -> Plot:
    plt = _pyplot()
    fig, (clock, power) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH_IN, 4.6), dpi=100, sharex=True)
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
    clock.set_ylabel("SM clock (MHz)")
    power.set_ylabel("power (W)")
    power.set_xlabel("seconds (shaded: measured runs; dotted: power limit)")
    clock.set_title(_fit(title))
    clock.legend(ncol=4)
    for ax in (clock, power):
        ax.grid(alpha=0.3)
    return Plot(title, filename, _png(fig))


def kernel_plot(title: str, rows: list[dict], filename: str) -> Plot:
    return Plot(title, filename, _png(kernel_figure(title, rows)))


def kernel_figure(title: str, rows: list[dict]):
    """Median latency per phase and shape, the arms side by side (colour and hatch), published marks."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.2), dpi=100)
    labels = []
    for r in rows:
        missing = [arm for arm in ARMS if r[arm] is None]
        note = (
            ""
            if not missing
            else "\nboth missing"
            if len(missing) == len(ARMS)
            else f"\n{missing[0]} missing"
        )
        labels.append(f"{r['phase']}\n{shape_label(r['shape'])}{note}")
    xs = range(len(rows))
    width = 0.38
    for k, (arm, color, hatch) in enumerate((("triton", "tab:blue", ""), ("helion", "tab:orange", "//"))):
        offs = [x + (k - 0.5) * width for x in xs]
        ax.bar(offs, [r[arm] if r[arm] is not None else float("nan") for r in rows], width, color=color,
               hatch=hatch, edgecolor="white", label=arm)  # fmt: skip
        pubs = [(o, r[f"pub_{arm}"]) for o, r in zip(offs, rows, strict=True) if r[f"pub_{arm}"] is not None]
        if pubs:
            ax.scatter([o for o, _ in pubs], [v for _, v in pubs], marker="_", color="black", s=140, zorder=3,
                       label="published" if k == 0 else None)  # fmt: skip
    ax.set_xticks(list(xs), labels)
    ax.set_yscale("log")
    ax.set_ylabel("median latency (µs, log)")
    ax.set_title(title)
    ax.legend(ncol=3)
    ax.grid(alpha=0.3, axis="y")
    return fig


def _fit(title: str, width: int = 90) -> str:
    """A long title (a record's path) over two lines rather than cut at the figure's edge."""
    import textwrap

    return "\n".join(textwrap.wrap(title, width)) if len(title) > width else title


def _drawn_texts(fig) -> list:
    """The texts a figure draws: its titles, the axes' titles, labels, legends and the tick labels inside
    each axis' view (matplotlib keeps, and does not draw, the ones outside)."""
    found = [t for t in (*fig.texts, getattr(fig, "_suptitle", None)) if t is not None]
    for ax in fig.axes:
        found += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        legend = ax.get_legend()
        if legend is not None:
            found += legend.get_texts()
        for axis, (low, high) in ((ax.xaxis, sorted(ax.get_xlim())), (ax.yaxis, sorted(ax.get_ylim()))):
            for tick in axis.get_major_ticks():
                if low <= tick.get_loc() <= high:
                    found.append(tick.label1)
    return [t for t in found if t.get_visible() and str(t.get_text()).strip()]


def texts_outside(fig) -> list[str]:
    """The texts of a figure (titles, labels, ticks, legends) not wholly inside it: cut in the PNG."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    cut = []
    for text in _drawn_texts(fig):
        extent = text.get_window_extent(renderer)
        if (
            extent.x0 < box.x0 - 1
            or extent.x1 > box.x1 + 1
            or extent.y0 < box.y0 - 1
            or extent.y1 > box.y1 + 1
        ):
            cut.append(str(text.get_text()))
    return cut


def small_texts(fig, least_pt: float = SMALL_PT) -> list[str]:
    """The texts of a figure set smaller than `least_pt` (illegible once the page shows it)."""
    return [str(t.get_text()) for t in _drawn_texts(fig) if t.get_fontsize() < least_pt]


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(io.BytesIO(), format="png")  # a first draw places the legend below the axes ...
    fig.tight_layout()  # ... which the second layout makes room for
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
