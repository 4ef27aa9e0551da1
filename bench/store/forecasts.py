"""What the forecast reads from a stored sweep beyond bench.store.results, and where its check is written.

    raw = read_inputs(conn, sweep_id)          # {config_key: Raw}: phases with and without sync, buckets
    write_validation(conn, sweep_id, rows)     # the `forecasts` table: one row per measured count checked
    read_validation(conn, sweep_id)            # those rows, for the report

Phases are medians over the slowest rank's steps (bench.analysis.stats), scaled so they add up to the median
step of those rows: the forecast adds phases, and a sum of medians is not the median of the sums.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Optional

from bench.analysis import stats
from bench.store import store
from bench.store.schema import FORECAST_COLUMNS

PHASES = {"data_ms": ("data_ms", "h2d_ms", "buffers_ms"), "forward_ms": ("forward_ms",),
          "backward_ms": ("backward_ms",), "optimizer_ms": ("optimizer_ms", "other_ms")}


@dataclass
class Raw:
    """One configuration's raw inputs to the forecast (repeats pooled)."""
    key: str
    measured: dict                   # phase -> ms of the measured window (PHASES' names), with 'step_ms'
    no_sync: Optional[dict]          # the same for DDP's no_sync() probe blocks; None without a probe
    sync: Optional[dict] = None      # and for its synchronised probe blocks (the same step as measured, later)
    buckets: list = field(default_factory=list)     # [(size_bytes, ready_fraction)] of DDP's buckets, in order
    units: list = field(default_factory=list)       # [size_bytes] of FSDP's units, forward order


def phases(rows: list) -> Optional[dict]:
    """{data_ms, forward_ms, backward_ms, optimizer_ms, step_ms} from step rows (slowest rank per step)."""
    slowest = stats.slowest_rank_rows(rows)
    if not slowest:
        return None
    step = stats.median(r["step_ms"] for r in slowest)
    out = {name: sum(stats.median(r.get(c) for r in slowest) if any(r.get(c) is not None for r in slowest) else 0.0
                     for c in cols) for name, cols in PHASES.items()}
    total = sum(out.values())
    if total > 0:
        out = {k: v * step / total for k, v in out.items()}
    out["step_ms"] = step
    return out


def _buckets(rows: list) -> list:
    """Each bucket's size and its ready time as a fraction of the last bucket's (backward's gradients all made),
    medians over ranks and steps."""
    by_bucket: dict = {}
    for r in rows:
        by_bucket.setdefault(int(r["bucket"]), []).append(r)
    if not by_bucket:
        return []
    per_step: dict = {}
    for r in rows:
        per_step.setdefault((r["rank"], r["step"]), []).append(float(r["ready_ms"]))
    last = {k: max(v) for k, v in per_step.items()}
    out = []
    for b in sorted(by_bucket):
        fr = [float(r["ready_ms"]) / last[(r["rank"], r["step"])] for r in by_bucket[b] if last[(r["rank"], r["step"])] > 0]
        out.append((float(by_bucket[b][0]["size_bytes"]), stats.median(fr) if fr else 1.0))
    return out


def read_inputs(conn: sqlite3.Connection, sweep_id: int) -> dict:
    """{config_key: Raw} for the ok benchmark results of a sweep."""
    groups: dict = {}
    for r in store.latest_results(conn, sweep_id):
        if r["mode"] == "bench" and r["status"] == "ok":
            groups.setdefault(r["config_key"], []).append(int(r["result_id"]))
    out = {}
    for key, ids in groups.items():
        marks = ",".join("?" * len(ids))
        steps = [dict(s) for s in conn.execute(f"SELECT * FROM steps WHERE result_id IN ({marks})", ids)]
        # the steps of different repeats share step numbers: keep them apart
        for s in steps:
            s["step"] = s["result_id"] * 1_000_000 + s["step"]
        measured = phases([s for s in steps if s["kind"] == "measure"])
        if measured is None:
            continue
        nosync = phases([s for s in steps if s["kind"] in ("probe_no_sync", "no_sync")])
        brows = [dict(b) for b in conn.execute(f"SELECT * FROM buckets WHERE result_id IN ({marks}) ORDER BY bucket", ids)]
        ddp = [b for b in brows if b["kind"] == "ddp" and b["ready_ms"] is not None]
        first = min((b["result_id"] for b in brows if b["kind"] == "fsdp_unit"), default=None)
        units = [float(b["size_bytes"]) for b in brows if b["kind"] == "fsdp_unit" and b["result_id"] == first and b["rank"] == 0]
        out[key] = Raw(key=key, measured=measured, no_sync=nosync, buckets=_buckets(ddp), units=units,
                       sync=phases([s for s in steps if s["kind"] == "probe_sync"]))
    return out


def write_validation(conn: sqlite3.Connection, sweep_id: int, rows: list) -> None:
    """The forecast's check, one row per measured count (a later check of the same sweep replaces it)."""
    if not rows:
        return
    with store.transaction(conn):
        conn.executemany(f"INSERT OR REPLACE INTO forecasts (sweep_id, {', '.join(FORECAST_COLUMNS)}) "
                         f"VALUES (?, {', '.join('?' * len(FORECAST_COLUMNS))})",
                         [[sweep_id] + [r.get(c) if c != "judged_sweep" else r.get(c) or sweep_id for c in FORECAST_COLUMNS]
                          for r in rows])


def read_validation(conn: sqlite3.Connection, sweep_id: int) -> list:
    return [dict(r) for r in conn.execute("SELECT * FROM forecasts WHERE sweep_id = ? ORDER BY workload, strategy, "
                                          "variant, device_count", (sweep_id,))]
