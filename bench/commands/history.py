"""`./run_bench.sh history`: how each configuration moved over the sweeps of a store, and where it changed.

    ./run_bench.sh history                                        # results/bench.sqlite, every configuration
    ./run_bench.sh history --workloads synthetic --strategies ddp --gpus 8 --since 2025-06-01
    ./run_bench.sh history --price-per-device-hour prices.toml     # and what a million samples cost, sweep by sweep
    ./run_bench.sh history --leave-out 3                          # sweep 3 was disturbed: its noise counts for no step

For every configuration measured in more than one sweep: samples/s and efficiency sweep by sweep (bench.analysis.
history), each step that compare's rule calls a regression or an improvement, with what changed in the environment
there; a plot per workload, results/history.md and results/history.html, and one line per finding on the terminal.
Bad flags, a filter value the store does not hold, a price that is not a positive finite number, or a store that is
not one exit 2 before anything is written. A store written by an older version of the suite is read as it is.
"""
from __future__ import annotations

import argparse
from typing import Optional

from bench import config, options
from bench.analysis import compare, cost
from bench.analysis import history as hist
from bench.commands.compare import sweep_ids
from bench.config import ConfigError
from bench.store import read, store
from bench.store.store import StoreError

FILTERS = (("workloads", "workload", "names", "workloads to show, e.g. synthetic,deeplabv3"),
           ("strategies", "strategy", "names", "strategies to show, e.g. ddp,fsdp"),
           ("gpus", "device_count", "ints", "device counts to show, e.g. 4,8 (on CPU: gloo processes)"),
           ("precision", "precision", "names", "precisions to show, e.g. fp32,bf16"))


def parse(argv: list) -> argparse.Namespace:
    p = options.Parser(prog="./run_bench.sh history", description=__doc__.splitlines()[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="results/bench.sqlite", help="the results store to read")
    for name, _, _, help_ in FILTERS:
        p.add_argument(config.flag(name), default=None, help=help_)
    p.add_argument("--since", default=None, help="only sweeps started on or after this date (2025-06-01, or 2025-06-01T18:00)")
    p.add_argument("--threshold", default="0.05", help="smallest change that counts, as compare's (0.05 = 5%%)")
    p.add_argument("--leave-out", default="",
                   help="sweeps whose noise should not count for any step, comma-separated ids (a sweep you know was "
                        "disturbed, as compare's --leave-out); their own rows and steps stay")
    p.add_argument(cost.FLAG, dest="price", default=None, help=cost.HELP)
    p.add_argument("--plots-dir", default="plots", help="where <workload>_history.png is written")
    p.add_argument("--report-dir", default="results", help="where history.md and history.html are written")
    ns = p.parse_args(argv)
    for name, _, kind, _ in FILTERS:
        text = getattr(ns, name)
        setattr(ns, name, None if text is None else config.parse_value(name, kind, text))
    if ns.since is not None:
        try:
            ns.since = hist.since_key(ns.since)
        except ValueError:
            raise ConfigError(f"--since {ns.since!r}: expected a date such as 2025-06-01, or a date and time such as "
                              "2025-06-01T18:00") from None
    ns.threshold = config.finite(ns.threshold, "--threshold")
    if not 0 <= ns.threshold < 10:
        raise ConfigError(f"--threshold: {ns.threshold:g} is not allowed; expected a fraction such as 0.05 (5%)")
    ns.prices = cost.parse_price(ns.price)
    ns.leave_out = sweep_ids(ns.leave_out, "--leave-out")
    return ns


def check_filters(conn, ns: argparse.Namespace) -> None:
    """Each filter value must be one the store's benchmarks hold: ConfigError naming it and what the store has."""
    for name, column, _, _ in FILTERS:
        wanted = getattr(ns, name)
        if wanted is None:
            continue
        held = read.bench_values(conn, column)
        unknown = [v for v in wanted if v not in held]
        if unknown:
            raise ConfigError(f"{config.flag(name)} {','.join(map(str, wanted))}: {', '.join(map(repr, unknown))} is not "
                              f"in the store; it holds {', '.join(map(str, held)) or 'no benchmark'}")


def check_leave_out(conn, ids: tuple, h: hist.History, store_name: str) -> None:
    """--leave-out names sweeps of the store (compare.check_held, compare's own check) that are some step's earlier
    evidence: ConfigError otherwise. A sweep is evidence only for steps whose baseline comes after it."""
    compare.check_held(conn, ids, store_name)
    last = max((p.previous for s in h.series for p in s.points if p.previous is not None), default=0)
    for i in ids:
        if i >= last:
            raise ConfigError(f"--leave-out {i}: no step of this history has its baseline after sweep {i} (the last "
                              f"step's is sweep {last}); the evidence is the sweeps before a step's baseline, so leaving "
                              f"{i} out would change nothing")


def no_history(ns: argparse.Namespace, h: hist.History) -> str:
    """Why there is no history: '0 of its 4 sweeps are since 2030-01-01' where --since left none (it read 'measured in
    more than one of its 0 sweep(s)' of a store of 4), else no configuration twice among the sweeps read."""
    n = len(h.sweeps)
    if ns.since and n < 2:
        return (f"--store {ns.store}: {n} of its {h.stored} sweep{'s' if h.stored != 1 else ''} "
                f"{'is' if n == 1 else 'are'} since {ns.since}; a history needs two")
    where = f" (of {h.stored}) since {ns.since}" if ns.since else ""
    return (f"--store {ns.store}: no configuration{describe(ns)} was measured in more than one of its {n} "
            f"sweep(s){where}; a history needs two")


def describe(ns: argparse.Namespace) -> str:
    parts = [f"{config.flag(n)} {','.join(map(str, getattr(ns, n)))}" for n, _, _, _ in FILTERS if getattr(ns, n)]
    parts += [f"since {ns.since}"] if ns.since else []
    return f" ({'; '.join(parts)})" if parts else ""


def main(argv: Optional[list] = None) -> int:
    ns = parse(list(argv or []))                 # every flag checked before the store is opened
    for flag, folder in (("--plots-dir", ns.plots_dir), ("--report-dir", ns.report_dir)):
        store.check_folder(flag, folder)
    conn = read.connect(ns.store)
    try:
        check_filters(conn, ns)
        filters = hist.Filters(workloads=ns.workloads, strategies=ns.strategies, counts=ns.gpus,
                               precisions=ns.precision, since=ns.since)
        h = hist.build(conn, filters, threshold=ns.threshold, leave_out=ns.leave_out)
        if not h.series:
            raise StoreError(no_history(ns, h))
        check_leave_out(conn, ns.leave_out, h, ns.store)
    finally:
        conn.close()
    from bench.report import history as page
    out = page.render(h, ns.store, ns.plots_dir, ns.report_dir, ns.prices, describe(ns))
    left = f"; sweep(s) {', '.join(map(str, ns.leave_out))} left out of the noise (--leave-out)" if ns.leave_out else ""
    print(f"history of {ns.store}: {len(h.sweeps)} sweeps, {len(h.series)} configuration(s){describe(ns)}; "
          f"steps judged by compare's rule, the noise measured within each level (threshold {ns.threshold:.0%}{left}; "
          f"{hist.MEANING})")
    for line in hist.summary_lines(h):
        print("  " + line)
    print(f"wrote {out['markdown']}, {out['html']} and {len(out['plots'])} plot(s) in {ns.plots_dir}")
    return 0

