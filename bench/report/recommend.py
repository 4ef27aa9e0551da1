"""The report's first screen: per workload and precision, what to run and why, each claim pointing to
the table or plot behind it.

    blocks(sweep, figures) -> report blocks: a heading, a summary table (one row per workload and precision), one
                     small figure per workload, then one short paragraph per workload and precision with the claims
    choose(configs)  -> (recommended, fastest, tie): the configuration to run, and why when it is not the fastest

For each: the recommended configuration (strategy, settings, device count) and its efficiency: the fastest, unless
a simpler one is within the noise of it (`choose`: fewer devices; at equal devices single, then DDP, then FSDP and
the rest, DataParallel only where it is strictly faster; then fewer settings changed); what DataParallel would
cost at that count; where scaling stops paying (the first count whose efficiency falls below EFFICIENCY_FLOOR);
whether the run was data-bound (the loader alone barely keeps up, or steps wait for data), held back by a straggler
(--profile's traces: the other ranks wait for one) or communication-bound (exposed communication is a large share
of the step); FSDP's memory and speed beside DDP's; and a warning when the winner is within the noise of the
runner-up. An efficiency above 100% is shown by bench.stats.shown_efficiency's rule.
"""
from __future__ import annotations

import math

from bench import stats
from bench.report import traces as trace_report
from bench.report.plots import file_name
from bench.analysis.results import STRATEGY_NAMES, Sweep

EFFICIENCY_FLOOR = 0.75      # scaling "stops paying" below 75% efficiency
DATA_BOUND_LOADER = 1.1      # the loader alone delivers less than 1.1x the training throughput
DATA_BOUND_WAIT = 0.10       # or steps wait for data more than 10% of the time
COMM_BOUND = 0.20            # exposed communication above 20% of the step
SINGULAR = {"GPUs": "GPU", "processes": "process"}


def _name(s: str) -> str:
    return STRATEGY_NAMES.get(s, s)


def _settings(c) -> str:
    extra = [f"{k}={v}" for k, v in sorted(c.options.items())]
    extra += (["channels_last"] if c.channels_last else []) + (["torch.compile"] if c.compiled else [])
    return f" with {', '.join(extra)}" if extra else ""


def _where(workload: str, what: str) -> str:
    return f"(table: {workload}: all configurations; plot: {file_name(workload, what)})"


SIMPLER = ("single", "ddp", "fsdp")   # at equal device counts a tie goes to the first; other strategies next, DataParallel last


def _simplicity(c) -> tuple:
    """Sort key, simplest first: fewer devices; then single, DDP, FSDP, the rest, DataParallel; then fewer settings."""
    order = SIMPLER.index(c.strategy) if c.strategy in SIMPLER else len(SIMPLER) + (c.strategy == "dp")
    return c.device_count, order, len(c.options) + c.channels_last + c.compiled


def _apart(faster, slower) -> tuple:
    """(gap, within the noise?, noise bound, repeated on both sides?): whether `faster` is told apart from `slower`, by
    the measured spread between repeats where both ran in several processes, else the process-to-process bound that
    `compare` states (stats.noise_bound). A gap under 5% is never a lead: let simplicity decide."""
    gap = faster.samples_per_s / slower.samples_per_s - 1
    bound = stats.noise_bound(faster.process_sps, slower.process_sps)
    repeated = not any(math.isnan(c.repeat_spread) for c in (faster, slower))
    return gap, gap < max(0.05, bound), bound, repeated


def choose(cs: list) -> tuple:
    """(recommended, fastest, tie) among measured configurations: the fastest, unless others are within the noise of it;
    then the simplest of them (`_simplicity`). tie: `_apart(fastest, recommended)` where they differ, else None."""
    fastest = max(cs, key=lambda c: c.samples_per_s)
    tied = [c for c in cs if c is fastest or _apart(fastest, c)[1]]
    pick = min(tied, key=lambda c: (_simplicity(c), -c.samples_per_s))
    return pick, fastest, (None if pick is fastest else _apart(fastest, pick))


def _noise_words(gap: float, bound: float, repeated: bool, n: int) -> str:
    if gap >= bound:
        return f"the {bound:.0%} measured between processes; {gap:.0%} is beyond it but under the 5% this report calls a lead"
    if repeated:
        return f"the {bound:.0%} spread between their {n} processes each"
    return (f"the {bound:.0%} that fresh processes of the same code can differ (a single process on at least one side); "
            "rerun with --repeats 5 to separate them")


def _why_simpler(pick, fastest) -> str:
    if pick.device_count < fastest.device_count:
        return "it needs fewer devices"
    if pick.strategy != fastest.strategy:
        return "the simpler strategy" + (" (DataParallel is recommended only where it is strictly faster)"
                                          if fastest.strategy == "dp" else "")
    return "fewer settings changed from the defaults"


def _tie_sentence(pick, fastest, tie: tuple) -> str:
    gap, _, bound, repeated = tie
    n = min(len(pick.process_sps), len(fastest.process_sps))
    faster = "as fast (less than 1% apart)" if gap < 0.005 else f"{gap:.0%} faster"
    return (f"{fastest.label} [{fastest.variant}] is {faster}, within the noise: {pick.label} is recommended, "
            f"{_why_simpler(pick, fastest)}. The noise: {_noise_words(gap, bound, repeated, n)}.")


def _efficiency_words(c, with_baseline: bool = True) -> str:
    """'87% scaling efficiency against single device x1'; above 100% with why (stats.shown_efficiency)."""
    e = stats.shown_efficiency(c.efficiency, c.efficiency_noise, c.device_count)
    return (f"{e.shown:.0%} {'scaling ' if with_baseline else ''}efficiency" + (f" against {c.baseline}" if with_baseline else "")
            + (f" ({e.note})" if e.note else ""))


def _straggler_sentence(cs: list, best, workload: str):
    """The straggler --profile's traces found, preferring the recommended configuration's; None without one."""
    for c in sorted(cs, key=lambda c: c is not best):
        s = trace_report.straggler(c)
        if s:
            return (f"Straggler in {c.label} [{c.variant}], rank {s[0]}: {trace_report.wait_words(c)} "
                    f"(table: {workload}: profiler traces).")
    return None


def sentences(sweep: Sweep, workload: str, configs: list, precision: str) -> list:
    """The answer for one workload at one precision, as sentences."""
    return answer(sweep, workload, configs, precision)[1]


def answer(sweep: Sweep, workload: str, configs: list, precision: str) -> tuple:
    """(summary row, sentences) for one workload at one precision; (None, []) when nothing was measured."""
    cs = [c for c in configs if c.precision == precision and not math.isnan(c.samples_per_s)]
    if not cs:
        return None, []
    u = "GPUs" if cs[0].device_type == "cuda" else "processes"
    best, fastest, tie = choose(cs)
    many = best.device_count > 1
    out = [f"{'Fastest' if tie is None else 'Recommended'}: {_name(best.strategy)}{_settings(best)} on {best.device_count} "
           f"{u if many else SINGULAR[u]}, {best.samples_per_s:.1f} samples/s"
           + (f", {_efficiency_words(best)}" if many and not math.isnan(best.efficiency) else "")
           + f" {_where(workload, 'throughput')}."]
    if tie is not None:
        out.append(_tie_sentence(best, fastest, tie))
    multi = [c for c in cs if c.device_count > 1]
    if not many and multi:
        m = max(multi, key=lambda c: c.samples_per_s)
        out.append(f"Using more devices does not pay here: the best on several, {m.label}, reaches {m.samples_per_s:.1f} "
                   f"samples/s ({_efficiency_words(m, with_baseline=False)}).")
    rivals = sorted((c for c in cs if c is not best), key=lambda c: -c.samples_per_s)
    lead = _runner_up(best, rivals[0]) if rivals and tie is None else None
    if lead and lead[2]:
        out.append(lead[2])
    dp_cost = "–"
    dp = [c for c in cs if c.strategy == "dp" and c.device_count == best.device_count]
    if best.strategy != "dp" and best.device_count > 1:
        if dp:
            d = max(dp, key=lambda c: c.samples_per_s)
            dp_cost = f"{best.samples_per_s / d.samples_per_s:.2f}x slower"
            out.append(f"DataParallel on {best.device_count} {u} would give {d.samples_per_s:.1f} samples/s: "
                       f"{dp_cost} {_where(workload, 'efficiency')}.")
        else:
            dp_cost = "did not run"
            out.append(f"DataParallel did not run on {best.device_count} {u} (see the skipped configurations).")
    series = sorted((c for c in cs if c.series == best.series and not math.isnan(c.efficiency)), key=lambda c: c.device_count)
    below = [c for c in series if c.device_count > 1 and c.efficiency < EFFICIENCY_FLOOR]
    paying = [c.device_count for c in series if 1 < c.device_count < (below[0].device_count if below else math.inf)]
    scaling = str(paying[-1] if paying else 1) if any(c.device_count > 1 for c in series) or (not many and multi) else "–"
    if below:
        last_good = [c.device_count for c in series if c.device_count < below[0].device_count]
        past = last_good[-1] if last_good else 1
        out.append(f"Scaling stops paying past {past} {u if past > 1 else SINGULAR[u]}: at {below[0].device_count} "
                   f"efficiency is {below[0].efficiency:.0%}, below {EFFICIENCY_FLOOR:.0%} {_where(workload, 'efficiency')}.")
    elif len(series) > 1:
        out.append(f"Efficiency stays at or above {EFFICIENCY_FLOOR:.0%} up to {series[-1].device_count} {u} "
                   f"{_where(workload, 'efficiency')}.")
    kind, why = _bound(sweep, workload, best, u)
    out.append(why)
    lagging = _straggler_sentence(cs, best, workload)
    if lagging and not kind.startswith("straggler"):
        out.append(lagging)
    fsdp = [c for c in cs if c.strategy == "fsdp"]
    ddp = [c for c in cs if c.strategy == "ddp"]
    if fsdp and ddp:
        n = max({c.device_count for c in fsdp} & {c.device_count for c in ddp}, default=None)
        if n:
            f = max((c for c in fsdp if c.device_count == n), key=lambda c: c.samples_per_s)
            d = max((c for c in ddp if c.device_count == n), key=lambda c: c.samples_per_s)
            fm, dm = _peak(f), _peak(d)
            mem = (f"holds {1 - fm / dm:.0%} less memory per {'GPU' if u == 'GPUs' else 'process'}" if fm < dm
                   else f"holds {fm / dm - 1:.0%} more memory per {'GPU' if u == 'GPUs' else 'process'}") if fm and dm else "memory not recorded"
            speed = f.samples_per_s / d.samples_per_s
            out.append(f"FSDP {mem} and is {abs(1 - speed):.0%} {'slower' if speed < 1 else 'faster'} than DDP at {n} {u} "
                       f"{_where(workload, 'memory')}.")
    eff = stats.shown_efficiency(best.efficiency, best.efficiency_noise, best.device_count).text() if many and not math.isnan(best.efficiency) else "–"
    if tie is not None:
        margin = f"tie: {fastest.label} {tie[0]:.0%} faster (within noise)"
    else:
        margin = "–" if lead is None else f"{lead[0]:.0%}" + (" (within noise)" if lead[1] else "")
    row = [workload, precision, f"{_name(best.strategy)}{_settings(best)} x{best.device_count}", f"{best.samples_per_s:.1f}",
           eff, dp_cost, scaling, kind, margin]
    return row, out


SUMMARY_HEADERS = ["workload", "precision", "recommended", "samples/s", "efficiency", "DataParallel there",
                   f"efficiency ≥ {EFFICIENCY_FLOOR:.0%} up to", "bound", "lead over runner-up"]


def _runner_up(best, second) -> tuple:
    """(lead, within the noise?, sentence or ""): whether the recommended (and fastest) configuration is told apart
    from the runner-up (`_apart`)."""
    gap, within, bound, repeated = _apart(best, second)
    if not within:
        return gap, False, ""
    n = min(len(best.process_sps), len(second.process_sps))  # several on both sides where repeated
    apart = "as fast (less than 1% apart)" if gap < 0.005 else f"only {gap:.0%} slower"
    why = ("under 5%, so let other grounds (memory, simplicity) decide between them" if gap >= bound
           else f"within {_noise_words(gap, bound, repeated, n)}")
    return gap, gap < bound, f"The runner-up, {second.label} [{second.variant}], is {apart}: {why}."


def _peak(c):
    mem = c.reserved_mib or c.memory_mib
    return max(mem.values()) if mem else None


def bound(sweep: Sweep, workload: str, c) -> tuple:
    """(kind, sentence): what bounds configuration c's step, as the recommendation says it for the one it picks: data,
    a straggler, the host, communication, else compute (bench.report.tables gives it for every configuration)."""
    return _bound(sweep, workload, c, "GPUs" if c.device_type == "cuda" else "processes")


def _bound(sweep: Sweep, workload: str, c, u: str) -> tuple:
    step = c.summary.median_ms
    wait = c.data_wait_ms if not math.isnan(c.data_wait_ms) else c.phases_ms.get("data_ms", math.nan)
    alone = sweep.loader.get(c.device_count)
    if alone and alone < DATA_BOUND_LOADER * c.samples_per_s:
        return "data", (f"Data-bound: the loader alone delivers {alone:.1f} samples/s with {c.loader_workers or '?'} workers, barely "
                f"more than training's {c.samples_per_s:.1f}; add --num-workers (table: {workload}: the data loader alone).")
    if not math.isnan(wait) and step > 0 and wait / step > DATA_BOUND_WAIT:
        return "data", f"Data-bound: steps wait for data {wait / step:.0%} of the time {_where(workload, 'phases')}."
    lagging = trace_report.straggler(c)
    if lagging:
        return f"straggler (rank {lagging[0]})", (f"Held back by a straggler, rank {lagging[0]}: {trace_report.wait_words(c)} "
                                                  f"(table: {workload}: profiler traces).")
    idle = trace_report.device_idle(c)
    if idle and idle[0] > trace_report.HOST_BOUND_IDLE:
        return f"host ({idle[0]:.0%} idle)", (f"Host-bound: the GPU's kernels take {idle[1]:.1f} ms of a {step:.1f} ms step and "
                f"it sits idle {idle[0]:.0%} of the time, waiting for the host to issue work (table: {workload}: profiler "
                f"traces); fewer, larger kernels help: --compile, a larger --per-device-batch.")
    if not math.isnan(c.exposed_comm_ms) and step > 0 and c.exposed_comm_ms / step > COMM_BOUND:
        return f"communication ({c.exposed_comm_ms / step:.0%})", (f"Communication-bound: {c.exposed_comm_ms / step:.0%} of a step is exposed communication "
                f"(table: {workload}: DDP against the bounds of its step; `./run_bench.sh tune` searches DDP's settings).")
    share = "" if math.isnan(c.exposed_comm_ms) or step <= 0 else f"; exposed communication {max(0.0, c.exposed_comm_ms) / step:.0%}"
    return "compute", f"Compute-bound: neither data nor communication holds the step back{share} {_where(workload, 'phases')}."


def blocks(sweep: Sweep, figures: list = ()) -> list:
    """The heading, the summary table, `figures` ((path, alt) per workload: drawn right under the table, before any
    prose) and one paragraph per workload and precision."""
    out: list = [("h", 2, "Recommendation")]
    if not sweep.bench:
        return out + [("p", "No configuration produced a measurement; see the failed configurations below.")]
    rows, paragraphs = [], []
    for workload, configs in sweep.bench.items():
        for precision in dict.fromkeys(c.precision for c in configs):
            row, text = answer(sweep, workload, configs, precision)
            if text:
                rows.append(row)
                paragraphs.append(("p", f"{workload}, {precision}: " + " ".join(text)))
    key = ("p", "One row per workload and precision: the recommended configuration, the one with the most samples per "
                "second unless a simpler one is within the noise of it (fewer devices first; at equal devices single "
                "device, then DDP, then FSDP and the rest, DataParallel only where it is strictly faster); its scaling "
                "efficiency; how much slower DataParallel ran at that count; the largest count whose efficiency stays "
                f"at or above {EFFICIENCY_FLOOR:.0%}; what bounds its step; and its lead over the next fastest, 'within "
                "noise' where that cannot be told from process-to-process variation. Each claim, with the table or plot "
                "behind it, follows.")
    shown = [("imgs", list(figures))] if figures else []
    return out + ([("table", SUMMARY_HEADERS, rows), *shown, key] if rows else []) + paragraphs
