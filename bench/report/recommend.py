"""The report's first screen: per workload and precision, what to run and why, each claim pointing to
the table or plot behind it.

    blocks(sweep, figures) -> report blocks: a heading, a summary table (one row per workload and precision), one
                     small figure per workload, then one short paragraph per workload and precision with the claims
    choose(configs)  -> (recommended, fastest, tie): the configuration to run, and why when it is not the fastest

For each: the recommended configuration (its one name, bench.analysis.results.label) and its efficiency: the fastest,
unless a simpler one is within the noise of it (`choose`: fewer devices; at equal devices single, then DDP, then FSDP
and the rest, DataParallel only where it is strictly faster, by a lead the noise resolves; then fewer settings
changed); in a fit sweep only among measured runs within the budget; what DataParallel would cost at that count;
where scaling stops paying (the first count whose efficiency falls below EFFICIENCY_FLOOR); what bounds its step,
with the evidence (bench.report.bound); FSDP's memory and speed beside DDP's, like for like (the same count, batch and
recipe; in a fit sweep fit's own sentence); and the runner-up, told apart or not by the noise, which the report
names with its source (`apart`: bench.stats.pair_noise, never a figure of another device). An efficiency above
100% is shown by bench.stats.shown_efficiency's rule.
"""
from __future__ import annotations

import math

from bench import stats
from bench.forecast.batches import per_device as per_device_batch
from bench.forecast.overhead import DISJOINT, own_baseline
from bench.report import cpu_notes, training_state
from bench.report import traces as trace_report
from bench.report import utilisation as utilisation_report
from bench.report.fit import over_budget
from bench.report.frontier import names, peak_mib, peak_source
from bench.report.bound import bound
from bench.report.choice import (LEAD_FLOOR, _label, _margin_note, _noise_words, _tie_sentence, apart, by_floor,
                                  choose, floor_words, instability, lead_words, model_words, models, noise_blocks,
                                  steps_clause, unresolved,
                                  unresolved_cell, unstable_sentence)
from bench.report.plots import where
from bench.shared import rehearsal
from bench.analysis.results import Sweep, diverged

EFFICIENCY_FLOOR = 0.75      # scaling "stops paying" below 75% efficiency
SINGULAR = {"GPUs": "GPU", "processes": "process"}


def _efficiency_words(c, with_baseline: bool = True) -> str:
    """'87% scaling efficiency against single device x1'; above 100% with why (stats.shown_efficiency)."""
    e = stats.shown_efficiency(c.efficiency, c.efficiency_noise, c.device_count)
    return (f"{e.shown:.0%} {'scaling ' if with_baseline else ''}efficiency" + (f" against {c.baseline}" if with_baseline else "")
            + (f" ({e.note})" if e.note else ""))


def tokens_clause(c) -> str:
    """' (19488 tokens/s, 9744 per process)' after a language model's samples/s (its configurations table's figures:
    samples/s x the sequence length, and that over its devices), '' for any other workload: the first screen gave
    'Fastest: single device x1, 609.0 samples/s' alone, where LM users compare tokens/s per device."""
    if not c.tokens_per_sample:
        return ""
    per = SINGULAR["GPUs" if c.device_type == "cuda" else "processes"]
    return f" ({c.tokens_per_s:.0f} tokens/s, {c.tokens_per_s_per_device:.0f} per {per})"


def _straggler_sentence(cs: list, best, workload: str, name=_label):
    """The straggler --profile's traces found, preferring the recommended configuration's; None without one."""
    for c in sorted(cs, key=lambda c: c is not best):
        s = trace_report.straggler(c)
        if s:
            return (f"Straggler in {name(c)}, rank {s[0]}: {trace_report.wait_words(c)} "
                    f"(table: {workload}: profiler traces).")
    return None


def candidates(sweep: Sweep, configs: list, precision: str) -> list:
    """The configurations the recommendation chooses among at one precision: measured, training (loss finite), and in
    a fit sweep within the budget in their measured run. The overview's star and the configurations table's mark
    should choose among these too (`recommended`), so that they mark what the summary names."""
    over = over_budget(sweep)
    return [c for c in configs if c.precision == precision and not math.isnan(c.samples_per_s) and not diverged(c)
            and c.key not in over]


def chosen(sweep: Sweep, configs: list, name=_label) -> list:
    """[(recommended, fastest, tie)] of each precision (and model: `models`) that has candidates: the summary's rule
    (`candidates`, `choose`), which the overview's marks and the export's recommendation columns read rather than
    choosing again."""
    return [choose(cs, name) for cs in (candidates(sweep, group, p) for p, group in models(configs)) if cs]


def recommended(sweep: Sweep, configs: list, precision: str):
    """The configuration the summary recommends at one precision, None where there is none."""
    cs = candidates(sweep, configs, precision)
    return choose(cs)[0] if cs else None


def sentences(sweep: Sweep, workload: str, configs: list, precision: str) -> list:
    """The answer for one workload at one precision, as sentences."""
    return answer(sweep, workload, configs, precision)[1]


def answer(sweep: Sweep, workload: str, configs: list, precision: str) -> tuple:
    """(summary row, sentences) for one workload at one precision; (None, []) when nothing was measured."""
    name = names(configs, bool(sweep.fit))   # with its batch where one label ran at several, and in a fit sweep
    cs = [c for c in configs if c.precision == precision and not math.isnan(c.samples_per_s)]
    not_training = [c for c in cs if diverged(c)]  # timed, but not training: its speed is no verdict
    too_big = [c for c in cs if c.key in over_budget(sweep) and not diverged(c)]  # a fit's measured run over the budget
    cs = candidates(sweep, configs, precision)
    if not cs and too_big:   # a fit whose every measured run passed the budget: nothing to recommend, said so
        return ([workload, precision, "nothing fits the budget"] + ["–"] * (len(SUMMARY_HEADERS) - 3),
                ["Nothing to recommend within the memory budget: every measured run went over it ("
                 + ", ".join(name(c) for c in too_big) + "; see the largest batch that fits)."])
    if not cs:
        return None, []
    u = "GPUs" if cs[0].device_type == "cuda" else "processes"
    best, fastest, tie = choose(cs, name)
    many, open_pick = best.device_count > 1, unresolved(best, tie)
    out = [f"{'Fastest' if tie is None else 'Not resolved' if open_pick else 'Recommended'}: {name(best)}, "
           f"{best.samples_per_s:.1f} samples/s{tokens_clause(best)}" + (f", {_efficiency_words(best)}" if many and not math.isnan(best.efficiency) else "")
           + utilisation_report.clause(best) + (f", or {name(fastest)}, {fastest.samples_per_s:.1f} samples/s{tokens_clause(fastest)}"
                                                + utilisation_report.clause(fastest) if open_pick else "")
           + f" {where(workload, 'throughput')}."]
    shaky = [] if open_pick else instability(best)   # an open pick's cell and sentence say it already
    if shaky:
        out.append(unstable_sentence(best, shaky, workload, name))
    rehearsed = _rehearsal_sentence(cs)
    if rehearsed:
        out.append(rehearsed)
    alone = _unwrapped_missing(best)
    if alone:
        out.append("It is chosen among the strategies swept: no single device x1 with its settings ran in this sweep "
                   "to hold it against, and at one device a wrapper has nothing to spread (add single to --strategies "
                   "to measure one).")
    if tie is not None:
        out.append(_tie_sentence(best, fastest, tie, name))
    if not_training:
        out.append("Left out of the recommendation, timed but not training: " + "; ".join(
            f"{name(c)} ({stats.loss_words(c.loss_not_finite, verdict=False)})" for c in not_training) + ".")
    if too_big:
        out.append("Left out of the recommendation, over the memory budget in their measured run: "
                   + ", ".join(name(c) for c in too_big) + " (see the largest batch that fits).")
    multi = [c for c in cs if c.device_count > 1]
    if not many and multi:
        m = max(multi, key=lambda c: c.samples_per_s)
        out.append(f"Using more devices does not pay here: the best on several, {name(m)}, reaches {m.samples_per_s:.1f} "
                   f"samples/s ({_efficiency_words(m, with_baseline=False)}).")
    rivals = sorted((c for c in cs if c is not best), key=lambda c: -c.samples_per_s)
    lead = _runner_up(best, rivals[0], name) if rivals and tie is None else None
    if lead:
        out.append(lead[1])
    odd = training_state.unexplained_lead(best, cs)   # HSDP at one shard group ahead of FSDP: not the strategy's doing
    if odd:
        out.append(odd[0].upper() + odd[1:] + ".")
    dp_cost = "–"
    dp = [c for c in cs if c.strategy == "dp" and c.device_count == best.device_count]
    if best.strategy != "dp" and best.device_count > 1:
        if dp:
            d = max(dp, key=lambda c: c.samples_per_s)
            dp_cost = f"{best.samples_per_s / d.samples_per_s:.2f}x slower"
            out.append(f"DataParallel on {best.device_count} {u} would give {d.samples_per_s:.1f} samples/s: "
                       f"{dp_cost} {where(workload, 'efficiency')}.")
        elif any(r["strategy"] == "dp" and r["device_count"] == best.device_count and r["workload"] == workload
                 for r in sweep.problems):
            dp_cost = "did not run"
            out.append(f"DataParallel did not run on {best.device_count} {u} (see the skipped configurations).")
        else:  # not asked for (on CPU left out by default: the CPU notes under the verdicts say why)
            dp_cost = "left out on CPU" if cpu_notes.dp_left_out(sweep) else "not in this sweep"
    series = sorted((c for c in cs if c.series == best.series and not math.isnan(c.efficiency)), key=lambda c: c.device_count)
    below = [c for c in series if c.device_count > 1 and c.efficiency < EFFICIENCY_FLOOR]
    paying = [c.device_count for c in series if 1 < c.device_count < (below[0].device_count if below else math.inf)]
    scaling = str(paying[-1] if paying else 1) if any(c.device_count > 1 for c in series) or (not many and multi) else "–"
    if below and not paying:   # '1' read as a count that scales; no count past one reaches the floor
        scaling = f"none ({below[0].efficiency:.0%} at {below[0].device_count})"
    if below:
        last_good = [c.device_count for c in series if c.device_count < below[0].device_count]
        past = last_good[-1] if last_good else 1
        if best.device_count >= below[0].device_count and best.device_count > 1 and not math.isnan(best.speedup):
            out.append(_past_floor_sentence(best, below[0], past, u, name) + f" {where(workload, 'efficiency')}.")
        else:
            out.append(f"Scaling stops paying past {past} {u if past > 1 else SINGULAR[u]}: at {below[0].device_count} "
                       f"efficiency is {below[0].efficiency:.0%}, below {EFFICIENCY_FLOOR:.0%} "
                       f"{where(workload, 'efficiency')}.")
    elif len(series) > 1:
        out.append(f"Efficiency stays at or above {EFFICIENCY_FLOOR:.0%} up to {series[-1].device_count} {u} "
                   f"{where(workload, 'efficiency')}.")
    kind, why = bound(sweep, workload, best)
    out.append(f"For {name(best)}: {why}" if open_pick else why)   # of which candidate, where neither is the answer
    if utilisation_report.throttled_sentence(best):
        out.append(utilisation_report.throttled_sentence(best))
    lagging = _straggler_sentence(cs, best, workload, name)
    if lagging and not kind.startswith("straggler"):
        out.append(lagging)
    beside, qualified = _fsdp_beside_ddp(sweep, cs, best, u, name)
    if beside:
        out.append(beside if sweep.fit else f"{beside} {where(workload, 'memory')}.")
    if qualified:
        out.append(qualified)
    eff = stats.shown_efficiency(best.efficiency, best.efficiency_noise, best.device_count).text() if many and not math.isnan(best.efficiency) else "–"
    if tie is not None:
        margin = (f"{'tie: ' if tie.within else ''}{name(fastest)} {tie.gap:.0%} faster ({_margin_note(tie)})")
    else:
        margin = "–" if lead is None else f"{lead[0].gap:.0%} ({_margin_note(lead[0])})"
    unstable_cell = f" (unstable: {'; '.join(short for short, _ in shaky)})" if shaky else ""
    row = [workload, precision, name(best), f"{best.samples_per_s:.1f}{tokens_clause(best)}{unstable_cell}",
           eff, dp_cost, scaling, kind, margin, best.utilisation.mfu_cell() if best.utilisation else "–"]
    notes = ([alone] if alone else []) + _row_notes(best, cs)
    if notes:
        row[2] = f"{name(best)} ({'; '.join(notes)})"
    if open_pick:   # no answer yet: no figure of either stands for the row
        row = [workload, precision, unresolved_cell(best, fastest, name)] + ["–"] * 5 + [margin, "–"]
    return row, out


def _past_floor_sentence(best, first_below, past: int, u: str, name) -> str:
    """'DDP x2 gives 1.44x the throughput of single device x1 for 2x the processes: 72% efficiency, under the 75%
    this report calls scaling that pays', without the closing pointer: where the pick sits at or past the
    first count below EFFICIENCY_FLOOR. A CPU sweep read 'Scaling stops paying past 1 process: ... DDP x2 is
    recommended as the fastest all the same', one sentence saying both."""
    floor = f"the {EFFICIENCY_FLOOR:.0%} this report calls scaling that pays"
    if best.efficiency < EFFICIENCY_FLOOR:
        note = f"{best.efficiency:.0%} efficiency, under {floor}"
    else:   # a dip before it: the pick itself is back above the floor
        note = (f"{best.efficiency:.0%} efficiency, where {first_below.device_count} {u} reached "
                f"{first_below.efficiency:.0%}, under {floor}")
    if past > 1:
        note += f"; at or above it up to {past} {u}"
    return f"{name(best)} gives {best.speedup:.2f}x the throughput of {best.baseline} for {best.device_count}x the {u}: {note}"


REHEARSAL_NOTE = "a rehearsal: not scaling figures and not a recommendation for a real multi-GPU run"


def _rehearsal_sentence(cs: list) -> str:
    """Where any candidate is a rehearsal (ranks sharing one GPU over gloo, bench.shared.rehearsal), what its figures are
    not: the H200 rehearsal recommended HSDP x2 at 2.44x FSDP x2's throughput on one GPU, as if for a multi-GPU run."""
    shared = [c for c in cs if rehearsal.shares(c.options)]
    if not shared:
        return ""
    return ("This is a rehearsal (ranks sharing one GPU over gloo, which copies every collective through the host): its "
            "figures are not scaling figures, and what it ranks first is no recommendation for a real multi-GPU run.")


def _row_notes(best, cs: list) -> list:
    """The recommended cell's qualifiers: a rehearsal's pick (`REHEARSAL_NOTE`), and HSDP at one shard group ahead of
    its FSDP twin by a lead the strategy does not explain (training_state.unexplained_twin)."""
    notes = [REHEARSAL_NOTE] if rehearsal.shares(best.options) else []
    if training_state.unexplained_twin(best, cs) is not None:
        notes.append("its lead over FSDP unexplained by the strategy: --repeats 3")
    return notes


def _unwrapped_missing(best) -> str:
    """Where the pick is a one-device wrapper held against itself (no single device x1 of its settings ran), what it
    was chosen among, else '': an H200 sweep recommended FSDP x1 [bf16, adamw] with no single device x1 beside it,
    where on an H100 single device x1 of the same model stepped 46% faster than FSDP x1."""
    if best.device_count == 1 and best.strategy != "single" and own_baseline(best):
        return "among the strategies swept; no single device x1 with its settings in this sweep to hold it against"
    return ""


def _recipe(c) -> tuple:
    """What FSDP is held against DDP at: the same count, batch per device and training recipe (precision, optimizer,
    activation checkpointing, format, compilation, aux); each strategy's own settings are how to run it."""
    return (c.device_count, per_device_batch(c), c.precision, c.optimizer, c.activation_checkpointing, c.channels_last,
            c.compiled, c.aux)


def _fsdp_beside_ddp(sweep: Sweep, cs: list, best, u: str, name) -> tuple:
    """('FSDP holds 41% less memory per GPU and is 7% slower than DDP at 2 GPUs', what qualifies it): like for like
    (`_recipe`), at the largest count with such a pair, the recommended configuration's recipe first, else the one with
    the fastest DDP; (None, None) where no pair is alike (a fit report set FSDP at batch 4, over the budget, against DDP
    at batch 3, and read '19% slower' beside fit's own '1.48x'). A fit sweep compares each at its own largest batch:
    that sentence is fit's. The qualifier: a speed gap the noise does not resolve, flagged as the lead column flags it
    (an H100 page read '39% slower' flatly between two unstable processes); which memory figure (`_memory_figure`);
    at one device that sharding cannot show (DDP's 6% more there is its buckets)."""
    if sweep.fit:
        return ("FSDP beside DDP: in the largest batch that fits below, each at its own largest batch."
                if any(c.strategy == "fsdp" for c in cs) and any(c.strategy == "ddp" for c in cs) else None), None
    pairs = {}
    for c in cs:
        if c.strategy in ("fsdp", "ddp"):
            pairs.setdefault(_recipe(c), {}).setdefault(c.strategy, []).append(c)
    alike = [(r, p) for r, p in pairs.items() if len(p) == 2]
    if not alike:
        return None, None
    r, p = max(alike, key=lambda rp: (rp[0][0], rp[0] == _recipe(best), max(c.samples_per_s for c in rp[1]["ddp"])))
    f, d = (max(p[k], key=lambda c: c.samples_per_s) for k in ("fsdp", "ddp"))
    word, n = ("GPU" if u == "GPUs" else "process"), r[0]
    fm, dm, figure = _memory_figure(f, d)
    word = "rank" if figure.startswith(SHARED_FIGURE) else word
    mem = ("memory not recorded" if not (fm and dm) else
           f"holds as much memory per {word} (less than 1% apart)" if abs(fm / dm - 1) < 0.005 else
           f"holds {1 - fm / dm:.0%} less memory per {word}" if fm < dm else f"holds {fm / dm - 1:.0%} more memory per {word}")
    them, other = "FSDP", f"DDP at {n} {u if n > 1 else SINGULAR[u]}"
    both = [c for c in cs if c.strategy in ("fsdp", "ddp")]
    held = ([f"[{f.variant}]"] if len({c.variant for c in both}) > 1 else []) + (
        [f"batch {r[1]} per {word}"] if len({per_device_batch(c) for c in both}) > 1 else [])
    if f.variant != d.variant:   # each with its own settings: both named in full
        them, other = name(f), name(d)
    elif held:                   # one of several recipes or batches: which one
        other += f" (both {', '.join(held)})"
    speed = f.samples_per_s / d.samples_per_s
    fast = (f"as fast as {other} (less than 1% apart)" if abs(1 - speed) < 0.005
            else f"{abs(1 - speed):.0%} {'slower' if speed < 1 else 'faster'} than {other}")
    told = apart(*sorted((f, d), key=lambda c: -c.samples_per_s), name)
    verdict = (f"not resolved: one unstable process, and {DISJOINT}" if told.disjoint else _margin_note(told))
    flag = (f"{them}'s {abs(1 - speed):.0%} against {'DDP' if them == 'FSDP' else name(d)} is {verdict}. "
            if told.within is None and abs(1 - speed) >= 0.005 else "")   # as the lead column flags such a pair
    one = (f"; at 1 {word} FSDP has nothing to shard across, so its sharding shows only at 2 or more "
           f"{'ranks' if word == 'rank' else u}" if n == 1 else "")
    return f"{them} {mem} and is {fast}", f"{flag}Memory there: {figure}{one}."


SHARED_FIGURE = "the peak allocated per rank"


def _memory_figure(f, d) -> tuple:
    """(FSDP's MiB, DDP's MiB, which figure): the memory budget table's (on CUDA the device level), but where the
    ranks share one GPU (a rehearsal) the allocator's peak per rank, since that GPU's device level counts every rank's
    CUDA context: an H100 rehearsal read 'FSDP holds 29% more memory per GPU' (2582 against 2000 MiB) beside 117
    against 163 MiB allocated and 60% less training state."""
    if rehearsal.shares(f.options) or rehearsal.shares(d.options):
        fm, dm = (max(c.memory_mib.values()) if c.memory_mib else None for c in (f, d))
        return fm, dm, (f"{SHARED_FIGURE}, since the ranks share one GPU, whose device level counts every rank's "
                        f"CUDA context")
    src = {peak_source(f), peak_source(d)}
    what = FIGURE_WORDS.get(src.pop(), "") if len(src) == 1 else ""
    return peak_mib(f), peak_mib(d), (f"{what}, the memory budget's figure" if what
                                      else f"FSDP's {peak_source(f)} against DDP's {peak_source(d)}")


FIGURE_WORDS = {"device level": "the device level", "reserved": "the allocator's peak reserved", "RSS": "the peak RSS"}


SUMMARY_HEADERS = ["workload", "precision", "recommended", "samples/s", "efficiency", "DataParallel there",
                   f"efficiency ≥ {EFFICIENCY_FLOOR:.0%} up to", "bound", "lead over runner-up", "MFU"]


def _runner_up(best, second, name=_label) -> tuple:
    """(Apart, sentence): whether the recommended (and fastest) configuration is told apart from the runner-up, and the
    noise that says so with its source; the lead in the summary's lead column's words (choice.lead_words)."""
    a = apart(best, second, name)
    head, lead = f"The lead over the runner-up, {name(second)}, is", lead_words(a)
    if a.within is None:
        held = a.why if a.why else f"the noise between processes is {a.noise.words()}"
        rerun = "" if a.disjoint else "; rerun with --repeats 3 to tell them apart"   # the disjoint words say it
        return a, f"{head} {lead}: not told apart, {held}{rerun}."
    if a.within and by_floor(a):   # where the median steps do not show the gap: not resolved, as the wrapper cell says
        return a, f"{head} only {lead}{steps_clause(a) or ':'} {floor_words()} (the noise: {_noise_words(a)})."
    if a.within:
        return a, f"{head} only {lead}: within {_noise_words(a)}."
    return a, f"{head} {lead}: beyond the noise, {a.noise.words()}."


def blocks(sweep: Sweep, figures: list = ()) -> list:
    """The heading, the summary table, `figures` ((path, alt) per workload: drawn right under the table, before any
    prose), one paragraph per workload and precision, then a CPU sweep's own notes and the table's rule (`rule_words`):
    the verdicts first. The rule's ~255 words sat between the table and the verdicts, pushing them off a first screen."""
    out: list = [("h", 2, "Recommendation")]
    if not sweep.bench:
        return out + [("p", "No configuration produced a measurement; see the failed configurations below.")]
    rows, paragraphs = [], []
    for workload, configs in sweep.bench.items():
        for precision, group in models(configs):
            row, text = answer(sweep, workload, group, precision)
            if text:
                row[1] = model_words(precision, group, configs)
                rows.append(row)
                paragraphs.append(("p", f"{workload}, {row[1]}: " + " ".join(text)))
    cpu = ((cpu_notes.DP_LEFT_OUT if cpu_notes.dp_left_out(sweep) else "") + cpu_notes.device_note(sweep)).strip()
    notes = [("p", cpu)] if cpu else []
    shown = [("imgs", list(figures))] if figures else []
    return out + ([("table", SUMMARY_HEADERS, rows), *shown, *paragraphs, *noise_blocks(sweep), *notes,
                   ("p", rule_words())] if rows else [])


def rule_words() -> str:
    """The summary table's columns and the rule that picks its recommended cell (choice.choose), under the verdicts."""
    return ("One row per workload and precision (and model, where DeepLabV3's auxiliary head took several values: "
            "each trains another model): the recommended configuration, the one with the most samples per "
            "second unless a simpler one is within the noise of it (fewer devices first; at equal devices single "
            "device, then DDP, then FSDP and the rest, DataParallel only where it is strictly faster; 'not resolved: "
            "--repeats 3' and both where it stands only on a faster one's unresolved lead and ran one unstable "
            "process itself; a wrapper at one device without single device x1 beside it, chosen among the "
            "strategies swept, says so), 'unstable' beside its samples/s where its steps or its processes spread "
            f"more than {stats.UNSTABLE_IQR_FRACTION:.0%}; its scaling efficiency; how much slower DataParallel ran "
            f"at that count; the largest count whose efficiency stays at or above {EFFICIENCY_FLOOR:.0%}; what bounds "
            "its step; and its lead over the next fastest (faster / slower - 1), 'within noise' where that cannot be "
            f"told from process-to-process variation, 'under the {LEAD_FLOOR:.0%} floor' where it is beyond the noise "
            f"but smaller than the {LEAD_FLOOR:.0%} the suite calls a difference (or the noise is not measured), 'not "
            "resolved' where that variation is not measured on this device, with the noise figure and where it came "
            "from (the configurations' own repeats, this sweep's repeated configuration, the same store's earlier "
            "sweep of that workload, or selfcheck's figure for this host, another workload's named with it; the "
            "lines under the verdicts give each precision's, and each workload's where the sweep ran several); and its "
            "model FLOPs utilisation (MFU: achieved FLOP/s against the device's dense peak, where "
            "the peak is known). Each claim above names the table or plot behind it.")
