"""Figures that say what the text says (issue 38): the phases plot draws exposed communication only where the report's
text resolves it, the forecast shows no one-device wrapper as scaling, its legend fits its figure and it marks every
network it assumed. Stand-in configurations (bench.analysis.results.Config's fields the plots read), no sweep."""
from __future__ import annotations

import math
from types import SimpleNamespace

from bench.report import comm as comm_report
from bench.report import plots


def config(count: int, probe_ms: float, median_ms: float = 100.0, p10_ms: float = 99.0, p90_ms: float = 101.0,
           label: str = "") -> SimpleNamespace:
    """A configuration whose median step is median_ms (phases: data 5, forward 30, backward 50, optimizer 10 ms) and
    whose DDP probe (synchronised minus no_sync() medians) is probe_ms, its steps spread p10_ms-p90_ms."""
    return SimpleNamespace(device_count=count, strategy="ddp", exposed_comm_ms=probe_ms, label=label or f"DDP x{count}",
                           phases_ms={"data_ms": 5.0, "h2d_ms": math.nan, "forward_ms": 30.0, "backward_ms": 50.0,
                                      "optimizer_ms": 10.0},
                           summary=SimpleNamespace(median_ms=median_ms, p10_ms=p10_ms, p90_ms=p90_ms))


def _bars(fig) -> dict:
    return {c.get_label(): [b.get_height() for b in c] for c in fig.axes[0].containers}


def test_the_phases_plot_draws_exposed_communication_only_where_the_text_resolves_it():
    told = config(2, 12.0)                               # 12 ms beyond a 2 ms spread: resolved, as the text says
    inside = config(2, 11.0, p10_ms=90.0, p90_ms=105.0, label="DDP x2 [bf16]")   # inside a 15 ms spread: the text says "not resolved"
    negative = config(2, -0.42, label="DDP x2 [fp16]")                         # a negative difference of medians: never a negative segment
    one_rank = config(1, 11.0)                           # one rank communicates nothing: DDP's own work, in backward
    assert comm_report.resolved(told) == 12.0 and comm_report.resolved(inside) is None
    assert "not resolved" in comm_report.probe_words(inside) and "no communication" in comm_report.probe_words(one_rank)
    seg = plots.phase_segments_ms(told)
    assert seg["exposed communication"] == 12.0 and seg["backward (compute)"] == 50.0 - 12.0
    for c in (inside, negative, one_rank):
        seg = plots.phase_segments_ms(c)
        assert seg["exposed communication"] == 0.0, c
        assert seg["backward (compute)"] == 50.0, c                 # the probe stays in backward, unsplit
        assert all(v >= 0 for v in seg.values()) and sum(seg.values()) == c.summary.median_ms
    fig = plots.phases_figure([told, inside, negative, one_rank], "synthetic", "cpu")
    bars = _bars(fig)
    assert bars["exposed communication"] == [12.0, 0.0, 0.0, 0.0]
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ["not resolved" in t for t in labels] == [False, True, True, False]   # one rank: nothing to resolve
