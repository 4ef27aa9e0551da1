"""Results as pandas DataFrames, for notebooks: the numbers the report shows, read from a store.

    from bench import results
    r = results.load("results/bench.sqlite")       # the latest sweep; sweep=3 for another, sweep="all" for every one
    r.configurations    # one row per configuration: samples/s, efficiency, step percentiles, memory, bound, ...
    r.steps             # every raw per-rank step, as stored (step_ms and its phases)
    r.collectives       # the collectives microbenchmark: size_bytes, time_ms, algbw_gbps, busbw_gbps
    r.forecast          # per forecast setting and count (2 ... 1024): step_ms, samples_per_s, efficiency, memory_mib,
                        # each with its range (_low, _high), the recommendation and what it rests on, in its words
    r.checks            # the forecast's checks as stored (the store's forecasts table), written by ./run_bench.sh forecast

A thin face over bench.report.tables (the figures the report shows per configuration, each from bench.analysis and the
report's own functions) and bench.report.forecastrows (the forecast `./run_bench.sh forecast` prints at its default
counts, from bench.forecast.outlook): nothing is derived here. Not in the frames: the report's other sections (fit's
trials, the memory levers, the equivalence gate, the interference rows, the traces' overlap; the store holds them:
docs/store.md). Any schema version reads (an older store is migrated in a copy in memory, the file left as it was).
`./run_bench.sh export --format csv|json` writes the same tables as files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Union

import pandas as pd

from bench.config import ConfigError
from bench.store import read
from bench.store.store import StoreError

TABLES = ("configurations", "steps", "collectives", "forecast", "checks")
LAZY = ("forecast", "checks")   # read from the store when first used


@dataclass(frozen=True, repr=False)
class Results:
    """The tables of one or more sweeps of a store; every row names its sweep (`sweep_id`). The forecast and its
    checks are read from the store when first used (the forecast takes a fraction of a second a sweep, which a
    notebook that reads only the configurations need not pay)."""
    configurations: pd.DataFrame
    steps: pd.DataFrame
    collectives: pd.DataFrame
    store: str
    sweeps: tuple

    @cached_property
    def forecast(self) -> pd.DataFrame:
        """Per forecast setting and count: the figures `./run_bench.sh forecast` prints (bench.report.forecastrows)."""
        return self._forecast_table("forecast")

    @cached_property
    def checks(self) -> pd.DataFrame:
        """The forecast's checks as stored (the store's forecasts table, written by `./run_bench.sh forecast`)."""
        return self._forecast_table("checks")

    def _forecast_table(self, name: str) -> pd.DataFrame:
        from bench.report import forecastrows
        conn = read.connect(self.store)
        try:
            rows = [_frame(forecastrows.ROWS[name](conn, sid), sid) for sid in self.sweeps]
        finally:
            conn.close()
        return _table(rows, forecastrows.COLUMNS[name])

    def __repr__(self) -> str:
        # the forecast's tables are read when first used: showing R in a notebook must not run the forecast
        return (f"Results({self.store!r}, sweeps {list(self.sweeps)}: " + ", ".join(
            f"{name} {len(getattr(self, name))} rows" if name in vars(self) or name not in LAZY else f"{name} not read yet"
            for name in TABLES) + ")")


def sweep_ids(conn, sweep: Union[int, str], who: str = "--sweep ") -> list:
    """'last', 'all' or a sweep id (int or digits) -> the ids to read; ConfigError naming any other value,
    StoreError for an id the store does not hold (naming those it does) or a store with no sweep. `who` says who
    gave the value: the command line's flag ("--sweep ") or results.load's argument ("results.load: sweep=")."""
    if sweep == "all":
        ids = read.sweep_ids(conn)
        return ids or [read.pick_sweep(conn, None)]   # no sweep: refused there, with its reason
    if sweep == "last":
        return [read.pick_sweep(conn, None)]
    if isinstance(sweep, bool) or not (isinstance(sweep, int) or (isinstance(sweep, str) and sweep.isdigit())):
        raise ConfigError(f"{who}{sweep!r}: expected 'last', 'all' or a sweep id (a whole number)")
    held = read.sweep_ids(conn)
    if held and int(sweep) not in held:
        raise StoreError(f"{who}{sweep!r}: sweep {int(sweep)} is not in the store; it holds {_spans(held)}")
    return [read.pick_sweep(conn, int(sweep))]


def _spans(ids: list) -> str:
    """Sweep ids as runs: [1, 2, 3, 7] -> 'sweeps 1-3, 7'."""
    return ("sweep " if len(ids) == 1 else "sweeps ") + read.id_runs(ids)


def _frame(rows: list, sweep_id: int) -> pd.DataFrame:
    """The rows as a DataFrame; a column of whole numbers or of booleans keeps its type where some rows lack it
    (pandas' nullable Int64 and boolean), instead of turning into floats or objects."""
    frame = pd.DataFrame([{"sweep_id": sweep_id, **r} for r in rows])
    for col in frame.columns:
        values = [r[col] for r in rows if r.get(col) is not None] if col != "sweep_id" else []
        if values and len(values) < len(rows) and all(isinstance(v, bool) for v in values):
            frame[col] = frame[col].astype("boolean")
        elif values and len(values) < len(rows) and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            frame[col] = frame[col].astype("Int64")
    return frame


def load(path: str = "results/bench.sqlite", sweep: Union[int, str] = "last", prices: Optional[str] = None) -> Results:
    """The store's tables as DataFrames: `sweep` 'last' (default), a sweep id, or 'all'; `prices` as
    --price-per-device-hour takes it (a number or a TOML file) adds cost_per_million_samples and cost_per_epoch.
    Errors name these arguments (sweep=, prices=), not the command line's flags."""
    from bench.analysis import cost
    if not isinstance(path, (str, os.PathLike)):
        raise StoreError(f"results.load: expected the path of a results store (a str or os.PathLike), got {path!r}")
    try:
        price_table = cost.parse_price(prices) if prices is not None else None
    except ConfigError as e:
        raise ConfigError("results.load: " + str(e).replace(f"{cost.FLAG} ", "prices=", 1)) from None
    return read_tables(os.fspath(path), sweep, price_table, who="results.load: sweep=")


def read_tables(path: str, sweep: Union[int, str], price_table=None, who: str = "--sweep ") -> Results:
    """load's work, for `./run_bench.sh export` too: price_table parsed already (bench.analysis.cost.parse_price),
    `who` as sweep_ids takes it, so the command line's errors name its flags."""
    from bench.analysis import results as analysis
    from bench.report import tables
    conn = read.connect(path)
    try:
        ids = sweep_ids(conn, sweep, who)
        parts: dict = {name: [] for name in tables.COLUMNS}
        for sid in ids:
            s = analysis.load(conn, sid)
            parts["configurations"].append(_frame(tables.configurations(s, price_table), sid))
            parts["steps"].append(_frame(tables.steps(conn, sid), sid))
            parts["collectives"].append(_frame(tables.collectives(s), sid))
    finally:
        conn.close()
    return Results(store=path, sweeps=tuple(ids), **{name: _table(fs, tables.COLUMNS[name]) for name, fs in parts.items()})


def _table(frames: list, columns: tuple) -> pd.DataFrame:
    """One table over the sweeps' frames; without a row it still has its columns (sweep_id first), so a query on it
    gives no row and the export writes its header."""
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["sweep_id", *columns])
