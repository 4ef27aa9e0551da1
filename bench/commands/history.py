"""`./run_bench.sh history`: how each configuration moved over the sweeps of a store, and where it changed.

    ./run_bench.sh history                                        # results/bench.sqlite, every configuration
    ./run_bench.sh history --workloads synthetic --strategies ddp --gpus 8 --since 2025-06-01
    ./run_bench.sh history --price-per-device-hour prices.toml     # and what a million samples cost, sweep by sweep

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
from bench.analysis import cost
from bench.analysis import history as hist
from bench.config import ConfigError
from bench.store import read
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


def describe(ns: argparse.Namespace) -> str:
    parts = [f"{config.flag(n)} {','.join(map(str, getattr(ns, n)))}" for n, _, _, _ in FILTERS if getattr(ns, n)]
    parts += [f"since {ns.since}"] if ns.since else []
    return f" ({'; '.join(parts)})" if parts else ""


def main(argv: Optional[list] = None) -> int:
    ns = parse(list(argv or []))                 # every flag checked before the store is opened
    conn = read.connect(ns.store)
    try:
        check_filters(conn, ns)
        filters = hist.Filters(workloads=ns.workloads, strategies=ns.strategies, counts=ns.gpus,
                               precisions=ns.precision, since=ns.since)
        h = hist.build(conn, filters, threshold=ns.threshold)
    finally:
        conn.close()
    if not h.series:
        raise StoreError(f"--store {ns.store}: no configuration{describe(ns)} was measured in more than one of its "
                         f"{len(h.sweeps)} sweep(s); a history needs two")
    from bench.report import history as page
    out = page.render(h, ns.store, ns.plots_dir, ns.report_dir, ns.prices, describe(ns))
    print(f"history of {ns.store}: {len(h.sweeps)} sweeps, {len(h.series)} configuration(s){describe(ns)}; "
          f"steps judged by compare's rule (threshold {ns.threshold:.0%}; {hist.MEANING})")
    for line in hist.summary_lines(h):
        print("  " + line)
    print(f"wrote {out['markdown']}, {out['html']} and {len(out['plots'])} plot(s) in {ns.plots_dir}")
    return 0

