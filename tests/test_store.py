"""The results store: versioned schema, one transaction per result, raw rows kept, the counting result picked."""
from __future__ import annotations

import hashlib
import sqlite3

import pytest

from bench.store import schema, store
from bench.sweep import record
from bench.sweep.plan import RunSpec


def spec(strategy="ddp", n=2, **kw) -> RunSpec:
    return RunSpec(workload="synthetic", strategy=strategy, device_type="cpu", device_count=n, per_device_batch=4,
                   global_batch=4 * n, image_size=0, steps=3, warmup=1, threads=1, seed=0, scaling="weak", **kw)


def steps(n_ranks=2, ms=(10.0, 12.0, 11.0)):
    return [{"kind": "measure", "rank": r, "step": i, "step_ms": v + r} for r in range(n_ranks) for i, v in enumerate(ms)]


def test_store_of_another_schema_version_is_refused_and_left_untouched(store_path):
    conn = sqlite3.connect(store_path)
    conn.execute("CREATE TABLE results (x)")
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = hashlib.sha256(open(store_path, "rb").read()).hexdigest()
    with pytest.raises(store.StoreError, match=f"schema version 99.*version {store.SCHEMA_VERSION}"):
        store.connect(store_path)
    assert hashlib.sha256(open(store_path, "rb").read()).hexdigest() == before


def test_a_store_another_sweep_is_creating_at_that_moment_is_not_refused_as_foreign(store_path, monkeypatch):
    # Sweeps started together on a new store: one creates it while another checks it. The check read the version
    # (0: not yet committed) and then the tables (committed since), and refused a store of "schema version 0".
    creator = sqlite3.connect(store_path, isolation_level=None)
    creator.execute("PRAGMA journal_mode = WAL")
    creator.execute("BEGIN IMMEDIATE")
    schema.create(creator)

    class CommitAfterTheFirstRead:  # the creator commits between the check's two reads
        def __init__(self, conn):
            self.conn = conn

        def execute(self, sql, *args):
            cursor = self.conn.execute(sql, *args)
            if "user_version" in sql and creator.in_transaction:
                creator.execute("COMMIT")
            return cursor

        def __getattr__(self, name):
            return getattr(self.conn, name)

    reader = store._reader
    monkeypatch.setattr(store, "_reader", lambda path: CommitAfterTheFirstRead(reader(path)))
    store.check_path(store_path)  # no StoreError
    assert not creator.in_transaction  # the commit did land in the middle of the check
    creator.close()


def test_a_file_that_is_not_sqlite_is_refused(tmp_path):
    p = tmp_path / "notes.sqlite"
    p.write_text("not a database " * 100)
    with pytest.raises(store.StoreError, match="not a SQLite results store"):
        store.connect(str(p))


@pytest.mark.parametrize("version", [0, 3])
def test_another_programs_sqlite_database_is_not_a_store_not_an_old_one(tmp_path, version):
    # A database with no sweeps table was told "has schema version 0; this suite reads version 6 (...)" and two
    # thousand characters of history: as if it were an old store to upgrade.
    from bench import results
    from bench.store import read
    p = str(tmp_path / "other.sqlite")
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE foo (x)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
    before = hashlib.sha256(open(p, "rb").read()).hexdigest()
    said = f"{p!r} is a SQLite database but not a results store (no sweeps table; it holds tables: foo); " \
           "expected a store this suite wrote"
    for attempt in (lambda: store.check_path(p), lambda: store.connect(p), lambda: store.connect(p, readonly=True),
                    lambda: read.connect(p), lambda: results.load(p)):
        with pytest.raises(store.StoreError) as refused:
            attempt()
        assert said in str(refused.value) and "schema version" not in str(refused.value), refused.value
    assert hashlib.sha256(open(p, "rb").read()).hexdigest() == before


def test_an_empty_sqlite_file_still_holds_no_results_yet(tmp_path):
    from bench.store import read
    empty, no_tables = tmp_path / "empty.sqlite", str(tmp_path / "no-tables.sqlite")
    empty.write_bytes(b"")
    conn = sqlite3.connect(no_tables)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("DROP TABLE t")
    conn.commit()
    conn.close()
    for p in (str(empty), no_tables):
        store.check_path(p)  # a sweep may write into it
        with pytest.raises(store.StoreError, match="holds no results yet"):
            read.connect(p)


def test_result_and_raw_rows_are_written_together_or_not_at_all(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    bad = steps() + [{"kind": "measure", "rank": 0, "step": 0, "step_ms": 1.0}]  # duplicate primary key
    with pytest.raises(sqlite3.IntegrityError):
        record.record_result(conn, sid, None, spec(), "ok", payload={"steps": bad})
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == 0


def test_ddp_step_time_is_the_slowest_rank_and_summary_derives_from_raw_rows(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    windows = [{"kind": "measure", "rank": r, "wall_s": 0.030 + 0.002 * r, "samples": 12, "steps": 3} for r in range(2)]
    rid = record.record_result(conn, sid, None, spec(), "ok",
                              payload={"steps": steps(), "windows": windows, "params": 10, "grad_bytes": 40})
    r = conn.execute("SELECT * FROM results WHERE result_id = ?", (rid,)).fetchone()
    assert r["step_ms_median"] == 12.0          # per step max over ranks: 11, 13, 12 -> median 12
    assert r["samples_per_s"] == pytest.approx(24 / 0.032)  # both ranks' samples over the slower rank's window
    assert r["window_s"] == pytest.approx(0.032)
    assert conn.execute("SELECT COUNT(*) FROM steps WHERE result_id = ?", (rid,)).fetchone()[0] == 6
    assert r["env_id"] is None and r["params"] == 10


def test_exposed_communication_is_the_probes_synced_minus_no_sync_median(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    probe = [{"kind": k, "rank": r, "step": 10 + i, "step_ms": ms} for k, ms in (("probe_sync", 15.0), ("probe_no_sync", 7.0))
             for r in range(2) for i in range(3)]
    rid = record.record_result(conn, sid, None, spec(), "ok", payload={"steps": steps() + probe, "comm_method": "x"})
    assert conn.execute("SELECT exposed_comm_ms FROM results WHERE result_id = ?", (rid,)).fetchone()[0] == pytest.approx(8.0)


def test_latest_results_prefers_the_ok_rerun_of_a_failed_configuration(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    record.record_result(conn, sid, None, spec(), "failed", "rank 1: boom")
    ok = record.record_result(conn, sid, None, spec(), "ok", payload={"steps": steps()})
    record.record_result(conn, sid, None, spec("single", 1), "interrupted", "Ctrl-C")
    latest = {r["config_key"]: r for r in store.latest_results(conn, sid)}
    assert latest[spec().key]["result_id"] == ok
    assert latest[spec("single", 1).key]["status"] == "interrupted"
    assert store.ok_keys(conn, sid) == {(spec().key, 0)}


def test_a_resume_runs_again_every_repeat_a_failure_skipped_and_leaves_other_skips_alone(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    dp2, ddp, single = spec("dp", 2), spec(), spec("single", 1)
    record.record_result(conn, sid, None, dp2, "skipped", "DataParallel on CPU runs at count 1 only")  # the plan's
    record.record_result(conn, sid, None, ddp, "failed", "rank 1: boom")
    record.record_result(conn, sid, None, single, "ok", payload={"steps": steps(1)})
    record.record_result(conn, sid, None, spec(repeat=1), "skipped", "not run again: repeat 1 of this configuration failed")
    record.record_result(conn, sid, None, spec("single", 1, repeat=1), "ok", payload={"steps": steps(1)})
    assert store.ok_keys(conn, sid) == {(dp2.key, 0), (single.key, 0), (single.key, 1)}
    record.record_result(conn, sid, None, ddp, "ok", payload={"steps": steps()})  # the resume: repeat 1 ok, then 2
    assert (ddp.key, 1) not in store.ok_keys(conn, sid)
    record.record_result(conn, sid, None, spec(repeat=1), "ok", payload={"steps": steps()})
    assert store.ok_keys(conn, sid) == {(dp2.key, 0), (single.key, 0), (single.key, 1), (ddp.key, 0), (ddp.key, 1)}


def test_environment_is_stored_with_versions(store_path):
    from bench.machine import env
    conn = store.connect(store_path)
    e = env.capture()
    eid = store.insert_environment(conn, e)
    row = conn.execute("SELECT * FROM environments WHERE env_id = ?", (eid,)).fetchone()
    import torch
    assert row["torch"] == torch.__version__ and row["cpu_cores"] >= 1 and row["hostname"]
    assert row["git_commit"] and row["cpu_model"]


def test_a_version_1_store_is_migrated_in_place_keeping_every_row(tmp_path):
    from bench.store import schema
    path = str(tmp_path / "v1.sqlite")
    conn = sqlite3.connect(path)
    v1 = """
    CREATE TABLE environments (env_id INTEGER PRIMARY KEY, captured_at TEXT NOT NULL, hostname TEXT, python TEXT, torch TEXT,
        torchvision TEXT, cuda TEXT, cudnn TEXT, nccl TEXT, gpu_names TEXT, gpu_driver TEXT, cpu_model TEXT, cpu_cores INTEGER,
        git_commit TEXT, json TEXT NOT NULL);
    CREATE TABLE sweeps (sweep_id INTEGER PRIMARY KEY, started_at TEXT NOT NULL, ended_at TEXT,
        status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'interrupted', 'died')), command_line TEXT NOT NULL,
        config_json TEXT NOT NULL, hostname TEXT, pid INTEGER, env_id INTEGER REFERENCES environments(env_id),
        resumed INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE results (result_id INTEGER PRIMARY KEY, sweep_id INTEGER NOT NULL REFERENCES sweeps(sweep_id),
        env_id INTEGER, config_key TEXT NOT NULL, mode TEXT NOT NULL, workload TEXT NOT NULL, strategy TEXT NOT NULL,
        device_type TEXT NOT NULL, device_count INTEGER NOT NULL, per_device_batch INTEGER NOT NULL,
        global_batch INTEGER NOT NULL, image_size INTEGER, scaling TEXT, data TEXT, repeat INTEGER NOT NULL DEFAULT 0,
        threads_per_process INTEGER, status TEXT NOT NULL, reason TEXT, failed_rank INTEGER, started_at TEXT,
        ended_at TEXT, wall_s REAL, n_steps INTEGER, samples_per_s REAL, step_ms_median REAL, step_ms_p10 REAL,
        step_ms_p90 REAL, step_ms_iqr REAL, step_ms_mean REAL, step_ms_ci95_low REAL, step_ms_ci95_high REAL,
        unstable INTEGER, params INTEGER, grad_mib REAL, exposed_comm_ms REAL, comm_method TEXT, spec_json TEXT NOT NULL,
        details_json TEXT);
    CREATE TABLE steps (result_id INTEGER NOT NULL REFERENCES results(result_id), kind TEXT NOT NULL DEFAULT 'measure',
        rank INTEGER NOT NULL, step INTEGER NOT NULL, step_ms REAL NOT NULL, data_ms REAL, h2d_ms REAL, forward_ms REAL,
        backward_ms REAL, optimizer_ms REAL, loss REAL, PRIMARY KEY (result_id, kind, rank, step));
    CREATE TABLE memory (result_id INTEGER NOT NULL, rank INTEGER NOT NULL, device TEXT NOT NULL, device_name TEXT,
        peak_allocated_mib REAL, peak_reserved_mib REAL, peak_rss_mib REAL, PRIMARY KEY (result_id, rank, device));
    CREATE TABLE epochs (result_id INTEGER NOT NULL REFERENCES results(result_id), epoch INTEGER NOT NULL, wall_s REAL NOT NULL,
        mean_loss REAL, data_wait_s REAL, samples INTEGER, steps INTEGER, images INTEGER, images_seen INTEGER,
        images_repeated INTEGER, images_dropped INTEGER, PRIMARY KEY (result_id, epoch));
    CREATE TABLE comm (result_id INTEGER NOT NULL, size_bytes INTEGER NOT NULL, time_ms REAL NOT NULL, algbw_gbps REAL,
        busbw_gbps REAL, iters INTEGER, PRIMARY KEY (result_id, size_bytes));
    INSERT INTO sweeps VALUES (1, 't', 't', 'completed', 'cmd', '{"steps": 0, "warmup": -1, "gpus": []}', 'h', 1, NULL, 0);
    INSERT INTO results (result_id, sweep_id, config_key, mode, workload, strategy, device_type, device_count,
        per_device_batch, global_batch, status, spec_json) VALUES (1, 1, 'k', 'comm', 'allreduce', 'ddp', 'cpu', 2, 0, 0, 'ok', '{}');
    INSERT INTO steps (result_id, rank, step, step_ms) VALUES (1, 0, 0, 5.0);
    INSERT INTO epochs (result_id, epoch, wall_s) VALUES (1, 0, 9.0);
    INSERT INTO comm VALUES (1, 4096, 0.5, 1.0, 1.0, 5);
    PRAGMA user_version = 1;
    """
    conn.executescript(v1)
    conn.close()
    with pytest.raises(store.StoreError, match="migrate --store"):
        store.connect(path, readonly=True)  # a report does not modify it; it says how to upgrade
    conn = store.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == 1
    assert tuple(conn.execute("SELECT scope, ranks, op, timing FROM comm").fetchone()) == ("world", 2, "all_reduce", "host_clock")
    assert conn.execute("SELECT wall_s FROM epochs").fetchone()[0] == 9.0
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert "results_v1" not in str(conn.execute("SELECT group_concat(sql) FROM sqlite_master").fetchone()[0])
    store.end_sweep(conn, 1, "failed", "/tmp/tb.txt")  # the status version 1 could not hold
    from bench.config import SweepConfig
    assert SweepConfig.from_json(conn.execute("SELECT config_json FROM sweeps").fetchone()[0]).steps is None


def test_a_version_3_store_keeps_its_all_reduce_rows_and_takes_other_collectives_at_the_same_size(tmp_path):
    from bench.store import schema
    path = str(tmp_path / "v3.sqlite")
    store.connect(path).close()
    conn = sqlite3.connect(path)
    conn.executescript("""
    DROP TABLE comm;
    CREATE TABLE comm (result_id INTEGER NOT NULL REFERENCES results(result_id), scope TEXT NOT NULL DEFAULT 'world',
        ranks INTEGER, size_bytes INTEGER NOT NULL, time_ms REAL NOT NULL, algbw_gbps REAL, busbw_gbps REAL,
        iters INTEGER, PRIMARY KEY (result_id, scope, size_bytes));
    INSERT INTO sweeps (sweep_id, started_at, status, command_line, config_json) VALUES (1, 't', 'completed', 'cmd', '{}');
    INSERT INTO results (result_id, sweep_id, config_key, mode, workload, strategy, device_type, device_count,
        per_device_batch, global_batch, status, spec_json) VALUES (1, 1, 'k', 'comm', 'allreduce', 'comm', 'cuda', 4, 0, 0, 'ok', '{}');
    INSERT INTO comm VALUES (1, 'world', 4, 4096, 0.5, 0.008, 0.012, 50), (1, 'node', 2, 4096, 0.25, 0.016, 0.016, 50);
    PRAGMA user_version = 3;
    """)
    conn.close()
    conn = store.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    rows = [tuple(r) for r in conn.execute("SELECT scope, op, size_bytes, time_ms, iters, timing FROM comm ORDER BY scope")]
    assert rows == [("node", "all_reduce", 4096, 0.25, 50, "host_clock"), ("world", "all_reduce", 4096, 0.5, 50, "host_clock")]
    # the key now holds the collective: an all-gather of the same size and scope is a row of its own
    conn.execute("INSERT INTO comm (result_id, scope, op, size_bytes, time_ms, timing) VALUES "
                 "(1, 'world', 'all_gather', 4096, 0.3, 'cuda_events')")
    assert conn.execute("SELECT COUNT(*) FROM comm").fetchone()[0] == 3
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert "comm_v1" not in str(conn.execute("SELECT group_concat(name) FROM sqlite_master").fetchone()[0])


def test_a_version_4_store_gains_the_state_columns_optimizer_interference_and_held_out_checks(tmp_path):
    from bench.store import schema
    path = str(tmp_path / "v4.sqlite")
    conn = sqlite3.connect(path)
    conn.executescript("""
    CREATE TABLE sweeps (sweep_id INTEGER PRIMARY KEY, started_at TEXT NOT NULL, ended_at TEXT, status TEXT NOT NULL,
        command_line TEXT NOT NULL, config_json TEXT NOT NULL, hostname TEXT, pid INTEGER, env_id INTEGER,
        resumed INTEGER NOT NULL DEFAULT 0, traceback_path TEXT, label TEXT, paired_with INTEGER);
    CREATE TABLE results (result_id INTEGER PRIMARY KEY, sweep_id INTEGER NOT NULL, config_key TEXT NOT NULL,
        mode TEXT NOT NULL, workload TEXT NOT NULL, strategy TEXT NOT NULL, device_type TEXT NOT NULL,
        device_count INTEGER NOT NULL, per_device_batch INTEGER NOT NULL, global_batch INTEGER NOT NULL,
        status TEXT NOT NULL, spec_json TEXT NOT NULL);
    CREATE TABLE memory (result_id INTEGER NOT NULL, rank INTEGER NOT NULL, device TEXT NOT NULL, peak_rss_mib REAL,
        PRIMARY KEY (result_id, rank, device));
    CREATE TABLE forecasts (sweep_id INTEGER NOT NULL, config_key TEXT NOT NULL, workload TEXT NOT NULL,
        strategy TEXT NOT NULL, variant TEXT, device_count INTEGER NOT NULL, from_counts TEXT NOT NULL,
        forecast_step_ms REAL, measured_step_ms REAL, error REAL, forecast_samples_per_s REAL,
        measured_samples_per_s REAL, compute_error REAL, noise REAL, why TEXT, network TEXT, created_at TEXT NOT NULL,
        PRIMARY KEY (sweep_id, config_key));
    INSERT INTO sweeps (sweep_id, started_at, status, command_line, config_json) VALUES (1, 't', 'completed', 'cmd', '{}');
    INSERT INTO results VALUES (1, 1, 'k', 'bench', 'synthetic', 'ddp', 'cpu', 2, 64, 128, 'ok', '{}');
    INSERT INTO memory VALUES (1, 0, 'cpu', 700.0);
    INSERT INTO forecasts VALUES (1, 'k', 'synthetic', 'ddp', 'fp32', 2, '1', 30.0, 40.0, -0.25, 1, 1, 0, 0, '', '', 't');
    PRAGMA user_version = 4;
    """)
    conn.close()
    conn = store.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION == 6
    assert tuple(conn.execute("SELECT optimizer, activation_checkpointing FROM results").fetchone()) == ("sgd", "none")
    assert tuple(conn.execute("SELECT peak_rss_mib, params_mib, baseline_rss_mib FROM memory").fetchone()) == (700.0, None, None)
    # version 6: the whole run's peak (before the post-warm-up reset) was not recorded; nor the device's own work
    assert tuple(conn.execute("SELECT run_peak_reserved_mib, run_device_used_mib FROM memory").fetchone()) == (None, None)
    assert {"work_ms", "devices_json", "step_waits_json"} <= {r[1] for r in conn.execute("PRAGMA table_info(traces)")}
    # an old check judged its own sweep; a held-out check of a later sweep is a row of its own
    assert tuple(conn.execute("SELECT sweep_id, judged_sweep, error FROM forecasts").fetchone()) == (1, 1, -0.25)
    conn.execute("INSERT INTO sweeps (sweep_id, started_at, status, command_line, config_json) VALUES (2, 't', 'completed', 'c', '{}')")
    conn.execute("INSERT INTO forecasts (sweep_id, judged_sweep, config_key, workload, strategy, device_count, from_counts, "
                 "created_at) VALUES (1, 2, 'k', 'synthetic', 'ddp', 2, '1', 't')")
    assert conn.execute("SELECT COUNT(*) FROM forecasts").fetchone()[0] == 2
    assert "interference" in {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


def test_a_process_that_exits_without_teardown_leaves_its_store_whole_in_the_one_file(tmp_path):
    # `python -m bench` ends with store.close_all() then os._exit (no module teardown): a connection left
    # open would leave the last results in the WAL file, lost to whoever copies bench.sqlite alone.
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    path = tmp_path / "s.sqlite"
    code = ("import sys; from bench.shared import procs; from bench.store import store\n"
            f"conn = store.connect({str(path)!r})\n"
            "store.begin_sweep(conn, 'cmd', '{}', None)\n"
            "closed = store.close_all()\n"
            "print(closed)\n"
            "procs.exit_without_teardown(0)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0 and p.stdout.split() == ["1"], p.stdout + p.stderr
    alone = tmp_path / "copy" / "s.sqlite"
    alone.parent.mkdir()
    shutil.copy(path, alone)  # the file alone, without any -wal or -shm beside it
    conn = sqlite3.connect(alone)
    assert conn.execute("SELECT command_line FROM sweeps").fetchall() == [("cmd",)]


def test_reading_a_store_writes_nothing_and_leaves_no_wal_or_shm_beside_it(tmp_path):
    path = tmp_path / "s.sqlite"
    conn = store.connect(str(path))
    store.begin_sweep(conn, "cmd", "{}", None)
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    writer = store.connect(str(path))   # a sweep still writing while a report reads
    store.begin_sweep(writer, "cmd2", "{}", None)
    reader = store.connect(str(path), readonly=True)
    assert [r[0] for r in reader.execute("SELECT command_line FROM sweeps ORDER BY sweep_id")] == ["cmd", "cmd2"]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.execute("DELETE FROM sweeps")
    reader.close()
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]
    reader = store.connect(str(path), readonly=True)   # alone: the report's usual case
    assert reader.execute("SELECT COUNT(*) FROM sweeps").fetchone()[0] == 2
    reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() != before  # (the writer's sweep is in the file)
