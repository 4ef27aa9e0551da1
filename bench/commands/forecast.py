"""`./run_bench.sh forecast`: past the devices the sweep had. Reads a stored sweep (no GPU, seconds) and forecasts,
for each DDP, FSDP and DataParallel setting it measured, the step, samples/s and scaling efficiency at the counts
asked, on the network named, with what limits each point; then checks itself against every measured count.

    ./run_bench.sh forecast                                   # the latest sweep, 2..1024 devices
    ./run_bench.sh forecast --to 16,64,256,1024 --network h100
    ./run_bench.sh forecast --network node=370@3,net=50@5 --gpus-per-node 8 --sweep 4

The model and its references: bench.analysis.forecast (the step), bench.analysis.network (the collectives, the
fit, the presets), bench.analysis.forecast_sweep (what each forecast rests on). The check against the truth
(every measured count above the smallest, forecast from the smaller counts alone) is printed and stored in the
store's `forecasts` table; the report draws both. Bad flags exit 2 naming the value before the store is read;
a refusal writes nothing.
"""
from __future__ import annotations

import argparse
import math

from bench.analysis import forecast_outlook as fo
from bench.analysis import forecast_sweep as fs
from bench.analysis import network as nw
from bench.analysis import results
from bench.config import ConfigError
from bench.store import forecasts, store

DEFAULT_TO = tuple(2**k for k in range(1, 11))    # 2, 4, ... 1024


def counts(text: str) -> tuple:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise ConfigError(f"--to {text!r}: {part!r} is not a whole device count of 1 or more (e.g. --to 16,64,256,1024)")
        out.append(int(part))
    return tuple(sorted(set(out)))


def parse(argv: list) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="./run_bench.sh forecast", description=__doc__.splitlines()[0],
               formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="presets: " + "; ".join(f"{k}: {v.summary}" for k, v in nw.PRESETS.items()))
    p.add_argument("--store", default="results/bench.sqlite", help="the results store to read (and to store the check in)")
    p.add_argument("--sweep", default="last", help="a sweep id, or 'last' (default)")
    p.add_argument("--to", default=None, help="device counts to forecast, e.g. 16,64,256,1024 (default: 2,4,...,1024)")
    p.add_argument("--network", default=None, help="a preset (" + ", ".join(nw.PRESETS) + ") and/or levels "
                   "LEVEL=GBPS@US: node (inside a node) or net (between nodes), bus bandwidth GB/s, latency us per "
                   "step, e.g. h100 or node=370@3,net=50@5 (default: the levels the sweep measured; a CUDA sweep's "
                   "GPU names its preset for the rest)")
    p.add_argument("--gpus-per-node", default=None, help="devices per node at the forecast counts (default: the "
                   "preset's, else the sweep's)")
    ns = p.parse_args(argv)
    ns.to = counts(ns.to) if ns.to is not None else DEFAULT_TO
    ns.preset, ns.levels = nw.parse_network(ns.network) if ns.network is not None else (None, {})
    if ns.gpus_per_node is not None:
        if not str(ns.gpus_per_node).isdigit() or int(ns.gpus_per_node) < 1:
            raise ConfigError(f"--gpus-per-node {ns.gpus_per_node!r}: expected a whole number of 1 or more")
        ns.gpus_per_node = int(ns.gpus_per_node)
    if ns.sweep != "last" and not str(ns.sweep).isdigit():
        raise ConfigError(f"--sweep {ns.sweep!r}: expected 'last' or a sweep id (a whole number)")
    return ns


def _fmt(v: float, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def main(argv: list) -> int:
    ns = parse(argv)                              # every flag checked before the store is opened
    conn = store.connect(ns.store, readonly=True)
    try:
        sid = results.pick_sweep(conn, None if ns.sweep == "last" else int(ns.sweep))
        sweep = results.load(conn, sid)
        raw = forecasts.read_inputs(conn, sid)
    finally:
        conn.close()
    sets = fs.settings(sweep, raw)
    if not any(s.strategy in ("ddp", "fsdp") for s in sets):
        raise ConfigError(f"--store {ns.store} sweep {sid}: no DDP or FSDP run to forecast from (the sweep ran "
                          f"{', '.join(sorted({c.strategy for cs in sweep.bench.values() for c in cs})) or 'nothing'}); "
                          "run one with --strategies ddp")
    measured, own = nw.levels_from_comm(sweep.comm), nw.own_levels(sweep.comm)
    net = fo.network(sweep, ns.preset, ns.levels, ns.gpus_per_node)
    g, backend = net.gpus_per_node, net.backend
    grid = tuple(sorted(set(ns.to) | {n for n in fo.DOUBLING if n <= max(ns.to)}))
    print(f"forecast of sweep {sid} ({ns.store}); {g} devices per node; {backend}")
    print(f"  network inside a node: {net.node.busbw_gbps:.3g} GB/s, {net.node.latency_us:.3g} us per step "
          f"({'measured' if net.node.measured else 'assumed'}: {net.node.source})")
    print(f"  network between nodes: {net.net.busbw_gbps:.3g} GB/s, {net.net.latency_us:.3g} us per step "
          f"({'measured' if net.net.measured else 'assumed'}: {net.net.source})")
    for s in sets:
        inp = fs.inputs(s)
        print(f"\n{s.label}")
        if isinstance(inp, str):
            print(f"  not forecast: {inp}")
            continue
        print("  rests on: " + "; ".join(fo.rests_on(s, inp, net)))
        print(f"  {'devices':>7} {'nodes':>5} {'step_ms':>9} {'samples/s':>10} {'efficiency':>10}  bound")
        for n, c in s.configs.items():
            print(f"  {n:>7} {c.nodes:>5} {_fmt(c.summary.median_ms, '9.1f')} {_fmt(c.samples_per_s, '10.1f')} "
                  f"{_fmt(c.efficiency, '10.0%')}  measured")
        for p in fo.series(s, inp, ns.to, net):
            if p.refused:
                print(f"  {p.count:>7} {p.nodes:>5} {'-':>9} {'-':>10} {'-':>10}  refused: {p.refused}")
            else:
                print(f"  {p.count:>7} {p.nodes:>5} {p.step_ms:9.1f} {p.samples_per_s:10.1f} {p.efficiency:10.0%}  "
                      f"{p.bound}{' (' + p.algorithm + ')' if p.algorithm and p.bound == 'exposed communication' else ''}")
        moves = [(what, fo.first_below(pts)) for what, pts in fo.what_ifs(s, inp, net, grid)]
        print(f"  efficiency under {fo.EFFICIENT:.0%} from: " + "; ".join(
            f"{what}: {n if n else 'not up to ' + str(grid[-1])}" for what, n in moves))
        print("  " + fo.recommendation(s, fo.series(s, inp, grid, net)))
    return _check(ns, sid, sets, measured, ns.preset, own)


def _check(ns, sid: int, sets: list, measured: dict, preset, own: tuple) -> int:
    rows = [r for s in sets for r in fs.validate(s, measured, preset, ns.levels, store.now(), own)]
    print("\ncheck against the measured counts (each forecast from the smaller counts alone; compute from them, "
          "the network from the collectives microbenchmark):")
    if not rows:
        print("  nothing to check: the sweep measured no DDP/FSDP/DataParallel count above its smallest")
        return 0
    done = [r for r in rows if r.get("forecast_step_ms") is not None]
    for r in rows:
        head = f"  {r['workload']} {r['strategy']} [{r['variant']}] x{r['device_count']}: "
        if r.get("forecast_step_ms") is None:
            print(head + f"not checked: {r['why']}")
            continue
        split = (f" (compute {r['compute_error']:+.0%}, communication {r['error'] - r['compute_error']:+.0%})"
                 if r.get("compute_error") is not None else "")
        print(head + f"forecast {r['forecast_step_ms']:.2f} ms from x{r['from_counts']}, measured "
              f"{r['measured_step_ms']:.2f} ms: error {r['error']:+.1%}{split}"
              + (f"\n      beyond {fs.CHECK_TARGET:.0%}: {r['why']}" if r["why"] else ""))
    if done:
        errs = [abs(r["error"]) for r in done]
        print(f"  {len(done)} configuration(s) checked: mean |error| {sum(errs) / len(errs):.1%}, max {max(errs):.1%} "
              f"(published: dPRO 14%, vTrain 8.4-14.7%, Lumos 3.3%); stored in the forecasts table of {ns.store}")
    conn = store.connect(ns.store)
    try:
        forecasts.write_validation(conn, sid, done)
    finally:
        conn.close()
    return 0
