"""The results store: one SQLite file (default results/bench.sqlite) a user can query with SQL or pandas.

The tables and their history live in bench.store.schema. Durability: WAL journal, a busy timeout, and every
result with its raw values written in one `BEGIN IMMEDIATE` transaction, so a killed sweep never leaves
half a result and two sweeps can share a store. A sweep left 'running' by a process that no longer
exists is marked 'died' when the store is opened. `check_path` validates a store path without
writing anything, so a refused sweep leaves an existing store byte-identical.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import tempfile
import time
import weakref
from contextlib import contextmanager
from typing import Iterator, Optional

from bench.store import schema
from bench.store.schema import SCHEMA_HISTORY, SCHEMA_VERSION

SQLITE_MAGIC = b"SQLite format 3\x00"


class StoreError(RuntimeError):
    """The store cannot be used as asked (wrong schema version, not a SQLite file...)."""


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


BUSY_TIMEOUT_S = 60.0


class _Connection(sqlite3.Connection):
    """sqlite3's connection, one the store module can find again: `close_all` closes those still open."""

    def close(self) -> None:
        _OPEN.discard(self)
        super().close()


_OPEN: "weakref.WeakSet[_Connection]" = weakref.WeakSet()  # the store's connections not closed yet


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) a store; check its version; mark sweeps whose process died.

    Safe when several sweeps open (or create) the same store at once; readonly=True for reports
    read while a sweep writes.
    """
    if readonly:
        if not os.path.isfile(path):
            raise StoreError(missing(path))
        conn = _reader(path)
    else:
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, factory=_Connection)
    _OPEN.add(conn)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    try:
        version, tables = _version(conn)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise StoreError(f"store {path!r} is not a SQLite results store: {e}") from None
    _check_version(conn, path, version, tables, readonly)
    if readonly:
        if version == 0:
            conn.close()
            raise StoreError(f"store {path!r} holds no results yet (a sweep is creating it, or none has written to it)")
        return conn
    _retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
    conn.execute("PRAGMA synchronous = NORMAL")
    if version != SCHEMA_VERSION:
        with transaction(conn):  # another process may have created or migrated it since: look again under the lock
            version, tables = _version(conn)
            _check_version(conn, path, version, tables)
            if version == 0:
                schema.create(conn)
            elif version < SCHEMA_VERSION:
                schema.migrate(conn, version)
    mark_dead_sweeps(conn)
    return conn


def _reader(path: str) -> sqlite3.Connection:
    """A connection that cannot write. Where the store's folder is writable, query_only: unlike mode=ro, closing it
    as the last connection folds in and removes the -wal and -shm files a reader of a WAL store creates, so none
    are left beside it."""
    if os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, factory=_Connection)
        conn.execute("PRAGMA query_only = ON")
        return conn
    return sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S,
                           isolation_level=None, factory=_Connection)


def close_all() -> int:
    """Close every store connection this process still holds, before it exits without the interpreter's
    teardown (bench.shared.procs.exit_without_teardown): a closed connection folds the WAL back into the file,
    so the store is whole in its one file. Returns how many were open."""
    conns = list(_OPEN)
    for conn in conns:
        try:
            conn.close()
        except sqlite3.Error:
            pass
    return len(conns)


def missing(path: str, flag: str = "store") -> str:
    """Why there is no store to read at `path`: a folder (the path of a file inside it was meant), or nothing."""
    if os.path.isdir(path):
        return (f"{flag} {path!r} is a folder; expected the path of a SQLite results store "
                f"(e.g. {os.path.join(path, 'bench.sqlite')})")
    return f"{flag} {path!r} does not exist"


def check_path(path: str) -> None:
    """Refuse, before anything runs, a store path that cannot be created, opened or written: a folder, a
    file that is not a SQLite database, a read-only or virtual filesystem, a store of a newer schema.
    Writes nothing into an existing store (a probe file next to it is created and removed)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise StoreError(f"--store {path!r} is a folder; expected the path of a SQLite file (e.g. {os.path.join(path, 'bench.sqlite')})")
    if os.path.exists(path):
        if not os.path.isfile(path):
            raise StoreError(f"--store {path!r} exists and is not a regular file")
        try:
            with open(path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as e:
            raise StoreError(f"--store {path!r} cannot be read: {e.strerror}") from None
        if head and head != SQLITE_MAGIC:
            raise StoreError(f"--store {path!r} is not a SQLite database (its first bytes are {head[:16]!r}); "
                             "choose a new path or an existing results store")
        if head:
            _check_existing(path)
        if not os.access(path, os.W_OK):
            raise StoreError(f"--store {path!r} is not writable")
    folder = nearest_existing(os.path.dirname(path))  # the store's folders will be made in it
    if not os.path.isdir(folder):
        raise StoreError(f"--store {path!r}: {folder!r} is not a folder")
    refused = write_refused(folder)
    if refused is not None:
        raise StoreError(f"--store {path!r}: cannot create files in {folder!r} ({refused.strerror}); "
                         "SQLite needs to write the store and its journal there")


def nearest_existing(path: str) -> str:
    """PATH itself where it exists, else its nearest existing ancestor: where the missing folders would be made."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def write_refused(folder: str) -> Optional[OSError]:
    """The error creating a file in FOLDER raises, None where it can be done. A real write (a probe file created and
    removed), because os.access says yes to root on read-only mounts and on virtual filesystems (/proc, /sys)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".bench-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return e
    return None


SQLITE_MAX_INTEGER = 2**63 - 1   # the largest value an INTEGER column (and a LIMIT) holds


def check_folder(flag: str, path: str) -> None:
    """Refuse, before anything runs, an output folder (--out, --plots-dir, --report-dir) whose files could not be
    written: an empty path, a file, a path whose nearest existing ancestor is a file or a folder where nothing can be
    created (read-only, /proc). A sweep once ran whole and only then failed to render its report there."""
    if not path.strip():
        raise StoreError(f"{flag} {path!r}: expected the path of a folder (made if missing)")
    if os.path.exists(path) and not os.path.isdir(path):
        raise StoreError(f"{flag} {path!r} is a file; expected a folder (made if missing)")
    folder = nearest_existing(path)
    if not os.path.isdir(folder):
        raise StoreError(f"{flag} {path!r}: {folder} is a file, not a folder; expected a folder, or a path whose "
                         "existing part is a folder (the rest is made)")
    refused = write_refused(folder)
    if refused is not None:
        what = "files in" if folder == os.path.abspath(path) else "folders under"
        raise StoreError(f"{flag} {path!r}: cannot create {what} {folder}: {refused.strerror}; expected a folder "
                         "this user can write to")


def not_a_store(version: int, tables: set) -> Optional[str]:
    """Why a SQLite database with this version and these tables is not a results store (another program's database),
    None where it may be one: every version this suite wrote (1 to SCHEMA_VERSION) has a sweeps table, one with no
    table at all is being created, and a newer version is refused as such."""
    if version > SCHEMA_VERSION or not tables or "sweeps" in tables:
        return None
    names = sorted(tables)
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return (f"is a SQLite database but not a results store (no sweeps table; it holds tables: {shown}); "
            "expected a store this suite wrote")


def _check_existing(path: str) -> None:
    try:
        conn = _reader(path)
        try:  # one snapshot: a sweep creating the store at this moment commits its tables and version together
            version, tables = _version(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise StoreError(f"--store {path!r} cannot be opened as a SQLite database: {e}") from None
    foreign = not_a_store(version, tables)
    if foreign:
        raise StoreError(f"--store {path!r} {foreign}. Use another --store; the file was not modified.")
    if version > SCHEMA_VERSION or (version == 0 and tables):
        raise StoreError(f"--store {path!r} has schema version {version}; this suite reads and writes version "
                         f"{SCHEMA_VERSION}. Use another --store; the file was not modified.")


def check_resumable(path: str, which: str) -> dict:
    """The sweep `--resume WHICH` names, read without writing anything (a refused resume leaves no store behind
    and the store byte-identical): StoreError when the store or the sweep does not exist, or the sweep's process
    still runs. Returns the sweep's row."""
    if which != "last" and not which.isdigit():
        raise StoreError(f"--resume {which!r}: expected 'last' or a sweep id (a whole number)")
    if not os.path.isfile(path):
        raise StoreError(f"--resume {which}: there is no store at {path!r} (nothing to resume); --store names the "
                         "store the interrupted sweep wrote to")
    try:
        conn = _reader(path)
        conn.row_factory = sqlite3.Row
        try:
            row = dict(find_sweep(conn, which))
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise StoreError(f"--resume {which}: {path!r} cannot be read as a results store: {e}") from None
    except StoreError as e:
        raise StoreError(f"--resume {which}: {e} ({path})") from None
    if row["status"] == "running" and row["hostname"] == socket.gethostname() and row["pid"] and _pid_alive(int(row["pid"])):
        raise StoreError(f"sweep {row['sweep_id']} is still running (pid {row['pid']} on {row['hostname']})")
    return row


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


def _check_version(conn: sqlite3.Connection, path: str, version: int, tables: set, readonly: bool = False) -> None:
    problem = None
    foreign = not_a_store(version, tables)
    if foreign:
        problem = f"store {path!r} {foreign}; the file was not modified."
    elif version > SCHEMA_VERSION or (version == 0 and tables):
        problem = (f"store {path!r} has schema version {version}; this suite reads and writes version "
                   f"{SCHEMA_VERSION} ({SCHEMA_HISTORY[SCHEMA_VERSION]}). Use another --store, or a suite "
                   f"version that matches; the file was not modified.")
    elif readonly and 0 < version < SCHEMA_VERSION:
        problem = (f"store {path!r} was written with schema version {version}; this suite reads version {SCHEMA_VERSION}. "
                   f"`./run_bench.sh migrate --store {path}` upgrades it in place, keeping every row "
                   f"(a sweep into it does the same); the file was not modified.")
    if problem:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
        raise StoreError(problem)


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


def begin_sweep(conn: sqlite3.Connection, command_line: str, config_json: str, env_id: Optional[int],
                label: Optional[str] = None, paired_with: Optional[int] = None) -> int:
    with transaction(conn):
        cur = conn.execute("INSERT INTO sweeps (started_at, status, command_line, config_json, hostname, pid, env_id, "
                           "label, paired_with) VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                           (now(), command_line, config_json, socket.gethostname(), os.getpid(), env_id, label, paired_with))
    return int(cur.lastrowid)


def pair_sweeps(conn: sqlite3.Connection, a: int, b: int) -> None:
    """Mark two sweeps as interleaved A/B runs of each other (compare then pairs their processes)."""
    with transaction(conn):
        conn.execute("UPDATE sweeps SET paired_with = ? WHERE sweep_id = ?", (b, a))
        conn.execute("UPDATE sweeps SET paired_with = ? WHERE sweep_id = ?", (a, b))


def reopen_sweep(conn: sqlite3.Connection, sweep_id: int) -> None:
    """Resume: the same sweep id goes back to 'running', owned by this process."""
    with transaction(conn):
        conn.execute("UPDATE sweeps SET status = 'running', ended_at = NULL, hostname = ?, pid = ?, resumed = resumed + 1 "
                     "WHERE sweep_id = ?", (socket.gethostname(), os.getpid(), sweep_id))


def end_sweep(conn: sqlite3.Connection, sweep_id: int, status: str, traceback_path: Optional[str] = None) -> None:
    with transaction(conn):
        conn.execute("UPDATE sweeps SET status = ?, ended_at = ?, traceback_path = COALESCE(?, traceback_path) "
                     "WHERE sweep_id = ?", (status, now(), traceback_path, sweep_id))


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
    # an id past SQLite's INTEGER is in no store (sqlite3 would raise OverflowError binding it)
    row = conn.execute("SELECT * FROM sweeps WHERE sweep_id = ?", (sid,)).fetchone() if abs(sid) <= SQLITE_MAX_INTEGER else None
    if row is None:
        raise StoreError(f"sweep {sid} is not in the store")
    return row


def ok_keys(conn: sqlite3.Connection, sweep_id: int) -> set:
    """(config_key, repeat) pairs of a sweep that a resume leaves alone: those with an ok result, and the skipped
    ones of a configuration that never failed here (the plan's skips). A failed repeat's later ones, skipped as
    "not run again", run again with it until each has an ok result."""
    rows = [(r["config_key"], r["repeat"], r["status"])
            for r in conn.execute("SELECT config_key, repeat, status FROM results WHERE sweep_id = ?", (sweep_id,))]
    failed_here = {k for k, _, status in rows if status not in ("ok", "skipped")}
    return {(k, rep) for k, rep, status in rows if status == "ok" or (status == "skipped" and k not in failed_here)}


def done_keys(path: str, sweep_id: int) -> set:
    """`ok_keys` of a sweep, read without writing anything (a resume's pre-flight checks, before it opens the store)."""
    conn = _reader(path)
    conn.row_factory = sqlite3.Row
    try:
        return ok_keys(conn, sweep_id)
    finally:
        conn.close()


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
