"""`./run_bench.sh export`: a store's tables as CSV or JSON files, for other tools (the DataFrames of bench.results).

    ./run_bench.sh export                                   # the latest sweep, CSV, into results/export/
    ./run_bench.sh export --format json --sweep all --out /tmp/bench-json

Writes configurations, steps, collectives, forecast and checks (.csv, or .json: a list of records, NaN as null) into
--out: bench.results' tables (a table with no row: its CSV header alone, JSON []). A bad
--format, --sweep or price, an --out that is a file or cannot be made (its existing part a file, or not writable), or
a store that is not one exit 2 before anything is written; a write that fails all the same (a full disk) exits 1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from bench import options, results
from bench.analysis import cost
from bench.config import ConfigError
from bench.store import store

FORMATS = ("csv", "json")


def parse(argv: list) -> argparse.Namespace:
    p = options.Parser(prog="./run_bench.sh export", description=__doc__.splitlines()[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--store", default="results/bench.sqlite", help="the results store to read")
    p.add_argument("--sweep", default="last", help="a sweep id, 'last' (default) or 'all'")
    p.add_argument("--format", default="csv", help="csv (default) or json")
    p.add_argument("--out", default=os.path.join("results", "export"),
                   help="folder for the tables' .csv/.json files (configurations, steps, collectives, forecast, checks; "
                        "default results/export)")
    p.add_argument(cost.FLAG, dest="price", default=None, help=cost.HELP)
    ns = p.parse_args(argv)
    if ns.format not in FORMATS:
        raise ConfigError(f"--format {ns.format!r}: expected {' or '.join(FORMATS)}")
    if ns.sweep not in ("last", "all") and not ns.sweep.isdigit():
        raise ConfigError(f"--sweep {ns.sweep!r}: expected 'last', 'all' or a sweep id (a whole number)")
    check_out(ns.out)
    ns.prices = cost.parse_price(ns.price)   # the flag named in its errors, before the store is read
    return ns


def check_out(out: str) -> None:
    """Refuse an --out whose files could not be written, before the store is read (store.check_folder)."""
    store.check_folder("--out", out)


def json_records(frame) -> str:
    """A DataFrame as a JSON list of records, NaN as null, types as pandas writes them, but slashes as they are:
    pandas' own writer escapes them ('"config_key":"bench\\/transformer\\/single..."'), valid JSON that reads badly."""
    return json.dumps(json.loads(frame.to_json(orient="records", double_precision=15)), indent=1, ensure_ascii=False)


def write(r: results.Results, folder: str, fmt: str) -> list:
    """Each table of R as FOLDER/<table>.<fmt>; the paths written."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for name in results.TABLES:
        frame, path = getattr(r, name), os.path.join(folder, f"{name}.{fmt}")
        if fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(json_records(frame))
        paths.append(path)
    return paths


def main(argv: list) -> int:
    ns = parse(argv)
    r = results.read_tables(ns.store, ns.sweep, ns.prices)
    for name in results.TABLES:   # the forecast's tables are read when first used: all of them before any file
        getattr(r, name)
    try:
        paths = write(r, ns.out, ns.format)
    except OSError as e:  # checked before, yet it can still fail (a full disk, a folder removed meanwhile)
        where = f" ({e.filename})" if e.filename else ""
        print(f"export: could not write into --out {ns.out!r}{where}: {e.strerror or e}; files written before it are "
              "left as they are", file=sys.stderr)
        return 1
    which = "every sweep" if ns.sweep == "all" else f"sweep {r.sweeps[0]}"
    print(f"exported {which} of {ns.store}: " + ", ".join(f"{len(getattr(r, n))} {n}" for n in results.TABLES)
          + f" rows -> {', '.join(paths)}")
    return 0
