"""The forecast's ranges as its table and its verdicts write them (bench.forecast.outlook, which re-exports these).

    ranged(point, "step_ms", value, ".1f")       # '66.4 (39.9-121.0)': the central value and, where drawn, its range
    bracket(point, name, show)                   # ' (39.9-121.0)', '' where none was drawn or both ends read alike
    unbracketed_words(points)                    # once under the table: what a figure without brackets means
    stop_range(points), between(r, top, first)   # (N1, N2) of the last count that pays; ' (between N1 and N2)'
    flat(lo, hi)                                 # a range that is none: not drawn, or nothing in it varied
    check_range(lo, hi, digits, unit)            # ' (range 3.3201-3.3249 ms)' in the check's line
    ends(lo, hi, digits)                         # '3.3201-3.3249': the same in the report's check table
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from bench.forecast import spread
from bench.forecast.whatif import EFFICIENT

# The figures the table brackets a range after, each as it is written there (outlook.COLUMNS)
SHOWN = {"step_ms": ".1f", "samples_per_s": ".0f", "efficiency": ".0%", "memory_mib": ".0f"}
NO_RANGE = "no range: no input measured twice"


def num(v, spec: str) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def bracket(p, name: str, show) -> str:
    """' (39.9-121)': a figure's range as `show` writes its ends; '' where nothing was drawn or both ends read alike
    (`unbracketed_words` says which, once under the table)."""
    lo, hi = p.range_of(name)
    if math.isnan(lo):
        return ""
    a, b = show(lo), show(hi)
    return "" if a == b else f" ({a}-{b})"


def ranged(p, name: str, value, spec: str) -> str:
    """'66.4 (39.9-121.0)': the central value and, where drawn, its range."""
    text = num(value, spec)
    return text if text == "–" else text + bracket(p, name, lambda v: format(v, spec))


def flat(lo, hi) -> bool:
    """Whether a range is none: not drawn (None or nan), or nothing in its draws varied (no input measured twice)."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return True
    return math.isclose(lo, hi, rel_tol=1e-9, abs_tol=1e-12)


def ends(lo, hi, digits: int = 2) -> str:
    """'3.30-3.34': a range's ends with `digits` decimals, or as many more (up to 4) as tell them apart where those
    print both alike ('3.3201-3.3249'); '–' where none was drawn."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "–"
    d = next((d for d in range(digits, max(digits, 4) + 1) if f"{lo:.{d}f}" != f"{hi:.{d}f}"), digits)
    return f"{lo:.{d}f}-{hi:.{d}f}"


def check_range(lo, hi, digits: int = 2, unit: str = "ms") -> str:
    """' (range 3.30-3.34 ms)' in the check's line, its ends told apart (`ends`: ' (range 3.3201-3.3249 ms)'); ' (no
    range: no input measured twice)' only where none was drawn or nothing in it varied (`flat`). Told apart by their
    rounding alone, a steady H200's 3.31-3.33 ms read 'no range: no input measured twice' beside 'outside the range'."""
    return f" ({NO_RANGE})" if flat(lo, hi) else f" (range {ends(lo, hi, digits)} {unit})"


def unbracketed_words(points: list) -> str:
    """Once under the table, what a forecast figure without brackets means: its range rounds to the figure itself
    (drawn, narrower than the last digit shown), or it has none (nothing it rests on measured twice); '' where every
    forecast figure has its brackets. The two read alike: an H200's step '3.5' beside '145840 (145695-145966)'
    samples/s said nothing of its range. A measured row (its basis set) or a refused one has no range to say."""
    narrow = none = False
    for p in points:
        if p.refused or p.basis:
            continue
        for name, spec in SHOWN.items():
            value = (p.memory.device_mib if p.memory is not None else math.nan) if name == "memory_mib" else getattr(p, name)
            if value is None or math.isnan(value):
                continue
            lo, hi = p.range_of(name)
            if flat(lo, hi):
                none = True
            elif format(lo, spec) == format(hi, spec):
                narrow = True
    if narrow:
        return ("A forecast figure without brackets has a range that rounds to the figure itself"
                + (", or none where nothing it rests on was measured twice." if none else "."))
    return "A forecast figure without brackets has no range: nothing it rests on was measured twice." if none else ""


def stop_range(points: list, threshold: float = EFFICIENT) -> Optional[tuple]:
    """(N1, N2): the 5th and 95th percentile over the draws of the last count before efficiency falls under the
    threshold (None for a percentile whose draws stay above it at every count; 0: under it already at the first);
    None without draws."""
    known = [p for p in points if not p.refused and "efficiency" in p.draws]
    if not known:
        return None
    effs = np.stack([p.draws["efficiency"] for p in known])            # (counts, draws)
    below = effs < threshold
    first = np.where(below.any(axis=0), below.argmax(axis=0), len(known) + 1)  # the first count below, per draw
    counts = np.array([0] + [p.count for p in known] + [np.inf])       # the last that pays: counts[first] (0: none)
    last = counts[first]
    lo, hi = (float(np.quantile(last, q, method=how)) for q, how in ((spread.LOW, "lower"), (spread.HIGH, "higher")))
    return tuple(None if math.isinf(v) else int(v) for v in (lo, hi))


def between(r: Optional[tuple], top: int, first: int = 2) -> str:
    """' (between 1 and 8)': the range of the last count that pays, its ends in words; a draw where no count from
    `first` on pays (0) pays only below it (1 where the counts start at 2), never 'no count'; ' (both ends of its range:
    16)' where the ends agree (that read nothing: 'past 16 GPUs ... scaling stops paying', as if none were drawn)."""
    if r is None:
        return ""
    lo, hi = r
    low = lambda n: ("1" if first <= 2 else f"fewer than {first}") if n == 0 else str(n)  # noqa: E731
    word = lambda n: f"beyond {top}" if n is None else low(n)  # noqa: E731
    return f" (both ends of its range: {word(lo)})" if lo == hi else f" (between {word(lo)} and {word(hi)})"
