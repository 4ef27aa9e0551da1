"""The frontier plot's labels name their own points: an H100 transformer plot (examples/h100-2026-11-26/transformer)
put 'DDP+ZeRO x1 [bf16, adamw]' above-left of its point, over the single device point 2 GiB away, and ran 'single
device x1 [bf16, adamw, ac=full]' across the dashed frontier and the DDP ac=full point (trial A, finding 13). The
figure is built here with the points placed as there; positions are checked in display coordinates."""
from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from bench.report import frontierplot
from bench.report.labels import place_labels

# (peak GiB per GPU, samples/s, label) as the H100's sweep 2 stored them
POINTS = [(10.139, 174.6, "single device x1 [bf16, adamw]"), (6.747, 97.0, "single device x1 [bf16, adamw, ac=full]"),
          (12.081, 154.9, "DDP x1 [bf16, adamw]"), (7.868, 102.4, "DDP x1 [bf16, adamw, ac=full]"),
          (12.081, 177.6, "DDP+ZeRO x1 [bf16, adamw]"), (7.868, 93.3, "DDP+ZeRO x1 [bf16, adamw, ac=full]"),
          (11.409, 94.2, "FSDP x1 [bf16, adamw]")]
MARKER_PX = math.sqrt(50) / 2 * 100 / 72   # half a scatter marker of s=50 at 100 dpi


def figure():
    """The frontier plot's axes as frontier_figure draws them: points, the frontier's steps, the legend beside."""
    fig = Figure(figsize=(10.0, 5.5), layout="constrained", dpi=100)
    ax = fig.subplots()
    for x, y, text in POINTS:
        ax.scatter([x], [y], s=50, zorder=3, label=text.split(" x1")[0])
    line = frontierplot.frontier([(x, y) for x, y, _ in POINTS])
    ax.step([p[0] for p in line], [p[1] for p in line], where="post", color="#999999", linestyle="--", label="frontier")
    ax.set_xlim(0, 12.081 * 1.15)
    ax.set_ylim(0, 177.6 * 1.12)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    labels = place_labels(fig, ax, POINTS)
    renderer = fig.canvas.get_renderer()
    pixels = {text: tuple(ax.transData.transform((x, y))) for x, y, text in POINTS}
    steps = ax.get_lines()[0]
    path = Path(steps.get_transform().transform(list(zip(*_steps(steps)))))
    return {a.get_text(): a for a in labels}, {a.get_text(): Text.get_window_extent(a, renderer) for a in labels}, pixels, path


def _steps(ln):
    from matplotlib import cbook
    return cbook.STEP_LOOKUP_MAP[ln.get_drawstyle()](ln.get_xdata(), ln.get_ydata())


def gap(box, p) -> float:
    return math.hypot(max(box.x0 - p[0], 0.0, p[0] - box.x1), max(box.y0 - p[1], 0.0, p[1] - box.y1))


def marker(p):
    return Bbox.from_bounds(p[0] - MARKER_PX, p[1] - MARKER_PX, 2 * MARKER_PX, 2 * MARKER_PX)


def test_each_label_sits_nearer_its_own_point_than_any_other_or_has_a_leader_line():
    labels, boxes, pixels, _ = figure()
    assert set(labels) == set(pixels)             # every point named, none by a number
    for text, box in boxes.items():
        if labels[text].arrow_patch is None:
            others = [gap(box, p) for t, p in pixels.items() if t != text]
            assert gap(box, pixels[text]) < min(others), (text, box, gap(box, pixels[text]), min(others))
    zero = boxes["DDP+ZeRO x1 [bf16, adamw]"]
    assert labels["DDP+ZeRO x1 [bf16, adamw]"].arrow_patch is not None or \
        gap(zero, pixels["DDP+ZeRO x1 [bf16, adamw]"]) < gap(zero, pixels["single device x1 [bf16, adamw]"])


def test_labels_overprint_no_label_no_other_point_and_keep_off_the_frontier_where_they_can():
    labels, boxes, pixels, path = figure()
    names = list(boxes)
    assert not any(boxes[a].overlaps(boxes[b]) for i, a in enumerate(names) for b in names[i + 1:])
    for text, box in boxes.items():
        assert not any(box.overlaps(marker(p)) for t, p in pixels.items() if t != text), text
    ac = boxes["single device x1 [bf16, adamw, ac=full]"]   # it ran across the dashed frontier and DDP's ac=full point
    assert not path.intersects_bbox(ac, filled=False)
    assert not any(path.intersects_bbox(b, filled=False) for b in boxes.values())
