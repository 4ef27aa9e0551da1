"""The results store: one SQLite file (default results/bench.sqlite) a user can query with SQL or pandas.

Tables (schema version in `PRAGMA user_version`, see SCHEMA_HISTORY):
  environments  what produced a measurement: torch/CUDA/cuDNN/NCCL versions, GPUs, CPU, host, git commit
  sweeps        one row per sweep: command line, config, start/end, status (running/completed/interrupted/died)
  results       one row per configuration run: identity, status ok/failed/skipped/interrupted + reason,
                and a summary (samples/s, step-time statistics) derived from the raw rows below by bench.stats
  steps         raw per-step, per-rank times (ms) of every phase; kind 'measure' or 'no_sync' (DDP probe)
  memory        peak memory of every device (and process RSS) of a run, MiB
  epochs        per-epoch wall time, mean loss, data wait and split coverage (real-data runs with --epochs)
  comm          all-reduce microbenchmark rows: size, time, algbw/busbw (nccl-tests' definitions), GB/s

Durability: WAL journal, a busy timeout, and every result with its raw values written in one
`BEGIN IMMEDIATE` transaction, so a killed sweep never leaves half a result and two sweeps can share a
store. A sweep left 'running' by a process that no longer exists is marked 'died' when the store is opened.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from bench import faults, stats

SCHEMA_VERSION = 1
SCHEMA_HISTORY = {
    1: "first version: environments, sweeps, results, steps, memory, epochs, comm",
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS environments (
    env_id INTEGER PRIMARY KEY,
    captured_at TEXT NOT NULL,
    hostname TEXT, python TEXT, torch TEXT, torchvision TEXT, cuda TEXT, cudnn TEXT, nccl TEXT,
    gpu_names TEXT, gpu_driver TEXT, cpu_model TEXT, cpu_cores INTEGER, git_commit TEXT,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'interrupted', 'died')),
    command_line TEXT NOT NULL,
    config_json TEXT NOT NULL,
    hostname TEXT, pid INTEGER,
    env_id INTEGER REFERENCES environments(env_id),
    resumed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS results (
    result_id INTEGER PRIMARY KEY,
    sweep_id INTEGER NOT NULL REFERENCES sweeps(sweep_id),
    env_id INTEGER REFERENCES environments(env_id),
    config_key TEXT NOT NULL,
    mode TEXT NOT NULL,
    workload TEXT NOT NULL, strategy TEXT NOT NULL, device_type TEXT NOT NULL,
    device_count INTEGER NOT NULL, per_device_batch INTEGER NOT NULL, global_batch INTEGER NOT NULL,
    image_size INTEGER, scaling TEXT, data TEXT, repeat INTEGER NOT NULL DEFAULT 0,
    threads_per_process INTEGER,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'skipped', 'interrupted')),
    reason TEXT,
    failed_rank INTEGER,
    started_at TEXT, ended_at TEXT, wall_s REAL,
    n_steps INTEGER, samples_per_s REAL,
    step_ms_median REAL, step_ms_p10 REAL, step_ms_p90 REAL, step_ms_iqr REAL,
    step_ms_mean REAL, step_ms_ci95_low REAL, step_ms_ci95_high REAL, unstable INTEGER,
    params INTEGER, grad_mib REAL,
    exposed_comm_ms REAL, comm_method TEXT,
    spec_json TEXT NOT NULL,
    details_json TEXT
);
CREATE INDEX IF NOT EXISTS results_by_sweep ON results(sweep_id, config_key);
CREATE TABLE IF NOT EXISTS steps (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    kind TEXT NOT NULL DEFAULT 'measure',
    rank INTEGER NOT NULL, step INTEGER NOT NULL,
    step_ms REAL NOT NULL, data_ms REAL, h2d_ms REAL, forward_ms REAL, backward_ms REAL, optimizer_ms REAL,
    loss REAL,
    PRIMARY KEY (result_id, kind, rank, step)
);
CREATE TABLE IF NOT EXISTS memory (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    rank INTEGER NOT NULL, device TEXT NOT NULL, device_name TEXT,
    peak_allocated_mib REAL, peak_reserved_mib REAL, peak_rss_mib REAL,
    PRIMARY KEY (result_id, rank, device)
);
CREATE TABLE IF NOT EXISTS epochs (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    epoch INTEGER NOT NULL, wall_s REAL NOT NULL, mean_loss REAL, data_wait_s REAL,
    samples INTEGER, steps INTEGER,
    images INTEGER, images_seen INTEGER, images_repeated INTEGER, images_dropped INTEGER,
    PRIMARY KEY (result_id, epoch)
);
CREATE TABLE IF NOT EXISTS comm (
    result_id INTEGER NOT NULL REFERENCES results(result_id),
    size_bytes INTEGER NOT NULL, time_ms REAL NOT NULL, algbw_gbps REAL, busbw_gbps REAL, iters INTEGER,
    PRIMARY KEY (result_id, size_bytes)
);
"""

STEP_COLUMNS = ("kind", "rank", "step", "step_ms", "data_ms", "h2d_ms", "forward_ms", "backward_ms", "optimizer_ms", "loss")
MEMORY_COLUMNS = ("rank", "device", "device_name", "peak_allocated_mib", "peak_reserved_mib", "peak_rss_mib")
EPOCH_COLUMNS = ("epoch", "wall_s", "mean_loss", "data_wait_s", "samples", "steps",
                 "images", "images_seen", "images_repeated", "images_dropped")
COMM_COLUMNS = ("size_bytes", "time_ms", "algbw_gbps", "busbw_gbps", "iters")


class StoreError(RuntimeError):
    """The store cannot be used as asked (wrong schema version, not a SQLite file...)."""


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


BUSY_TIMEOUT_S = 60.0


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) a store; check its version; mark sweeps whose process died.

    Safe when several sweeps open (or create) the same store at once; readonly=True for reports
    read while a sweep writes.
    """
    if readonly:
        if not os.path.isfile(path):
            raise StoreError(f"store {path!r} does not exist")
        conn = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    else:
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    try:
        version, tables = _version(conn)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise StoreError(f"store {path!r} is not a SQLite results store: {e}") from None
    _check_version(conn, path, version, tables)
    if readonly:
        if version == 0:
            conn.close()
            raise StoreError(f"store {path!r} holds no results yet (a sweep is creating it, or none has written to it)")
        return conn
    _retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
    conn.execute("PRAGMA synchronous = NORMAL")
    if version == 0:
        with transaction(conn):  # another process may have created it since: look again under the write lock
            version, tables = _version(conn)
            _check_version(conn, path, version, tables)
            if version == 0:
                for stmt in SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    mark_dead_sweeps(conn)
    return conn


def _version(conn: sqlite3.Connection) -> tuple:
    """(user_version, table names), read from one snapshot."""
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        if own:
            conn.execute("COMMIT")
    return version, tables


def _check_version(conn: sqlite3.Connection, path: str, version: int, tables: set) -> None:
    if version != SCHEMA_VERSION and (version != 0 or tables):
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
        raise StoreError(f"store {path!r} has schema version {version}; this suite reads and writes version "
                         f"{SCHEMA_VERSION} ({SCHEMA_HISTORY[SCHEMA_VERSION]}). Use another --store, or a suite "
                         f"version that matches; the file was not modified.")


def _retry_busy(fn):
    """Switching to WAL takes an exclusive lock without waiting on the busy handler: retry it."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """An immediate write transaction: takes the write lock up front (waits busy_timeout), all or nothing."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_dead_sweeps(conn: sqlite3.Connection) -> list:
    """Sweeps still 'running' whose process on this host is gone become 'died'. Returns their ids."""
    host = socket.gethostname()
    rows = conn.execute("SELECT sweep_id, pid FROM sweeps WHERE status = 'running' AND hostname = ?", (host,)).fetchall()
    dead = [r["sweep_id"] for r in rows if r["pid"] is None or not _pid_alive(int(r["pid"]))]
    if dead:
        with transaction(conn):
            for sid in dead:
                conn.execute("UPDATE sweeps SET status = 'died', ended_at = COALESCE(ended_at, ?) WHERE sweep_id = ? AND status = 'running'", (now(), sid))
    return dead


def insert_environment(conn: sqlite3.Connection, env: dict) -> int:
    cols = ("hostname", "python", "torch", "torchvision", "cuda", "cudnn", "nccl", "gpu_names", "gpu_driver",
            "cpu_model", "cpu_cores", "git_commit")
    vals = [env.get(c) if not isinstance(env.get(c), (list, tuple)) else ", ".join(map(str, env.get(c))) for c in cols]
    with transaction(conn):
        cur = conn.execute(f"INSERT INTO environments (captured_at, {', '.join(cols)}, json) VALUES (?, {', '.join('?' * len(cols))}, ?)",
                           [now(), *vals, json.dumps(env, sort_keys=True)])
    return int(cur.lastrowid)


def begin_sweep(conn: sqlite3.Connection, command_line: str, config_json: str, env_id: Optional[int]) -> int:
    with transaction(conn):
        cur = conn.execute("INSERT INTO sweeps (started_at, status, command_line, config_json, hostname, pid, env_id) "
                           "VALUES (?, 'running', ?, ?, ?, ?, ?)",
                           (now(), command_line, config_json, socket.gethostname(), os.getpid(), env_id))
    return int(cur.lastrowid)


def reopen_sweep(conn: sqlite3.Connection, sweep_id: int) -> None:
    """Resume: the same sweep id goes back to 'running', owned by this process."""
    with transaction(conn):
        conn.execute("UPDATE sweeps SET status = 'running', ended_at = NULL, hostname = ?, pid = ?, resumed = resumed + 1 "
                     "WHERE sweep_id = ?", (socket.gethostname(), os.getpid(), sweep_id))


def end_sweep(conn: sqlite3.Connection, sweep_id: int, status: str) -> None:
    with transaction(conn):
        conn.execute("UPDATE sweeps SET status = ?, ended_at = ? WHERE sweep_id = ?", (status, now(), sweep_id))


def find_sweep(conn: sqlite3.Connection, which: str) -> sqlite3.Row:
    """'last' or a sweep id -> the sweeps row; StoreError naming the value if there is none."""
    if which == "last":
        row = conn.execute("SELECT * FROM sweeps ORDER BY sweep_id DESC LIMIT 1").fetchone()
        if row is None:
            raise StoreError("no sweep in the store to resume")
        return row
    try:
        sid = int(which)
    except ValueError:
        raise StoreError(f"sweep {which!r}: expected 'last' or a sweep id (a whole number)") from None
    row = conn.execute("SELECT * FROM sweeps WHERE sweep_id = ?", (sid,)).fetchone()
    if row is None:
        raise StoreError(f"sweep {sid} is not in the store")
    return row


def ok_keys(conn: sqlite3.Connection, sweep_id: int) -> set:
    """(config_key, repeat) pairs of a sweep that already have an ok (or skipped) result."""
    rows = conn.execute("SELECT config_key, repeat FROM results WHERE sweep_id = ? AND status IN ('ok', 'skipped')", (sweep_id,))
    return {(r["config_key"], r["repeat"]) for r in rows}


def record_result(conn: sqlite3.Connection, sweep_id: int, env_id: Optional[int], spec, status: str,
                  reason: str = "", payload: Optional[dict] = None, started_at: str = "", ended_at: str = "",
                  wall_s: Optional[float] = None, failed_rank: Optional[int] = None) -> int:
    """Write one configuration's result with all its raw rows in a single transaction. Returns result_id.

    payload (from the worker's result file): steps, memory, epochs, comm lists of dicts; params,
    grad_bytes, exposed_comm_ms, comm_method and any other keys go to details_json.
    """
    payload = dict(payload or {})
    steps = payload.pop("steps", [])
    memory = payload.pop("memory", [])
    epochs = payload.pop("epochs", [])
    comm = payload.pop("comm", [])
    grad_bytes = payload.pop("grad_bytes", None)
    measured = [s for s in steps if s.get("kind", "measure") == "measure"]
    summary = exposed_ms = None
    if status == "ok" and measured:
        summary = stats.summarize(stats.step_times_ms(measured))
        nosync = [s for s in steps if s.get("kind") == "no_sync"]
        if nosync:  # DDP: what backward's communication added over the same steps without it
            exposed_ms = stats.exposed_comm_ms(stats.step_times_ms(measured), stats.step_times_ms(nosync))
    row = {
        "sweep_id": sweep_id, "env_id": env_id, "config_key": spec.key, "mode": spec.mode,
        "workload": spec.workload, "strategy": spec.strategy, "device_type": spec.device_type,
        "device_count": spec.device_count, "per_device_batch": spec.per_device_batch, "global_batch": spec.global_batch,
        "image_size": spec.image_size, "scaling": spec.scaling, "data": spec.data, "repeat": spec.repeat,
        "threads_per_process": spec.threads, "status": status, "reason": reason or None, "failed_rank": failed_rank,
        "started_at": started_at or None, "ended_at": ended_at or None, "wall_s": wall_s,
        "n_steps": summary.n if summary else None,
        "samples_per_s": stats.samples_per_s(spec.global_batch, summary.median_ms) if summary else None,
        "step_ms_median": summary.median_ms if summary else None, "step_ms_p10": summary.p10_ms if summary else None,
        "step_ms_p90": summary.p90_ms if summary else None, "step_ms_iqr": summary.iqr_ms if summary else None,
        "step_ms_mean": summary.mean_ms if summary else None,
        "step_ms_ci95_low": summary.ci95_low_ms if summary else None,
        "step_ms_ci95_high": summary.ci95_high_ms if summary else None,
        "unstable": int(summary.unstable) if summary else None,
        "params": payload.pop("params", None),
        "grad_mib": grad_bytes / 2**20 if grad_bytes is not None else None,
        "exposed_comm_ms": exposed_ms, "comm_method": payload.pop("comm_method", None),
        "spec_json": spec.to_json(), "details_json": json.dumps(payload, sort_keys=True, default=str) if payload else None,
    }
    with transaction(conn):
        cur = conn.execute(f"INSERT INTO results ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        rid = int(cur.lastrowid)
        faults.sweep_writing_result()  # tests only: BENCH_FAULT=sigkill@sweep:N kills the sweep right here
        for table, cols, items in (("steps", STEP_COLUMNS, steps), ("memory", MEMORY_COLUMNS, memory),
                                   ("epochs", EPOCH_COLUMNS, epochs), ("comm", COMM_COLUMNS, comm)):
            if items:
                conn.executemany(f"INSERT INTO {table} (result_id, {', '.join(cols)}) VALUES (?, {', '.join('?' * len(cols))})",
                                 [[rid] + [it.get(c, "measure" if c == "kind" else None) for c in cols] for it in items])
    return rid


def latest_results(conn: sqlite3.Connection, sweep_id: int) -> list:
    """The result that counts for each (config_key, repeat) of a sweep, resumed parts included:
    the latest ok one if any, else the latest of any status."""
    rows = conn.execute("SELECT * FROM results WHERE sweep_id = ? ORDER BY result_id", (sweep_id,)).fetchall()
    best: dict = {}
    for r in rows:
        k = (r["config_key"], r["repeat"])
        cur = best.get(k)
        if cur is None or r["status"] == "ok" or cur["status"] != "ok":
            best[k] = r
    return list(best.values())
