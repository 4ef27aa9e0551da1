"""The results store: versioned schema, one transaction per result, raw rows kept, the counting result picked."""
from __future__ import annotations

import hashlib
import sqlite3

import pytest

from bench import store
from bench.config import RunSpec


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
    with pytest.raises(store.StoreError, match="schema version 99.*version 1"):
        store.connect(store_path)
    assert hashlib.sha256(open(store_path, "rb").read()).hexdigest() == before


def test_a_file_that_is_not_sqlite_is_refused(tmp_path):
    p = tmp_path / "notes.sqlite"
    p.write_text("not a database " * 100)
    with pytest.raises(store.StoreError, match="not a SQLite results store"):
        store.connect(str(p))


def test_result_and_raw_rows_are_written_together_or_not_at_all(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    bad = steps() + [{"kind": "measure", "rank": 0, "step": 0, "step_ms": 1.0}]  # duplicate primary key
    with pytest.raises(sqlite3.IntegrityError):
        store.record_result(conn, sid, None, spec(), "ok", payload={"steps": bad})
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == 0


def test_ddp_step_time_is_the_slowest_rank_and_summary_derives_from_raw_rows(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    rid = store.record_result(conn, sid, None, spec(), "ok", payload={"steps": steps(), "params": 10, "grad_bytes": 40})
    r = conn.execute("SELECT * FROM results WHERE result_id = ?", (rid,)).fetchone()
    assert r["step_ms_median"] == 12.0          # per step max over ranks: 11, 13, 12 -> median 12
    assert r["samples_per_s"] == pytest.approx(8 / 0.012)
    assert conn.execute("SELECT COUNT(*) FROM steps WHERE result_id = ?", (rid,)).fetchone()[0] == 6
    assert r["env_id"] is None and r["params"] == 10


def test_exposed_communication_is_synced_minus_no_sync_median(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    nosync = [{"kind": "no_sync", "rank": r, "step": i, "step_ms": 7.0} for r in range(2) for i in range(3)]
    rid = store.record_result(conn, sid, None, spec(), "ok", payload={"steps": steps() + nosync, "comm_method": "x"})
    assert conn.execute("SELECT exposed_comm_ms FROM results WHERE result_id = ?", (rid,)).fetchone()[0] == pytest.approx(5.0)


def test_latest_results_prefers_the_ok_rerun_of_a_failed_configuration(store_path):
    conn = store.connect(store_path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    store.record_result(conn, sid, None, spec(), "failed", "rank 1: boom")
    ok = store.record_result(conn, sid, None, spec(), "ok", payload={"steps": steps()})
    store.record_result(conn, sid, None, spec("single", 1), "interrupted", "Ctrl-C")
    latest = {r["config_key"]: r for r in store.latest_results(conn, sid)}
    assert latest[spec().key]["result_id"] == ok
    assert latest[spec("single", 1).key]["status"] == "interrupted"
    assert store.ok_keys(conn, sid) == {(spec().key, 0)}


def test_environment_is_stored_with_versions(store_path):
    from bench import env
    conn = store.connect(store_path)
    e = env.capture()
    eid = store.insert_environment(conn, e)
    row = conn.execute("SELECT * FROM environments WHERE env_id = ?", (eid,)).fetchone()
    import torch
    assert row["torch"] == torch.__version__ and row["cpu_cores"] >= 1 and row["hostname"]
    assert row["git_commit"] and row["cpu_model"]
