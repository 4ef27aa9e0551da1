"""`./run_bench.sh forecast`: past the devices the sweep had. Reads a stored sweep (no GPU, seconds) and forecasts,
for each DDP, FSDP (ZeRO, HSDP) and DataParallel setting it measured, the step, samples/s, scaling efficiency and
memory per device at the counts asked, each with its range (bench.forecast.spread), on the network named, with what
limits each point; then checks itself (whether each measurement fell inside the range).

    ./run_bench.sh forecast                                   # the latest sweep, 2..1024 devices
    ./run_bench.sh forecast --to 16,64,256,1024 --network h100
    ./run_bench.sh forecast --network node=370@3,net=50@5 --gpus-per-node 8 --sweep 4
    ./run_bench.sh forecast --sweep 1 --against 2 --to 2      # held out: sweep 1 (x1 + the machine at x2) judged by sweep 2
    ./run_bench.sh forecast --peak-tflops fp32=1.2            # MFU against this peak (CPU, or a GPU the table lacks)

The model and its references: bench.forecast.step (the step), bench.forecast.network (the collectives, the
fit, the presets), bench.forecast.interference (collectives beside computation), bench.forecast.memory (memory
per device), bench.forecast.settings (what each forecast rests on), bench.forecast.check (the check
and its basis). The check is printed and stored in the store's `forecasts` table; the report draws both. Bad flags
exit 2 naming the value before the store is read; a refusal writes nothing.
"""
from __future__ import annotations

import argparse
import math

from bench import options
from bench.analysis import cost, utilisation
from bench.forecast import batches
from bench.forecast import brackets
from bench.forecast import check as fk
from bench.analysis import forecastable
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import network as nw
from bench.forecast import spread
from bench.analysis.reference import REFERENCE_IMAGES
from bench.config import ConfigError, finite
from bench.machine import peaks
from bench.report import forecast as rf
from bench.report.utilisation import forecast_headers
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


def _sweep_id(text: str, flag: str) -> str:
    if text != "last" and not str(text).isdigit():
        raise ConfigError(f"{flag} {text!r}: expected 'last' or a sweep id (a whole number)")
    return text


def parse(argv: list) -> argparse.Namespace:
    p = options.Parser(prog="./run_bench.sh forecast", description=__doc__.splitlines()[0],
               formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="presets: " + "; ".join(f"{k}: {v.summary}" for k, v in nw.PRESETS.items()))
    p.add_argument("--store", default="results/bench.sqlite", help="the results store to read (and to store the check in)")
    p.add_argument("--sweep", default="last", help="a sweep id, or 'last' (default)")
    p.add_argument("--against", default=None, help="a later sweep of the same store whose measured counts judge this "
                   "forecast (the held-out form: the forecast reads only --sweep)")
    p.add_argument("--to", default=None, help="device counts to forecast, e.g. 16,64,256,1024 (default: 2,4,...,1024)")
    p.add_argument("--network", default=None, help="a preset (" + ", ".join(nw.PRESETS) + ") and/or levels "
                   "LEVEL=GBPS@US: node (inside a node) or net (between nodes), bus bandwidth GB/s, latency us per "
                   "step, e.g. h100 or node=370@3,net=50@5 (default: the levels the sweep measured; a CUDA sweep's "
                   "GPU names its preset for the rest)")
    p.add_argument("--gpus-per-node", default=None, help="devices per node at the forecast counts (default: the "
                   "preset's, else the sweep's)")
    p.add_argument("--memory-budget-gib", default=None, help="memory per device to fit in, GiB (default: the sweep's "
                   "own --memory-budget-gib, else the GPU's memory on CUDA; none on CPU)")
    p.add_argument(cost.FLAG, dest="price", default=None, help=cost.HELP)
    p.add_argument("--peak-tflops", default=None, help="dense peak TFLOP/s per device for the MFU column: a number, or "
                   "PRECISION=TFLOPS,... (e.g. bf16=989,fp32=67); overrides the table of known GPUs (default: the "
                   "sweep's own --peak-tflops, else the table; on CPU no MFU without it)")
    ns = p.parse_args(argv)
    if ns.peak_tflops is not None:
        try:
            peaks.parse_override(ns.peak_tflops)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    ns.prices = cost.parse_price(ns.price)
    ns.to = counts(ns.to) if ns.to is not None else DEFAULT_TO
    ns.preset, ns.levels = nw.parse_network(ns.network) if ns.network is not None else (None, {})
    if ns.gpus_per_node is not None:
        if not str(ns.gpus_per_node).isdigit() or int(ns.gpus_per_node) < 1:
            raise ConfigError(f"--gpus-per-node {ns.gpus_per_node!r}: expected a whole number of 1 or more")
        ns.gpus_per_node = int(ns.gpus_per_node)
    if ns.memory_budget_gib is not None:
        ns.memory_budget_gib = finite(ns.memory_budget_gib, "--memory-budget-gib")
        if ns.memory_budget_gib <= 0:
            raise ConfigError(f"--memory-budget-gib {ns.memory_budget_gib:g}: expected a number of GiB above 0")
    _sweep_id(ns.sweep, "--sweep")
    if ns.against is not None:
        _sweep_id(ns.against, "--against")
    return ns


def table(headers: list, rows: list) -> str:
    """Columns right-aligned to their widest cell, the last (words) left-aligned, each line indented by two."""
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    line = lambda r: "  " + " ".join(str(c).rjust(w) for c, w in zip(r[:-1], widths)) + "  " + str(r[-1])  # noqa: E731
    return "\n".join(line(r) for r in [headers] + rows)


def budget_mib(ns, sweep) -> tuple:
    """(MiB per device, which budget in words): --memory-budget-gib, else the sweep's own, else the GPU's (fo.budget)."""
    return fo.budget(sweep, ns.memory_budget_gib)


def price_of(ns, sweep):
    """The sweep's price per device-hour (--price-per-device-hour), said; None without one."""
    if ns.prices is None:
        return None
    env = sweep.envs[0] if sweep.envs else {}
    price = ns.prices.lookup(sweep.sweep.get("label"), sweep.sweep.get("hostname"), cost.machine_names(env))
    print(f"  price: {price.per_device_hour:g} {ns.prices.unit()} per device-hour ({price.source})" if price else
          f"  price: {ns.price} names no price for this sweep's machine (label, host, device or 'default')")
    return price


def cost_line(s, points: list, price, unit: str) -> str:
    """What the forecast counts cost per million samples (and per reference epoch for deeplabv3), the cheapest named."""
    known = [(cost.per_million_samples(price.per_device_hour, p.count, p.samples_per_s), p) for p in points if not p.refused]
    known = [(c, p) for c, p in known if not math.isnan(c)]
    if not known:
        return "cost: no forecast count has a throughput"
    parts = [f"x{p.count} {c:.3g}" for c, p in known]
    best = min(known, key=lambda k: k[0])[1]
    epoch = ""
    if s.workload == "deeplabv3":
        epoch = "; per reference epoch (VOC train, 1464 images): " + ", ".join(
            f"x{p.count} {cost.per_epoch(price.per_device_hour, p.count, REFERENCE_IMAGES / p.samples_per_s):.3g}"
            for _, p in known)
    fastest = max(known, key=lambda k: k[1].samples_per_s)[1]
    return (f"cost per million samples ({unit}): " + ", ".join(parts) + f"; cheapest x{best.count}, fastest "
            f"x{fastest.count}{epoch}")


def main(argv: list) -> int:
    ns = parse(argv)                              # every flag checked before the store is opened
    conn = store.connect(ns.store, readonly=True)
    try:
        f = forecastable.load(conn, None if ns.sweep == "last" else int(ns.sweep))
        judged = forecastable.load(conn, None if ns.against == "last" else int(ns.against)) if ns.against is not None else None
    finally:
        conn.close()
    if ns.peak_tflops is not None:                # the peaks typed here, as report --peak-tflops gives them
        utilisation.attach(f.sweep, ns.peak_tflops)
    if judged is not None and judged.sid <= f.sid:
        raise ConfigError(f"--against {judged.sid}: expected a sweep later than the forecast's ({f.sid}): a later "
                          "measurement judges it")
    if not any(s.strategy != "dp" for s in f.sets):
        raise ConfigError(f"--store {ns.store} sweep {f.sid}: no DDP or FSDP run to forecast from (the sweep ran "
                          f"{', '.join(sorted({c.strategy for cs in f.sweep.bench.values() for c in cs})) or 'nothing'}); "
                          "run one with --strategies ddp")
    m = fo.machine(f.sweep, f.runs, ns.preset, ns.levels, ns.gpus_per_node)   # exit 2 here, before anything printed
    from bench.report.bound import bound          # the report's bound of each run at one device, for the local step
    fo.attach_bounds(f.sets, lambda c: bound(f.sweep, c.workload, c)[0])
    batches.mark(f.sets, f.sweep)                 # a fit sweep's forecast names the batch it rests on
    budget, budget_name = budget_mib(ns, f.sweep)
    grid = tuple(sorted(set(ns.to) | {n for n in fo.DOUBLING if n <= max(ns.to)}))
    print(f"forecast of sweep {f.sid} ({ns.store}); {m.net.gpus_per_node} devices per node; {m.net.backend}")
    for name, lv in (("inside a node", m.net.node), ("between nodes", m.net.net)):
        print(f"  network {name}: {lv.busbw_gbps:.3g} GB/s, {lv.latency_us:.3g} us per step, {lv.call_us:.3g} us per "
              f"call ({'measured' if lv.measured else 'assumed'}: {lv.source})")
    print(f"  {m.inter.words()}")
    cpu = fs.on_cpu(f.sets)
    per_node = m.gpus_per_node if cpu else 0    # CPU: a budget is a node's, its processes summed, as the report's
    print("  memory budget: " + (f"{budget_name} per {'node' if per_node else 'device'}" if budget
                                 else "none (--memory-budget-gib)"))
    price = price_of(ns, f.sweep)
    forecast_sets = [s for s in f.sets if not isinstance(fs.inputs(s, m), str)]
    on, on_short = (fo.on_words(m, forecast_sets, short) for short in (False, True))
    for s in f.sets:
        inp = fs.inputs(s, m)
        print(f"\n{s.label}" + (f": {batches.head_words(s).rstrip('; ')}" if s.batch else ""))
        if isinstance(inp, str):
            print(f"  not forecast: {inp}")
            continue
        print("  rests on: " + "; ".join(fo.rests_on(s, inp, m)))
        print(f"  {spread.words(inp, m)}")
        assumed = fk.assumed_words(m, fk.validate(s, f.runs, ns.preset, ns.levels, ""), grid)
        if assumed:
            print(f"  {assumed}")
        whatifs = fo.what_ifs(s, inp, m, grid)
        pts = [p for p in whatifs[0][1] if p.count in ns.to]
        shown = [(fo.measured_point(s, n), c) for n, c in s.configs.items()] + [(p, None) for p in pts]
        print(table(forecast_headers(), [rf.cells(s, p, c) for p, c in shown]))   # each row with its own MFU
        plain = fo.unbracketed_words([p for p, _ in shown])
        if plain:
            print(f"  {plain}")
        mfu_words = rf.mfu_words(s, shown)
        if mfu_words:
            print(f"  MFU: {mfu_words}")
        if s.configs.keys() - {1}:
            print(f"  {fo.BASIS_WORDS}")
        below = fo.below_words(whatifs, grid[-1], on_short)
        if below:                                 # none where the efficiency is unknown (no single device x1)
            print(f"  efficiency under {fo.EFFICIENT:.0%} from: {below}")
        print("  " + fo.recommendation(s, whatifs[0][1], whatifs, on))
        if price is not None:
            print("  " + cost_line(s, pts, price, ns.prices.unit()))
        mems = [p.memory for p in whatifs[0][1] if p.memory is not None]
        if mems:
            print(f"  memory: {rf.memory_fits(s, whatifs[0][1], budget, budget_name, per_node)}"
                  + f"; at {mems[-1].count}: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in mems[-1].parts.items()) + " MiB"
                  + (f", CUDA context, NCCL and the allocator's cache {mems[-1].runtime_mib:.0f} MiB (measured at "
                     f"x{inp.memory.count}; NCCL's buffers grow with its peers: not modelled)" if mems[-1].runtime_mib else ""))
    return _check(ns, f, judged)


def _check(ns, f, judged) -> int:
    now = store.now()
    if judged is None:
        rows = [r for s in f.sets for r in fk.validate(s, f.runs, ns.preset, ns.levels, now)]
        print("\ncheck against the measured counts (each forecast from what its basis allows; the basis on each line):")
    else:
        by = {(s.workload, s.strategy, s.variant): s for s in judged.sets}
        rows = [r for s in f.sets if (s.workload, s.strategy, s.variant) in by
                for r in fk.validate_against(s, by[(s.workload, s.strategy, s.variant)], f.runs, ns.preset, ns.levels,
                                             now, judged.sid, judged.raw)]
        print(f"\nheld-out check: sweep {f.sid}'s forecast against sweep {judged.sid}'s measurement:")
    if not rows:
        print("  nothing to check: no measured count above the forecast's own")
        return 0
    done = [r for r in rows if r.get("forecast_step_ms") is not None]
    for r in rows:
        head = f"  {r['workload']} {r['strategy']} [{r['variant']}] x{r['device_count']}: "
        if r.get("forecast_step_ms") is None:
            print(head + f"not checked: {r['why']}")
            continue
        split = (f" (compute {r['compute_error']:+.0%}, communication and waiting {r['error'] - r['compute_error']:+.0%})"
                 if r.get("compute_error") is not None else "")
        mem = (f"; memory {r['forecast_mem_mib']:.0f} MiB"
               + brackets.check_range(r.get("forecast_mem_mib_low"), r.get("forecast_mem_mib_high"), 0, "MiB")
               + f" against {r['measured_mem_mib']:.0f} measured ({r['mem_error']:+.0%}, {r['mem_method']})"
               + {1: ", inside its range", 0: ", outside its range"}.get(r.get("mem_in_range"), "")
               if r.get("mem_error") is not None else "")
        ranged = brackets.check_range(r.get("forecast_step_ms_low"), r.get("forecast_step_ms_high"))
        inside = {1: ", inside the range", 0: ", outside the range"}.get(r.get("in_range"), "")
        print(head + f"forecast {r['forecast_step_ms']:.2f} ms from x{r['from_counts']}{ranged}, measured "
              f"{r['measured_step_ms']:.2f} ms: error {r['error']:+.1%}{inside}{split}{mem}\n      basis: {r['basis']}"
              + (f"\n      beyond {fk.CHECK_TARGET:.0%}: {r['why']}" if r["why"] else ""))
    if done:
        errs = [abs(r["error"]) for r in done]
        ranged = [r for r in done if r.get("in_range") is not None]
        mems = [r for r in done if r.get("mem_in_range") is not None]
        print(f"  {len(done)} configuration(s) checked: mean |error| {sum(errs) / len(errs):.1%}, max {max(errs):.1%} "
              f"(published: dPRO 14%, vTrain 8.4-14.7%, Lumos 3.3%); "
              + (f"{sum(r['in_range'] for r in ranged)} of {len(ranged)} measured inside the range; " if ranged else "")
              + (f"memory: {sum(r['mem_in_range'] for r in mems)} of {len(mems)} peaks inside its range; " if mems else "")
              + f"stored in the forecasts table of {ns.store}")
        conn = store.connect(ns.store)
        try:
            forecasts.write_validation(conn, f.sid, done)
        finally:
            conn.close()
    return 0
