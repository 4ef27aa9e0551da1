"""A wrapper's overhead at one device, in the words the report's efficiency column and the forecast's x1 row share: the
time its step takes more than single device x1's (DDP, FSDP or DataParallel at one device, not scaling), and whether it
is resolved: not where either side ran one unstable process, not inside the noise between processes, and not where a
gap under LEAD_FLOOR comes from the windows' throughput alone while the two median steps lie inside their own spread.

    overhead_verdict(c, base) -> Verdict(figure, resolved, within_noise, words), None without a baseline
    wrapper_overhead(c, base) -> 'wrapper overhead 2.7% (against single device x1: more time a sample, by the
                                 windows' throughput)', '' without a baseline
    throughput_gap(a, b), under_floor(gap), within_noise(gap, noise): the one rule the lead column (bench.report
                                 .choice.apart) and the wrapper cell judge a pair by
    own_baseline(c)           -> whether c was held against itself (a sweep without single device x1)
    steps_alike(c, base)      -> the words where a gap is not in the median steps ('' where it is)
    steps_disjoint(a, b)      -> whether one's p10 step lies above the other's p90 (DISJOINT says what that leaves open)
LEAD_FLOOR is the report's too (bench.report.choice): a gap under it is never a lead there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from bench import stats

LEAD_FLOOR = 0.05            # a gap under 5% is never a lead (bench.report.choice), nor an overhead the windows alone make
# The overhead's basis, said with it: an H200 self-check's page gave DDP x1's as 'wrapper overhead 11.4%' here, its probe's
# '0.30 ms, 9% of a step' and a 0.90x speed-up, three figures for one cost with no word of which each was.
BASIS = "more time a sample, by the windows' throughput"


def throughput_gap(a_sps: float, b_sps: float) -> float:
    """How far apart two throughputs are: the higher over the lower, less 1 (fraction; nan where one is not positive).
    The one quantity the floor and the noise are held against, whichever side is faster: the wrapper cell once gated on
    its time ratio (|1/speedup - 1|) and the lead column on this, so DataParallel x1 at 105.2 against single's 100
    samples/s read 'not resolved' in one (4.9% < 5%) and 'beyond 0.5% noise' in the other (5.2%)."""
    hi, lo = max(a_sps, b_sps), min(a_sps, b_sps)
    return hi / lo - 1 if lo > 0 else math.nan


def under_floor(gap: float) -> bool:
    """A throughput gap (`throughput_gap`) under LEAD_FLOOR: never a lead, nor an overhead the windows alone make."""
    return gap < LEAD_FLOOR


def within_noise(gap: float, noise: float) -> bool:
    """A throughput gap inside the noise between processes (both fractions): strictly under it, by the lead column and
    the wrapper cell alike (one read `<=`, the other `<`); False where the noise is not measured (nan)."""
    return gap < noise


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


@dataclass(frozen=True)
class Verdict:
    """A one-device wrapper's overhead against its baseline, as the report's cell, the forecast's row and the export read
    it. figure: the time its step takes more (1 / speedup - 1, fraction); resolved: True (beyond the noise), False (not
    resolved: one unstable process, the median steps alike, or within the noise), None (the noise not measured);
    within_noise: True inside the noise, False beyond it, None where it was not held against it; words: the cell."""
    figure: float
    resolved: Optional[bool]
    within_noise: Optional[bool]
    words: str


def overhead_verdict(c, base=None) -> Optional[Verdict]:
    """`Verdict` of the wrapper c at one device against its baseline `base` (`wrapper_overhead` says which branches);
    None without a single-device baseline, or where the baseline is c itself (`own_baseline`). The export once
    re-derived these branches by hand and missed the median steps': an overhead the cell called 'not resolved (... the
    median steps ...)' exported efficiency_within_noise False, as if resolved."""
    if math.isnan(c.speedup) or not c.baseline or own_baseline(c):
        return None
    over = 1 / c.speedup - 1
    gap = throughput_gap(c.speedup, 1.0)   # speedup = c's samples/s over base's: the pair's throughput gap
    shaky = stats.unsteady_words([b for b in (c, base) if b is not None])
    if shaky:
        apart = disjoint_words(c, base)
        return Verdict(over, False, None, f"wrapper overhead not resolved ({over:.1%} against {c.baseline}: {shaky}; "
                       + (apart if apart else "--repeats 3 measures it") + ")")
    noise = c.efficiency_noise
    if within_noise(gap, noise):   # before the steps, as the lead column: a gap the noise hides needs no other reason
        return Verdict(over, False, True, f"wrapper overhead not resolved ({over:.1%} against {c.baseline}, within "
                                          f"the {stats.percent(noise)} noise)")
    alike = steps_alike(c, base) if under_floor(gap) else ""
    if alike:
        return Verdict(over, False, None, f"wrapper overhead not resolved ({over:.1%} by the windows' throughput "
                                          f"against {c.baseline}; {alike})")
    if math.isnan(noise):
        return Verdict(over, None, None, f"wrapper overhead {over:.1%} (against {c.baseline}: {BASIS}; the noise "
                                         "between processes is not measured)")
    return Verdict(over, True, False, f"wrapper overhead {over:.1%} (against {c.baseline}: {BASIS})")


def wrapper_overhead(c, base=None) -> str:
    """'wrapper overhead 2.7% (against single device x1: more time a sample, by the windows' throughput)': a wrapper
    (DDP, FSDP, DataParallel) at one device against single is the time its step takes more, not scaling; 'not resolved' inside the noise between processes, or where
    the wrapper or its baseline `base` ran one unstable process (stats.unsteady: the noise measured on steady processes
    does not speak for it; one H100's DDP x1 [bf16] read 'wrapper overhead 35.5%'), or where a gap under LEAD_FLOOR is
    not in the median steps (`steps_alike`). The floor and the noise are held against the pair's throughput gap
    (`throughput_gap`), as the report's lead column holds them (bench.report.choice.apart); the figure shown is the
    time ratio. The report's and the forecast's words for the row alike; '' without a single-device baseline, and ''
    where the baseline is c itself (`own_baseline`: a sweep without single x1 of its settings holds each x1 against
    itself; an H200 sweep read 'wrapper overhead not resolved (0.0% against FSDP x1 [bf16, adamw]: FSDP x1 [bf16,
    adamw] and FSDP x1 [bf16, adamw] ran ...')."""
    v = overhead_verdict(c, base)
    return v.words if v else ""
