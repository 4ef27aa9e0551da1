"""The rule that picks one configuration among several, and its words: the fastest, unless a simpler one is within the
noise of it (`choose`: fewer devices; at equal devices single, then DDP, then FSDP and the rest, DataParallel only
where it is strictly faster, by a lead the noise resolves; then fewer settings changed); whether two are told apart
(`apart`: the noise between processes, with its source, never a figure of another device; LEAD_FLOOR under which no
gap is a lead). The recommendation, the fastest-within-the-budget table and the side-by-side page pick by it alike.

    pick, fastest, tie = choose(configs)      a = apart(faster, slower)      tie_clause(pick, fastest, tie)
    models(configs)                           the groups a recommendation chooses within: precision and model
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench import stats
from bench.analysis import noise_source
from bench.forecast import overhead
from bench.report.pages import BOTH_AT


SIMPLER = ("single", "ddp", "fsdp")   # at equal device counts a tie goes to the first; other strategies next, DataParallel last


def simplicity(c) -> tuple:
    """Sort key, simplest first: fewer devices; then single, DDP, FSDP, the rest, DataParallel; then fewer settings."""
    order = SIMPLER.index(c.strategy) if c.strategy in SIMPLER else len(SIMPLER) + (c.strategy == "dp")
    return c.device_count, order, len(c.options) + c.channels_last + c.compiled


LEAD_FLOOR = overhead.LEAD_FLOOR   # a gap under 5% is never a lead: let simplicity decide (nor a wrapper's overhead)


@dataclass(frozen=True)
class Apart:
    """Whether `faster` is told apart from `slower`: gap = faster / slower - 1 (overhead.throughput_gap); within True (a tie: inside the noise,
    or under LEAD_FLOOR), False (a lead), None (not told: the noise is not measured on this device, or `why`); noise:
    the figure held against, with its source (stats.pair_noise: their repeats, else the sweep's, else selfcheck's)."""
    gap: float
    within: Optional[bool]
    noise: stats.Noise
    why: Optional[str] = None        # why it is not told, where the noise is measured but does not speak for a side
    steps: str = ""                  # a gap under LEAD_FLOOR not in the median steps (overhead.steps_alike's words)
    disjoint: bool = False           # `why` says the two single processes' steps do not overlap (overhead.DISJOINT)


unsteady, unsteady_words = stats.unsteady, stats.unsteady_words  # one rule for the report and the forecast


def _label(c) -> str:
    return c.label


def apart(faster, slower, name=_label) -> Apart:
    """Whether `faster` is told apart from `slower` (`Apart`). A gap inside the measured noise is a tie, whether or not
    a side ran one unstable process: an unsteady process can only widen what the noise already hides (the H200
    self-check read DataParallel x1 [bf16], a pass-through at one device, '11% faster (not resolved: one unstable
    process)' beside single's own three processes 15% apart). Beyond the noise, one unstable process on a side is not
    held against the noise of other processes (a lead it may owe to its own unsteadiness is not resolved), and the
    words say that rule, not that those processes were steady: a CPU report read 'the 12% noise was measured on steady
    processes' where selfcheck's three processes behind it were all unstable."""
    gap = overhead.throughput_gap(faster.samples_per_s, slower.samples_per_s)   # faster / slower - 1
    noise = stats.pair_noise(faster.process_sps, slower.process_sps, faster.noise_fallback)
    if overhead.under_floor(gap):   # the wrapper cell's floor, on the same gap (overhead.overhead_verdict)
        return Apart(gap, True, noise, steps=overhead.steps_alike(faster, slower))
    if noise.measured and overhead.within_noise(gap, noise.fraction):
        return Apart(gap, True, noise)
    shaky = [name(c) for c in (faster, slower) if unsteady(c)]
    if noise.source != "repeats" and shaky:  # beyond the noise or none measured: one unstable process decides nothing
        held = (f"and one unstable process is not held against the {stats.percent(noise.fraction)} noise between "
                f"processes ({noise.source_words()})" if noise.measured
                else f"and the noise between processes at its precision is {noise.words()}")
        apart_steps = overhead.disjoint_words(faster, slower)   # why even a 2.2x gap stays open: one process each
        return Apart(gap, None, noise, f"{' and '.join(shaky)} ran one process whose steps spread more than "
                                       f"{stats.UNSTABLE_IQR_FRACTION:.0%} of their median (unstable), {held}"
                                       + (f"; {apart_steps}" if apart_steps else ""), disjoint=bool(apart_steps))
    return Apart(gap, overhead.within_noise(gap, noise.fraction) if noise.measured else None, noise)


def choose(cs: list, name=_label) -> tuple:
    """(recommended, fastest, tie) among measured configurations: the fastest, unless others are within the noise of it;
    then the simplest of them (`simplicity`). A rival whose difference cannot be told (noise not measured) is not tied,
    except against DataParallel, recommended only where it is strictly faster: where its lead over the best without it
    is not resolved, that one is recommended (quick-cpu recommended DataParallel x1, on CPU single device timed again,
    on a lead of 15% 'not resolved'). tie: `apart(fastest, recommended)` where they differ, else None."""
    fastest = max(cs, key=lambda c: c.samples_per_s)
    tied = [c for c in cs if c is fastest or apart(fastest, c, name).within is True]
    pick = min(tied, key=lambda c: (simplicity(c), -c.samples_per_s))
    rest = [c for c in cs if c.strategy != "dp"]
    if pick.strategy == "dp" and rest:
        alt = choose(rest, name)[0]
        if apart(fastest, alt, name).within is None:
            pick = alt
    return pick, fastest, (None if pick is fastest else apart(fastest, pick, name))


def by_floor(a: Apart) -> bool:
    """A tie that only the floor makes: a gap under LEAD_FLOOR beyond the measured noise, or with the noise not
    measured. Never "within the noise" then: the noise does not hide it, the suite just does not call it a difference."""
    return a.within is True and not (a.noise.measured and overhead.within_noise(a.gap, a.noise.fraction))


def floor_words() -> str:
    return f"under the {LEAD_FLOOR:.0%} floor the suite calls a difference"


def _noise_words(a: Apart) -> str:
    """The noise held against a gap, and where it came from; where it was not measured, that and how to measure it."""
    if not a.noise.measured:
        return f"{a.noise.words()}; --repeats 3 measures it"
    if a.steps and by_floor(a):   # beyond the noise by the windows alone: not said so where the steps do not show it
        return a.noise.words()
    if not overhead.within_noise(a.gap, a.noise.fraction):
        return f"{a.noise.words()}; the gap is beyond it"
    return a.noise.words() + ("" if a.noise.source == "repeats" else
                              " (a single process on at least one side: --repeats 3 measures theirs)")


def _margin_note(a: Apart) -> str:
    """How the summary table qualifies a gap: 'within 25% noise, selfcheck', 'beyond 0.8% noise, this sweep',
    'not resolved: noise not measured', 'under the 5% floor the suite calls a difference; noise 1.0%, this sweep'. A
    selfcheck figure names its workload ('noise 1.0%, selfcheck on the synthetic MLP'): the H100 DeepLabV3 summary read
    'noise 1.0%, selfcheck', the MLP's 3.2 ms steps held against 108 ms ones, and did not say so."""
    if a.within is None:
        why = ([] if a.noise.measured else ["noise not measured"]) + (["one unstable process, --repeats 3"] if a.why else [])
        return "not resolved: " + ", ".join(why)
    src = a.noise.source_words()
    if by_floor(a):
        return f"{floor_words()}; " + ("not resolved: the median steps alike; " if a.steps else "") + (
            f"noise {stats.percent(a.noise.fraction)}, {src}" if a.noise.measured else "noise not measured")
    return f"{'within' if a.within else 'beyond'} {stats.percent(a.noise.fraction)} noise, {src}"


def steps_clause(a: Apart) -> str:
    """'by the windows' throughput, not resolved: the median steps, 3.01 and 3.01 ms, differ by less than ...' where a
    gap under the floor is not in the median steps (overhead.steps_alike, the wrapper cell's rule), else '': the H200
    self-check's paragraph read DataParallel x1's 1.4% 'beyond' the 0.5% noise, its table cell 'not resolved'."""
    return f" by the windows' throughput, not resolved: {a.steps};" if a.steps and by_floor(a) else ""


def _why_simpler(pick, fastest) -> str:
    if pick.device_count < fastest.device_count:
        return "it needs fewer devices"
    if pick.strategy != fastest.strategy:
        return "the simpler strategy" + (" (DataParallel is recommended only where it is strictly faster)"
                                          if fastest.strategy == "dp" else "")
    return "fewer settings changed from the defaults"


def tie_clause(pick, fastest, tie: Apart, name=_label) -> str:
    """'DataParallel x1 is 12% faster (not resolved: ...): single device x1 stands, DataParallel is recommended only
    where it is strictly faster, as in the recommendation': why `pick` stands where `fastest` ran faster, in a clause
    (the memory budget table's sentence, bench.report.frontier)."""
    faster = "as fast (less than 1% apart)" if tie.gap < 0.005 else f"{tie.gap:.0%} faster"
    why = ("DataParallel is recommended only where it is strictly faster" if fastest.strategy == "dp"
           else _why_simpler(pick, fastest))
    return f"{name(fastest)} is {faster} ({_margin_note(tie)}): {name(pick)} stands, {why}, as in the recommendation"


def _spread(fraction: float, threshold: float) -> str:
    """'13%'; one decimal where whole percent would read as the threshold itself ('10.3%', not '10%')."""
    return f"{fraction:.1%}" if round(fraction, 2) == round(threshold, 2) else f"{fraction:.0%}"


def instability(c) -> list:
    """[(short, detail)] of what makes c unstable (results.Config.unstable, the configurations table's stability column),
    from its stored figures; [] for a steady one. The first screen said nothing where the default CPU sweep's
    recommended synthetic DDP x2 had steps spread 13% of their median: only that table's column and the forecast did."""
    n, s = len(c.process_sps) or 1, c.summary
    out = []
    if s.unstable and s.median_ms > 0:
        pooled = "its one process's steps" if n == 1 else f"the steps of its {n} processes pooled"
        out.append((f"its steps spread {_spread(s.iqr_ms / s.median_ms, stats.UNSTABLE_IQR_FRACTION)} of their median",
                    f"interquartile range, {pooled}; unstable above {stats.UNSTABLE_IQR_FRACTION:.0%}"))
    if n > 1 and c.repeat_spread > stats.UNSTABLE_REPEAT_SPREAD:
        out.append((f"its {n} processes' throughputs spread {_spread(c.repeat_spread, stats.UNSTABLE_REPEAT_SPREAD)}",
                    f"fastest less slowest over their median; unstable above {stats.UNSTABLE_REPEAT_SPREAD:.0%}"))
    return out


def unstable_sentence(best, shaky: list, workload: str, name) -> str:
    """'DDP x2 is unstable: its steps spread 13% of their median (interquartile range, ...; unstable above 10%; table:
    synthetic: all configurations)': `shaky` is instability(best), on the first screen for any device."""
    said = " and ".join(f"{short} ({detail}" + (f"; table: {workload}: all configurations)" if i == len(shaky) - 1 else ")")
                        for i, (short, detail) in enumerate(shaky))
    return f"{name(best)} is unstable: {said}."


def lead_words(a) -> str:
    """The lead as the summary's lead column gives it, faster / slower - 1: '44% (1.44x as fast)' (the ratio from
    pages.BOTH_AT apart), 'less than 1%'. The column read '44%' beside 'single device x1 is 31% slower (the fastest
    1.44x as fast)', and '9%' beside '8% slower': two conventions for one gap."""
    if a.gap < 0.005:
        return "less than 1%"
    return f"{a.gap:.0%}" + (f" ({1 + a.gap:.2f}x as fast)" if 1 + a.gap >= BOTH_AT else "")


def unresolved(pick, tie: Optional[Apart]) -> bool:
    """Whether `choose`'s pick is no answer yet: it stands only because the fastest's lead is not resolved (DataParallel's
    rule), and it ran one unstable process itself. An H100's DDP x1 [bf16] (2.3-3.8 ms p10-p90) was recommended over
    DataParallel x1 [bf16], 69% faster and steady: the rule kept DataParallel out, but nothing showed DDP was the answer."""
    return tie is not None and tie.within is None and unsteady(pick)


def unresolved_cell(pick, fastest, name=_label) -> str:
    """The summary's recommendation cell where `unresolved`: both candidates, and what tells them apart."""
    return f"not resolved: --repeats 3 ({name(pick)}, unstable, or {name(fastest)})"


def _tie_sentence(pick, fastest, tie: Apart, name=_label) -> str:
    faster = "as fast (less than 1% apart)" if tie.gap < 0.005 else f"{tie.gap:.0%} faster"
    if unresolved(pick, tie):
        return (f"{name(fastest)} is {faster}, a lead not resolved, and DataParallel is recommended only where it is "
                f"strictly faster; {name(pick)}, the simpler, ran one unstable process, so neither is recommended until "
                f"--repeats 3 tells them apart. Not resolved because {tie.why}.")
    if tie.within is None:   # DataParallel's lead not resolved (`choose`)
        held = tie.why if tie.why else f"the noise between processes is {tie.noise.words()}"
        cpu = " (on CPU it times single device again)" if fastest.device_type == "cpu" else ""
        return (f"{name(fastest)} is {faster}, a lead not resolved, so {name(pick)} is recommended: DataParallel{cpu} "
                f"is recommended only where it is strictly faster, and a lead the noise cannot resolve is not. Not "
                f"resolved because {held}" + ("." if tie.disjoint else "; rerun with --repeats 3 to tell them apart."))
    why = floor_words() if by_floor(tie) else "within the noise"
    return (f"{name(fastest)} is {faster}{steps_clause(tie) or ','} {why}: {name(pick)} is recommended, "
            f"{_why_simpler(pick, fastest)}. The noise: {_noise_words(tie)}.")


def models(configs: list) -> list:
    """[(precision, the configurations that train one model at it)], in the sweep's order: DeepLabV3's auxiliary head
    (--deeplabv3-aux) changes what is trained (and how fast: 11% on an H200), so each value is a model of its own and is
    recommended on its own row. One recommendation over [aux=true] and [aux=unused] would have advised leaving the head
    out of the loss, had that run been the faster (on an H200 it ran 11% slower, with find_unused_parameters)."""
    order = list(dict.fromkeys(c.precision for c in configs))   # precision first, as the rows always ran
    keys = sorted(dict.fromkeys((c.precision, c.aux) for c in configs), key=lambda k: order.index(k[0]))
    return [(p, [c for c in configs if c.precision == p and c.aux == a]) for p, a in keys]


def model_suffix(aux: str, every: list) -> str:
    """', aux=unused' where `every` (a workload's configurations) trains several models (`models`), else '': the one
    rule by which the recommendation, the budget table, the frontier plot, the cost and side-by-side pages name one."""
    return f", aux={aux}" if len({c.aux for c in every}) > 1 else ""


def model_words(precision: str, configs: list, every: list) -> str:
    """'fp32', or 'fp32, aux=unused' where the workload's configurations train several models (`models`)."""
    return precision + model_suffix(configs[0].aux, every)


def noise_blocks(sweep) -> list:
    """One line per precision under the verdicts (per workload and precision where the sweep ran several workloads:
    each workload's verdicts rest on their own figure, Sweep.noise_by_workload): the process noise they were held
    against, its processes' range and its source (noise_source.lines). A sweep run to measure it (DeepLabV3 fp32 and
    bf16, 3 processes each, one H200) showed only 'unstable' and a pooled median: 0.1% and 17% were in the store alone;
    the default CUDA sweep's DeepLabV3 verdicts named the synthetic MLP's processes as 'single device x1'."""
    device = next((c.device_type for cs in sweep.bench.values() for c in cs), None)
    if device is None:
        return []
    by = getattr(sweep, "noise_by_workload", None) or {}
    if len(sweep.bench) < 2 or not by:
        shown = dict.fromkeys(c.precision for cs in sweep.bench.values() for c in cs)   # the summary table's order
        return [("p", line + ".") for line in noise_source.lines(
            {p: sweep.noise_by_precision[p] for p in shown if p in sweep.noise_by_precision}, device)]
    where = stats.device_word(device)
    keys = dict.fromkeys((w, c.precision) for w, cs in sweep.bench.items() for c in cs)
    return [("p", f"Process noise on this {where}, {w} at {p}: "
                  + (n.figure_words() if n.measured else noise_source.missing(n, f"for {w} at {p} on this {where}")) + ".")
            for (w, p), n in ((k, by[k]) for k in keys if k in by)]
