"""The report's plots (matplotlib, PNG bytes), drawn from the model's rows."""

from __future__ import annotations

import io

from kdakit.report.model import ARMS, Plot, shape_label


def throughput_plot(title: str, rows: list[dict], filename: str) -> Plot:
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


def ratio_plot(title: str, rows: list[dict], filename: str) -> Plot:
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
