"""The report's two renderings of its sections: Markdown and self-contained HTML."""

from __future__ import annotations

import base64
import html

from kdakit.report.model import PLOTS_DIR, Plot, Section, Table


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
