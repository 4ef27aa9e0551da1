"""The report's two renderings of one list of blocks: GitHub markdown with relative image links, and
one self-contained HTML page with the plots inlined as data: URIs and every store text escaped.

Blocks: ('h', level, text), ('p', text), ('table', headers, rows), ('img', path, alt), ('imgs', [(path, alt)]) (small
figures side by side: the first screen's). A table cell may be a `Link` to a local file (a trace): a relative link
in markdown, a file:// link in HTML; or `Em`, a value marked (what differs between environments). `fmt` writes a
number for a table cell. `origin` is the line each page carries to say which sweep of which store it reports, so a
later render can tell that it replaces the report of another sweep (`read_origin`).
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


class Em(NamedTuple):
    """A table cell shown marked: **bold** in markdown, <mark> in HTML."""
    text: str


def _md_cell(cell, report_dir: str) -> str:
    if isinstance(cell, Em):
        return f"**{_md_text(cell.text)}**"
    if isinstance(cell, Link):
        rel = os.path.relpath(os.path.abspath(cell.path), os.path.abspath(report_dir)).replace(os.sep, "/")
        return f"[{_md_text(cell.text)}]({rel.replace(' ', '%20')})"
    return _md_text(cell)


LONG_CELL = 40   # characters: a cell of words, not a figure, given room to read (`_html_td`)


def _html_td(cell) -> str:
    """A table cell; one of more than LONG_CELL characters gets a reading width (class 'words'), where the browser
    squeezed an efficiency cell's sentence into one word a line, 8+ lines high, beside a column of figures."""
    text = cell.text if isinstance(cell, (Em, Link)) else str(cell)
    return ('<td class="words">' if len(text) > LONG_CELL else "<td>") + _html_cell(cell) + "</td>"


def _html_cell(cell) -> str:
    if isinstance(cell, Em):
        return f"<mark>{html.escape(str(cell.text))}</mark>"
    if isinstance(cell, Link):
        return f'<a href="{html.escape(Path(os.path.abspath(cell.path)).as_uri())}">{html.escape(cell.text)}</a>'
    return html.escape(str(cell))


def _md_text(text: str) -> str:
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def _rel(path: str, report_dir: str) -> str:
    return os.path.relpath(os.path.abspath(path), os.path.abspath(report_dir)).replace(os.sep, "/")


def to_markdown(bl: list, report_dir: str, origin: str = "") -> str:
    out = [f"<!-- {ORIGIN}{_md_text(_comment_safe(origin))} -->"] if origin else []
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
            out.append(f"![{_md_text(blk[2])}]({_rel(blk[1], report_dir)})")
        elif blk[0] == "imgs":
            out.append(" ".join(f"![{_md_text(alt)}]({_rel(path, report_dir)})" for path, alt in blk[1]))
    return "\n\n".join(out) + "\n"


# A wide table scrolls inside its own box (div.table), not the page: at 1280 px the 'all configurations' table
# overflowed the page with a horizontal scrollbar and its last column (stability) was cut off.
_CSS = ("body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}"
        "div.table{overflow-x:auto;max-width:100%;margin:1em 0}"
        "table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        "td.words{min-width:16em}"
        "th{background:#f3f3f3}img{max-width:100%;display:block;margin:1em 0}#img-warning{color:#b00}"
        ".figures{display:flex;flex-wrap:wrap;gap:1em}.figures img{width:460px;margin:0}mark{background:#ffe08a}")
# Says so on the page if an embedded plot cannot be decoded (and lets a headless test check it).
_SCRIPT = ("window.addEventListener('load',function(){var bad=[].filter.call(document.images,"
           "function(i){return !(i.naturalWidth>0)});document.body.setAttribute('data-images-ok',bad.length?'false':'true');"
           "if(bad.length){document.getElementById('img-warning').textContent=bad.length+' plot(s) could not be shown';}});")


def _data_uri(path: str) -> str:
    with open(path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode("ascii")


def to_html(bl: list, origin: str = "") -> str:
    e = html.escape
    out = []
    for blk in bl:
        if blk[0] == "h":
            out.append(f'<h{blk[1]} id="{anchor(str(blk[2]))}">{e(str(blk[2]))}</h{blk[1]}>')
        elif blk[0] == "p":
            out.append(f"<p>{e(str(blk[1]))}</p>")
        elif blk[0] == "table":
            head = "".join(f"<th>{e(str(h))}</th>" for h in blk[1])
            body = "".join("<tr>" + "".join(_html_td(c) for c in row) + "</tr>" for row in blk[2])
            out.append(f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')
        elif blk[0] == "img":
            out.append(f'<img src="{_data_uri(blk[1])}" alt="{e(str(blk[2]))}">')
        elif blk[0] == "imgs":
            out.append('<div class="figures">' + "".join(f'<img src="{_data_uri(path)}" alt="{e(str(alt))}">'
                                                         for path, alt in blk[1]) + "</div>")
    title = e(str(bl[0][2])) if bl and bl[0][0] == "h" else "report"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            + (f"<!-- {ORIGIN}{e(_comment_safe(origin))} -->" if origin else "")
            + f"<style>{_CSS}</style><script>{_SCRIPT}</script></head>\n<body>\n<p id=\"img-warning\"></p>\n"
            + "\n".join(out) + "\n</body></html>\n")



ORIGIN = "bench report of "   # the comment each page starts with, then the sweep and the store it reports


def _comment_safe(text: str) -> str:
    return str(text).replace("--", "-\u2010")   # '--' cannot appear inside an HTML comment


def read_origin(path: str) -> str:
    """What the comment at the top of an existing report says it reports ('sweep 3 of /abs/bench.sqlite'), "" when the
    file is missing or has none (a report of an older version, or someone else's file)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return ""
    m = re.search(r"<!-- " + re.escape(ORIGIN) + r"(.*?) -->", head)
    return html.unescape(m.group(1)) if m else ""


def write(bl: list, report_dir: str, stem: str, origin: str) -> tuple:
    """STEM.md and STEM.html of blocks `bl` in report_dir, each opening with what it reports (origin): (markdown path,
    html path, what the pages there reported before when it was something else, '' otherwise)."""
    os.makedirs(report_dir, exist_ok=True)
    md, page = os.path.join(report_dir, f"{stem}.md"), os.path.join(report_dir, f"{stem}.html")
    before = read_origin(md) or read_origin(page)
    if not before and (os.path.exists(md) or os.path.exists(page)):
        before = "a sweep it does not name (an older version's report, or a file this suite did not write)"
    with open(md, "w", encoding="utf-8") as f:
        f.write(to_markdown(bl, report_dir, origin))
    with open(page, "w", encoding="utf-8") as f:
        f.write(to_html(bl, origin))
    return md, page, before if before and before != origin else ""


def anchor(text: str) -> str:
    """The id of a heading, so a sentence can point at the table or plot behind it (#synthetic-all-configurations)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower().split(" (")[0]).strip("-")


def fmt(v, spec: str = "", suffix: str = "") -> str:
    """A number for a table; without spec 1 decimal from 100 up, 2 from 1 up, else 3 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    spec = spec or (".1f" if abs(v) >= 100 else ".2f" if abs(v) >= 1 else "#.3g")
    return f"{v:{spec}}{suffix}"


BOTH_AT = 1.25   # from 1.25x apart the two readings of a gap part by 5 points or more (20% slower, 25% faster): say both


def slower_share(fast_sps: float, slow_sps: float) -> float:
    """How much slower `slow` runs than `fast`, in throughput: 1 - slow / fast (0.28 for 164.4 against 226.8
    samples/s). Never fast / slow - 1: that is how much faster the fast one is (an H200 report read 'the runner-up
    ... is 144% slower' for 160.9 against 391.8 samples/s, which is 59% slower)."""
    return 1 - slow_sps / fast_sps


def slower_words(fast_sps: float, slow_sps: float, than: str = "", fast: str = "") -> str:
    """'28% slower', or with `than` '28% slower than the fastest'; from BOTH_AT apart the other reading too, as a
    ratio: '59% slower (the fastest 2.44x as fast)', '59% slower than the fastest, which is 2.44x as fast', or with
    `fast` (the fast one's name, for a clause already inside parentheses) '59% slower, FSDP 2.44x as fast'."""
    head = f"{slower_share(fast_sps, slow_sps):.0%} slower" + (f" than {than}" if than else "")
    ratio = fast_sps / slow_sps
    if ratio < BOTH_AT:
        return head
    if than:
        return f"{head}, which is {ratio:.2f}x as fast"
    return f"{head}, {fast} {ratio:.2f}x as fast" if fast else f"{head} (the fastest {ratio:.2f}x as fast)"


def faster_words(fast_sps: float, slow_sps: float, slow: str) -> str:
    """`slower_words` from the fast one's side: '4% faster'; from BOTH_AT apart both readings, the slow one (`slow`)
    named: '2.44x as fast, FSDP 59% slower' (never '144% faster' alone, which reads as the slow one 144% slower)."""
    ratio = fast_sps / slow_sps
    if ratio < BOTH_AT:
        return f"{ratio - 1:.0%} faster"
    return f"{ratio:.2f}x as fast, {slow} {slower_share(fast_sps, slow_sps):.0%} slower"
