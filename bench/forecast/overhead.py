"""A wrapper's overhead at one device, in the words the report's efficiency column and the forecast's x1 row share: the
time its step takes more than single device x1's (DDP, FSDP or DataParallel at one device, not scaling), and whether it
is resolved: not where either side ran one unstable process, not inside the noise between processes, and not where a
gap under LEAD_FLOOR comes from the windows' throughput alone while the two median steps lie inside their own spread.

    wrapper_overhead(c, base) -> 'wrapper overhead 2.7% (against single device x1)', '' without a baseline
    own_baseline(c)           -> whether c was held against itself (a sweep without single device x1)
    steps_alike(c, base)      -> the words where a gap is not in the median steps ('' where it is)
    steps_disjoint(a, b)      -> whether one's p10 step lies above the other's p90 (DISJOINT says what that leaves open)
LEAD_FLOOR is the report's too (bench.report.choice): a gap under it is never a lead there.
"""
from __future__ import annotations

import math

from bench import stats

LEAD_FLOOR = 0.05            # a gap under 5% is never a lead (bench.report.choice), nor an overhead the windows alone make


def own_baseline(c) -> bool:
    """Whether c was held against itself: the analysis falls back to a series' own one-device run where the sweep has
    no single device x1 of its settings, so at one device the wrapper is its own baseline and has no overhead to tell."""
    return bool(c.baseline) and c.baseline == c.label


def steps_alike(c, base) -> str:
    """'the median steps, 3.01 and 3.01 ms, differ by less than either's p10-p90 spread (the narrower 0.02 ms)' where a gap
    under LEAD_FLOOR is not in the steps: the two median steps differ by less than each one's p10-p90 spread, so
    the gap is the windows' throughput alone (an H200's DataParallel x1 read 'wrapper overhead 1.4%' beside single
    device x1 with both medians 3.01 ms: a 20-step, 60 ms window's rate made it); '' where they are apart or unknown."""
    if base is None or base is c:
        return ""
    a, b = c.summary, base.summary
    spread = min(a.p90_ms - a.p10_ms, b.p90_ms - b.p10_ms)
    gap = abs(a.median_ms - b.median_ms)
    if any(math.isnan(x) for x in (spread, gap)) or gap >= spread:
        return ""
    return (f"the median steps, {a.median_ms:.2f} and {b.median_ms:.2f} ms, differ by less than either's p10-p90 spread "
            f"(the narrower {spread:.2f} ms)")


DISJOINT = ("the steps of the two processes do not overlap, but one process each: a process-level difference "
            "(placement, clocks) is not told from the strategy's without --repeats 3")


def steps_disjoint(a, b) -> bool:
    """Whether the steps of a and b do not overlap: one's p10 step above the other's p90 (the H100 rehearsal's ZeRO x2,
    18.1-77.0 ms, against DDP x2's 9.7-13.4 ms). That resolves the steps of these two processes, not the strategies:
    processes of one configuration differ far beyond their own steps' spread (an H200 ran DeepLabV3 single x1 [bf16] at
    144 and 200 samples/s in two processes, each steady), so a large gap with one unstable process stays unresolved,
    and DISJOINT says why."""
    if a is None or b is None or a is b:
        return False
    x, y = a.summary, b.summary
    return x.p10_ms > y.p90_ms or y.p10_ms > x.p90_ms


def disjoint_words(a, b) -> str:
    """DISJOINT where each of a and b ran one process and their steps do not overlap (`steps_disjoint`), else ''."""
    one = all(len(getattr(c, "process_sps", ()) or ()) <= 1 for c in (a, b))
    return DISJOINT if one and steps_disjoint(a, b) else ""


def wrapper_overhead(c, base=None) -> str:
    """'wrapper overhead 2.7% (against single device x1)': a wrapper (DDP, FSDP, DataParallel) at one device against
    single is the time its step takes more, not scaling; 'not resolved' inside the noise between processes, or where
    the wrapper or its baseline `base` ran one unstable process (stats.unsteady: the noise measured on steady processes
    does not speak for it; one H100's DDP x1 [bf16] read 'wrapper overhead 35.5%'), or where a gap under LEAD_FLOOR is
    not in the median steps (`steps_alike`). The report's and the forecast's words for the row alike; '' without a
    single-device baseline, and '' where the baseline is c itself (`own_baseline`: a sweep without single x1 of its
    settings holds each x1 against itself; an H200 sweep read 'wrapper overhead not resolved (0.0% against FSDP x1
    [bf16, adamw]: FSDP x1 [bf16, adamw] and FSDP x1 [bf16, adamw] ran ...')."""
    if math.isnan(c.speedup) or not c.baseline or own_baseline(c):
        return ""
    over = 1 / c.speedup - 1
    shaky = stats.unsteady_words([b for b in (c, base) if b is not None])
    if shaky:
        apart = disjoint_words(c, base)
        return (f"wrapper overhead not resolved ({over:.1%} against {c.baseline}: {shaky}; "
                + (apart if apart else "--repeats 3 measures it") + ")")
    alike = steps_alike(c, base) if abs(over) < LEAD_FLOOR else ""
    if alike:
        return f"wrapper overhead not resolved ({over:.1%} by the windows' throughput against {c.baseline}; {alike})"
    noise = c.efficiency_noise
    if math.isnan(noise):
        return f"wrapper overhead {over:.1%} (against {c.baseline}; the noise between processes is not measured)"
    if abs(over) <= noise:
        return f"wrapper overhead not resolved ({over:.1%} against {c.baseline}, within the {stats.percent(noise)} noise)"
    return f"wrapper overhead {over:.1%} (against {c.baseline})"
