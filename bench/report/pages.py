"""The report's two renderings of one list of blocks: GitHub markdown with relative image links, and
one self-contained HTML page with the plots inlined as data: URIs and every store text escaped.

Blocks: ('h', level, text), ('p', text), ('table', headers, rows), ('img', path, alt). A table cell may be a
`Link` to a local file (a trace): a relative link in markdown, a file:// link in HTML. `fmt` writes a number
for a table cell.
"""
from __future__ import annotations

import base64
import html
import math
import os
import re
from pathlib import Path
from typing import NamedTuple


class Link(NamedTuple):
    """A table cell that links to a local file."""
    text: str
    path: str


def _md_cell(cell, report_dir: str) -> str:
    if isinstance(cell, Link):
        rel = os.path.relpath(os.path.abspath(cell.path), os.path.abspath(report_dir)).replace(os.sep, "/")
        return f"[{_md_text(cell.text)}]({rel.replace(' ', '%20')})"
    return _md_text(cell)


def _html_cell(cell) -> str:
    if isinstance(cell, Link):
        return f'<a href="{html.escape(Path(os.path.abspath(cell.path)).as_uri())}">{html.escape(cell.text)}</a>'
    return html.escape(str(cell))


def _md_text(text: str) -> str:
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def to_markdown(bl: list, report_dir: str) -> str:
    out = []
    for blk in bl:
        if blk[0] == "h":
            out.append("#" * blk[1] + " " + _md_text(blk[2]))
        elif blk[0] == "p":
            out.append(_md_text(blk[1]))
        elif blk[0] == "table":
            out.append("| " + " | ".join(_md_text(h) for h in blk[1]) + " |")
            out[-1] += "\n|" + "---|" * len(blk[1])
            out[-1] += "".join("\n| " + " | ".join(_md_cell(c, report_dir) for c in row) + " |" for row in blk[2])
        elif blk[0] == "img":
            rel = os.path.relpath(os.path.abspath(blk[1]), os.path.abspath(report_dir)).replace(os.sep, "/")
            out.append(f"![{_md_text(blk[2])}]({rel})")
    return "\n\n".join(out) + "\n"


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%;display:block;margin:1em 0}#img-warning{color:#b00}")
# Says so on the page if an embedded plot cannot be decoded (and lets a headless test check it).
_SCRIPT = ("window.addEventListener('load',function(){var bad=[].filter.call(document.images,"
           "function(i){return !(i.naturalWidth>0)});document.body.setAttribute('data-images-ok',bad.length?'false':'true');"
           "if(bad.length){document.getElementById('img-warning').textContent=bad.length+' plot(s) could not be shown';}});")


def to_html(bl: list) -> str:
    e = html.escape
    out = []
    for blk in bl:
        if blk[0] == "h":
            out.append(f'<h{blk[1]} id="{anchor(str(blk[2]))}">{e(str(blk[2]))}</h{blk[1]}>')
        elif blk[0] == "p":
            out.append(f"<p>{e(str(blk[1]))}</p>")
        elif blk[0] == "table":
            head = "".join(f"<th>{e(str(h))}</th>" for h in blk[1])
            body = "".join("<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>" for row in blk[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif blk[0] == "img":
            with open(blk[1], "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            out.append(f'<img src="data:image/png;base64,{data}" alt="{e(str(blk[2]))}">')
    title = e(str(bl[0][2])) if bl and bl[0][0] == "h" else "report"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{_CSS}</style><script>{_SCRIPT}</script></head>\n<body>\n<p id=\"img-warning\"></p>\n"
            + "\n".join(out) + "\n</body></html>\n")




def anchor(text: str) -> str:
    """The id of a heading, so a sentence can point at the table or plot behind it (#synthetic-all-configurations)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower().split(" (")[0]).strip("-")


def fmt(v, spec: str = "", suffix: str = "") -> str:
    """A number for a table; without spec 1 decimal from 100 up, 2 from 1 up, else 3 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    spec = spec or (".1f" if abs(v) >= 100 else ".2f" if abs(v) >= 1 else "#.3g")
    return f"{v:{spec}}{suffix}"
