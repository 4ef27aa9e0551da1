"""What the sweep does for --profile: where each configuration's traces go, and what profiling cost.

    spec = profiling.attach(spec, cfg, sweep_id, index)   # before launching: bench mode only
    for line in profiling.cost_lines(conn, sweep_id): log(line)   # at the end of the sweep

Traces lie next to the store, one folder per sweep, one file per configuration and rank:
    <store folder>/traces/sweep<ID>/<NNN>-<configuration>-rep<R>-rank<K>.pt.trace.json.gz
(NNN: the configuration's place in the plan). A SLURM sweep's store is on a folder every node reaches,
so its traces are too. The ranks write them (bench.rank.profile); the store reads them back for their
figures (bench.analysis.traces) and keeps each path with its result.
"""
from __future__ import annotations

import dataclasses
import os
import re

from bench.config import SweepConfig
from bench.shared.spec import RunSpec

HOW_TO_OPEN = ("open a trace at https://ui.perfetto.dev (drag the .gz file in), or all of a sweep's with "
               "`tensorboard --logdir {folder}` (pip install torch-tb-profiler)")


def traces_dir(store_path: str, sweep_id: int) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(store_path)), "traces", f"sweep{sweep_id}")


def trace_prefix(store_path: str, sweep_id: int, index: int, spec: RunSpec) -> str:
    """The path every rank's trace of this configuration starts with (the rank adds -rank<K>.pt.trace.json.gz)."""
    key = spec.key.split("/", 1)[1] if "/" in spec.key else spec.key  # without the mode: always 'bench'
    name = re.sub(r"[^A-Za-z0-9.=,-]+", "_", key.replace("/", "-"))[:150]
    return os.path.join(traces_dir(store_path, sweep_id), f"{index:03d}-{name}-rep{spec.repeat}")


def attach(spec: RunSpec, cfg: SweepConfig, sweep_id: int, index: int) -> RunSpec:
    """The spec with --profile's settings when the sweep profiles and the configuration is a benchmark."""
    if not cfg.profile or spec.mode != "bench":
        return spec
    return dataclasses.replace(spec, profile_steps=cfg.profile_steps, profile_max_mb=cfg.profile_max_mb,
                               trace_prefix=trace_prefix(cfg.store, sweep_id, index, spec))


def cost_lines(conn, sweep_id: int, store_path: str) -> list:
    """What profiling cost this sweep: trace sizes per traced step, and the time it added."""
    rows = [dict(r) for r in conn.execute(
        "SELECT t.*, r.wall_s AS result_wall_s FROM traces t JOIN results r ON r.result_id = t.result_id "
        "WHERE r.sweep_id = ? ORDER BY t.result_id, t.rank", (sweep_id,))]
    if not rows:
        return []
    kept = [r for r in rows if r["trace_bytes"]]
    total_mb = sum(r["trace_bytes"] for r in kept) / 1e6
    steps = sum(r["steps"] or 0 for r in kept)
    by_result: dict = {}
    for r in rows:  # the ranks profile at the same time: a configuration is held up by its slowest
        by_result[r["result_id"]] = (max(by_result.get(r["result_id"], (0.0, 0.0))[0], r["profile_s"] or 0.0),
                                     r["result_wall_s"] or 0.0)
    added_s = sum(p for p, _ in by_result.values()) + sum(r["read_s"] or 0.0 for r in rows)  # the sweep reads them in turn
    wall_s = sum(w for _, w in by_result.values())
    per_step = f", {total_mb / steps:.3f} MB per traced step and rank" if steps else ""
    share = f" ({added_s / wall_s * 100:.0f}% of the profiled configurations' {wall_s:.0f} s)" if wall_s else ""
    slower = _overhead(conn, list(by_result))
    lines = [f"profiling: {len(kept)} trace(s), {total_mb:.2f} MB gzipped in all{per_step}; "
             f"it added {added_s:.1f} s to the sweep{share}"
             + (f"; a traced step took {slower:.2f}x a measured one (median)" if slower == slower else "")]
    for r in rows:
        if r["error"] or r["note"]:
            lines.append(f"profiling: result {r['result_id']} rank {r['rank']}: {r['error'] or r['note']}")
    lines.append("profiling: traces in " + traces_dir(store_path, sweep_id) + "; "
                 + HOW_TO_OPEN.format(folder=traces_dir(store_path, sweep_id)))
    return lines


def _overhead(conn, result_ids: list) -> float:
    """Median over configurations of (median traced step / median measured step): the profiler's own cost per step."""
    ratios = []
    for rid in result_ids:
        med = {}
        for kind in ("measure", "profile"):
            ms = sorted(r[0] for r in conn.execute("SELECT step_ms FROM steps WHERE result_id = ? AND kind = ?", (rid, kind)))
            med[kind] = ms[len(ms) // 2] if ms else None
        if med["measure"] and med["profile"]:
            ratios.append(med["profile"] / med["measure"])
    ratios.sort()
    return ratios[len(ratios) // 2] if ratios else float("nan")


def result_note(conn, result_id: int) -> str:
    """'' or what went wrong with a configuration's traces, for its line in the sweep's log."""
    rows = conn.execute("SELECT rank, error, note FROM traces WHERE result_id = ? AND (error IS NOT NULL OR note IS NOT NULL) "
                        "ORDER BY rank", (result_id,)).fetchall()
    return "".join(f"; profiling, rank {r['rank']}: {r['error'] or r['note']}" for r in rows)
