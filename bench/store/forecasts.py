"""What the forecast reads from a stored sweep beyond bench.analysis.results, as stored, and where its check is written.
Every statistic over these rows is derived in bench.forecast.inputs.

    raw = read_raw(conn, sweep_id)               # {config_key: RawRows}: step, bucket and memory rows, details
    inter = read_interference(conn, sweep_id)    # [(device_count, nodes, rows)]: the interference rows of comm runs
    write_validation(conn, sweep_id, rows)       # the `forecasts` table: one row per measured count checked
    read_validation(conn, sweep_id)              # those rows, for the report
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

from bench.store import store
from bench.store.schema import FORECAST_COLUMNS, add_late_columns


@dataclass
class RawRows:
    """One configuration's stored rows (every ok repeat), each row with its result_id."""
    key: str
    result_ids: list
    steps: list = field(default_factory=list)
    buckets: list = field(default_factory=list)
    memory: list = field(default_factory=list)
    details: dict = field(default_factory=dict)      # the first repeat's details_json


def read_raw(conn: sqlite3.Connection, sweep_id: int) -> dict:
    """{config_key: RawRows} for the ok benchmark results of a sweep."""
    groups: dict = {}
    details: dict = {}
    for r in store.latest_results(conn, sweep_id):
        if r["mode"] == "bench" and r["status"] == "ok":
            groups.setdefault(r["config_key"], []).append(int(r["result_id"]))
            details.setdefault(r["config_key"], json.loads(r["details_json"] or "{}"))
    out = {}
    for key, ids in groups.items():
        marks = ",".join("?" * len(ids))
        rows = {table: [dict(x) for x in conn.execute(f"SELECT * FROM {table} WHERE result_id IN ({marks})", ids)]
                for table in ("steps", "buckets", "memory")}
        out[key] = RawRows(key, sorted(ids), rows["steps"], rows["buckets"], rows["memory"], details[key])
    return out


def read_interference(conn: sqlite3.Connection, sweep_id: int) -> list:
    """[(device_count, nodes, rows)]: the interference rows of the sweep's ok comm runs (the latest per count)."""
    out = []
    for r in store.latest_results(conn, sweep_id):
        if r["mode"] == "comm" and r["status"] == "ok":
            rows = [dict(x) for x in conn.execute("SELECT * FROM interference WHERE result_id = ?", (r["result_id"],))]
            if rows:
                out.append((int(r["device_count"]), int(r["nodes"] or 1), rows))
    return sorted(out, key=lambda x: x[0])


def write_validation(conn: sqlite3.Connection, sweep_id: int, rows: list) -> None:
    """The forecast's check, one row per measured count (a later check of the same sweep and judged sweep replaces it)."""
    if not rows:
        return
    with store.transaction(conn):
        add_late_columns(conn)     # a version-6 store written before the memory's range (bench.store.schema.LATE_V6)
        conn.executemany(f"INSERT OR REPLACE INTO forecasts (sweep_id, {', '.join(FORECAST_COLUMNS)}) "
                         f"VALUES (?, {', '.join('?' * len(FORECAST_COLUMNS))})",
                         [[sweep_id] + [r.get(c) if c != "judged_sweep" else r.get(c) or sweep_id for c in FORECAST_COLUMNS]
                          for r in rows])


def read_validation(conn: sqlite3.Connection, sweep_id: int) -> list:
    return [dict(r) for r in conn.execute("SELECT * FROM forecasts WHERE sweep_id = ? ORDER BY judged_sweep, workload, "
                                          "strategy, variant, device_count", (sweep_id,))]
