"""The report's forecast section and plot: past the measured counts, on the network the sweep measured (and the
preset its GPUs name for what it did not), with the check against the measured counts beside it.

    bl = blocks(store_path, sweep, plots_dir)     # report blocks (bench.report.pages); [] with nothing to forecast

Per workload one plot, <workload>_forecast.png: scaling efficiency against device count (log scale), the
measured points, the forecast line of each DDP/FSDP/DataParallel setting with a band of +-its largest check
error, the 75% line and the count where each crosses it, and what-if lines (a faster inter-node network,
bigger buckets, bf16 gradients). The tables: the forecast at 16, 64, 256 and 1024 devices, what it rests on
(measured or assumed), and the check, with why where it missed by more than 10%.
"""
from __future__ import annotations

import math
import os

from bench.analysis import forecast_outlook as fo
from bench.config import ConfigError
from bench.analysis import forecast_sweep as fs
from bench.analysis import network as nw
from bench.store import forecasts, store

TABLE_COUNTS = (16, 64, 256, 1024)
WHAT_IF_STYLES = ("--", ":", "-.")


def _text(v: float, spec: str) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def figure(workload: str, where: str, lines: list):
    """lines: [(setting, what_ifs, band, crossing)] -> a matplotlib Figure (Agg, no pyplot)."""
    from bench.report import plots
    fig, ax = plots._figure("Forecast: scaling efficiency past the measured counts", where, workload, width=9.0)
    for s, whatifs, band, crossing in lines:
        color = plots.COLORS.get(s.strategy)
        name = f"{plots.NAMES.get(s.strategy, s.strategy)} [{s.variant}]"
        measured = [(n, c.efficiency) for n, c in s.configs.items() if not math.isnan(c.efficiency)]
        if measured:
            ax.plot([n for n, _ in measured], [e * 100 for _, e in measured], "o", color=color, label=f"{name} measured")
        for i, (what, pts) in enumerate(whatifs):
            pts = [p for p in pts if not p.refused and not math.isnan(p.efficiency)]
            if not pts:
                continue
            xs, ys = [p.count for p in pts], [p.efficiency * 100 for p in pts]
            if i == 0:
                ax.plot(xs, ys, "-", color=color, label=f"{name} forecast, this network")
                if band and not math.isnan(band):
                    ax.fill_between(xs, [y * (1 - band) for y in ys], [y * (1 + band) for y in ys], color=color, alpha=0.15,
                                    label=f"{name}: +-{band:.0%} (largest check error)")
            else:
                ax.plot(xs, ys, WHAT_IF_STYLES[(i - 1) % len(WHAT_IF_STYLES)], color=color, alpha=0.6, label=f"{name}: {what}")
        if crossing:
            ax.axvline(crossing, color=color, alpha=0.3, linewidth=1)
    ax.axhline(fo.EFFICIENT * 100, color="#999999", linestyle="--", label=f"{fo.EFFICIENT:.0%}: scaling stops paying")
    ax.set_xscale("log", base=2)
    ax.set_xticks(fo.DOUBLING, [str(n) for n in fo.DOUBLING])
    ax.set(xlabel="device count (log scale)", ylabel="scaling efficiency (%)")
    ax.set_ylim(0, 110)
    ax.legend(fontsize="small")
    return fig


def blocks(store_path: str, sweep, plots_dir: str, where: str = "") -> list:
    """The forecast section of the report, from the store alone; [] when the sweep has nothing to forecast."""
    conn = store.connect(store_path, readonly=True)
    try:
        raw = forecasts.read_inputs(conn, int(sweep.sweep["sweep_id"]))
    finally:
        conn.close()
    sets = [s for s in fs.settings(sweep, raw) if not isinstance(fs.inputs(s), str)]
    if not sets:
        return []
    try:
        net = fo.network(sweep)
    except Exception as e:  # no all-reduce rows and no preset: say so rather than fail the report
        return [("h", 2, "Forecast past the measured counts"), ("p", f"No forecast: {e}")]
    measured, own = nw.levels_from_comm(sweep.comm), nw.own_levels(sweep.comm)
    b: list = [("h", 2, "Forecast past the measured counts")]
    sentences, by_workload, rows, checks = [], {}, [], []
    for s in sets:
        inp = fs.inputs(s)
        ws = fo.what_ifs(s, inp, net, fo.DOUBLING)
        try:
            check = fs.validate(s, measured, None, {}, "", own)
        except ConfigError:  # no all-reduce measured at the smaller counts: the forecast stands unchecked
            check = []
        errs = [abs(r["error"]) for r in check if r.get("error") is not None]
        band = max(errs) if errs else math.nan
        crossing = fo.first_below(ws[0][1])
        by_workload.setdefault(s.workload, []).append((s, ws, band, crossing))
        sentences.append(fo.recommendation(s, ws[0][1]) + (f"; checked within {band:.0%} at the measured counts" if errs else
                                                            "; not checked (one measured count)"))
        moves = "; ".join(f"{what}: {fo.first_below(pts) or 'not up to 1024'}" for what, pts in ws[1:])
        for p in fo.series(s, inp, TABLE_COUNTS, net):
            rows.append([s.label, str(p.count), str(p.nodes), _text(p.step_ms, ".1f"), _text(p.samples_per_s, ".0f"),
                         _text(p.efficiency, ".0%"), p.refused or p.bound])
        rows.append([s.label, "rests on", "", "", "", "", "; ".join(fo.rests_on(s, inp, net)) + (f". Under 75% from: {moves}" if moves else "")])
        for r in check:
            checks.append([s.label, str(r["device_count"]), r.get("from_counts") or "–",
                           _text(r.get("forecast_step_ms"), ".2f"), _text(r["measured_step_ms"], ".2f"),
                           _text(r.get("error"), "+.1%"), r.get("why") or ("within 10%" if r.get("error") is not None else "–")])
    b += [("p", s + ".") for s in sentences]
    b.append(("p", f"Network: inside a node {net.node.busbw_gbps:.3g} GB/s, {net.node.latency_us:.3g} us per step "
                   f"({'measured' if net.node.measured else 'assumed'}: {net.node.source}); between nodes "
                   f"{net.net.busbw_gbps:.3g} GB/s, {net.net.latency_us:.3g} us ({'measured' if net.net.measured else 'assumed'}: "
                   f"{net.net.source}); {net.gpus_per_node} devices per node. The model, its references and its "
                   f"assumptions: README, section \"Forecast\"; `./run_bench.sh forecast --network ...` for another network."))
    os.makedirs(plots_dir, exist_ok=True)
    from bench.report import plots
    for workload, lines in by_workload.items():
        path = os.path.join(plots_dir, plots.file_name(workload, "forecast"))
        figure(workload, where, lines).savefig(path, dpi=100)
        b.append(("img", path, f"{workload}: forecast scaling efficiency"))
    b.append(("table", ["setting", "devices", "nodes", "step ms", "samples/s", "efficiency", "bound"], rows))
    if checks:
        b.append(("p", "The check: each measured count forecast from the smaller counts alone (compute from them, the "
                       "network from the collectives microbenchmark), beside the measurement."))
        b.append(("table", ["setting", "devices", "from", "forecast ms", "measured ms", "error", "beyond 10%: why"], checks))
    return b
