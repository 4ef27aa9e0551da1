"""`./run_bench.sh export`: a store's tables as CSV or JSON files, for other tools (the DataFrames of bench.results).

    ./run_bench.sh export                                   # the latest sweep, CSV, into results/export/
    ./run_bench.sh export --format json --sweep all --out /tmp/bench-json

Writes configurations, steps and collectives (.csv, or .json: a list of records, NaN as null) into --out. A bad
--format, --sweep or price, an --out that is a file, or a store that is not one exit 2 before anything is written.
"""
from __future__ import annotations

import argparse
import os

from bench import options, results
from bench.analysis import cost
from bench.config import ConfigError

FORMATS = ("csv", "json")


def parse(argv: list) -> argparse.Namespace:
    p = options.Parser(prog="./run_bench.sh export", description=__doc__.splitlines()[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--store", default="results/bench.sqlite", help="the results store to read")
    p.add_argument("--sweep", default="last", help="a sweep id, 'last' (default) or 'all'")
    p.add_argument("--format", default="csv", help="csv (default) or json")
    p.add_argument("--out", default=os.path.join("results", "export"),
                   help="folder for configurations, steps and collectives .csv/.json (default results/export)")
    p.add_argument(cost.FLAG, dest="price", default=None, help=cost.HELP)
    ns = p.parse_args(argv)
    if ns.format not in FORMATS:
        raise ConfigError(f"--format {ns.format!r}: expected {' or '.join(FORMATS)}")
    if ns.sweep not in ("last", "all") and not ns.sweep.isdigit():
        raise ConfigError(f"--sweep {ns.sweep!r}: expected 'last', 'all' or a sweep id (a whole number)")
    if os.path.exists(ns.out) and not os.path.isdir(ns.out):
        raise ConfigError(f"--out {ns.out!r} is a file; expected a folder (made if missing)")
    return ns


def write(r: results.Results, folder: str, fmt: str) -> list:
    """Each table of R as FOLDER/<table>.<fmt>; the paths written."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for name in results.TABLES:
        frame, path = getattr(r, name), os.path.join(folder, f"{name}.{fmt}")
        if fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_json(path, orient="records", indent=1, double_precision=15)
        paths.append(path)
    return paths


def main(argv: list) -> int:
    ns = parse(argv)
    r = results.load(ns.store, ns.sweep, ns.price)
    paths = write(r, ns.out, ns.format)
    which = "every sweep" if ns.sweep == "all" else f"sweep {r.sweeps[0]}"
    print(f"exported {which} of {ns.store}: " + ", ".join(f"{len(getattr(r, n))} {n}" for n in results.TABLES)
          + f" rows -> {', '.join(paths)}")
    return 0
