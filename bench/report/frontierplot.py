"""The memory-speed frontier plot: samples/s against the peak memory the budget holds, one point per configuration,
the frontier through the points nothing beats, the budget's line. Split from frontier.py (past 400 lines), which keeps
the budget table and its words."""
from __future__ import annotations

import math
from typing import Optional

from matplotlib.figure import Figure

from bench.analysis.results import STRATEGY_NAMES
from bench.forecast.batches import per_device   # a configuration's batch per device
from bench.report import plots, training_state
from bench.report.choice import model_suffix
from bench.report.frontier import groups as recipe_groups, held_mib, peak_source, size, warmup as frontier_warmup
from bench.report.labels import place_labels

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")   # one per device count


def frontier(points: list) -> list:
    """The (memory, speed) points no other point beats on both (less or equal memory and more speed), by memory."""
    out, best = [], -math.inf
    for mem, sps in sorted(points, key=lambda p: (p[0], -p[1])):
        if sps > best:
            out.append((mem, sps))
            best = sps
    return out


BUDGET_IN_VIEW = 1.3   # a budget beyond 1.3x the largest point is named at the axis' edge, not drawn far to the right


def frontier_figure(configs: list, workload: str, where: str, budget: Optional[float]) -> Figure:
    """samples/s against the peak the budget holds (`held_mib`: per GPU; on CPU per node, its processes' peak RSS
    summed): one point per configuration (colour: strategy, marker: count), each
    labelled without overprinting another (`labels.place_labels`), the frontier through the points nothing beats (one per
    precision and optimizer), the budget as a vertical line where it lies near the points, else named at the edge
    (79 GiB beside points of 3-6 GiB squeezed them all into the left 6% of the width)."""
    cuda = configs[0].device_type == "cuda"
    scale, unit = (1024.0, "GiB") if cuda else (1.0, "MiB")
    fig = Figure(figsize=(10.0, 5.5), layout="constrained")
    ax = fig.subplots()
    fig.suptitle(f"Speed against peak memory per {'GPU' if cuda else 'node'}\n{workload} on {where}".replace("$", r"\$"))
    counts = sorted({c.device_count for c in configs})
    shown = [c for c in configs if not math.isnan(c.samples_per_s) and held_mib(c) is not None]
    over = {id(c) for c in shown if budget and held_mib(c) > budget}
    seen = set()
    for c in shown:
        colour, marker = plots.COLORS.get(c.strategy, "#333333"), MARKERS[counts.index(c.device_count) % len(MARKERS)]
        label = STRATEGY_NAMES.get(c.strategy, c.strategy) if c.strategy not in seen else None
        seen.add(c.strategy)
        if label and id(c) in over:   # the strategy's legend entry filled, as its colour, not hollow as this point
            ax.scatter([], [], color=colour, marker=marker, s=50, label=label)
            label = None
        ax.scatter([held_mib(c) / scale], [c.samples_per_s], facecolors="none" if id(c) in over else colour,
                   edgecolors=colour, marker=marker, s=50, label=label, zorder=3)
    groups = recipe_groups(shown)  # one frontier per training recipe and model: precision, optimizer, auxiliary head
    for i, ((precision, optimizer, aux), cs) in enumerate(groups.items()):
        line = frontier([(held_mib(c) / scale, c.samples_per_s) for c in cs])
        if len(line) < 2:  # one point beats the rest: no line to draw, so none in the legend (the H200 fit listed one)
            continue
        ax.step([p[0] for p in line], [p[1] for p in line], where="post", color="#999999", zorder=2,
                linestyle=plots.STYLES[(i + 1) % len(plots.STYLES)],
                label="frontier (nothing faster for less memory)" + (f" [{precision}, {optimizer}"
                                                                      + model_suffix(aux, shown) + "]"
                                                                      if len(groups) > 1 else ""))
    top = max([held_mib(c) / scale for c in shown] + _warmup_peaks(ax, shown, scale), default=1.0)
    if budget and budget / scale <= BUDGET_IN_VIEW * top:
        ax.axvline(budget / scale, color="#d62728", linestyle=":", label=f"budget {size(budget)}")
        top = max(top, budget / scale)
    elif budget:
        ax.annotate(f"budget {size(budget)} lies beyond this axis: every point uses at most "
                    f"{top * scale / budget:.0%} of it \u2192", (0.99, 0.02), xycoords="axes fraction", ha="right",
                    va="bottom", fontsize=8, color="#d62728")
    ax.set_xlim(0, top * 1.15)
    for n in counts if len(counts) > 1 else ():  # at one count the markers tell nothing apart: no 'x1' entry
        ax.scatter([], [], color="#777777", marker=MARKERS[counts.index(n) % len(MARKERS)], label=f"x{n}")
    if over:
        ax.scatter([], [], facecolors="none", edgecolors="#777777", marker="o", label="hollow: over the budget")
    what = ("GPU, device level (steady, or at the warm-up's end)" if cuda and all(
        peak_source(c) == "device level" for c in shown) else "GPU (device level; reserved where none)" if cuda
        else "node: the peak RSS of its processes, summed")
    ax.set(xlabel=f"peak memory per {what} ({unit})", ylabel="throughput (samples/s)")
    ax.set_ylim(0, max([c.samples_per_s for c in shown], default=1.0) * 1.12)
    if ax.get_legend_handles_labels()[0]:   # a lone point under no budget has nothing to explain
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    place_labels(fig, ax, [(held_mib(c) / scale, c.samples_per_s, point_label(c, shown, over)) for c in shown])
    return fig


WARMUP_LABEL = "warm-up peak reserved with the context\n(given back before the level\nis read; not held to the budget)"


def _warmup_peaks(ax, shown: list, scale: float) -> list:
    """Where the allocator held more during the warm-up than the point's held peak (bench.report.frontier.warmup:
    cuDNN's benchmark search, compilation), a dotted segment from the point to that peak, one legend entry: the axis
    read 'device level over the whole run' at one reading at the warm-up's end, while the H100's DeepLabV3 fp32 held
    20.7 GiB in its warm-up beside 5.5 GiB there. Returns the peaks drawn (in the axis' unit), for its width."""
    drawn = []
    for c in shown:
        held = frontier_warmup(c)
        if held is None:
            continue
        x0, x1 = held_mib(c) / scale, held[1] / scale   # with the CUDA context, as the axis' device level holds it
        ax.plot([x0, x1], [c.samples_per_s] * 2, color="#999999", linestyle=":", linewidth=1.0, marker="|",
                markevery=[1], markersize=9, zorder=2, label=None if drawn else WARMUP_LABEL)
        drawn.append(x1)
    return drawn


def point_label(c, shown: list, over: set) -> str:
    """A point's label: with its batch where points at one device count ran at several per-device batches (a fit sweep
    measures each configuration at its own largest; strong scaling's batches differ only between counts) or where it
    is over the budget, and '(over)' there. The H200 fit's plot labelled 'DDP x1 [bf16, adamw]' the batch-14 runs over
    its 16 GiB budget, beside a page whose answer was 12."""
    batches = any(len({per_device(x) for x in shown if x.device_count == n}) > 1
                  for n in {x.device_count for x in shown})
    return (c.label + (f" at batch {per_device(c)}" if batches or id(c) in over else "")
            + (" (over)" if id(c) in over else ""))


def save_plots(configs: list, workload: str, where: str, plots_dir: str, budget: Optional[float]) -> dict:
    """The frontier plot and the training state plot of one workload: {question: path}."""
    import os
    figs = {"frontier": frontier_figure(configs, workload, where, budget)}
    if any(c.state_mib for c in configs):
        figs["memory_state"] = training_state.state_figure(configs, workload, where)
    out = {}
    for question, fig in figs.items():
        out[question] = os.path.join(plots_dir, plots.file_name(workload, question))
        fig.savefig(out[question], dpi=100)
    return out
