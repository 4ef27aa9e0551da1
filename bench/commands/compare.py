"""`./run_bench.sh compare`: its command line (the comparison itself, and what it rests on, is
bench.analysis.compare).

    ./run_bench.sh compare --store base.sqlite --against new.sqlite [--threshold 0.05]
    ./run_bench.sh compare --store results/bench.sqlite          # the two latest sweeps of one store

Exit status 1 on a regression, 0 otherwise, 2 on bad input.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from bench.analysis import compare as comparison
from bench.config import ConfigError, finite
from bench.store import store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default="results/bench.sqlite", help="baseline store")
    parser.add_argument("--against", default=None, help="candidate store (default: compare two sweeps of --store)")
    parser.add_argument("--sweep-a", type=int, default=None, help="baseline sweep id (default: latest, or the one before --sweep-b)")
    parser.add_argument("--sweep-b", type=int, default=None, help="candidate sweep id (default: latest)")
    parser.add_argument("--threshold", default="0.05", help="smallest slowdown that counts (0.05 = 5%%)")
    parser.add_argument("--drift", default=None,
                        help="with repeats but no earlier sweep of a configuration: the drift between sweeps a slowdown "
                             "must also pass (0.15 = 15%%; default: 15%% on CPU, where it was measured, and none on a "
                             "GPU: there such a configuration cannot be decided without it); interleaved A/B sweeps "
                             "(./run_bench.sh ab) need none")
    parser.add_argument("--history", default=str(comparison.DEFAULT_HISTORY),
                        help=f"earlier sweeps of each configuration (same store, same host) that measure its noise "
                             f"(default {comparison.DEFAULT_HISTORY}; 0: none)")
    parser.add_argument("--leave-out", default="",
                        help="earlier sweeps of --store whose noise should not count, comma-separated ids (a sweep you "
                             "know was disturbed: compare names one that alone widens a configuration's bound)")


def sweep_ids(text: str, flag: str) -> tuple:
    """'3,7' -> (3, 7); ConfigError naming the value otherwise."""
    out = []
    for part in (p.strip() for p in text.split(",")) if text.strip() else ():
        if not part.isdigit() or int(part) < 1:
            raise ConfigError(f"{flag}: {part!r} is not a sweep id; expected comma-separated whole numbers >= 1 "
                              f"(sweep ids as ./run_bench.sh history lists them)")
        out.append(int(part))
    return tuple(out)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage()
        self.exit(2, f"error: {message}\n")


def main(argv: Optional[list] = None) -> int:
    parser = _Parser(prog="./run_bench.sh compare", description=comparison.__doc__.splitlines()[0])
    add_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        fractions = [finite(getattr(ns, name), f"--{name}") if getattr(ns, name) is not None else None
                     for name in ("threshold", "drift")]
        for name, v in zip(("threshold", "drift"), fractions):
            if v is not None and not 0 <= v < 10:
                raise ConfigError(f"--{name}: {v:g} is not allowed; expected a fraction such as 0.05 (5%)")
        history = finite(ns.history, "--history")
        if history < 0 or history != int(history):
            raise ConfigError(f"--history: {ns.history!r} is not allowed; expected a whole number of sweeps >= 0")
        history = min(int(history), store.SQLITE_MAX_INTEGER)   # more sweeps than a store holds: all of them (SQLite's LIMIT is an int64)
        text, code = comparison.compare(ns.store, ns.against, ns.sweep_a, ns.sweep_b, *fractions, history=history,
                                        leave_out=sweep_ids(ns.leave_out, "--leave-out"))
    except (ConfigError, store.StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text, end="")
    return code
