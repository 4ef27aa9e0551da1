"""How a configuration's speed-up and scaling efficiency are said, in every table and page alike (the report, the
side-by-side, history): above 100% only with why; at one device a wrapper (DataParallel, DDP, FSDP) against single is
its overhead, not scaling; a wrapper that is its own baseline (no single device x1 of its settings ran) has neither.

    efficiency_text(c, ".1%", configs)   speedup_text(c)   wrapper_text(c, base)   efficiency_words(c, " efficiency")
"""
from __future__ import annotations

import math

from bench import stats
from bench.forecast import overhead
from bench.report.pages import fmt


def efficiency_words(c, what: str = "") -> str:
    """'87% efficiency', or '100% efficiency; within noise: measured 103%, noise 25%' for a sentence."""
    e = stats.shown_efficiency(c.efficiency, c.efficiency_noise, c.device_count)
    return f"{e.shown:.0%}{what}" + (f"; {e.note}" if e.note else "")


OWN_BASELINE = "– (its own baseline: no single device x1 with its settings in this sweep)"


def efficiency_text(c, spec: str = ".0%", configs: list = ()) -> str:
    """The configuration's efficiency as shown: above 100% only with why (bench.stats.shown_efficiency); at one device
    a wrapper (DataParallel, DDP, ...) against single is its overhead, not scaling (`wrapper_text`, its baseline
    looked up by label among `configs`); where that baseline is itself (no single device x1 of its settings ran), it
    says so: no overhead to tell, never '0.0% against' itself."""
    if c.device_count == 1 and c.strategy != "single" and not math.isnan(c.speedup) and c.baseline:
        if overhead.own_baseline(c):
            return OWN_BASELINE
        return wrapper_text(c, next((b for b in configs if b.label == c.baseline), None))
    return stats.shown_efficiency(c.efficiency, c.efficiency_noise, c.device_count).text(spec)


def speedup_text(c) -> str:
    """The speed-up cell: '–' where a one-device wrapper is its own baseline (no single device x1 of its settings ran),
    as its efficiency says; a 1.00x there reads as a measured tie with single device that never ran."""
    if c.device_count == 1 and c.strategy != "single" and overhead.own_baseline(c):
        return "–"
    return fmt(c.speedup, ".2f", "x")


def wrapper_text(c, base=None) -> str:
    """A one-device wrapper's overhead against its baseline `base`, in the forecast's words for the same row
    (bench.forecast.overhead.wrapper_overhead: not resolved where either ran one unstable process)."""
    return overhead.wrapper_overhead(c, base)
