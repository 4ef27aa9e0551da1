"""The store's one plain read interface: rows as they were stored, as dicts, and nothing derived from them
(bench.analysis derives every number: bench.analysis.results reads a sweep through this module).

    conn = read.connect(path)                   # any schema version: an older store is migrated in a copy in memory
    sid = read.pick_sweep(conn, None)           # the latest sweep (or the id given, checked)
    rows = read.result_rows(conn, "steps", result_id)   # a result's raw rows of one table, in key order
    read.sweeps(conn)                           # every sweep row, oldest first, with its environment's versions

A sweep of "this suite's own code" is a plain sweep or the A side of an A/B run: `./run_bench.sh ab` labels its B
side 'b: ...' and tune labels its trials 'tune: ...' (they ran other code or settings); a user's `--label` is any
other text (bench.config refuses those prefixes).
"""
from __future__ import annotations

import os
import sqlite3
from typing import Optional

from bench.store import schema, store
from bench.store.store import StoreError

# What each raw table is ordered by when a result's rows are read (its key after result_id).
ORDER = {"steps": "kind, rank, step", "windows": "rank, kind, first_step", "memory": "rank, device", "epochs": "epoch",
         "comm": "scope, op, size_bytes", "traces": "rank", "nodes": "node_rank", "buckets": "kind, rank, step, bucket",
         "interference": "scope, op, size_bytes", "gpu_samples": "rank, device, sample"}
OWN_CODE = "(label IS NULL OR (label NOT LIKE 'b:%' AND label NOT LIKE 'tune:%'))"   # SQL: plain sweeps and A sides
ENV_KEYS = ("hostname", "git_commit", "python", "torch", "torchvision", "cuda", "cudnn", "nccl", "gpu_names",
            "gpu_driver", "cpu_model", "cpu_cores")


def connect(path: str) -> sqlite3.Connection:
    """A connection that reads the store at `path`, whatever schema version wrote it: a store of this version read
    in place (read-only), an older one copied into memory and migrated there, so the file stays as it was
    (bench.store.schema's migrations). StoreError for a missing file, a file that is not a results store, a store
    of a newer version or one that holds nothing yet."""
    if not os.path.isfile(path):
        raise StoreError(store.missing(path))
    try:
        src = store._reader(path)
        try:
            version, tables = store._version(src)
        except sqlite3.DatabaseError:
            src.close()
            raise
    except sqlite3.DatabaseError as e:
        raise StoreError(f"store {path!r} is not a SQLite results store: {e}") from None
    if not 0 < version < schema.SCHEMA_VERSION or "sweeps" not in tables:
        src.close()
        return store.connect(path, readonly=True)  # this version, or refused there with its reason
    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        src.backup(mem)
        mem.execute("BEGIN")
        schema.migrate(mem, version)
        mem.execute("COMMIT")
    except sqlite3.DatabaseError as e:
        mem.close()
        raise StoreError(f"store {path!r} (schema version {version}) could not be read: {e}") from None
    finally:
        src.close()
    mem.row_factory = sqlite3.Row
    return mem


def pick_sweep(conn: sqlite3.Connection, sweep_id: Optional[int]) -> int:
    """The given sweep id (checked) or the latest sweep."""
    if sweep_id is None and conn.execute("SELECT 1 FROM sweeps LIMIT 1").fetchone() is None:
        raise StoreError("the store holds no sweep yet; run a sweep first")
    return int(store.find_sweep(conn, "last" if sweep_id is None else str(sweep_id))["sweep_id"])


def sweep_ids(conn: sqlite3.Connection) -> list:
    """Every sweep's id, oldest first (A/B sides and tune's trials included)."""
    return [r[0] for r in conn.execute("SELECT sweep_id FROM sweeps ORDER BY sweep_id")]


def sweep_row(conn: sqlite3.Connection, sweep_id: int) -> dict:
    return dict(store.find_sweep(conn, str(sweep_id)))


def result_rows(conn: sqlite3.Connection, table: str, result_id: int) -> list:
    """One result's raw rows of `table` (steps, windows, memory, epochs, comm, traces, nodes, buckets, interference,
    gpu_samples)."""
    return [dict(r) for r in conn.execute(f"SELECT * FROM {table} WHERE result_id = ? ORDER BY {ORDER[table]}", (result_id,))]


def has_measured_steps(conn: sqlite3.Connection, result_id: int) -> bool:
    return conn.execute("SELECT 1 FROM steps WHERE result_id = ? AND kind = 'measure' LIMIT 1", (result_id,)).fetchone() is not None


def latest_results(conn: sqlite3.Connection, sweep_id: int) -> list:
    """The result that counts per (config_key, repeat) of a sweep (bench.store.store.latest_results), as dicts
    in the order they were written."""
    return sorted((dict(r) for r in store.latest_results(conn, sweep_id)), key=lambda r: r["result_id"])


def bench_values(conn: sqlite3.Connection, column: str) -> list:
    """The distinct values of one of the results' identity columns (workload, strategy, device_count, precision)
    among the benchmarks of this suite's own sweeps, sorted."""
    if column not in ("workload", "strategy", "device_count", "precision"):
        raise ValueError(column)
    return [r[0] for r in conn.execute(f"SELECT DISTINCT r.{column} FROM results r JOIN sweeps s USING (sweep_id) "
                                       f"WHERE r.mode = 'bench' AND {OWN_CODE.replace('label', 's.label')} ORDER BY 1")]


def environment(conn: sqlite3.Connection, env_id: Optional[int]) -> dict:
    """The environments row, {} when there is none."""
    row = None if env_id is None else conn.execute("SELECT * FROM environments WHERE env_id = ?", (env_id,)).fetchone()
    return dict(row) if row else {}


def sweeps(conn: sqlite3.Connection, own_code_only: bool = True) -> list:
    """Every sweep row, oldest first, each with `env`: its environment row (the sweep's own, else its first
    result's; {} when none was recorded). own_code_only: plain sweeps and A sides (see the module's docstring)."""
    where = f"WHERE {OWN_CODE}" if own_code_only else ""
    out = []
    for r in conn.execute(f"SELECT * FROM sweeps {where} ORDER BY sweep_id"):
        row = dict(r)
        env_id = row["env_id"]
        if env_id is None:
            first = conn.execute("SELECT env_id FROM results WHERE sweep_id = ? AND env_id IS NOT NULL ORDER BY result_id "
                                 "LIMIT 1", (row["sweep_id"],)).fetchone()
            env_id = first[0] if first else None
        row["env"] = environment(conn, env_id)
        out.append(row)
    return out


def earlier_sweeps(conn: sqlite3.Connection, before: int, hostname: Optional[str], limit: int) -> list:
    """Ids of the `limit` most recent sweeps before `before` that ran this suite's own code on this host: plain
    sweeps and the A side of A/B runs (variant B and tune's trials ran other code or settings), newest last."""
    rows = conn.execute(f"SELECT sweep_id FROM sweeps WHERE sweep_id < ? AND {OWN_CODE} "
                        "AND (? IS NULL OR hostname = ?) ORDER BY sweep_id DESC LIMIT ?",
                        (before, hostname, hostname, limit)).fetchall()
    return sorted(r[0] for r in rows)


def id_runs(ids: list) -> str:
    """Ids as runs, the way a person lists them: [1, 2, 3, 5] -> '1-3, 5'."""
    runs: list = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
