"""Labels beside the points of a scatter plot (the memory/throughput frontier's configurations), each nearer its own
point than any other, over no label, marker or drawn line, inside the axes; further out on a leader line where nothing
beside it is free; else a number at the point and its label listed in the legend.

    annotations = place_labels(fig, ax, [(x, y, text), ...])
"""
from __future__ import annotations

import math

from matplotlib import cbook
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.transforms import Bbox


# Beside its point (offset in points, alignment); then out along eight directions, then in a column, on a leader line.
LABEL_OFFSETS = ((5, 2, "left", "bottom"), (5, -2, "left", "top"), (-5, 2, "right", "bottom"), (-5, -2, "right", "top"),
                 (6, 0, "left", "center"), (-6, 0, "right", "center"), (0, 6, "center", "bottom"), (0, -6, "center", "top"))
LEADER_STEPS = (16, 28, 44, 64, 90)   # points from the point to a label on a leader line
NEARER = 2.0       # beside its point a label is at most half as far from it as from any other point (display coordinates)
MARKER_PT = 4.5    # half a marker's side (scatter s=50: about 7 pt across) and a little room: no label covers a point


def _tries():
    """(dx, dy, ha, va, leader) in the order tried: beside the point, then out on a leader line."""
    yield from ((dx, dy, ha, va, False) for dx, dy, ha, va in LABEL_OFFSETS)
    for r in LEADER_STEPS:
        for ux, uy in ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1), (-1, -1)):  # straight first: thin
            yield (ux * r, uy * r * 0.6, ("center", "left", "right")[ux], ("center", "bottom", "top")[uy], True)
    for step in range(1, 12):   # then stacked in a column beside the point, for a cluster
        for ux, uy in ((1, -1), (-1, -1), (1, 1), (-1, 1)):
            yield (ux * 5, uy * (6 + 10 * step), ("left", "right")[ux < 0], ("bottom", "top")[uy < 0], True)


def _box(anchor, wh, k: float, dx: float, dy: float, ha: str, va: str):
    """The display box of a label w x h whose (ha, va) corner sits (dx, dy) points from the anchor (display pixels)."""
    share = {"left": 0.0, "bottom": 0.0, "center": 0.5, "right": 1.0, "top": 1.0}
    return Bbox.from_bounds(anchor[0] + dx * k - share[ha] * wh[0], anchor[1] + dy * k - share[va] * wh[1], *wh)


def _gap(box, p) -> float:
    """Display distance from point p to the nearest part of a box (0 inside it)."""
    return math.hypot(max(box.x0 - p[0], 0.0, p[0] - box.x1), max(box.y0 - p[1], 0.0, p[1] - box.y1))


def _lines(ax) -> list:
    """The drawn lines (the frontier's steps, the budget) as display paths, for labels to keep off."""
    out = []
    for ln in ax.get_lines():
        x, y = ln.get_xdata(orig=False), ln.get_ydata(orig=False)
        if len(x) > 1:
            xy = cbook.STEP_LOOKUP_MAP[ln.get_drawstyle()](x, y)
            out.append(Path(ln.get_transform().transform(list(zip(*xy)))))
    return out


def _free(box, own, rivals: list, placed: list, lines: list, inside, near: bool) -> bool:
    """Inside the axes, over no label, point or (where `lines`) line; and where `near` (no leader line), nearer its
    own point than any other (`rivals`) by NEARER: the H100's 'DDP+ZeRO x1 [bf16, adamw]' sat left of its point, above the
    single device point 2 GiB away, and read as that one's."""
    if not (box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0 and box.y1 <= inside.y1):
        return False
    if any(box.overlaps(p) for p in placed) or any(ln.intersects_bbox(box, filled=False) for ln in lines):
        return False
    return not near or all(_gap(box, own) * NEARER <= _gap(box, a) for a in rivals)


def _place(ax, renderer, point, own, others: list, marks: list, rivals: list, lines: list, fontsize: float):
    """The first free place for one label (`_free`: `others` are the labels, `marks` the other points' markers), lines
    avoided where any place does; a label on a leader line covers no label with it either (its extent holds the
    line). None where nothing is free."""
    x, y, text = point
    k = ax.figure.dpi / 72.0
    probe = ax.annotate(text, (x, y), fontsize=fontsize)
    wh = probe.get_window_extent(renderer).size
    probe.remove()
    inside = ax.get_window_extent(renderer)
    for avoid in (lines, []):
        for dx, dy, ha, va, lead in _tries():
            box = _box(own, wh, k, dx, dy, ha, va)
            if not _free(box, own, rivals, others + marks, avoid, inside, not lead):
                continue
            if lead and any(_leader_extent(box, own, k).overlaps(p) for p in others):
                continue
            return ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize, ha=ha,
                               va=va, arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.5, "shrinkB": MARKER_PT}
                               if lead else None)
    return None


def _leader_extent(box, own, k: float):
    """A label on a leader line with its line, as matplotlib draws it: from the box's centre towards the point, ending
    MARKER_PT short of it. Worked out, not measured: building an annotation per place tried to read its extent (its
    arrow clipped by Bezier splitting) took 9 of a 12-point frontier's 9.2 s; this gives the same places in 0.4 s."""
    cx, cy = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
    dist = math.hypot(own[0] - cx, own[1] - cy)
    s = min(1.0, MARKER_PT * k / dist) if dist else 0.0
    end = (own[0] + (cx - own[0]) * s, own[1] + (cy - own[1]) * s)
    return Bbox.union([box, Bbox.from_bounds(end[0], end[1], 0, 0)])


def place_labels(fig: Figure, ax, points: list, fontsize: float = 7.0) -> list:
    """Label each (x, y, text) point beside it, where the label overlaps no label placed before it, no point, no line
    (the frontier, the budget; where no place avoids those, lines may be crossed), stays inside the axes and sits
    nearer its own point than any other (`_free`); else further out with a leader line to its point; where none is
    free, the point gets a number and its label is listed under the plot ("1: HSDP x2 [...]"), never drawn over another
    or outside the axes. Returns the annotations (a test reads their extents)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    fig.draw_without_rendering()  # the layout first: the labels' extents are measured in its pixels
    renderer, k = canvas.get_renderer(), fig.dpi / 72.0
    legend = ax.get_legend()
    anchors = [tuple(ax.transData.transform((x, y))) for x, y, _ in points]
    m = MARKER_PT * k
    placed = ([legend.get_window_extent(renderer)] if legend is not None else []) + [t.get_window_extent(renderer) for t in ax.texts]
    markers = [Bbox.from_bounds(a[0] - m, a[1] - m, 2 * m, 2 * m) for a in anchors]
    lines = _lines(ax)
    out, listed = [], []
    for (x, y, text), own, mark in sorted(zip(points, anchors, markers), key=lambda p: (-p[0][1], p[0][0])):
        marks = [b for b in markers if b is not mark]    # its own marker is no obstacle to its number or leader
        rivals = [p for p in anchors if math.dist(p, own) > 2 * m]   # points under its marker: no place tells them apart
        a = _place(ax, renderer, (x, y, text), own, placed, marks, rivals, lines, fontsize)
        if a is not None:
            placed.append(a.get_window_extent(renderer))
            out.append(a)
            continue
        listed.append(text)   # nowhere free: a number beside the point (where it overlaps least), the label in the legend
        out.append(_number(ax, renderer, (x, y), str(len(listed)), placed, marks, fontsize))
        placed.append(out[-1].get_window_extent(renderer))
    if listed and legend is not None:   # the legend beside the axes lists them: the layout makes room for it
        from matplotlib.lines import Line2D
        handles, labels = ax.get_legend_handles_labels()
        handles += [Line2D([], [], linestyle="none") for _ in listed]
        labels += [f"{i}: {t}" for i, t in enumerate(listed, 1)]
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return out


NUMBER_OFFSETS = ((4, 2), (4, -9), (-9, 2), (-9, -9), (4, 9), (-9, 9), (0, 11), (0, -15))


def _number(ax, renderer, xy, number: str, placed: list, marks: list, fontsize: float):
    """A point's number where it covers no label nor point; else no label; else the last place tried."""
    for obstacles in (placed + marks, placed):
        for dx, dy in NUMBER_OFFSETS:
            a = ax.annotate(number, xy, textcoords="offset points", xytext=(dx, dy), fontsize=fontsize, fontweight="bold")
            if not any(a.get_window_extent(renderer).overlaps(p) for p in obstacles):
                return a
            a.remove()
    return ax.annotate(number, xy, textcoords="offset points", xytext=NUMBER_OFFSETS[-1], fontsize=fontsize,
                       fontweight="bold")
