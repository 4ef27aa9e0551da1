"""The report's first screen: per workload and precision, what to run and why, each claim pointing to
the table or plot behind it.

    blocks(sweep) -> report blocks: a heading, a summary table (one row per workload and precision), then
                     one short paragraph per workload and precision with the claims behind each row

For each: the fastest configuration (strategy, settings, device count) and its efficiency; what
DataParallel would cost at that count; where scaling stops paying (the first count whose efficiency
falls below EFFICIENCY_FLOOR); whether the run was data-bound (the loader alone barely keeps up, or
steps wait for data) or communication-bound (exposed communication is a large share of the step);
FSDP's memory and speed beside DDP's; and a warning when the winner is within the noise of the runner-up.
"""
from __future__ import annotations

import math

from bench.analysis import stats
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


def sentences(sweep: Sweep, workload: str, configs: list, precision: str) -> list:
    """The answer for one workload at one precision, as sentences."""
    return answer(sweep, workload, configs, precision)[1]


def answer(sweep: Sweep, workload: str, configs: list, precision: str) -> tuple:
    """(summary row, sentences) for one workload at one precision; (None, []) when nothing was measured."""
    cs = [c for c in configs if c.precision == precision and not math.isnan(c.samples_per_s)]
    if not cs:
        return None, []
    u = "GPUs" if cs[0].device_type == "cuda" else "processes"
    best = max(cs, key=lambda c: c.samples_per_s)
    many = best.device_count > 1
    out = [f"Fastest: {_name(best.strategy)}{_settings(best)} on {best.device_count} {u if many else SINGULAR[u]}, "
           f"{best.samples_per_s:.1f} samples/s"
           + (f", {best.efficiency:.0%} scaling efficiency against {best.baseline}" if many and not math.isnan(best.efficiency) else "")
           + f" {_where(workload, 'throughput')}."]
    multi = [c for c in cs if c.device_count > 1]
    if not many and multi:
        m = max(multi, key=lambda c: c.samples_per_s)
        out.append(f"Using more devices does not pay here: the best on several, {m.label}, reaches {m.samples_per_s:.1f} "
                   f"samples/s ({m.efficiency:.0%} efficiency).")
    rivals = sorted((c for c in cs if c is not best), key=lambda c: -c.samples_per_s)
    lead = _runner_up(best, rivals[0]) if rivals else None
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
    eff = f"{best.efficiency:.0%}" if many and not math.isnan(best.efficiency) else "–"
    margin = "–" if lead is None else f"{lead[0]:.0%}" + (" (within noise)" if lead[1] else "")
    row = [workload, precision, f"{_name(best.strategy)}{_settings(best)} x{best.device_count}", f"{best.samples_per_s:.1f}",
           eff, dp_cost, scaling, kind, margin]
    return row, out


SUMMARY_HEADERS = ["workload", "precision", "fastest", "samples/s", "efficiency", "DataParallel there",
                   f"efficiency ≥ {EFFICIENCY_FLOOR:.0%} up to", "bound", "lead over runner-up"]


def _runner_up(best, second) -> tuple:
    """(lead, within the noise?, sentence or ""): whether the winner is told apart from the runner-up, by the
    measured spread between repeats where both ran in several processes, else the process-to-process bound
    that `compare` states (stats.PROCESS_NOISE)."""
    gap = best.samples_per_s / second.samples_per_s - 1
    spreads = [c.repeat_spread for c in (best, second)]
    repeated = not any(math.isnan(v) for v in spreads)
    bound = max(spreads) if repeated else stats.PROCESS_NOISE
    if gap >= max(0.05, bound):
        return gap, False, ""
    n = min(len(best.process_sps), len(second.process_sps))  # several on both sides where repeated
    apart = "as fast (less than 1% apart)" if gap < 0.005 else f"only {gap:.0%} slower"
    if gap >= bound:
        why = "under 5%, so let other grounds (memory, simplicity) decide between them"
    elif repeated:
        why = f"within the {bound:.0%} spread between their {n} processes each"
    else:
        why = (f"within the {bound:.0%} that fresh processes of the same code can differ "
               "(a single process on at least one side); rerun with --repeats 5 to separate them")
    return gap, gap < bound, f"The runner-up, {second.label} [{second.variant}], is {apart}: {why}."


def _peak(c):
    mem = c.reserved_mib or c.memory_mib
    return max(mem.values()) if mem else None


def _bound(sweep: Sweep, workload: str, c, u: str) -> tuple:
    step = c.summary.median_ms
    wait = c.data_wait_ms if not math.isnan(c.data_wait_ms) else c.phases_ms.get("data_ms", math.nan)
    alone = sweep.loader.get(c.device_count)
    if alone and alone < DATA_BOUND_LOADER * c.samples_per_s:
        return "data", (f"Data-bound: the loader alone delivers {alone:.1f} samples/s with {c.loader_workers or '?'} workers, barely "
                f"more than training's {c.samples_per_s:.1f}; add --num-workers (table: {workload}: the data loader alone).")
    if not math.isnan(wait) and step > 0 and wait / step > DATA_BOUND_WAIT:
        return "data", f"Data-bound: steps wait for data {wait / step:.0%} of the time {_where(workload, 'phases')}."
    if not math.isnan(c.exposed_comm_ms) and step > 0 and c.exposed_comm_ms / step > COMM_BOUND:
        return f"communication ({c.exposed_comm_ms / step:.0%})", (f"Communication-bound: {c.exposed_comm_ms / step:.0%} of a step is exposed communication "
                f"(table: {workload}: DDP against the bounds of its step; `./run_bench.sh tune` searches DDP's settings).")
    share = "" if math.isnan(c.exposed_comm_ms) or step <= 0 else f"; exposed communication {max(0.0, c.exposed_comm_ms) / step:.0%}"
    return "compute", f"Compute-bound: neither data nor communication holds the step back{share} {_where(workload, 'phases')}."


def blocks(sweep: Sweep) -> list:
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
    key = ("p", "One row per workload and precision: the configuration with the most samples per second; its scaling "
                "efficiency; how much slower DataParallel ran at that count; the largest count whose efficiency stays "
                f"at or above {EFFICIENCY_FLOOR:.0%}; what bounds its step; and its lead over the next fastest, 'within "
                "noise' where that cannot be told from process-to-process variation. Each claim, with the table or plot "
                "behind it, follows.")
    return out + [("table", SUMMARY_HEADERS, rows), key] * bool(rows) + paragraphs
