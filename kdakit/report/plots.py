"""The report's plots (matplotlib, PNG bytes), drawn from the model's rows."""

from __future__ import annotations

import io

from kdakit.report.model import ARMS, Plot, shape_label

ARM_STYLE = {  # colour, marker, filled, x offset (factor on the log concurrency axis): no arm hides another
    "triton": ("tab:blue", "o", True, 0.93),
    "helion": ("tab:orange", "s", False, 1.07),
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput_figure(title: str, rows: list[dict]):
    """Measured output tok/s per arm against concurrency (arms side by side, bars: the range of the runs or
    visits behind each value) and, on its own axis, measured / published per arm (near 1: as published)."""
    plt = _pyplot()
    published = any(r.get(f"pub_{arm}") for r in rows for arm in ARMS)
    fig, axes = plt.subplots(1, 2 if published else 1, figsize=(10 if published else 6.4, 3.8), dpi=100,
                             squeeze=False)  # fmt: skip
    ax = axes[0][0]
    lengths = sorted({r["key"][:2] for r in rows})
    for arm in ARMS:
        color, marker, filled, offset = ARM_STYLE[arm]
        for n, (i, o) in enumerate(lengths):
            pts = sorted(
                (r["key"][2], r[arm], r.get(f"spread_{arm}")) for r in rows if r["key"][:2] == (i, o)
            )
            pts = [(x * offset, y, sp) for x, y, sp in pts if y is not None]
            if not pts:
                continue
            xs, ys = [x for x, _, _ in pts], [y for _, y, _ in pts]
            low = [y - sp[0] if sp else 0.0 for _, y, sp in pts]
            high = [sp[1] - y if sp else 0.0 for _, y, sp in pts]
            ax.errorbar(xs, ys, yerr=[low, high], marker=marker, color=color, capsize=3,
                        mfc=color if filled else "white", linestyle=("-", "--", ":")[n % 3],
                        label=f"{arm} {i}/{o}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (arms drawn side by side)")
    ax.set_ylabel("output tok/s (median)")
    ax.set_title("measured (bars: range of runs or visits)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if published:
        ax = axes[0][1]
        for arm in ARMS:
            color, marker, filled, offset = ARM_STYLE[arm]
            pts = [(r["key"][2] * offset, r[arm] / r[f"pub_{arm}"], r) for r in rows
                   if r[arm] is not None and r.get(f"pub_{arm}")]  # fmt: skip
            if not pts:
                continue
            low = [(v - r[f"spread_{arm}"][0] / r[f"pub_{arm}"]) if r.get(f"spread_{arm}") else 0.0
                   for _, v, r in pts]  # fmt: skip
            high = [(r[f"spread_{arm}"][1] / r[f"pub_{arm}"] - v) if r.get(f"spread_{arm}") else 0.0
                    for _, v, r in pts]  # fmt: skip
            ax.errorbar([x for x, _, _ in pts], [v for _, v, _ in pts], yerr=[low, high], fmt=marker,
                        color=color, mfc=color if filled else "white", capsize=3, label=arm)  # fmt: skip
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("measured / published")
        ax.set_title("against the published numbers (1: as published)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def throughput_plot(title: str, rows: list[dict], filename: str) -> Plot:
    return Plot(title, filename, _png(throughput_figure(title, rows)))


def ratio_figure(title: str, rows: list[dict]):
    """helion/triton per point with its 95 % interval (coloured by verdict) and the A/A interval beside it."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    shown = [r for r in rows if r["ci"] is not None or r.get("aa") is not None]
    colors = {"within": "tab:green", "inside": "tab:blue", "outside": "tab:red"}
    for x, r in enumerate(shown):
        for ci, dx, marker, color in (
            (r["ci"], -0.12, "o", colors.get(r.get("kind"), "tab:gray")),
            (r.get("aa"), 0.12, "s", "tab:purple"),
        ):
            if ci is None:
                continue
            if ci.low is not None:
                ax.errorbar([x + dx], [ci.ratio], yerr=[[ci.ratio - ci.low], [ci.high - ci.ratio]],
                            fmt=marker, color=color, capsize=4, markersize=5)  # fmt: skip
            else:  # no interval (one visit): a hollow mark, no bar to draw
                ax.plot([x + dx], [ci.ratio], marker, color=color, mfc="none")
    band = rows[0]["band"] / 100 if rows else 0.01
    for y, style in ((1.0, "-"), (1 - band, ":"), (1 + band, ":")):
        ax.axhline(y, color="black", linestyle=style, linewidth=0.8)
    ax.set_xticks(
        range(len(shown)), [f"{r['key'][0]}/{r['key'][1]}\nC{r['key'][2]}" for r in shown], fontsize=7
    )
    ax.set_ylabel("helion / triton (●), A/A (■)", fontsize=8)
    ax.set_title(f"{title}  (dotted: ±{band * 100:g} %; green within, blue different but inside, "
                 "red outside, grey cannot tell)", fontsize=8)  # fmt: skip
    ax.grid(alpha=0.3, axis="y")
    return fig


def ratio_plot(title: str, rows: list[dict], filename: str) -> Plot:
    return Plot(title, filename, _png(ratio_figure(title, rows)))


def telemetry_plot(title: str, rows: list[dict], windows: list[dict], filename: str) -> Plot:
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


def kernel_plot(title: str, rows: list[dict], filename: str) -> Plot:
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
