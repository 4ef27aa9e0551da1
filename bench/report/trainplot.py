"""The time-to-train figure: one bar per setup for the reference experiment's epochs, each setup's range across its
processes where several ran, the published V100 times beside them. Split from plots.py (past 400 lines)."""
from __future__ import annotations

import math
from typing import Optional

from matplotlib.figure import Figure

from bench.report.names import hms
from bench.report.plots import _figure, processes


def _bars_minutes(ax, bars: list, color: str, spans: Optional[list] = None) -> None:
    """One bar per setup at its own place: bars given by name would stack two setups of one name on one spot. Where a
    setup ran several processes (`spans`: `train_spans`, nan where none), an error bar spans its
    processes' times and its label reads as the report's table does: one H200's DeepLabV3 [bf16] bar read '3m17s'
    alone, its three processes 3m02s-3m44s."""
    labels, secs = [b[0] for b in bars], [b[1] for b in bars]
    spans = list(spans or []) + [(math.nan, math.nan, 0)] * (len(bars) - len(spans or []))
    ax.bar(range(len(bars)), [s / 60 for s in secs], color=color)
    ranged = [i for i, sp in enumerate(spans) if not math.isnan(sp[0]) and not math.isnan(secs[i])]
    if ranged:
        mids = [secs[i] / 60 for i in ranged]
        ax.errorbar(ranged, mids, yerr=[[max(0.0, m - spans[i][0] / 60) for i, m in zip(ranged, mids)],
                                        [max(0.0, spans[i][1] / 60 - m) for i, m in zip(ranged, mids)]],
                    fmt="none", ecolor="black", elinewidth=1.2, capsize=5, label="range of its processes")
        ax.legend(loc="best", fontsize="small")   # "best" keeps clear of the bars and their labels
    tops = [max(s, spans[i][1] if i in ranged else s) / 60 for i, s in enumerate(secs)]
    for i, s in enumerate(secs):
        if not math.isnan(s):
            ax.annotate(bar_text(s, spans[i], i in ranged), (i, tops[i]), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize="small")
    finite = [t for t in tops if not math.isnan(t)]
    if finite:   # room above the tallest bar or whisker for its label (three lines where ranged): '4m32s' met the top
        ax.set_ylim(0, (1.35 if ranged else 1.1) * max(finite))
    ax.set_xticks(range(len(bars)), labels, rotation=25, ha="right", fontsize="small")
    ax.set_ylabel("time to train (minutes)")


def bar_text(seconds: float, span: tuple, ranged: bool) -> str:
    """'3m17s' on a bar; beneath it where several processes ran, the report's table's words in lines a bar holds:
    '3m02s-3m44s' and 'across 3 processes' ('in each of 3 processes' where they round to one figure)."""
    if not ranged:
        return hms(seconds)
    low, high, n = hms(span[0]), hms(span[1]), span[2]
    return f"{hms(seconds)}\n" + (f"{low} in each of\n{n} processes" if low == high else f"{low}-{high}\nacross {n} processes")


def train_spans(configs: list) -> list:
    """(fastest, slowest, processes) seconds per configuration to train the reference experiment, as the report's
    table gives them (bench.report.compile: bench.analysis.reference.process_range, for estimates only); nan where
    one process ran or the epochs were measured."""
    from bench.analysis.reference import estimated, process_range
    est = estimated(configs)
    return [(*(process_range(c) if est else (math.nan, math.nan)), processes(c)) for c in configs]


def time_to_train_figure(bars: list, how: str, workload: str, where: str, reference: Optional[tuple] = None,
                         epochs: int = 20, compiled: bool = False, spans: Optional[list] = None) -> Figure:
    """Bars of the time to train the reference experiment's epochs per setup, each setup's range across its processes
    where `spans` gives one (`train_spans`, in the bars' order); the published V100 times beside them when the data is
    VOC. The subtitle names compilation only where a configuration compiled (an H200 sweep that compiled nothing read
    'warm-up and compilation included')."""
    fig, axes = _figure(f"Time to train {epochs} epochs of VOC 2012 train", where, workload,
                        width=12.0 if reference else max(8.0, 1.1 * len(bars)), ncols=2 if reference else 1)
    ours = axes[0] if reference else axes
    _bars_minutes(ours, bars, "#1f77b4", spans)
    ours.set_title("this run (" + ("measured" if how.startswith("measured") else "estimate")
                   + (", warm-up and compilation included)" if compiled else ", warm-up included)"))
    if reference:
        _bars_minutes(axes[1], list(reference), "#7f7f7f")
        axes[1].set_title("published: AWS V100s (docs/reference.md)")
    return fig
