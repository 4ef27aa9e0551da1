"""Recording one configuration's result: what the sweep derives from a worker's raw rows before the store writes
them (the results row's summary columns by bench.stats, each --profile trace's figures by
bench.analysis.traces), then bench.store.write writes the row and every raw row in one transaction.

    rid = record_result(conn, sweep_id, env_id, spec, "ok", payload=payload)    # every command that stores a run

The store itself derives nothing (it reads and writes rows); every number in a report is derived again from the raw
rows (bench.analysis.results), the summary columns are there for SQL readers.
"""
from __future__ import annotations

import sqlite3
from typing import Optional

from bench import stats

from bench.analysis import traces
from bench.store import write


def summary_columns(steps: list, windows: list, global_batch: int) -> dict:
    """The results row's summary columns (bench.store.write.SUMMARY_COLUMNS) from one run's raw rows."""
    s = stats.result_summary(steps, windows, global_batch)
    summary = s.get("summary")
    out = {"samples_per_s": s.get("samples_per_s"), "exposed_comm_ms": s.get("exposed_comm_ms"), "window_s": s.get("window_s")}
    if summary is not None:
        out.update(n_steps=summary.n, step_ms_median=summary.median_ms, step_ms_p10=summary.p10_ms,
                   step_ms_p90=summary.p90_ms, step_ms_iqr=summary.iqr_ms, step_ms_mean=summary.mean_ms,
                   step_ms_ci95_low=summary.ci95_low_ms, step_ms_ci95_high=summary.ci95_high_ms,
                   unstable=int(summary.unstable))
    return out


def record_result(conn: sqlite3.Connection, sweep_id: int, env_id: Optional[int], spec, status: str,
                  reason: str = "", payload: Optional[dict] = None, started_at: str = "", ended_at: str = "",
                  wall_s: Optional[float] = None, failed_rank: Optional[int] = None) -> int:
    """Derive, then write one configuration's result with all its raw rows (bench.store.write.write_result).
    payload: the worker's result file (steps, windows, memory, epochs, comm, interference, nodes, traces, buckets,
    and the scalars write_result names). Returns result_id."""
    payload = dict(payload or {})
    trace_rows = traces.derive(payload.pop("traces", []))  # --profile: read the traces before taking the lock
    derived = (summary_columns(payload.get("steps", []), payload.get("windows", []), spec.global_batch)
               if status == "ok" else {})
    bad = stats.loss_not_finite(payload.get("steps", []))
    if bad:  # kept with the result (details): the steps table keeps a NaN loss as NULL
        payload["loss_not_finite"] = bad
    return write.write_result(conn, sweep_id, env_id, spec, status, reason, payload, derived=derived, traces=trace_rows,
                              started_at=started_at, ended_at=ended_at, wall_s=wall_s, failed_rank=failed_rank)
