"""The forecast as plain rows, for bench.results' `forecast` and `checks` frames and `./run_bench.sh export`: what
`./run_bench.sh forecast` prints at its default counts (2, 4, ... 1024, on the network the sweep measured) and the
report draws, from the functions both take it from (bench.analysis.forecastable, bench.forecast.outlook), not a second
forecast.

    forecast(conn, sweep_id)   one row per forecast setting and count: step, samples/s, efficiency and memory per
                               device, each its central value with the range's low and high end (nan where nothing
                               was drawn); the bound there; per setting the recommendation, where efficiency falls under
                               75% on each what-if, the memory verdict, and what the forecast and its range rest on,
                               what it assumes, the network and the interference, in the forecast's words
    checks(conn, sweep_id)     the forecast's check as stored (the store's `forecasts` table: each measured count forecast
                               by `./run_bench.sh forecast`, the latest per judged sweep), nothing computed

Not in these rows: the measured counts' own figures (the configurations frame), the what-ifs' figures per count
(only where each falls under 75%), MFU and cost per count (`./run_bench.sh forecast --peak-tflops`,
`--price-per-device-hour`), another network (`--network`). Where the store lacks what the forecast needs (no collective
measured and no preset for the device, no setting it can forecast), there is no row.
"""
from __future__ import annotations

import math

from bench.analysis import forecastable
from bench.config import ConfigError
from bench.forecast import batches
from bench.forecast import check as fk
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import spread
from bench.report.forecast import memory_fits
from bench.report.bound import bound
from bench.shared.spec import STRATEGY_NAMES
from bench.store import forecasts
from bench.store.schema import FORECAST_COLUMNS

FIGURES = ("step_ms", "samples_per_s", "efficiency", "memory_mib")   # outlook's range names, each with _low and _high
FORECAST_ROW_COLUMNS = (
    "workload", "strategy", "strategy_name", "variant", "setting", "device_count", "nodes",
    *(f"{name}{end}" for name in FIGURES for end in ("", "_low", "_high")), "bound", "refused", "unresolved",
    "recommendation", "stops_paying_low", "stops_paying_high", "under_75_from", "memory_fits", "batch", "rests_on",
    "range_rests_on", "assumed", "network_node_busbw_gbps", "network_node_latency_us", "network_node", "network_net_busbw_gbps",
    "network_net_latency_us", "network_net", "gpus_per_node", "interference")
CHECK_COLUMNS = FORECAST_COLUMNS   # as stored (bench.store.schema), the forecast's sweep_id before them in the frame


def _level(lv) -> str:
    """A network level's origin as the forecast prints it: 'measured: ...' or 'assumed: ...'."""
    return f"{'measured' if lv.measured else 'assumed'}: {lv.source}"


def forecast(conn, sweep_id: int) -> list:
    """The forecast of the sweep as rows (FORECAST_ROW_COLUMNS); [] where the store lacks what it needs."""
    f = forecastable.load(conn, sweep_id)
    try:
        m = fo.machine(f.sweep, f.runs)          # the network the sweep measured, else its GPU's preset
    except ConfigError:                          # neither: `forecast` refuses it, the report says 'No forecast'
        return []
    fo.attach_bounds(f.sets, lambda c: bound(f.sweep, c.workload, c)[0])
    batches.mark(f.sets, f.sweep)
    sets = [(s, inp) for s, inp in ((s, fs.inputs(s, m)) for s in f.sets) if not isinstance(inp, str)]
    budget, budget_name = fo.budget(f.sweep)
    per_node = m.gpus_per_node if fs.on_cpu(s for s, _ in sets) else 0
    on, on_short = (fo.on_words(m, [s for s, _ in sets], short) for short in (False, True))
    bound_cell = dict(fo.COLUMNS)["bound"]
    net = m.net
    machine = {"network_node_busbw_gbps": net.node.busbw_gbps, "network_node_latency_us": net.node.latency_us,
               "network_node": _level(net.node), "network_net_busbw_gbps": net.net.busbw_gbps,
               "network_net_latency_us": net.net.latency_us, "network_net": _level(net.net),
               "gpus_per_node": net.gpus_per_node, "interference": m.inter.words()}
    rows = []
    for s, inp in sets:
        whatifs = fo.what_ifs(s, inp, m, fo.DOUBLING)
        pts = whatifs[0][1]
        stops = fo.stop_range([p for p in pts if not p.refused and not math.isnan(p.efficiency)])
        setting = {
            "workload": s.workload, "strategy": s.strategy, "strategy_name": STRATEGY_NAMES.get(s.strategy, s.strategy),
            "variant": s.variant, "setting": s.label, "recommendation": fo.recommendation(s, pts, whatifs, on),
            "stops_paying_low": stops[0] if stops else None, "stops_paying_high": stops[1] if stops else None,
            "under_75_from": fo.below_words(whatifs, fo.DOUBLING[-1], on_short) or None,
            "memory_fits": memory_fits(s, pts, budget, budget_name, per_node) or None,   # the terminal's and report's
            "batch": batches.head_words(s).rstrip("; ") or None, "rests_on": "; ".join(fo.rests_on(s, inp, m)),
            "range_rests_on": spread.words(inp, m),
            "assumed": fk.assumed_words(m, fk.validate(s, f.runs, None, {}, ""), fo.DOUBLING) or None, **machine}
        for p in pts:
            central = {"step_ms": math.nan if p.refused else p.step_ms,
                       "samples_per_s": math.nan if p.refused else p.samples_per_s,
                       "efficiency": math.nan if p.refused else p.efficiency,
                       "memory_mib": p.memory.device_mib if p.memory else math.nan}   # as outlook.COLUMNS shows them
            row = {**setting, "device_count": p.count, "nodes": p.nodes, "bound": bound_cell(s, p),
                   "refused": p.refused or None, "unresolved": p.unresolved or None}
            for name in FIGURES:
                lo, hi = p.range_of(name)
                row.update({name: central[name], f"{name}_low": lo, f"{name}_high": hi})
            rows.append({c: row.get(c) for c in FORECAST_ROW_COLUMNS})
    return rows


def checks(conn, sweep_id: int) -> list:
    """The sweep's stored forecast checks (bench.store.forecasts.read_validation), their columns in CHECK_COLUMNS' order."""
    return [{c: r.get(c) for c in CHECK_COLUMNS} for r in forecasts.read_validation(conn, sweep_id)]


ROWS = {"forecast": forecast, "checks": checks}                        # bench.results' frame -> its rows ...
COLUMNS = {"forecast": FORECAST_ROW_COLUMNS, "checks": CHECK_COLUMNS}  # ... and its columns
