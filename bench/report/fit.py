"""The largest batch that fits (./run_bench.sh fit), in the report: per configuration the largest per-device batch
that fit the budget, the smallest that did not and why, and its throughput there; per workload and recipe the
sentence that compares them ("DDP x8 fits 32 a GPU, FSDP x8 96; at its largest batch FSDP x8 trains 1.40x faster
than DDP x8"). Every peak is bench.analysis.fit.budget_peak's figure (per GPU; on CPU per node, its processes' peak RSS
summed), the one the fastest-within-the-budget table holds to the same budget; verdicts are read back as stored, and a trial stored as fitting whose peak by that figure is over
the budget (judged when it ran by the allocator's peak reserved) is marked and said so.

    blocks(sweep)   # [] unless the sweep was a fit
"""
from __future__ import annotations

import json
import math

from bench import stats
from bench.analysis import fit as fitting, oom
from bench.analysis.results import diverged
from bench.forecast import overhead
from bench.report.frontier import held_mib, mfu_cell, over_size, over_unit, size
from bench.report.pages import fmt


def _measured(sweep, s, batch="largest"):
    """The measured run of a search at `batch`, by default its largest (a bench Config of the sweep), or None."""
    key = s.bench_keys.get(s.largest if batch == "largest" else batch)
    return next((c for c in sweep.bench.get(s.workload, []) if c.key == key), None) if key else None


def again(s) -> str:
    """How to try the untried batches: a fit is not resumed, and run again it starts over from its first batch, so
    the words give the flags that try just those ('./run_bench.sh fit again bisects it' sent an H200's fit of 128 to
    256 back to 128 for 145-147)."""
    gap = s.untried
    return f"fit --per-device-batch {gap[0]} --max-batch {gap[-1]} with this sweep's flags tries them"


def _gap(s) -> str:
    """'13' or '13-15': the batches between the largest that fits and the smallest that did not that no trial tried
    (`Search.untried`), '' where the boundary is resolved."""
    gap = s.untried
    return "" if not gap else str(gap[0]) if len(gap) == 1 else f"{gap[0]}-{gap[-1]}"


def _untried(s) -> str:
    """'13 not tried (fit --per-device-batch 13 --max-batch 13 ... tries them)', '' where the boundary is resolved."""
    return f"{_gap(s)} not tried ({again(s)})" if s.untried else ""


def _unit(ss: list):
    """The one unit every overage the fit block writes is in (`over_unit`): those of the smallest batch that did not
    fit (its trial, its measured run) and of the measured runs over the budget."""
    overs = []
    for s in ss:
        nxt = s.smallest_not
        peaks = [p for _, p in s.ran_over] + [t[3] for t in s.overturned]
        peaks += [nxt[2], (s.measured_now(nxt[0]) or (None, None))[1]] if nxt else []
        overs += [p - s.budget_mib for p in peaks if p is not None and p > s.budget_mib]
    return over_unit(overs)


def _left(s) -> float:
    """The budget less the largest batch's peak (its trial's or its measured run's, the larger), MiB; nan where neither
    peak was read back or the budget is unknown (a stored 'fits' whose memory rows are gone raised here)."""
    ran = (s.measured_now(s.largest) or (None, None))[1]
    peak = max((p for p in (s.peak_at(s.largest), ran) if p is not None), default=None)
    return s.budget_mib - peak if peak is not None else math.nan


def _capped(s, c, u: str = "") -> str:
    """Where the search stopped at its cap with every batch fitting: a lower bound, said as one, with the headroom and,
    where two trials give the memory a sample takes, the batch that would fill it, not tried. The H200 fit read 'DDP
    x1 fits 128 a GPU' with 15.5 GiB left at 128 and no batch out of memory: 128 was --max-batch, not the limit."""
    per, left = s.mib_per_sample(), _left(s)
    room = f"{size(left)} left at {s.largest}; " if not math.isnan(left) else ""
    said = (f"at least {s.largest}" + (f" a {u}" if u else "") + f" (the search's cap, --max-batch {s.largest}; "
            f"{room}no batch ran out of memory): raise --max-batch to find the limit")
    if per is None or math.isnan(left) or left < per:
        return said
    what = "a sequence" if c is not None and getattr(c, "tokens_per_sample", None) else "a sample"
    return said + f"; ~{size(per)} {what}: about {s.largest + int(left // per)} might fit, not tried"


def _why_not(s, unit=None) -> str:
    nxt = s.smallest_not
    if nxt is None:
        return "none: every batch tried fit, up to the search's cap" if s.capped else "every batch tried fit"
    batch, v, peak, reason = nxt
    if v.endswith(fitting.IN_MEASURED_RUN):
        frag = oom.words(s.measured_reasons.get(batch, ""))
        return (f"{batch}: its trial fit (peak {size(s.peak_at(batch))}), its measured run did not "
                f"({_peak_over(s, v, peak, unit)}{'; ' + frag if frag else ''})")
    if v == fitting.OOM:
        frag = oom.words(reason)
        return f"{batch}: out of memory" + (f" ({frag})" if frag else "")
    ran = s.measured_now(batch)
    return (f"{batch}: peak {size(peak)}, over by {over_size(peak - s.budget_mib, unit)}"
            + (f"; its measured run: {_peak_over(s, ran[0], ran[1], unit)}" if ran else ""))


def _peak_over(s, verdict: str, peak, unit=None) -> str:
    if peak is None:
        return verdict
    return (f"peak {size(peak)}, over by {over_size(peak - s.budget_mib, unit)}" if peak > s.budget_mib
            else f"peak {size(peak)}, {verdict}")


def _ran_over(sweep, s, unit=None) -> str:
    """A batch measured and over the budget whose trial, by today's rule, did not fit either (a store judged by an
    older figure): said as such, with the largest batch within the budget, so the page never calls it fitting (the
    H200 fit said 'DDP x1 fits 14' beside '17.56 GiB (over)' and 'nothing fits the budget')."""
    b, peak = s.ran_over[-1]
    c = _measured(sweep, s, b)
    speed = f" ({c.samples_per_s:.1f} samples/s)" if c is not None and not math.isnan(c.samples_per_s) else ""
    over = (f"over the {size(s.budget_mib)} budget by {over_size(peak - s.budget_mib, unit)}"
            if peak is not None and peak > s.budget_mib else "out of memory")
    trial = "" if _measured(sweep, s) else " (by its trial; no measured run there)"
    within = ("none verified within the budget" if s.largest is None
              else f"{s.largest} is the largest tried that fits{trial}; {_untried(s)}" if s.untried
              else f"largest within it: {s.largest}{trial}")
    return f"{s.name}: {b} ran{speed}, but {over}; {within}"


def _overturned(ss: list, unit=None) -> str:
    """Where a trial fit and its longer measured run did not: both peaks, and the batch that fit instead."""
    said = []
    for s in ss:
        if s.overturned:
            said.append(", ".join(f"{s.name}'s trial at {batch} fit (peak {size(trial_peak)}) but its measured run there "
                                  f"did not ({_peak_over(s, v, peak, unit)}{_fragmented(s, batch)})"
                                  for batch, trial_peak, v, peak in s.overturned)
                        + (f" ({oom.EXPANDABLE} may fit those)" if any(_fragmented(s, b) for b, *_ in s.overturned)
                           else "")
                        + (f", so it fits {s.largest}" if s.largest is not None else ", so nothing fits it"))
    if not said:
        return ""
    grew = [(s.name, batch, trial_peak, peak) for s in ss for batch, trial_peak, _, peak in s.overturned]
    return "; " + "; ".join(said) + (_heap_grows(grew) if ss[0].device_type == "cpu" else "")


def _fragmented(s, batch: int) -> str:
    """'; fragmentation, not capacity: ...' where the measured run at `batch` ran out of a fragmented allocator's
    cache (bench.analysis.oom), else ''."""
    frag = oom.words(s.measured_reasons.get(batch, ""), hint=False)
    return f"; {frag}" if frag else ""


def _heap_grows(grew: list) -> str:
    """Why a CPU trial can fit where its measured run at the same batch does not, with how much more the measured run
    peaked in this sweep, from its stored peaks: grew is [(name, batch, trial's peak MiB, measured run's peak MiB)].
    The sentence once carried a figure of another run (12% and 2%, docs/memory.md's) as 'measured here' beside
    this sweep's own +1.5-1.8%."""
    rose = [f"{name} at {batch} {measured / trial - 1:+.1%}" for name, batch, trial, measured in grew
            if trial and measured is not None]
    return (" (on the CPU the heap grows for some steps past a trial's two" + (
        f"; in this sweep the measured run's peak RSS against its trial's at the same batch: {', '.join(rose)})"
        if rose else ")"))


def sentences(sweep) -> list:
    """One per workload and recipe: how much each configuration fits, and which trains fastest at its largest batch."""
    out = []
    groups: dict = {}
    unit = _unit(sweep.fit)
    for s in sweep.fit:
        groups.setdefault((s.workload, s.recipe), []).append(s)
    for (workload, recipe), ss in groups.items():
        u = "GPU" if ss[0].device_type == "cuda" else "process"
        fits = [s for s in ss if s.largest is not None]
        parts = [f"{s.name} fits {s.largest}" + (f" (the largest tried; {_gap(s)} not tried: {again(s)})" if s.untried else "")
                 for s in fits if not s.ran_over and not s.capped]
        capped = [f"{s.name} fits {_capped(s, _measured(sweep, s), u)}" for s in fits if not s.ran_over and s.capped]
        said = [_ran_over(sweep, s, unit) for s in ss if s.ran_over]
        text = f"{workload} [{', '.join(recipe)}]: " + "; ".join(
            ([", ".join(parts) + f" a {u}"] if parts else []) + capped + said or ["nothing fits"])
        none = [s.name for s in ss if s.largest is None and not s.overturned and not s.ran_over]
        text += (f"; {', '.join(none)} fit{'s' if len(none) == 1 else ''} not even the smallest batch"
                 if none and (parts or capped or said) else "")
        ran = [(s, c) for s in fits for c in [_measured(sweep, s)] if c is not None and not math.isnan(c.samples_per_s)]
        lost = [(s, c) for s, c in ran if diverged(c)]  # it fit, but its speed there is no training's
        ran = [(s, c) for s, c in ran if not diverged(c)]
        if len(ran) >= 2:
            ran.sort(key=lambda sc: -sc[1].samples_per_s)
            (best, cb), (runner, cr) = ran[0], ran[1]
            text += (f"; at its largest batch {best.name} trains {cb.samples_per_s / cr.samples_per_s:.2f}x faster than "
                     f"{runner.name} ({cb.samples_per_s:.1f} against {cr.samples_per_s:.1f} samples/s)")
        elif len(ran) == 1:
            text += f"; at its largest batch {ran[0][0].name} trains {ran[0][1].samples_per_s:.1f} samples/s"
        text += "".join(f"; at its largest batch {s.name} did not train ({stats.loss_words(c.loss_not_finite, verdict=False)})"
                        for s, c in lost)
        text += "".join(f"; {flat}" for s in fits for flat in [_flat(s)] if flat)
        text += _overturned(ss, unit)
        out.append(text + ".")
    return out


TRIALS = "trials' figures, 1 measured step each"


def _trial_speeds(s) -> str:
    """'64: 262.7; 128: 262.6': each trial's samples/s by batch (a trial's one measured step), '–' where none ran."""
    return "; ".join(f"{b}: {v:.1f}" for b, v in sorted(s.speeds.items())) or "–"


def _flat(s) -> str:
    """Where the largest batch that fits is not faster per sample than smaller ones that fit, by the trials, beyond the
    5% the suite calls a difference: said, with the memory the larger batch costs. The H200 fit's trials ran 262.7
    samples/s at 64 and 262.6 at 128 (3.80 ms a sequence each) and the page recommended 128 as the fastest, 60 GiB
    more for no speed. A trial is one short process, so this never resolves a difference; it only says none showed."""
    fit = {b: s.speeds[b] for b, v, _, _ in s.judged if v == fitting.FITS and b in s.speeds}
    top = fit.get(s.largest) if s.largest is not None else None
    same = []
    for b in sorted((b for b in fit if top is not None and b < s.largest), reverse=True):
        if top > fit[b] and not overhead.under_floor(overhead.throughput_gap(top, fit[b])):
            break   # the largest is faster than this one beyond the floor: the run of alike batches ends above it
        same.append(b)
    if not same:
        return ""
    low = same[-1]
    figures = [f"{fit[b]:.1f}" for b in sorted(same) + [s.largest]]
    flat = all(overhead.under_floor(overhead.throughput_gap(top, fit[b])) for b in same)
    more = (s.peak_at(s.largest) or 0.0) - (s.peak_at(low) or 0.0)
    return (f"{s.name}'s speed per sample is {'flat' if flat else 'no higher'} from {low} to {s.largest} ({TRIALS}: "
            f"{' and '.join([', '.join(figures[:-1]), figures[-1]])} samples/s, "
            + (f"under the suite's {overhead.LEAD_FLOOR:.0%} floor" if flat else "the smaller faster") + "): the larger batch buys no speed here"
            + (f", {size(more)} more memory" if more > 0 else "") + f"; a sweep at --per-device-batch {low} measures it")


def over_budget(sweep) -> set:
    """The config keys of a fit sweep's measured runs that did not fit the budget (their verdict, or where a store
    predates that verdict their peak): no answer of the sweep, so the recommendation passes them over (a fit report
    recommended against FSDP at a batch whose measured run went over the budget)."""
    out = set()
    for s in sweep.fit:
        for b, (v, peak) in s.measured.items():
            if v in fitting.NOT_FITTING or (peak is not None and peak > s.budget_mib):
                out.add(s.bench_keys.get(b))
    return out - {None}


def _largest_cell(s, c) -> str:
    """'12 (the largest tried that fits, by its trial; not measured); 13 not tried (./run_bench.sh fit again bisects
    it)': the H200 fit's '12' beside 'smallest that did not fit: 14' read as a resolved boundary, 13 never tried."""
    if s.largest is None:
        return "none within the budget"
    if s.capped:
        return _capped(s, c)
    notes = [x for x in ("the largest tried that fits" if s.untried else "",
                         "by its trial; not measured" if c is None else "") if x]
    return str(s.largest) + (f" ({', '.join(notes)})" if notes else "") + (f"; {_untried(s)}" if s.untried else "")


def _doubling(start: int, cap: int) -> str:
    """'1, 2, 4, ...' from `start`, at most `cap`: the batches the search doubles through; '8, 16' where it reaches the
    cap at once."""
    seq = [start]
    while seq[-1] < cap and len(seq) < 3:
        seq.append(min(2 * seq[-1], cap))
    return ", ".join(str(b) for b in seq) + (", ..." if seq[-1] < cap else "")


def _search_words(sweep) -> str:
    """How the search ran, from the stored sweep: its first batch and its cap (--per-device-batch, --max-batch on the
    stored command line) and each configuration's batches in the order tried. The H200 fit's page described 'batches
    1, 2, 4, ...' for a search that ran 8, 16, 12, 14, 15 (--per-device-batch 8 --max-batch 16)."""
    row = getattr(sweep, "sweep", None) or {}
    given = fitting.max_batch_of(row.get("command_line") or "")
    cap = given or fitting.MAX_BATCH
    cap_words = f"--max-batch {cap}" if given else f"--max-batch's default, {cap}"
    starts = sorted({s.order[0] for s in sweep.fit if s.order})
    if len(starts) != 1:   # configurations that start apart (BatchNorm's least batch), or a stand-in without order
        start = " from each configuration's first" if starts else ""
        return (f"batches doubling{start} up to {cap_words}, until one did not fit, then bisection between the largest "
                "that fit and the smallest that did not" + _orders(sweep))
    first = starts[0]
    flag = "--per-device-batch " if json.loads(row.get("config_json") or "{}").get("per_device_batch") == first else ""
    return (f"batches {_doubling(first, cap)} (from {flag}{first}, doubling up to {cap_words}) until one did not fit, "
            "then bisection between the largest that fit and the smallest that did not" + _orders(sweep))


def _orders(sweep) -> str:
    tried = [f"{s.name} {', '.join(str(b) for b in s.order)}" for s in sweep.fit if s.order]
    return f" (tried, in order: {'; '.join(tried)})" if tried else ""


def blocks(sweep) -> list:
    if not sweep.fit:
        return []
    rows, unit = [], _unit(sweep.fit)
    for s in sweep.fit:
        c = _measured(sweep, s)
        tokens = c.tokens_per_s_per_device if c is not None and c.tokens_per_sample else math.nan
        measured_peak = held_mib(c) if c is not None else None
        rows.append([s.workload, s.label, _largest_cell(s, c), size(s.peak_at(s.largest)), _why_not(s, unit),
                     size(measured_peak) if c is not None else "; ".join(
                         f"at {b}: {size(p)} (over)" for b, p in s.ran_over) or "–",
                     fmt(c.samples_per_s) if c else "–", mfu_cell(c),
                     fmt(tokens, ".0f") if not math.isnan(tokens) else "–", str(len(s.trials)), _trial_speeds(s)])
    u = "GPU" if sweep.fit[0].device_type == "cuda" else "process"
    how = ("the device level on the fullest GPU, the larger of the steady state's and the level at the end of the "
           "warm-up, net of the suite's "
           "pre-generated batches, as the fastest-within-the-budget table takes it; where no device level was recorded, "
           "the allocator's peak reserved; an out-of-memory error does not fit"
           if u == "GPU" else "the peak RSS of the processes one node runs, summed, since they share its RAM, as the "
                              "fastest-within-the-budget table takes it")
    per_node = "" if u == "GPU" else " (per node)"   # on CPU the processes' peaks summed, not the batch's process
    b = [("h", 2, "The largest batch that fits"),
         ("p", f"Per configuration, the largest per-device batch whose measured peak stayed within "
               f"{size(sweep.fit[0].budget_mib)} per {'GPU' if u == 'GPU' else 'node'} ({how}): {_search_words(sweep)}, each trial a warm-up step and a measured one in fresh processes; then each measured as a sweep "
               "measures it, at its own largest batch; where that measured run passed the budget, the batch did not fit, "
               "and the next smaller one was measured."),
         ("table", ["workload", "configuration", f"largest tried that fits, per {u}", "its peak in the trial" + per_node,
                    "smallest that did not fit", "peak in the measured run" + per_node, "samples/s at the largest",
                    "MFU at the largest", f"tokens/s per {u}", "trials", f"samples/s by batch ({TRIALS})"], rows)]
    b += [("p", t) for t in sentences(sweep)]
    before = [f"{s.name} at {', '.join(str(x) for x in s.restated)}" for s in sweep.fit if s.restated]
    if before:
        older = ("the allocator's peak reserved, without the CUDA context and NCCL's buffers" if u == "GPU"
                 else "the largest rank's peak RSS alone, not the node's processes summed")
        b.append(("p", f"Stored as fitting, but over the budget by today's figure: {'; '.join(before)}. These verdicts "
                       f"were judged when they ran by an older figure ({older}); by today's rule they do not fit, and "
                       "this page counts them as over the budget throughout."))
    errors = [(s, t) for s in sweep.fit for t in s.errors]
    if errors:
        b.append(("p", "Trials that failed for another reason than memory (their search stopped there): "
                       + "; ".join(f"{s.label} at batch {t[0]}: {t[3].splitlines()[0][:200] if t[3] else 'no reason'}"
                                   for s, t in errors) + "."))
    return b
