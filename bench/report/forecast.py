"""The report's forecast section and plots: past the measured counts, on the machine the sweep measured (and the
preset its GPUs name for what it did not), with the check against the measured counts beside it.

    bl = blocks(store_path, sweep, plots_dir)     # report blocks (bench.report.pages); [] with nothing to forecast

Per workload two plots, one colour per setting. <workload>_forecast.png: scaling efficiency against device count
(log scale): the measured points; each measured count above the smallest as the check forecast it (from the smaller
counts, a hollow marker joined to the measurement: the check table's numbers); the forecast line from the largest
measured count on, with its range as a band (bench.forecast.spread: the inputs drawn from their repeated
measurements); where it rests on an assumption (interference not measured, the network between nodes not measured)
the legend says so and a hatched band spans how far the check erred where the sweep measured a count; the 75% line
and what-if lines (a faster inter-node network, bigger buckets, bf16 gradients).
<workload>_forecast_memory.png: memory per device (CUDA: the device level) against count, per setting, with its range,
the measured peaks, and the budget (the GPU's memory on CUDA) as a line. The tables: the forecast at 16, 64, 256 and
1024 devices (bench.forecast.outlook.COLUMNS, each figure with its range), what it rests on (measured or assumed) and
what its range rests on, and the check with its range, whether the measurement fell inside, its basis and why where
it missed by more than 10%.
"""
from __future__ import annotations

import math
import os
import textwrap

from bench.forecast import check as fk
from bench.analysis import forecastable
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import memory as mm
from bench.forecast import spread
from bench.config import ConfigError
from bench.report.bound import bound
from bench.report.utilisation import forecast_cells, forecast_headers
from bench.store import store

TABLE_COUNTS = (16, 64, 256, 1024)
WHAT_IF_STYLES = ("--", ":", "-.")


def _text(v: float, spec: str) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _ticks(ax, counts: list) -> None:
    ticks = sorted({1, *fo.DOUBLING} & set(range(min(counts + [2]), max(counts + [2]) + 1))) or list(fo.DOUBLING)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(n) for n in ticks])


PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def colors(settings: list) -> dict:
    """One colour per setting of a plot (two settings of one strategy never share one): (strategy, variant) -> colour."""
    return {(s.strategy, s.variant): PALETTE[i % len(PALETTE)] for i, s in enumerate(settings)}


LEGEND_WRAP = 56          # characters per line of a legend's label: two columns fit a 10-inch figure
LEGEND_LINE_IN = 0.17     # inches a legend's line of small text takes: the figure grows by its tallest column


def _legend(fig, ax) -> None:
    """The legend below the axes in two columns, each label wrapped to LEGEND_WRAP characters and the figure made taller
    by the legend's lines, so that every label lies whole inside the figure (a one-line legend of two columns under a
    fixed 9-inch figure was clipped at both ends)."""
    handles, labels = ax.get_legend_handles_labels()
    labels = [textwrap.fill(t, LEGEND_WRAP) for t in labels]
    rows = math.ceil(len(labels) / 2)                      # a legend fills its first column, then the second
    tallest = max((sum(t.count("\n") + 1 for t in col) for col in (labels[:rows], labels[rows:])), default=0)
    fig.set_figheight(fig.get_figheight() + LEGEND_LINE_IN * tallest)
    fig.legend(handles, labels, fontsize="small", loc="outside lower center", ncols=2)


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


def assumed_words(m) -> str:
    """What the forecast's machine assumed rather than measured, for the plot's legend: 'interference and network
    inside a node and network between nodes' (a one-GPU sweep forecast on its GPU's preset); '' for nothing. The same
    list the text names (bench.forecast.check.assumed), over every count the plot draws."""
    return " and ".join(w for w, _ in fk.assumed(m, fo.DOUBLING))


def figure(workload: str, where: str, lines: list):
    """lines: [(setting, what_ifs, checks, assumed)] -> a matplotlib Figure (Agg, no pyplot). The band around each
    forecast line is its range (bench.forecast.spread); where the forecast rests on an assumption (`assumed`, the
    check's band: how far it erred where the sweep measured a count) a hatched band beside it, and its legend says
    what is assumed."""
    from bench.report import plots
    fig, ax = plots._figure("Forecast: scaling efficiency past the measured counts", where, workload, width=10.0)
    xs_all = []
    palette = colors([line[0] for line in lines])
    for s, whatifs, checks, assumed in lines:
        color = palette[(s.strategy, s.variant)]
        name = f"{plots.NAMES.get(s.strategy, s.strategy)} [{s.variant}]"
        # at one device a wrapper against single is its overhead (the report's table says it), not scaling
        measured = [(n, c.efficiency) for n, c in s.configs.items() if n > 1 and not math.isnan(c.efficiency)]
        if measured:
            ax.plot([n for n, _ in measured], [e * 100 for _, e in measured], "o", color=color, label=f"{name} measured")
        for r in checks:
            eff = s.configs[r["device_count"]].efficiency
            if r.get("error") is None or math.isnan(eff):
                continue
            fe = eff / (1 + r["error"])  # the same samples at the forecast step: efficiency scales inversely
            ax.plot([r["device_count"]] * 2, [eff * 100, fe * 100], "-", color=color, alpha=0.5)
            ax.plot([r["device_count"]], [fe * 100], "o", mfc="none", color=color)
        top = max(s.configs)
        for i, (what, pts) in enumerate(whatifs):
            pts = [p for p in pts if not p.refused and not math.isnan(p.efficiency) and p.count >= top]
            if not pts:
                continue
            xs, ys = [p.count for p in pts], [p.efficiency * 100 for p in pts]
            xs_all += xs
            if i > 0:
                ax.plot(xs, ys, WHAT_IF_STYLES[(i - 1) % len(WHAT_IF_STYLES)], color=color, alpha=0.6, label=f"{name}: {what}")
                continue
            what_assumed, (lo, hi) = assumed
            ax.plot(xs, ys, "-", color=color, label=f"{name} forecast, this network"
                    + (f" ({what_assumed} assumed)" if what_assumed else ""))
            ranges = [p.range_of("efficiency") for p in pts]
            if not any(math.isnan(r[0]) for r in ranges):
                ax.fill_between(xs, [r[0] * 100 for r in ranges], [r[1] * 100 for r in ranges], color=color, alpha=0.18,
                                label=f"{name}: range from the inputs' spreads (5-95% of the draws)")
            if what_assumed and not math.isnan(lo):  # step error e: efficiency / (1 + e)
                ax.fill_between(xs, [y / (1 + hi) for y in ys], [y / (1 + lo) for y in ys], facecolor="none",
                                edgecolor=color, hatch="//", alpha=0.5, label=f"{name}: {what_assumed} assumed, erred "
                                f"{lo:+.0%} to {hi:+.0%} where measured")
        xs_all += [n for n in s.configs if n > 1]
    ax.axhline(fo.EFFICIENT * 100, color="#999999", linestyle="--", label=f"{fo.EFFICIENT:.0%}: scaling stops paying")
    _ticks(ax, xs_all)
    ax.set(xlabel="device count (log scale)", ylabel="scaling efficiency (%)")
    ax.set_ylim(0, 110)
    _legend(fig, ax)
    return fig


def memory_figure(workload: str, where: str, lines: list, budget_mib):
    """lines: [(setting, [Point])] -> memory per device against count, the measured peaks, the budget."""
    from bench.report import plots
    fig, ax = plots._figure("Forecast: memory per device", where, workload, width=10.0)
    xs_all = []
    palette = colors([s for s, _ in lines])
    for s, pts in lines:
        color = palette[(s.strategy, s.variant)]
        name = f"{plots.NAMES.get(s.strategy, s.strategy)} [{s.variant}]"
        mem = [(p.count, p.memory.device_mib, p.range_of("memory_mib")) for p in pts if p.memory is not None]
        if mem:
            ax.plot([n for n, _, _ in mem], [m for _, m, _ in mem], "-", color=color, label=f"{name} forecast")
            if not any(math.isnan(r[0]) for _, _, r in mem):
                ax.fill_between([n for n, _, _ in mem], [r[0] for _, _, r in mem], [r[1] for _, _, r in mem], color=color,
                                alpha=0.18)
            xs_all += [n for n, _, _ in mem]
        seen = [(n, s.raws[c.key].peak_mib + (s.raws[c.key].runtime_mib or 0.0)) for n, c in s.configs.items()
                if c.key in s.raws and s.raws[c.key].peak_mib]  # the device level, as the line
        if seen:
            ax.plot([n for n, _ in seen], [m for _, m in seen], "o", color=color, label=f"{name} measured peak")
            xs_all += [n for n, _ in seen]
    if budget_mib:
        ax.axhline(budget_mib, color="#c0392b", linestyle="--", label=f"budget {budget_mib / 1024:.3g} GiB per device")
    _ticks(ax, xs_all or [2])
    ax.set(xlabel="device count (log scale)", ylabel="memory per device (MiB; CUDA: the device level)")
    ax.set_ylim(bottom=0)
    _legend(fig, ax)
    return fig


def blocks(store_path: str, sweep, plots_dir: str, where: str = "") -> list:
    """The forecast section of the report, from the store alone; [] when the sweep has nothing to forecast."""
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
    sets = [(s, fs.inputs(s, m)) for s in f.sets]
    sets = [(s, inp) for s, inp in sets if not isinstance(inp, str)]
    if not sets:
        return []
    budget = fo.device_memory_mib(f.sweep)
    b: list = [("h", 2, "Forecast past the measured counts")]
    sentences, by_workload, mem_lines, rows, checks, errors = [], {}, {}, [], [], []
    for s, inp in sets:
        ws = fo.what_ifs(s, inp, m, fo.DOUBLING)
        check = fk.validate(s, f.runs, None, {}, "")
        assumed = fk.assumed_words(m, check, fo.DOUBLING)
        what_assumed = assumed_words(m)
        by_workload.setdefault(s.workload, []).append((s, ws, check, (what_assumed, fk.band(check))))
        mem_lines.setdefault(s.workload, []).append((s, ws[0][1]))
        checked = [r for r in check if r.get("error") is not None]
        inside = [r for r in checked if r.get("in_range") is not None]
        mems = [p.memory for p in ws[0][1] if p.memory is not None]
        sentences.append(fo.recommendation(s, ws[0][1], ws)
                         + (f"; checked at x{','.join(str(r['device_count']) for r in checked)} with errors "
                            f"{', '.join(format(r['error'], '+.0%') for r in checked)}"
                            + (f", {sum(r['in_range'] for r in inside)} of {len(inside)} inside the range" if inside else "")
                            if checked else "; not checked (one measured count)")
                         + (f"; memory: {mm.fit_words(mems, budget, s.strategy)}" if mems else ""))
        moves = "; ".join(f"{what}: {fo.first_below(pts) or 'not up to 1024'}" for what, pts in ws[1:])
        shown = [p for p in ws[0][1] if p.count in TABLE_COUNTS]
        rows += [[s.label] + cells(s, p) for p in shown]   # each with its own MFU
        mfu = mfu_words(s, [(p, None) for p in shown])
        if mfu:
            errors.append(f"MFU of {s.label}: {mfu}.")
        rows.append([s.label, "rests on"] + [""] * (len(forecast_headers()) - 2) + ["; ".join(
            fo.rests_on(s, inp, m) + [spread.words(inp, m)] + ([assumed] if assumed else []))
            + (f". Under 75% from: {moves}" if moves else "")])
        for r in check:
            ranged = (f"{r['forecast_step_ms_low']:.2f}-{r['forecast_step_ms_high']:.2f}"
                      if r.get("forecast_step_ms_low") is not None else "–")
            checks.append([s.label, str(r["device_count"]), r.get("from_counts") or "–",
                           _text(r.get("forecast_step_ms"), ".2f"), ranged, _text(r["measured_step_ms"], ".2f"),
                           _text(r.get("error"), "+.1%"), {1: "yes", 0: "no"}.get(r.get("in_range"), "–"),
                           _text(r.get("mem_error"), "+.0%"), r.get("basis") or "–",
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
        path = os.path.join(plots_dir, plots.file_name(workload, "forecast"))
        figure(workload, where, lines).savefig(path, dpi=100)
        b.append(("img", path, f"{workload}: forecast scaling efficiency"))
        if any(p.memory is not None for _, pts in mem_lines[workload] for p in pts):
            path = os.path.join(plots_dir, plots.file_name(workload, "forecast_memory"))
            memory_figure(workload, where, mem_lines[workload], budget).savefig(path, dpi=100)
            b.append(("img", path, f"{workload}: forecast memory per device"))
    b.append(("p", f"Each figure is the forecast on the inputs as measured (robust: medians of processes, rounds and "
                   f"steps) and, in brackets, its range: {spread.LOW:.0%} to {spread.HIGH:.0%} of {spread.DRAWS} draws of "
                   f"the inputs from their own repeated measurements (docs/forecast.md, \"The range: what the measurement supports\")."))
    b.append(("table", ["setting"] + forecast_headers(), rows))
    b += [("p", e) for e in errors]
    if checks:
        b.append(("p", "The check: each measured count forecast from what its basis allows (held out: nothing of that "
                       "count; machine at xN: its collectives measured apart from training, nothing of its training), "
                       "beside the measurement; memory against the measured peak."))
        b.append(("table", ["setting", "devices", "from", "forecast ms", "range ms", "measured ms", "error", "inside",
                            "memory error", "basis", "beyond 10%: why"], checks))
    return b
