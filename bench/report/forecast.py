"""The report's forecast section and plots: past the measured counts, on the machine the sweep measured (and the
preset its GPUs name for what it did not), with the check against the measured counts beside it.

    bl = blocks(store_path, sweep, plots_dir)     # report blocks (bench.report.pages); [] with nothing to forecast

Per workload two plots, one colour per setting. <workload>_forecast.png: scaling efficiency against device count
(log scale): the measured points; each measured count above the smallest as the check forecast it (a hollow marker
joined to the measurement); the forecast line from the largest measured count on, with its range as a band (faint, its
edges drawn: bench.forecast.spread); where it rests on an assumption a hatched band spans how far the check erred; the
75% line; a what-if line (faster network, bigger buckets, bf16 gradients) only where it leaves its setting's line by
VISIBLE_POINTS, the rest listed once. One legend entry per setting, each mark's meaning once, the y axis from the data
(values past Y_CAP marked at the edge). <workload>_forecast_memory.png: memory per device (CUDA: the device level)
against count, per setting (its own marker for the measured peak), with its range, and the budget the page holds it to
(bench.forecast.outlook.budget: the sweep's --memory-budget-gib, else the GPU's memory), drawn where it is near the
data, else named as above the scale. The tables: the forecast at 16, 64, 256 and
1024 devices (bench.forecast.outlook.COLUMNS, each figure with its range), what it rests on (measured or assumed) and
what its range rests on, and the check with its range, whether the measurement fell inside, its basis and why where
it missed by more than 10%.
"""
from __future__ import annotations

import math
import os
import textwrap
from typing import Optional

from bench.forecast import batches
from bench.forecast import check as fk
from bench.analysis import forecastable
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import memory as mm
from bench.forecast import spread
from bench.config import ConfigError
from bench.report import frontier
from bench.report.bound import bound
from bench.report.utilisation import forecast_cells, forecast_headers
from bench.store import store
from bench.workloads.usermodel import display_name

TABLE_COUNTS = (16, 64, 256, 1024)
UNRESOLVED_STYLE = "--"   # a forecast line resting on one unstable process (`Point.unresolved`): dashed
WHAT_IF_STYLES = (":", "-.", (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)))   # never dashed: `UNRESOLVED_STYLE`


def _text(v: float, spec: str) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _ticks(ax, counts: list) -> None:
    ticks = sorted({1, *fo.DOUBLING} & set(range(min(counts + [2]), max(counts + [2]) + 1))) or list(fo.DOUBLING)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.set_xlim(min(ticks) / 1.25, max(ticks) * 1.25)   # set, not autoscaled: the legend's proxies hold no data


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


def plot_name(s: fs.Setting) -> str:
    """'DDP [bf16, adamw]', with the batch its forecast rests on where the page names it ('... at batch 14 a GPU')."""
    from bench.report import plots
    return f"{plots.NAMES.get(s.strategy, s.strategy)} [{s.variant}]" + (f" {s.batch}" if s.batch else "")


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


VISIBLE_POINTS = 2.0      # a what-if line within 2 percentage points of its setting's line everywhere is not drawn
Y_CAP = 250.0             # efficiency (%) above this is marked at the top edge with its value, not drawn off the axes


def _band(ax, xs: list, lo: list, hi: list, color) -> None:
    """A range as a faint fill with its two edges drawn: five settings' fills at alpha 0.18 merged into one mass."""
    ax.fill_between(xs, lo, hi, color=color, alpha=0.10, linewidth=0)
    for ys in (lo, hi):
        ax.plot(xs, ys, "-", color=color, linewidth=0.7, alpha=0.7)


def _off_scale(ax, pts: list, top: float) -> None:
    """pts: [(x, y, color)]: each value above the axes' top marked at the edge with its value (never clipped silently)."""
    for x, y, color in pts:
        if y > top:
            ax.annotate(f"{y:.0f}%", (x, top), xytext=(0, -10), textcoords="offset points", ha="center",
                        fontsize="x-small", color=color, arrowprops={"arrowstyle": "->", "color": color})


def efficiency_top(values: list) -> float:
    """The y-limit (%) from the data: at least 110, 5 points above the highest value, at most Y_CAP (`_off_scale`)."""
    return min(Y_CAP, max([110.0] + [v + 5.0 for v in values if not math.isnan(v)]))


def _key(ax, assumed: str, drawn: set) -> None:
    """What each mark means, once for every setting (a legend of one entry per mark and setting ran to 29 entries),
    and only for the marks drawn (`drawn`: 'line', 'measured', 'checked', 'band'): a one-GPU sweep's legend explained
    'measured (dots)' where no dot was drawn. A dashed line (not resolved) says so in its own entry. assumed: what
    every line assumes ('' where they differ, each line's entry then says its own)."""
    if "line" in drawn:
        ax.plot([], [], "-", color="#555555", label="forecast, this network" + (f" ({assumed} assumed)" if assumed else ""))
    marks = [w for k, w in (("measured", "measured (dots)"), ("checked", "the check's forecast of a measured count: "
                                                                         "hollow, joined to its measurement")) if k in drawn]
    if marks:
        ax.plot([], [], "o", color="#555555", label="; ".join(marks))
    if "band" in drawn:
        ax.fill_between([], [], [], color="#555555", alpha=0.2, label="range from the inputs' spreads (5-95% of the draws)")


def _what_ifs(ax, name: str, color, whatifs: list, main: dict, hidden: dict) -> list:
    """Draw the what-ifs that move off the setting's line by VISIBLE_POINTS somewhere; the others into `hidden`
    (what -> [setting names]), listed once. Returns the drawn values (%)."""
    drawn = []
    for i, (what, pts) in enumerate(whatifs):
        pts = [p for p in pts if p.count in main and not p.refused and not math.isnan(p.efficiency)]
        ys = [p.efficiency * 100 for p in pts]
        if not pts or max(abs(y - main[p.count]) for p, y in zip(pts, ys)) < VISIBLE_POINTS:
            hidden.setdefault(what, []).append(name)
            continue
        ax.plot([p.count for p in pts], ys, linestyle=WHAT_IF_STYLES[i % len(WHAT_IF_STYLES)], color=color, alpha=0.7,
                label=f"{name}: {what}")
        drawn += ys
    return drawn


def figure(workload: str, where: str, lines: list):
    """lines: [(setting, what_ifs, checks, assumed)] -> a matplotlib Figure (Agg, no pyplot). One legend entry per
    setting (its forecast line; what it assumes and how far that erred, hatched, in the same entry), the marks' meaning
    once, a what-if only where it leaves its setting's line by VISIBLE_POINTS (the rest listed once: on one H100 every
    what-if lay on its line, 29 entries described nothing visible), the y-limit from the data (`efficiency_top`)."""
    from bench.report import plots
    fig, ax = plots._figure("Forecast: scaling efficiency past the measured counts", where, workload, width=10.0)
    xs_all, marks, hidden, drawn = [], [], {}, set()
    palette = colors([line[0] for line in lines])
    shared = {a[0] for *_, a in lines}
    for s, whatifs, checks, assumed in lines:
        color = palette[(s.strategy, s.variant)]
        name = plot_name(s)
        # at one device a wrapper against single is its overhead (the report's table says it), not scaling
        measured = [(n, c.efficiency * 100) for n, c in s.configs.items() if n > 1 and not math.isnan(c.efficiency)]
        if measured:
            ax.plot([n for n, _ in measured], [e for _, e in measured], "o", color=color)
            marks += [(n, e, color) for n, e in measured]
            drawn.add("measured")
        for r in checks:
            eff = s.configs[r["device_count"]].efficiency
            if r.get("error") is None or math.isnan(eff):
                continue
            fe = eff / (1 + r["error"])  # the same samples at the forecast step: efficiency scales inversely
            ax.plot([r["device_count"]] * 2, [eff * 100, fe * 100], "-", color=color, alpha=0.5)
            ax.plot([r["device_count"]], [fe * 100], "o", mfc="none", color=color)
            marks.append((r["device_count"], fe * 100, color))
            drawn.add("checked")
        top = max(s.configs)
        pts = [p for p in whatifs[0][1] if not p.refused and not math.isnan(p.efficiency) and p.count >= top]
        xs_all += [n for n in s.configs if n > 1]
        if not pts:
            continue
        xs, ys = [p.count for p in pts], [p.efficiency * 100 for p in pts]
        xs_all += xs
        what_assumed, (lo, hi) = assumed
        hatched = what_assumed and not math.isnan(lo)
        said = what_assumed if len(shared) > 1 else ""   # one assumption for every line: said once (`_key`)
        shaky = any(p.unresolved for p in pts) and "not resolved, dashed: one unstable process (--repeats 3)"
        drawn.add("line")
        ax.plot(xs, ys, UNRESOLVED_STYLE if shaky else "-", color=color, label=f"{name} forecast" + "".join(
            f"; {w}" for w in (shaky, said and f"{said} assumed", hatched and f"hatched: {what_assumed} assumed, erred "
                               f"{lo:+.0%} to {hi:+.0%} where measured") if w))
        marks += [(x, y, color) for x, y in zip(xs, ys)]
        ranges = [p.range_of("efficiency") for p in pts]
        if not any(math.isnan(r[0]) for r in ranges):
            _band(ax, xs, [r[0] * 100 for r in ranges], [r[1] * 100 for r in ranges], color)
            marks += [(x, r[1] * 100, color) for x, r in zip(xs, ranges)]
            drawn.add("band")
        if hatched:  # step error e: efficiency / (1 + e)
            ax.fill_between(xs, [y / (1 + hi) for y in ys], [y / (1 + lo) for y in ys], facecolor="none",
                            edgecolor=color, hatch="//", alpha=0.4, linewidth=0)
            marks += [(x, y / (1 + lo), color) for x, y in zip(xs, ys)]
        marks += [(x, y, color) for x, y in zip(xs, _what_ifs(ax, name, color, whatifs[1:], dict(zip(xs, ys)), hidden))]
    _key(ax, next(iter(shared)) if len(shared) == 1 else "", drawn)
    ax.axhline(fo.EFFICIENT * 100, color="#999999", linestyle="--", label=f"{fo.EFFICIENT:.0%}: scaling stops paying")
    if hidden:
        ax.plot([], [], " ", label=f"not drawn, within {VISIBLE_POINTS:g} points of their setting's line at every "
                "count: " + "; ".join(f"{what} ({'every setting' if len(names) == len(lines) else ', '.join(names)})"
                                 for what, names in hidden.items()))
    _ticks(ax, xs_all)
    ax.set(xlabel="device count (log scale)", ylabel="scaling efficiency (%)")
    top = efficiency_top([y for _, y, _ in marks])
    ax.set_ylim(0, top)
    _off_scale(ax, marks, top)
    _legend(fig, ax)
    return fig


NEAR = 1.5    # the budget is drawn where it lies within 1.5x the data's top; further up it squashed the data


def memory_figure(workload: str, where: str, lines: list, budget_mib, budget_name: str = ""):
    """lines: [(setting, [Point])] -> memory per device against count, the measured peaks (each setting its own marker,
    so that two equal peaks both show), the budget. The y axis is the data's: the budget is drawn where it is near
    (NEAR), else named in the legend as above the scale (a 140 GiB line over 17 GiB of data squashed both lines)."""
    from bench.report import plots
    fig, ax = plots._figure("Forecast: memory per device", where, workload, width=10.0)
    xs_all, tops = [], []
    palette = colors([s for s, _ in lines])
    for i, (s, pts) in enumerate(lines):
        color, marker = palette[(s.strategy, s.variant)], plots.MARKERS[i % len(plots.MARKERS)]
        name = plot_name(s)
        ax.plot([], [], "-" + marker, color=color, mfc="none", label=f"{name}: forecast (line), measured peak (marker)")
        mem = [(p.count, p.memory.device_mib, p.range_of("memory_mib")) for p in pts if p.memory is not None]
        if mem:
            ax.plot([n for n, _, _ in mem], [m for _, m, _ in mem], "-", color=color)
            tops += [m for _, m, _ in mem]
            if not any(math.isnan(r[0]) for _, _, r in mem):
                _band(ax, [n for n, _, _ in mem], [r[0] for _, _, r in mem], [r[1] for _, _, r in mem], color)
                tops += [r[1] for _, _, r in mem]
            xs_all += [n for n, _, _ in mem]
        seen = [(n, s.raws[c.key].peak_mib + (s.raws[c.key].runtime_mib or 0.0)) for n, c in s.configs.items()
                if c.key in s.raws and s.raws[c.key].peak_mib]  # the device level, as the line
        if seen:
            ax.plot([n for n, _ in seen], [m for _, m in seen], marker, color=color, mfc="none", ms=11 - 2 * (i % 4),
                    mew=1.5)
            xs_all += [n for n, _ in seen]
            tops += [m for _, m in seen]
    top = max(tops, default=1.0)
    name = budget_name or (f"budget {mm.budget_text(budget_mib)}" if budget_mib else "")
    if budget_mib and budget_mib <= NEAR * top:
        ax.axhline(budget_mib, color="#c0392b", linestyle="--", label=f"{name} per device")
        top = max(top, budget_mib)
    elif budget_mib:
        ax.plot([], [], " ", label=f"{name} per device ({budget_mib:.0f} MiB): above the scale, not drawn")
    _ticks(ax, xs_all or [2])
    ax.set(xlabel="device count (log scale)", ylabel="memory per device (MiB; CUDA: the device level)")
    ax.set_ylim(0, top * 1.1)
    _legend(fig, ax)
    return fig


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
        sentences.append(batched(s, fo.recommendation(s, ws[0][1], ws))
                         + (f"; checked at x{','.join(str(r['device_count']) for r in checked)} with errors "
                            f"{', '.join(format(r['error'], '+.0%') for r in checked)}"
                            + (f", {sum(r['in_range'] for r in inside)} of {len(inside)} inside the range" if inside else "")
                            if checked else "; not checked (one measured count)")
                         + (f"; memory: {mm.fit_words(mems, budget, s.strategy, budget_name)}"
                            + batches.over_words(s, budget, frontier.peak_mib(s.configs[min(s.configs)]))
                            if mems else ""))
        moves = fo.below_words(ws, fo.DOUBLING[-1]) if len(ws) > 1 else ""
        shown = [p for p in ws[0][1] if p.count in TABLE_COUNTS]
        rows += [[s.label] + cells(s, p) for p in shown]   # each with its own MFU
        mfu = mfu_words(s, [(p, None) for p in shown])
        if mfu:
            errors.append(f"MFU of {s.label}: {mfu}.")
        rows.append([s.label, "rests on"] + [""] * (len(forecast_headers()) - 2) + ["; ".join(
            ([batches.head_words(s).rstrip("; ")] if s.batch else []) + fo.rests_on(s, inp, m) + [spread.words(inp, m)] + ([assumed] if assumed else []))
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
        shown = display_name(workload, by_workload)   # a model given by path: its titles say my_model:build
        path = os.path.join(plots_dir, plots.file_name(workload, "forecast"))
        figure(shown, where, lines).savefig(path, dpi=100)
        b.append(("img", path, f"{shown}: forecast scaling efficiency"))
        if any(p.memory is not None for _, pts in mem_lines[workload] for p in pts):
            path = os.path.join(plots_dir, plots.file_name(workload, "forecast_memory"))
            memory_figure(shown, where, mem_lines[workload], budget, budget_name).savefig(path, dpi=100)
            b.append(("img", path, f"{shown}: forecast memory per device"))
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
