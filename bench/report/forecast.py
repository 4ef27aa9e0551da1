"""The report's forecast section and plots: past the measured counts, on the machine the sweep measured (and the
preset its GPUs name for what it did not), with the check against the measured counts beside it.

    bl = blocks(store_path, sweep, plots_dir)     # report blocks (bench.report.pages); [] with nothing to forecast

Per workload two plots. <workload>_forecast.png: scaling efficiency against device count (log scale): the measured
points; each measured count above the smallest as the check forecast it (from the smaller counts, a hollow marker
joined to the measurement: the check table's numbers); the forecast line from the largest measured count on, with a
band of the check's own signed errors (lowest to highest, so the band at a measured count holds the measured point);
the 75% line and what-if lines (a faster inter-node network, bigger buckets, bf16 gradients).
<workload>_forecast_memory.png: memory per device against count, per setting, the measured peaks, and the budget
(the GPU's memory on CUDA) as a line. The tables: the forecast at 16, 64, 256 and 1024 devices with memory, what it
rests on (measured or assumed), and the check with its basis and why where it missed by more than 10%.
"""
from __future__ import annotations

import math
import os

from bench.forecast import check as fk
from bench.analysis import forecastable
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import memory as mm
from bench.config import ConfigError
from bench.store import store

TABLE_COUNTS = (16, 64, 256, 1024)
WHAT_IF_STYLES = ("--", ":", "-.")


def _text(v: float, spec: str) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _ticks(ax, counts: list) -> None:
    ticks = sorted({1, *fo.DOUBLING} & set(range(min(counts + [2]), max(counts + [2]) + 1))) or list(fo.DOUBLING)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(n) for n in ticks])


def figure(workload: str, where: str, lines: list):
    """lines: [(setting, what_ifs, checks, (lo, hi))] -> a matplotlib Figure (Agg, no pyplot)."""
    from bench.report import plots
    fig, ax = plots._figure("Forecast: scaling efficiency past the measured counts", where, workload, width=9.0)
    xs_all = []
    for s, whatifs, checks, (lo, hi) in lines:
        color = plots.COLORS.get(s.strategy)
        name = f"{plots.NAMES.get(s.strategy, s.strategy)} [{s.variant}]"
        measured = [(n, c.efficiency) for n, c in s.configs.items() if not math.isnan(c.efficiency)]
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
            if i == 0:
                ax.plot(xs, ys, "-", color=color, label=f"{name} forecast, this network")
                if not math.isnan(lo):  # step error e: efficiency / (1 + e); lo..hi of the checked counts
                    ax.fill_between(xs, [y / (1 + hi) for y in ys], [y / (1 + lo) for y in ys], color=color, alpha=0.15,
                                    label=f"{name}: the check's errors {lo:+.0%} to {hi:+.0%}")
            else:
                ax.plot(xs, ys, WHAT_IF_STYLES[(i - 1) % len(WHAT_IF_STYLES)], color=color, alpha=0.6, label=f"{name}: {what}")
        xs_all += list(s.configs)
    ax.axhline(fo.EFFICIENT * 100, color="#999999", linestyle="--", label=f"{fo.EFFICIENT:.0%}: scaling stops paying")
    _ticks(ax, xs_all)
    ax.set(xlabel="device count (log scale)", ylabel="scaling efficiency (%)")
    ax.set_ylim(0, 110)
    ax.legend(fontsize="small")
    return fig


def memory_figure(workload: str, where: str, lines: list, budget_mib):
    """lines: [(setting, [Point])] -> memory per device against count, the measured peaks, the budget."""
    from bench.report import plots
    fig, ax = plots._figure("Forecast: memory per device", where, workload, width=9.0)
    xs_all = []
    for s, pts in lines:
        color = plots.COLORS.get(s.strategy)
        name = f"{plots.NAMES.get(s.strategy, s.strategy)} [{s.variant}]"
        mem = [(p.count, p.memory.total_mib) for p in pts if p.memory is not None]
        if mem:
            ax.plot([n for n, _ in mem], [m for _, m in mem], "-", color=color, label=f"{name} forecast")
            xs_all += [n for n, _ in mem]
        seen = [(n, s.raws[c.key].peak_mib) for n, c in s.configs.items() if c.key in s.raws and s.raws[c.key].peak_mib]
        if seen:
            ax.plot([n for n, _ in seen], [m for _, m in seen], "o", color=color, label=f"{name} measured peak")
    if budget_mib:
        ax.axhline(budget_mib, color="#c0392b", linestyle="--", label=f"budget {budget_mib / 1024:.3g} GiB per device")
    _ticks(ax, xs_all or [2])
    ax.set(xlabel="device count (log scale)", ylabel="memory per device (MiB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return fig


def blocks(store_path: str, sweep, plots_dir: str, where: str = "") -> list:
    """The forecast section of the report, from the store alone; [] when the sweep has nothing to forecast."""
    conn = store.connect(store_path, readonly=True)
    try:
        f = forecastable.load(conn, int(sweep.sweep["sweep_id"]))
    finally:
        conn.close()
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
    sentences, by_workload, mem_lines, rows, checks = [], {}, {}, [], []
    for s, inp in sets:
        ws = fo.what_ifs(s, inp, m, fo.DOUBLING)
        check = fk.validate(s, f.runs, None, {}, "")
        lo, hi = fk.band(check)
        by_workload.setdefault(s.workload, []).append((s, ws, check, (lo, hi)))
        mem_lines.setdefault(s.workload, []).append((s, ws[0][1]))
        checked = [r for r in check if r.get("error") is not None]
        mems = [p.memory for p in ws[0][1] if p.memory is not None]
        sentences.append(fo.recommendation(s, ws[0][1])
                         + (f"; checked at x{','.join(str(r['device_count']) for r in checked)} with errors {lo:+.0%} to "
                            f"{hi:+.0%}" if checked else "; not checked (one measured count)")
                         + (f"; memory: {mm.fit_words(mems, budget, s.strategy)}" if mems else ""))
        moves = "; ".join(f"{what}: {fo.first_below(pts) or 'not up to 1024'}" for what, pts in ws[1:])
        for p in fo.series(s, inp, TABLE_COUNTS, m):
            rows.append([s.label, str(p.count), str(p.nodes), _text(p.step_ms, ".1f"), _text(p.samples_per_s, ".0f"),
                         fo.shown_efficiency(s, p.efficiency, p.count),
                         _text(p.memory.total_mib if p.memory else None, ".0f"),
                         p.refused or p.bound])
        rows.append([s.label, "rests on", "", "", "", "", "", "; ".join(fo.rests_on(s, inp, m))
                     + (f". Under 75% from: {moves}" if moves else "")])
        for r in check:
            checks.append([s.label, str(r["device_count"]), r.get("from_counts") or "–",
                           _text(r.get("forecast_step_ms"), ".2f"), _text(r["measured_step_ms"], ".2f"),
                           _text(r.get("error"), "+.1%"), _text(r.get("mem_error"), "+.0%"), r.get("basis") or "–",
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
    b.append(("table", ["setting", "devices", "nodes", "step ms", "samples/s", "efficiency", "MiB/device", "bound"], rows))
    if checks:
        b.append(("p", "The check: each measured count forecast from what its basis allows (held out: nothing of that "
                       "count; machine at xN: its collectives measured apart from training, nothing of its training), "
                       "beside the measurement; memory against the measured peak."))
        b.append(("table", ["setting", "devices", "from", "forecast ms", "measured ms", "error", "memory error", "basis",
                            "beyond 10%: why"], checks))
    return b
