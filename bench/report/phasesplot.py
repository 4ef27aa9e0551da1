"""The step-phases figure: where a step's time goes (data, host to device, forward, backward, exposed communication,
optimizer), with the exposed communication inferred from DDP's probe drawn as inferred. Split from plots.py (past 400
lines)."""
from __future__ import annotations

import math
from typing import Optional

from matplotlib.figure import Figure

from bench.report import comm as comm_report
from bench.report.plots import _caption, _figure, _label, category_ticks, wrapped

SEGMENTS = ("data", "host to device", "forward", "backward (compute)", "exposed communication", "optimizer", "other")
SEGMENT_COLORS = ("#8c564b", "#e377c2", "#2ca02c", "#17becf", "#d62728", "#bcbd22", "#c7c7c7")


def exposed_ms(c) -> Optional[float]:
    """The exposed communication a bar draws (ms), judged as the report's text judges it (bench.report.comm.resolved):
    DDP's probe where it exceeds the steps' p10-p90 spread, at more than one rank (at one, DDP communicates nothing:
    the probe is its own work, part of backward); None where it is not resolved (a negative probe included)."""
    return comm_report.resolved(c) if c.device_count > 1 else None


def unresolved(c) -> bool:
    """Whether c has a communication probe at several ranks that the text calls 'not resolved': its bar says so."""
    probe = c.exposed_comm_ms
    return c.device_count > 1 and probe is not None and not math.isnan(probe) and exposed_ms(c) is None


def phase_segments_ms(c) -> dict:
    """The median step split into stacked segments (ms). DDP's backward phase includes the all-reduce, so the exposed
    communication is taken out of it where the probe resolves it (`exposed_ms`); an unresolved probe stays in backward,
    never a red segment of noise or a negative one. 'other' is the rest of the median step."""
    p = {k: (0.0 if math.isnan(v) else v) for k, v in c.phases_ms.items()}
    exposed = exposed_ms(c) or 0.0
    seg = dict(zip(SEGMENTS, (p.get("data_ms", 0.0), p.get("h2d_ms", 0.0), p.get("forward_ms", 0.0),
                              max(0.0, p.get("backward_ms", 0.0) - exposed), exposed, p.get("optimizer_ms", 0.0))))
    seg["other"] = max(0.0, c.summary.median_ms - sum(seg.values()))
    return seg


INFERRED = "exposed communication (inferred)"


MEASURED_BACKWARD = "backward as measured (its all-reduce inside)"


def phases_figure(configs: list, workload: str, where: str) -> Figure:
    """Stacked bars: where the median step's time goes, per strategy and count (slowest rank). Where DDP's probe resolves
    exposed communication, that segment (hatched, 'inferred') is taken out of the measured backward, which is outlined
    whole, and a caption gives the sum: DDP x2's 'backward (compute)' drew 11.9 ms beside single device's 14.1 ms (its
    measured 35.34 ms less the probe's 23.48 ms, from blocks of their own) and read as DDP computing faster, a bug."""
    fig, ax = _figure("Step broken into phases (medians, slowest rank per step)", where, workload, width=10.0)
    labels = [wrapped(_label(c)) + ("\n(exposed comm. not resolved)" if unresolved(c) else "") for c in configs]
    segs = [phase_segments_ms(c) for c in configs]
    bottom = [0.0] * len(configs)
    for name, color in zip(SEGMENTS, SEGMENT_COLORS):
        h = [s[name] for s in segs]
        if any(h):
            split = name == "exposed communication"
            ax.bar(range(len(configs)), h, bottom=bottom, color=color, label=INFERRED if split else name,
                   hatch="//" if split else None, edgecolor="white" if split else None)
            bottom = [a + b for a, b in zip(bottom, h)]
    caption = _split_backward(ax, configs, segs)
    # a zero segment atop a bar ('other' at 933 ms) is a sticky edge that held the axis to the tallest bar's top
    ax.set(ylabel="time per step (ms)", ylim=(0.0, 1.05 * max(bottom + [1e-9])))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    category_ticks(fig, ax, labels)
    if caption:
        fig.supxlabel(caption, fontsize="small", ha="left", x=0.01)
    return fig


def _split_backward(ax, configs: list, segs: list) -> str:
    """Outline each measured backward that the bars split, and say in a caption how the split was made; '' where none."""
    split = [i for i, s in enumerate(segs) if s["exposed communication"] > 0]
    if not split:
        return ""
    measured = [0.0 if math.isnan(v) else v for v in (configs[i].phases_ms.get("backward_ms", math.nan) for i in split)]
    ax.bar(split, measured, bottom=[sum(segs[i][k] for k in SEGMENTS[:3]) for i in split], fill=False, edgecolor="black",
           linewidth=1.2, label=MEASURED_BACKWARD)
    sums = "; ".join(f"{_label(configs[i])}: {m:.2f} ms measured = {segs[i]['backward (compute)']:.2f} + {e:.2f} ms"
                     if e <= m else f"{_label(configs[i])}: the probe's {e:.2f} ms exceed the measured {m:.2f} ms"
                     for i, m, e in ((i, m, segs[i]["exposed communication"]) for i, m in zip(split, measured)))
    return _caption(
        "Hatched, inferred: DDP's exposed communication is its probe's synchronised less its no_sync() steps, measured "
        "in blocks of their own, and is taken out of the measured backward (outlined), which includes the all-reduce; "
        f"the rest is drawn as backward (compute), not measured apart. {sums}.")
