"""Plots of a sweep, one PNG per question, drawn from the report's `Config`s (bench.report.report).

Each `*_figure` function returns a matplotlib Figure (no pyplot, no global state, Agg canvas) so a
test can read its lines, bars and legend; `bench.report.plotset.render_workload` saves them as
<plots_dir>/<workload>_<question>.png. Every title names the question, the workload and the device
(GPU model or CPU model); every axis carries its unit.
"""
from __future__ import annotations

import math
import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Optional

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from bench.analysis.labels import label as config_label  # noqa: E402
from bench.shared.spec import STRATEGY_NAMES  # noqa: E402
from bench.workloads.usermodel import display_name  # noqa: E402

COLORS = {"single": "#555555", "dp": "#d62728", "ddp": "#1f77b4", "zero": "#9467bd", "fsdp": "#2ca02c", "hsdp": "#ff7f0e"}
NAMES = STRATEGY_NAMES   # the one table of strategies' names (bench.shared.spec)
STYLES = ("-", "--", ":", "-.")


_PAGE: ContextVar = ContextVar("page_workloads", default=())   # the workloads the page being written names (`page`)


@contextmanager
def page(workloads: Iterable[str]):
    """Within it, `file_name` names each plot by the page's name of its workload among `workloads` (every workload
    the page names): two models of one short name (/a/my_model.py:build and /b/my_model.py:build) both wrote
    my_model_build_overview.png, each section showing the second one's plots. Every module that saves or cites a plot
    (the report's, frontier's, forecast's, traces', the summary's '(plot: ...)') reaches the same name through it."""
    token = _PAGE.set(tuple(workloads))
    try:
        yield
    finally:
        _PAGE.reset(token)


def file_name(workload: str, question: str, among: Optional[Iterable[str]] = None) -> str:
    """The plot's file name: <workload>_<question>.png, the workload's name as pages show it among `among` (default:
    the page's, `page`), made safe for a path: a model given by path, stored as `/work/main/examples/my_model.py:build`,
    was `_work_main_examples_my_model.py_build_overview.png` in trial B; it is `my_model_build_overview.png`
    (usermodel.display_name: the same file whether a caller passes the stored or the shown name), and where another of
    the page's models has that short name, each keeps its path: `_a_my_model.py_build_overview.png`."""
    shown = display_name(workload, _PAGE.get() if among is None else among)
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', shown)}_{question}.png"


def where(workload: str, what: str) -> str:
    """'(table: <workload>: all configurations; plot: <workload>_<what>.png)': where a claim's evidence is."""
    return f"(table: {workload}: all configurations; plot: {file_name(workload, what)})"


def _figure(title: str, where: str, workload: str, width: float = 8.0, ncols: int = 1) -> tuple:
    fig = Figure(figsize=(width, 5.0), layout="constrained")
    axes = fig.subplots(1, ncols)
    fig.suptitle(f"{title}\n{workload} on {where}".replace("$", r"\$"))  # store text is not mathtext
    return fig, axes


def _devices_label(configs: list) -> str:
    return "device count (GPUs)" if configs[0].device_type == "cuda" else "device count (gloo processes)"


def _by_series(configs: list) -> dict:
    """(strategy, variant) -> its configurations: one line per strategy, precision and settings."""
    out: dict = {}
    for c in configs:
        out.setdefault(c.series, []).append(c)
    return out


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")


def _series_style(configs: list) -> dict:
    """Colour by strategy, line style and marker by variant (precision, settings): a variant measured at one count is
    a lone point, where only its marker tells it from the strategy's other variants (three DDP hooks at x2 drew three
    blue circles). Its legend label is `series_label`'s."""
    variants = list(dict.fromkeys(c.variant for c in configs))
    series = _by_series(configs)
    return {c.series: {"color": COLORS.get(c.strategy), "linestyle": STYLES[variants.index(c.variant) % len(STYLES)],
                       "marker": MARKERS[variants.index(c.variant) % len(MARKERS)], "label": series_label(series[c.series])}
            for c in configs}


def series_label(cs: list) -> str:
    """A series' legend label in the one labeller's words (bench.analysis.labels.label, as every table and sentence
    names a configuration): 'single device x1', 'DDP x1 [bf16]'; over several counts the labeller's with their range,
    'DDP x1–x8 [bf16]'. The legends read 'single device [fp32]' beside tables that said 'single device x1'."""
    c = cs[0]
    counts = sorted({x.device_count for x in cs})
    first = config_label(c.strategy, counts[0], c.variant)
    if len(counts) == 1:
        return first
    head = f"{NAMES.get(c.strategy, c.strategy)} x{counts[0]}"
    return f"{head}–x{counts[-1]}{first[len(head):]}"


def _label(c) -> str:
    return c.label  # bench.analysis.results.label: one name for a configuration everywhere


WRAP_CHARS = 30        # a category label's line, at most (broken between words)
LINE_IN = 0.16         # one line of "small" text, in inches (8.3 pt and its leading)
CHAR_IN = 0.075        # one character of it, in inches
TICK_MARGIN_IN = 0.15  # below a category axis's labels, to the image's edge


def wrapped(text: str) -> str:
    """A category label in lines of at most WRAP_CHARS characters, each line of the text wrapped on its own."""
    import textwrap
    return "\n".join(w for line in text.split("\n") for w in (textwrap.wrap(line, WRAP_CHARS) or [""]))


def category_ticks(fig: Figure, ax, labels: list, positions=None) -> None:
    """One configuration per tick, its label wrapped and upright (read from below), and the figure sized to them: a
    column of the axes per label, as wide as its lines, and room below for the longest. Twelve long labels rotated 20
    degrees in a 10-inch figure ('HSDP x2 [bf16, shard_size=2, adamw, ac=full]') overprinted each other."""
    labels = [wrapped(t) for t in labels]
    lines = max((t.count("\n") + 1 for t in labels), default=1)
    longest = max((len(line) for t in labels for line in t.split("\n")), default=0)
    width, height = fig.get_size_inches()
    legend_in = 3.2 if ax.get_legend() or ax.get_legend_handles_labels()[0] else 0.8
    fig.set_size_inches(max(width, legend_in + 1.0 + len(labels) * (lines * LINE_IN + 0.12)),
                        height + max(0.0, longest * CHAR_IN - 0.6))
    ax.set_xticks(list(range(len(labels))) if positions is None else list(positions), labels, rotation=90,
                  fontsize="small", linespacing=1.0)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    # constrained layout's default pad (0.04 in) left the longest upright label touching the image's bottom edge
    # (deeplabv3_step_times.png: "single device x1 [bf16]" read as running off it); a margin below them instead
    fig.get_layout_engine().set(h_pad=TICK_MARGIN_IN)


def throughput_axis(configs: list, label: str = "samples/s") -> tuple:
    """(factor, y label) of a throughput plot: a language model's in tokens/s, all devices (samples/s x its sequence
    length, as its configurations table gives it), since LM users compare tokens/s (trial B read 'throughput
    (samples/s)' for sequences of 32 tokens); else samples/s as measured."""
    tokens = {c.tokens_per_sample for c in configs}
    if len(tokens) == 1 and next(iter(tokens)):
        t = next(iter(tokens))
        return t, f"tokens/s, all devices (samples/s x {t})"
    return 1, label


def throughput_figure(configs: list, workload: str, where: str) -> Figure:
    """samples/s against device count per strategy, and the ideal line from the 1-device baseline."""
    fig, ax = _figure("Throughput against device count", where, workload, width=10.0)
    counts = sorted({c.device_count for c in configs})
    style = _series_style(configs)
    k, ylabel = throughput_axis(configs, "throughput (samples/s)")
    for key, cs in _by_series(configs).items():
        ax.plot([c.device_count for c in cs], [c.samples_per_s * k for c in cs], **style[key])
    draw_spread(ax, configs, style, k, capsize=4)
    for b in ideal_bases(configs, counts):
        ax.plot(counts, [b.samples_per_s * k * n for n in counts], ":", color="#999999", alpha=0.7,
                label=f"ideal linear (from {_label(b)})")
    ax.set(xlabel=_devices_label(configs), ylabel=ylabel, xticks=counts)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")  # beside the axes: it covers no point
    return fig


def ideal_bases(configs: list, counts: list) -> list:
    """The 1-device configurations an ideal-linear line starts from (single where it ran, else every 1-device one);
    none where the sweep ran one count only: a line over one count draws nothing, and its legend entry listed lines the
    plot did not show."""
    if len(counts) < 2:
        return []
    return ([c for c in configs if c.device_count == 1 and c.strategy == "single"]
            or [c for c in configs if c.device_count == 1])


SPREAD_LABEL = "whiskers: range of its processes"


def processes(c) -> int:
    """How many processes c's figures rest on (0 where a stand-in carries none)."""
    return len(getattr(c, "process_sps", None) or ())


def process_span(c, k: float = 1.0) -> Optional[tuple]:
    """(slowest, fastest) of c's processes' throughputs x k; None where it ran fewer than two."""
    return (min(c.process_sps) * k, max(c.process_sps) * k) if processes(c) > 1 else None


def draw_spread(ax, configs: list, style: dict, k: float, capsize: float) -> None:
    """Min-max whiskers across each configuration's processes, around its median point, in its series' colour, and one
    legend entry saying what they are: one H200's DeepLabV3 [bf16] ran 140.3, 166.0 and 153.3 samples/s in three
    processes and the plots drew 153.3 alone, a clean point the text calls unstable and its gaps 'not resolved'. A
    configuration of one process keeps its bare point."""
    spans = [(c, process_span(c, k)) for c in configs]
    spans = [(c, sp) for c, sp in spans if sp]
    for c, (low, high) in spans:
        mid = c.samples_per_s * k
        ax.errorbar([c.device_count], [mid], yerr=[[max(0.0, mid - low)], [max(0.0, high - mid)]], fmt="none",
                    ecolor=style[c.series]["color"] or "#555555", elinewidth=1.2, capsize=capsize, zorder=2)
    if spans:   # a neutral entry: the first whisker's colour would read as one strategy's
        ax.errorbar([], [], yerr=[], fmt="none", ecolor="#555555", elinewidth=1.2, capsize=capsize, label=SPREAD_LABEL)


OPEN_LABEL = "not resolved: --repeats 3"


def _marks(picks: list, open_pairs: list) -> tuple:
    """(starred, ringed): a star on each pick the summary resolves, a ring on both candidates of each pair it reads
    'not resolved: --repeats 3' (`open_pairs`: (pick, fastest), judged by the summary's rule in
    bench.report.report.overview_marks, where a fit sweep's runs over the budget are no candidates)."""
    ring = list({id(c): c for pair in open_pairs for c in pair}.values())
    return [p for p in picks if all(p is not r for r in ring)], ring


def _draw_marks(ax, star: list, ring: list, k: float) -> None:
    """Outlines, larger than the series' markers and drawn behind them (zorder 1), so the markers at their point stay
    seen: two filled stars hid three of six series' markers, and the outline above them still covered the single
    device fp32 marker at 78.9k (the H100 self-check's synthetic_overview.png)."""
    for cs, marker, size, label in ((star, "*", 20, "recommended"), (ring, "o", 14, OPEN_LABEL)):
        for i, c in enumerate(cs):
            ax.plot([c.device_count], [c.samples_per_s * k], marker=marker, markersize=size, linestyle="none",
                    markerfacecolor="none", markeredgecolor="#ff7f0e", markeredgewidth=1.6, zorder=1,
                    label=label if not i else None)


def overview_figure(configs: list, workload: str, where: str, picks: list = (), open_pairs: list = ()) -> Figure:
    """The first screen's small figure: samples/s against device count, one line per strategy and variant, the ideal
    line from the 1-device baseline, and a star on each recommended configuration (`picks`), a ring instead on the two
    candidates of each pair where the summary reads 'not resolved' (`open_pairs`, `_marks`)."""
    style = _series_style(configs)
    star, ring = _marks(list(picks), list(open_pairs))
    counts = sorted({c.device_count for c in configs})
    bases = ideal_bases(configs, counts)
    entries = (len(_by_series(configs)) + bool(bases) + bool(star) + bool(ring)   # the series, ideal, the marks drawn,
               + any(process_span(c) for c in configs))                  # and the whiskers' entry
    ncol = 1 if max(len(v["label"]) for v in style.values()) > 34 else 2   # long settings' labels: one column, wider
    rows = math.ceil(entries / ncol)
    # the legend below the axes, two columns, the figure taller by its rows: inside a 3.3-inch figure five variants'
    # legend covered the HSDP point, clipped its labels and collapsed the axes (matplotlib's constrained-layout warning)
    longest = max(len(v["label"]) for v in style.values())
    fig = Figure(figsize=(max(4.6, 0.8 + 0.06 * longest * (2 if ncol == 2 else 1)), 3.0 + 0.17 * rows), layout="constrained")
    ax = fig.subplots()
    fig.suptitle(f"{workload}: throughput against device count\n{where}".replace("$", r"\$"), fontsize="medium")
    k, ylabel = throughput_axis(configs)
    for key, cs in _by_series(configs).items():
        ax.plot([c.device_count for c in cs], [c.samples_per_s * k for c in cs], markersize=4, **style[key])
    draw_spread(ax, configs, style, k, capsize=2.5)
    for i, b in enumerate(bases):
        ax.plot(counts, [b.samples_per_s * k * n for n in counts], ":", color="#999999", alpha=0.7, label="ideal" if not i else None)
    _draw_marks(ax, star, ring, k)
    ax.set(xlabel=_devices_label(configs), ylabel=ylabel, xticks=counts)
    ax.set_xlim(min(counts) - 0.5, max(counts) + 0.5)
    ax.set_ylim(bottom=0)
    fig.legend(loc="outside lower center", ncol=ncol, fontsize="x-small")
    return fig


def efficiency_figure(configs: list, workload: str, where: str) -> Figure:
    """Scaling efficiency (speed-up / device count) against device count, per strategy. A wrapper at one device
    (DataParallel or DDP x1 against single) is its overhead, not scaling: the report's table says it, the plot leaves
    those points out."""
    scaling = configs[0].scaling
    kind = "weak scaling, batch per device fixed" if scaling == "weak" else "strong scaling, global batch fixed"
    fig, ax = _figure(f"Scaling efficiency ({kind})", where, workload, width=10.0)
    counts = sorted({c.device_count for c in configs})
    style = _series_style(configs)
    for key, cs in _by_series(configs).items():
        cs = [c for c in cs if not math.isnan(c.efficiency) and (c.device_count > 1 or c.strategy == "single")]
        if cs:   # named by the points drawn: a wrapper's x1 is left out
            ax.plot([c.device_count for c in cs], [c.efficiency * 100 for c in cs], **{**style[key], "label": series_label(cs)})
    ax.axhline(100, linestyle="--", color="#999999", label="ideal (100%)")
    if max(counts) == 1:
        ax.text(0.5, 0.5, "one device only: no scaling to show\n(a wrapper's overhead at one device is in the report's table)",
                transform=ax.transAxes, ha="center", va="center", color="#555555")
    ax.set(xlabel=_devices_label(configs), ylabel=f"{scaling} scaling efficiency (%)", xticks=counts)
    ax.set_ylim(0, max([110.0] + [c.efficiency * 110 for c in configs if not math.isnan(c.efficiency)]))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def memory_figure(configs: list, workload: str, where: str) -> Figure:
    """One bar per device per configuration: DataParallel's skew onto its first GPU shows here."""
    cuda = configs[0].device_type == "cuda"
    fig, ax = _figure("Peak memory per device" + (" (allocated by torch, net of pre-generated batches)" if cuda else " (process RSS per rank)"),
                      where, workload, width=10.0)
    devices = sorted({d for c in configs for d in c.memory_mib}, key=lambda d: (len(d), d))
    width = 0.8 / max(1, len(devices))
    for j, d in enumerate(devices):
        xs = [i + (j - (len(devices) - 1) / 2) * width for i, c in enumerate(configs) if d in c.memory_mib]
        ax.bar(xs, [c.memory_mib[d] for c in configs if d in c.memory_mib], width=width, label=d)
    ax.set(ylabel="peak memory (MiB)")
    if devices:
        ax.legend(title="GPU" if cuda else "process", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    category_ticks(fig, ax, [_label(c) for c in configs])
    return fig


def step_times_figure(configs: list, workload: str, where: str) -> Figure:
    """Distribution of step times per configuration: jitter and stragglers. A configuration's box pools the steps of
    all its processes (its configuration carries no steps per process), and says so: one H200's DeepLabV3 [bf16] box
    read as one run's jitter, when its three processes ran 140.3-166.0 samples/s."""
    pooled = any(processes(c) > 1 for c in configs)
    fig, ax = _figure("Distribution of step times (slowest rank per step" + (", processes pooled)" if pooled else ")"),
                      where, workload, width=10.0)
    ax.boxplot([c.step_ms for c in configs], positions=range(len(configs)), showmeans=True)
    ax.set(ylabel="step time (ms)")
    category_ticks(fig, ax, [_label(c) for c in configs])
    if pooled:
        fig.supxlabel(pooled_caption(configs, workload), fontsize="small", ha="left", x=0.01)
    return fig


def pooled_caption(configs: list, workload: str) -> str:
    """Which boxes pool how many processes, and where their difference shows instead."""
    several = [c for c in configs if processes(c) > 1]
    counts = {processes(c) for c in several}
    who = (f"Each box pools the steps of its configuration's {counts.pop()} processes" if len(several) == len(configs)
           and len(counts) == 1 else "A box pools the steps of all its configuration's processes ("
           + "; ".join(f"{_label(c)}: {processes(c)}" for c in several) + ")")
    return _caption(f"{who}: its spread holds how far the processes differ as well as each one's jitter (each "
                    f"process's throughput: the whiskers of {file_name(workload, 'throughput')}).", 110)


def _caption(text: str, width: int = 140) -> str:
    """A caption in lines of at most `width` characters (constrained layout makes room for them below the axes)."""
    import textwrap
    return "\n".join(textwrap.wrap(text, width))
