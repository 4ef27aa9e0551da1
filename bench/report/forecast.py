"""The report's forecast section and plots: past the measured counts, on the machine the sweep measured (and the
preset its GPUs name for what it did not), with the check against the measured counts beside it.

    bl = blocks(store_path, sweep, plots_dir)     # report blocks (bench.report.pages); [] with nothing to forecast

Per workload two plots (bench.report.forecastplots): scaling efficiency and memory per device against count. The
tables: the forecast at 16, 64, 256 and 1024 devices (bench.forecast.outlook.COLUMNS, each figure with its range), what
it rests on (measured or assumed) and what its range rests on, and the check with its range, whether the measurement
fell inside, its basis and why where it missed by more than 10%. Before any figure, what was measured and what every
count past it rests on (`scope_words`); on CPU the memory is a process's peak RSS, the memory section's figure, and a
budget a node's (its processes summed), as that section holds it.
"""
from __future__ import annotations

import math
import os
from typing import Optional

from bench.forecast import batches
from bench.forecast import brackets
from bench.forecast import check as fk
from bench.analysis import forecastable
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import memory as mm
from bench.forecast import spread
from bench.config import ConfigError
from bench.report import forecastplots as fp   # the section's plots
from bench.report import frontier
from bench.report.bound import bound
from bench.report.utilisation import forecast_cells, forecast_headers
from bench.store import store
from bench.workloads.usermodel import display_name

TABLE_COUNTS = (16, 64, 256, 1024)
_text = brackets.num   # a cell's figure, '–' where there is none


def memory_fits(s: fs.Setting, pts: list, budget, budget_name: str, per_node: bool) -> str:
    """What fits of a setting's forecast memory at each count, the high end of its range held to the budget too, and
    where a larger batch would not fit: the terminal's, the report's and the DataFrame's one sentence; '' where the
    forecast has no memory."""
    mems = [p.memory for p in pts if p.memory is not None]
    if not mems:
        return ""
    highs = {p.count: p.range_of("memory_mib")[1] for p in pts if p.memory is not None}
    return (mm.fit_words(mems, budget, s.strategy, budget_name, per_node, highs)
            + batches.over_words(s, budget, frontier.held_mib(s.configs[min(s.configs)])))


def _memory(r: dict) -> str:
    """The check's memory cell: '200 (195-205) / 220', the forecast peak with its range (where drawn and told apart:
    bench.forecast.brackets) and the measured; '–' where memory was not checked."""
    if r.get("forecast_mem_mib") is None or r.get("measured_mem_mib") is None:
        return "–"
    lo, hi = r.get("forecast_mem_mib_low"), r.get("forecast_mem_mib_high")
    ranged = "" if brackets.flat(lo, hi) else f" ({brackets.ends(lo, hi, 0)})"
    return f"{r['forecast_mem_mib']:.0f}{ranged} / {r['measured_mem_mib']:.0f}"


def own_mfu(s: fs.Setting, p: fs.Point, c=None) -> tuple:
    """(MFU, the higher of MFU and HFU) a row reaches on its own throughput (a measured row's c: its windows'), against
    the setting's peak and FLOPs; nan without them."""
    u = (c or s.any).utilisation
    sps, count = (c.samples_per_s, c.device_count) if c is not None else (p.samples_per_s, p.count)
    if p.refused or u is None or u.flops.per_sample is None or not u.peak_tflops > 0 or not sps > 0:
        return math.nan, math.nan
    mfu = u.flops.per_sample * sps / count / 1e12 / u.peak_tflops
    hfu_x = u.highest / u.measured if u.measured > 0 else 1.0      # HFU over MFU: recomputation's FLOPs
    return mfu, mfu * max(1.0, hfu_x)


def cells(s: fs.Setting, p: fs.Point, c=None) -> list:
    """A row of the forecast's table (forecast_headers()) whose MFU is its own: 'error: 211% > 100%' only on the row
    that reaches it, with its own figure (`own_mfu`). The shared cell read the setting's first configuration's error
    on every row: a CPU forecast with --peak-tflops fp32=0.01 put 'error: measured 211% > 100%' on x2 (57%) and x16
    (31%) because x1 alone read 211%. What the error means for the other rows is said once (`mfu_words`)."""
    out = forecast_cells(s, p)
    mfu, high = own_mfu(s, p, c)
    out[forecast_headers().index("MFU")] = ("–" if math.isnan(mfu) else f"error: {high:.0%} > 100%" if high > 1.0
                                           else f"{mfu:.0%}")
    return out


def mfu_words(s: fs.Setting, rows: list) -> str:
    """rows: [(point, measured config or None)]. Once, under the table, where a row passes 100% of the peak: which
    rows, and that the peak or the FLOP count is then wrong for every row (the others rest on the same two); ''
    where none does."""
    over = [(p, c, own_mfu(s, p, c)[1]) for p, c in rows]
    over = [(p, c, v) for p, c, v in over if v > 1.0]
    if not over:
        return ""
    u = s.any.utilisation
    which = ", ".join(f"x{p.count} ({'measured' if c is not None else 'forecast'}: {v:.0%})" for p, c, v in over)
    return (f"past 100% of the peak ({u.peak_text}) on {which}, which no device reaches: the peak or the FLOP count "
            f"({u.flops.per_sample:.4g} FLOP per sample, {u.flops.source}) is wrong, and every other row's MFU rests on "
            "the same two (--peak-tflops gives the peak)")




def scope_words(sets: list, m, threads: list) -> str:
    """What the forecast rests on, before any figure: the counts and nodes measured, that every count past them is an
    extrapolation, what it assumes there (the network inside a node or between nodes, interference: bench.forecast.
    check.assumed), which the ranges leave out, and on CPU what a device is. A new user's 2-core CPU report forecast
    1024 'devices' on 512 nodes from two one-thread processes, past one node on a network taken as fast as the node
    level, and its ranges ('55% (48%-63%)') read as if they covered that."""
    s = sets[0]
    top = max((c for t in sets for c in t.configs.values()), key=lambda c: (c.device_count, c.nodes))
    n, nodes = top.device_count, max(1, top.nodes)
    said = (f"Measured: up to {fo.unit(s, n)}, on {'one node' if nodes == 1 else f'{nodes} nodes'}. Every count past "
            f"{n} is an extrapolation from {'it' if n == 1 else 'them'}")
    assumed = fk.assumed(m, fo.DOUBLING)
    if assumed:
        typed = ",".join(f"{level}=GBPS@US" for what, level in (("network inside a node", "node"),
                                                                ("network between nodes", "net")) if what in dict(assumed))
        said += (f", resting on what was assumed, not measured: "
                 f"{'; '.join(_assumed_words(w, how, fo.unit(s, m.gpus_per_node)) for w, how in assumed)}. The ranges "
                 "in brackets cover the spread of the measured inputs, not these assumptions"
                 + (f" (`./run_bench.sh forecast --network {typed}` types the network)" if typed else ""))
    said += "."
    if getattr(s.any, "device_type", "cuda") == "cpu":
        per = (f"of {threads[0]} torch thread{'s' if threads[0] != 1 else ''}" if len(threads) == 1
               else "with its torch threads")
        said += (f" On CPU a device is one process {per}; a node is taken to hold {m.gpus_per_node} of them, as this "
                 "machine ran.")
    return said


def _assumed_words(what: str, how: str, node: str) -> str:
    """'past one node (2 processes), the network between nodes, taken as fast as the node level': one assumption."""
    how = {"as fast as the other level": "taken as fast as the " + ("node" if "between" in what else "net") + " level",
           "none": "taken as none", "serial": "taken as serial"}.get(how, how)
    where = f"past one node ({node}), " if "between" in what else ""
    return f"{where}{'interference of collectives and computation' if what == 'interference' else f'the {what}'}" + (
        f", {how}" if how else "")


def batched(s: fs.Setting, sentence: str) -> str:
    """The recommendation with the batch it rests on after the setting's name, where the page names it
    (bench.forecast.batches): 'transformer DDP [bf16, adamw]: forecast at batch 14 a GPU, ...; efficiency ...'."""
    head, said = f"{s.label}: ", batches.head_words(s)
    return head + said + sentence[len(head):] if said and sentence.startswith(head) else sentence


def blocks(store_path: str, sweep, plots_dir: str, where: str = "", memory_budget_gib: Optional[float] = None) -> list:
    """The forecast section of the report, from the store alone; [] when the sweep has nothing to forecast.
    memory_budget_gib: report --memory-budget-gib, which the forecast's memory is held to as the rest of the page is
    (bench.forecast.outlook.budget; None: the sweep's own, else the GPU's). Without it, the H100 self-check's report
    with --memory-budget-gib 1 read 'Nothing measured fits 1.00 GiB per GPU' and, in its forecast, 'memory: fits in the
    GPU's 79.2 GiB at every count'."""
    conn = store.connect(store_path, readonly=True)
    try:
        f = forecastable.load(conn, int(sweep.sweep["sweep_id"]))
    finally:
        conn.close()
    shown = {c.key: c.utilisation for cs in sweep.bench.values() for c in cs}  # the report's peaks (--peak-tflops)
    for cs in f.sweep.bench.values():
        for c in cs:
            c.utilisation = shown.get(c.key, c.utilisation)
    mine = {c.key: c for cs in sweep.bench.values() for c in cs}   # the report's bound of each run at one device
    fo.attach_bounds(f.sets, lambda c: bound(sweep, c.workload, mine.get(c.key, c))[0])
    try:
        m = fo.machine(f.sweep, f.runs)
    except ConfigError as e:  # no all-reduce rows and no preset: say so rather than fail the report
        return [("h", 2, "Forecast past the measured counts"), ("p", f"No forecast: {e}")]
    batches.mark(f.sets, f.sweep)   # a fit sweep, or several per-device batches: each forecast names its batch
    sets = [(s, fs.inputs(s, m)) for s in f.sets]
    sets = [(s, inp) for s, inp in sets if not isinstance(inp, str)]
    if not sets:
        return []
    budget, budget_name = fo.budget(f.sweep, memory_budget_gib)
    cpu = fs.on_cpu(s for s, _ in sets)
    per_node = m.gpus_per_node if cpu else 0     # CPU: a budget is a node's, its processes summed (fit.budget_peak)
    b: list = [("h", 2, "Forecast past the measured counts"), ("p", scope_words([s for s, _ in sets], m, sweep.threads))]
    sentences, by_workload, mem_lines, rows, checks, errors, shown_points = [], {}, {}, [], [], [], []
    on, on_short = (fo.on_words(m, [s for s, _ in sets], short) for short in (False, True))
    for s, inp in sets:
        ws = fo.what_ifs(s, inp, m, fo.DOUBLING)
        check = fk.validate(s, f.runs, None, {}, "")
        assumed = fk.assumed_words(m, check, fo.DOUBLING)
        what_assumed = fp.assumed_words(m)
        by_workload.setdefault(s.workload, []).append((s, ws, check, (what_assumed, fk.band(check))))
        mem_lines.setdefault(s.workload, []).append((s, ws[0][1]))
        checked = [r for r in check if r.get("error") is not None]
        inside = [r for r in checked if r.get("in_range") is not None]
        fits = memory_fits(s, ws[0][1], budget, budget_name, per_node)
        sentences.append(batched(s, fo.recommendation(s, ws[0][1], ws, on))
                         + (f"; checked at x{','.join(str(r['device_count']) for r in checked)} with errors "
                            f"{', '.join(format(r['error'], '+.0%') for r in checked)}"
                            + (f", {sum(r['in_range'] for r in inside)} of {len(inside)} inside the range" if inside else "")
                            if checked else "; not checked (one measured count)")
                         + (f"; memory: {fits}" if fits else ""))
        moves = fo.below_words(ws, fo.DOUBLING[-1], on_short) if len(ws) > 1 else ""
        shown = [p for p in ws[0][1] if p.count in TABLE_COUNTS]
        shown_points += shown
        rows += [[s.label] + cells(s, p) for p in shown]   # each with its own MFU
        mfu = mfu_words(s, [(p, None) for p in shown])
        if mfu:
            errors.append(f"MFU of {s.label}: {mfu}.")
        rows.append([s.label, "rests on"] + [""] * (len(forecast_headers()) - 2) + ["; ".join(
            ([batches.head_words(s).rstrip("; ")] if s.batch else []) + fo.rests_on(s, inp, m) + [spread.words(inp, m)] + ([assumed] if assumed else []))
            + (f". Under 75% from: {moves}" if moves else "")])
        for r in check:
            lo, hi = r.get("forecast_step_ms_low"), r.get("forecast_step_ms_high")
            ranged = "–" if brackets.flat(lo, hi) else brackets.ends(lo, hi)   # no range, as the terminal's line says
            checks.append([s.label, str(r["device_count"]), r.get("from_counts") or "–",
                           _text(r.get("forecast_step_ms"), ".2f"), ranged, _text(r["measured_step_ms"], ".2f"),
                           _text(r.get("error"), "+.1%"), {1: "yes", 0: "no"}.get(r.get("in_range"), "–"),
                           _memory(r), _text(r.get("mem_error"), "+.0%"),
                           {1: "yes", 0: "no"}.get(r.get("mem_in_range"), "–"), r.get("basis") or "–",
                           r.get("why") or ("within 10%" if r.get("error") is not None else "–")])
    b += [("p", s + ".") for s in sentences]
    net = m.net
    b.append(("p", f"Network: inside a node {net.node.busbw_gbps:.3g} GB/s, {net.node.latency_us:.3g} us per step "
                   f"({'measured' if net.node.measured else 'assumed'}: {net.node.source}); between nodes "
                   f"{net.net.busbw_gbps:.3g} GB/s, {net.net.latency_us:.3g} us ({'measured' if net.net.measured else 'assumed'}: "
                   f"{net.net.source}); {net.gpus_per_node} devices per node. {m.inter.words()}. The model, its references "
                   f"and its assumptions: docs/forecast.md; `./run_bench.sh forecast --network ...` for another network."))
    os.makedirs(plots_dir, exist_ok=True)
    from bench.report import plots
    for workload, lines in by_workload.items():
        shown = display_name(workload, by_workload)   # a model given by path: its titles say my_model:build
        if fp.drawable(lines):
            path = os.path.join(plots_dir, plots.file_name(workload, "forecast"))
            fp.figure(shown, where, lines).savefig(path, dpi=100)
            b.append(("img", path, f"{shown}: forecast scaling efficiency"))
        else:
            b.append(("p", f"No forecast scaling-efficiency plot for {shown}: its efficiency is unknown at every count "
                           "(no single device x1 to hold it against, as said above)."))
        if any(p.memory is not None for _, pts in mem_lines[workload] for p in pts):
            path = os.path.join(plots_dir, plots.file_name(workload, "forecast_memory"))
            fp.memory_figure(shown, where, mem_lines[workload], budget, budget_name, per_node).savefig(path, dpi=100)
            b.append(("img", path, f"{shown}: forecast " + ("peak RSS per process" if cpu else "memory per device")))
    b.append(("p", f"Each figure is the forecast on the inputs as measured (robust: medians of processes, rounds and "
                   f"steps) and, in brackets, its range: {spread.LOW:.0%} to {spread.HIGH:.0%} of {spread.DRAWS} draws of "
                   f"the inputs from their own repeated measurements (docs/forecast.md, \"The range: what the measurement supports\")."
                   + (" MiB/device is a process's peak RSS (its largest rank's), the figure the memory section gives."
                      if cpu else "")))
    b.append(("table", ["setting"] + forecast_headers(), rows))
    plain = fo.unbracketed_words(shown_points)
    if plain:
        b.append(("p", plain))
    b += [("p", e) for e in errors]
    if checks:
        b.append(("p", "The check: each measured count forecast from what its basis allows (held out: nothing of that "
                       "count; machine at xN: its collectives measured apart from training, nothing of its training), "
                       "beside the measurement; memory against the measured peak"
                       + (" (on CPU both less the process's RSS before its model: what the model moves)." if cpu else
                          ".")))
        b.append(("table", ["setting", "devices", "from", "forecast ms", "range ms", "measured ms", "error", "inside",
                            "memory MiB (range) / measured", "memory error", "memory inside", "basis", "beyond 10%: why"],
                  checks))
    return b
