"""The report's two renderings of its sections: Markdown and self-contained HTML."""

from __future__ import annotations

import base64
import html
import re

from kdakit.report.model import PLOTS_DIR, Headline, Plot, Section, Table


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
            elif isinstance(b, Headline):
                out.append(f"**{b.claim}: {b.verdict}**")
                out += [""] + [f"- {line}" for line in b.lines]
            else:
                out.append(b)
            out.append("")
    return "\n".join(out).rstrip() + "\n"


CSS = """body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:80rem;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.85rem;max-width:100%}
th,td{border:1px solid #ccc;padding:.25rem .4rem;text-align:left;overflow-wrap:normal;word-break:normal;
hyphens:manual;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right}.table{overflow-x:auto;max-width:100%}
@media (max-width:900px){table{font-size:.78rem}th,td{padding:.2rem .3rem}}
.holds{color:#17692c;font-weight:600}.inside{color:#1f4e9a;font-weight:600}
.nothold{color:#b00020;font-weight:600}.missing{color:#666;font-style:italic}.tell{color:#8a5a00;font-weight:600}
.headline{border-left:.5rem solid #999;background:#f7f7f7;padding:.6rem 1rem;margin:.6rem 0 1rem}
.headline.holds{border-color:#17692c;background:#eef7f0}.headline.nothold{border-color:#b00020;background:#fbeef0}
.headline.tell{border-color:#c08000;background:#fdf6e8}.headline.missing{border-color:#999}
.headline .claim{margin:0;color:#222;font-weight:400}.headline .answer{margin:.2rem 0;font-size:1.5rem}
.headline ul{margin:.3rem 0 0;padding-left:1.2rem;color:#222;font-weight:400}
figure{margin:.5rem 0 1rem}img{max-width:100%;height:auto}"""

# The styling follows the meaning: only a result outside the band (or a claim that does not hold) is red;
# "different but inside the band" is a difference that the claim allows.
_NOT_MEASURED = ("missing", "failed", "hung", "timed out", "not published", "n/a", "no data")


def cell_class(text: str) -> str | None:
    text = str(text)
    if text in ("holds", "holds where measured", "holds by the PR's method") or text.startswith("within ±"):
        return "holds"
    if text.startswith("different but inside"):
        return "inside"
    if text.startswith(("does not hold", "outside ±")):
        return "nothold"
    if text.startswith("cannot tell"):
        return "tell"
    if text.split(":")[0] in _NOT_MEASURED or text.startswith("no A/A"):
        return "missing"
    return None


_NUMBER = re.compile(r"[-+]?\d[\d.,]*%?( [(\[][^ ]*[)\]])?|[-+]?\d[\d.]* \[[\d., ]+\]|\d+ / \d+.*")


_BREAK_AFTER = re.compile(r"([/,=])(?=\S)")


def _breakable(text: str) -> str:
    """Escaped text with break opportunities after path and list separators only (never inside a word)."""
    return _BREAK_AFTER.sub(r"\1<wbr>", html.escape(str(text)))


def _html_cell(text: str) -> str:
    t = _breakable(text)
    css = cell_class(text) or ("num" if _NUMBER.fullmatch(str(text)) else None)
    return f'<td class="{css}">{t}</td>' if css else f"<td>{t}</td>"


def _inline_md(text: str) -> str:
    t = _breakable(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
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
                # a table wider than a narrow window scrolls in its own box; the page never does
                out.append('<div class="table"><table><tr>'
                           + "".join(f"<th>{html.escape(h)}</th>" for h in b.headers) + "</tr>")  # fmt: skip
                out += ["<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in b.rows]
                out.append("</table></div>")
            elif isinstance(b, Headline):
                out.append(
                    f'<div class="headline {b.css}"><p class="claim">{html.escape(b.claim)}</p>'
                    f'<p class="answer {b.css}">{html.escape(b.verdict)}</p><ul>'
                    + "".join(f"<li>{_inline_md(line)}</li>" for line in b.lines)
                    + "</ul></div>"
                )
            elif isinstance(b, Plot):
                data = base64.b64encode(b.png).decode()
                out.append(
                    f'<figure><img alt="{html.escape(b.title)}" src="data:image/png;base64,{data}"></figure>'
                )
            else:
                out.append(f"<p>{_inline_md(b)}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
