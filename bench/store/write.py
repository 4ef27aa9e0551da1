"""Writing one configuration's result: its results row and every raw row (steps, windows, memory, epochs, comm,
interference, nodes, traces, buckets) in one `BEGIN IMMEDIATE` transaction, so a killed sweep never leaves half a
result. The store writes what it is given: the summary columns and the traces' figures are derived before, on
the sweep's side (bench.sweep.record, with bench.analysis), never here.

    rid = write_result(conn, sweep_id, env_id, spec, "ok", "", payload, derived={...}, traces=[...])
"""
from __future__ import annotations

import json
import sqlite3
from typing import Optional

from bench.shared import faults
from bench.store.schema import (BUCKET_COLUMNS, COMM_COLUMNS, EPOCH_COLUMNS, GPU_SAMPLE_COLUMNS, INTERFERENCE_COLUMNS,
                                MEMORY_COLUMNS, STEP_COLUMNS, TRACE_COLUMNS, WINDOW_COLUMNS)
from bench.store.store import transaction

NODE_COLUMNS = ("node_rank", "hostname", "env_json")
DEFAULTS = {"kind": "measure", "scope": "world", "op": "all_reduce", "first_step": 0}
SUMMARY_COLUMNS = ("n_steps", "samples_per_s", "step_ms_median", "step_ms_p10", "step_ms_p90", "step_ms_iqr",
                   "step_ms_mean", "step_ms_ci95_low", "step_ms_ci95_high", "unstable", "exposed_comm_ms", "window_s")
RAW_TABLES = ("steps", "windows", "memory", "epochs", "comm", "interference", "nodes", "buckets", "gpu_samples")


def write_result(conn: sqlite3.Connection, sweep_id: int, env_id: Optional[int], spec, status: str,
                 reason: str = "", payload: Optional[dict] = None, *, derived: dict, traces: list,
                 started_at: str = "", ended_at: str = "", wall_s: Optional[float] = None,
                 failed_rank: Optional[int] = None) -> int:
    """Write one configuration's result with all its raw rows in a single transaction. Returns result_id.

    payload (from the worker's result file): steps, windows, memory, epochs, comm, interference, nodes, buckets,
    gpu_samples lists of dicts; params, grad_bytes, comm_method, timing_method, numerics, compile_s; flops (the
    count of bench.workloads.flops: its per-sample figures become columns, the rest flops_json); any other keys go to
    details_json (its 'traces' are ignored: `traces` holds their rows, figures included). derived: the summary
    columns (SUMMARY_COLUMNS; missing ones stay NULL)."""
    payload = dict(payload or {})
    payload.pop("traces", None)
    rows = {name: payload.pop(name, []) for name in RAW_TABLES}
    rows["traces"] = traces
    unknown = set(derived) - set(SUMMARY_COLUMNS)
    if unknown:
        raise ValueError(f"write_result: {sorted(unknown)} are not summary columns of results")
    grad_bytes = payload.pop("grad_bytes", None)
    flops = payload.pop("flops", None) or {}
    row = {
        "sweep_id": sweep_id, "env_id": env_id, "config_key": spec.key, "mode": spec.mode,
        "workload": spec.workload, "strategy": spec.strategy, "device_type": spec.device_type,
        "device_count": spec.device_count, "per_device_batch": spec.per_device_batch, "global_batch": spec.global_batch,
        "image_size": spec.image_size, "scaling": spec.scaling, "data": spec.data, "repeat": spec.repeat,
        "threads_per_process": spec.threads, "status": status, "reason": reason or None, "failed_rank": failed_rank,
        "started_at": started_at or None, "ended_at": ended_at or None, "wall_s": wall_s,
        **{c: derived.get(c) for c in SUMMARY_COLUMNS},
        "params": payload.pop("params", None),
        "grad_mib": grad_bytes / 2**20 if grad_bytes is not None else None,
        "comm_method": payload.pop("comm_method", None),
        "spec_json": spec.to_json(),
        "precision": spec.precision, "channels_last": int(spec.channels_last), "compiled": int(spec.compile),
        "options_json": json.dumps(dict(spec.options), sort_keys=True) if spec.options else None,
        "nodes": spec.nodes, "launcher": spec.launcher, "timing_method": payload.pop("timing_method", None),
        "micro_batch": spec.micro_batch or spec.per_device_batch,
        "loader_workers": spec.num_workers * spec.processes if spec.data == "voc" else None,
        "compile_s": payload.pop("compile_s", None),
        "numerics_json": json.dumps(payload.pop("numerics"), sort_keys=True) if payload.get("numerics") else None,
        "optimizer": getattr(spec, "optimizer", "sgd"),
        "activation_checkpointing": getattr(spec, "activation_checkpointing", "none"),
        "flops_per_sample": flops.get("flops_per_sample"), "hw_flops_per_sample": flops.get("hw_flops_per_sample"),
        "flops_json": json.dumps(flops, sort_keys=True) if flops else None,
        "details_json": json.dumps(payload, sort_keys=True, default=str) if payload else None,
    }
    rows["nodes"] = [{"node_rank": n.get("node_rank", i), "hostname": n.get("hostname"),
                      "env_json": json.dumps(n, sort_keys=True, default=str)} for i, n in enumerate(rows["nodes"])]
    with transaction(conn):
        cur = conn.execute(f"INSERT INTO results ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        rid = int(cur.lastrowid)
        faults.sweep_writing_result()  # tests only: BENCH_FAULT=sigkill@sweep:N kills the sweep right here
        for table, cols in (("steps", STEP_COLUMNS), ("windows", WINDOW_COLUMNS), ("memory", MEMORY_COLUMNS),
                            ("epochs", EPOCH_COLUMNS), ("comm", COMM_COLUMNS), ("interference", INTERFERENCE_COLUMNS),
                            ("nodes", NODE_COLUMNS), ("gpu_samples", GPU_SAMPLE_COLUMNS),
                            ("traces", TRACE_COLUMNS), ("buckets", BUCKET_COLUMNS)):
            if rows[table]:
                conn.executemany(f"INSERT INTO {table} (result_id, {', '.join(cols)}) VALUES (?, {', '.join('?' * len(cols))})",
                                 [[rid] + [it.get(c, DEFAULTS.get(c)) for c in cols] for it in rows[table]])
    return rid
