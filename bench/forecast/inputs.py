"""The forecast's inputs derived from one configuration's stored rows (bench.store.forecasts.RawRows): phases with and
without gradient synchronisation, DDP's bucket ready times, the spread of its steps and its memory per rank.

    raw = derive(rows)                   # Raw, or None when the configuration has no measured step
    sync_excess_ms(raw.step_ms, ranks)   # the slowest of `ranks` ranks over the median step

Phases are medians over the slowest rank's steps, scaled so they add up to the median step of those rows: the
forecast adds phases, and a sum of medians is not the median of the sums. Steps of different repeats (processes)
share step numbers: every figure keeps them apart (a repeat's bucket times are divided by its own backward).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from bench import stats

PHASES = {"data_ms": ("data_ms", "h2d_ms"), "forward_ms": ("forward_ms",), "backward_ms": ("backward_ms",),
          "optimizer_ms": ("optimizer_ms", "other_ms"), "buffers_ms": ("buffers_ms",)}
STATE = ("params_mib", "grads_mib", "optimizer_mib", "buckets_mib")


@dataclass
class Raw:
    """One configuration's raw inputs to the forecast (repeats pooled)."""
    key: str
    measured: dict                   # phase -> ms of the measured window (PHASES' names), with 'step_ms'
    no_sync: Optional[dict]          # the same for DDP's no_sync() probe blocks; None without a probe
    sync: Optional[dict] = None      # and for its synchronised probe blocks (the same step as measured, later)
    buckets: list = field(default_factory=list)     # [(size_bytes, ready_fraction)] of DDP's buckets, in order
    units: list = field(default_factory=list)       # [size_bytes] of FSDP's units, forward order
    step_ms: list = field(default_factory=list)     # the measured window's steps, slowest rank, every repeat
    state_mib: dict = field(default_factory=dict)   # STATE -> MiB this rank holds (the largest rank, median of repeats)
    peak_mib: Optional[float] = None                # the largest rank's measured peak (median of repeats)
    peak_method: str = ""                           # how: allocator peak (CUDA) or peak RSS less the baseline (CPU)
    buffer_bytes: float = 0.0                       # the module's buffers (DDP broadcasts them each forward)


def _keyed(rows: list) -> list:
    """Step rows whose step numbers are unique across repeats."""
    return [{**r, "step": int(r["result_id"]) * 1_000_000 + int(r["step"])} for r in rows]


def phases(rows: list) -> Optional[dict]:
    """{data_ms, forward_ms, backward_ms, optimizer_ms, buffers_ms, step_ms} from step rows (slowest rank per step)."""
    slowest = stats.slowest_rank_rows(_keyed(rows))
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


def bucket_fractions(rows: list) -> list:
    """Each DDP bucket's size and its ready time as a fraction of the last bucket's in the same repeat, rank and step
    (backward's gradients all made), medians over repeats, ranks and steps."""
    ddp = [r for r in rows if r.get("kind", "ddp") == "ddp" and r.get("ready_ms") is not None]
    last: dict = {}
    for r in ddp:
        k = (r["result_id"], r["rank"], r["step"])
        last[k] = max(last.get(k, 0.0), float(r["ready_ms"]))
    by_bucket: dict = {}
    for r in ddp:
        by_bucket.setdefault(int(r["bucket"]), []).append(r)
    out = []
    for b in sorted(by_bucket):
        fr = [float(r["ready_ms"]) / last[(r["result_id"], r["rank"], r["step"])] for r in by_bucket[b]
              if last[(r["result_id"], r["rank"], r["step"])] > 0]
        out.append((float(by_bucket[b][0]["size_bytes"]), stats.median(fr) if fr else 1.0))
    return out


def fsdp_units(rows: list) -> list:
    units = [r for r in rows if r.get("kind") == "fsdp_unit" and r.get("rank") == 0]
    first = min((r["result_id"] for r in units), default=None)
    return [float(r["size_bytes"]) for r in sorted(units, key=lambda r: r["bucket"]) if r["result_id"] == first]


def memory(rows: list) -> tuple:
    """(state MiB, peak MiB, method) of the rank holding the most: per repeat the largest rank, then the median."""
    by_result: dict = {}
    for r in rows:
        by_result.setdefault(r["result_id"], []).append(r)
    states, peaks, method = {k: [] for k in STATE}, [], ""
    for rs in by_result.values():
        for k in STATE:
            vals = [r.get(k) for r in rs if r.get(k) is not None]
            if vals:
                states[k].append(max(vals))
        alloc = [r["peak_allocated_mib"] - (r.get("artefact_mib") or 0.0) for r in rs if r.get("peak_allocated_mib") is not None]
        rss = [r["peak_rss_mib"] - r["baseline_rss_mib"] for r in rs
               if r.get("peak_rss_mib") is not None and r.get("baseline_rss_mib") is not None]
        if alloc:
            peaks.append(max(alloc))
            method = "the allocator's peak (torch.cuda.max_memory_allocated), net of the suite's batches"
        elif rss:
            peaks.append(max(rss))
            method = "peak RSS less the process's RSS before its model was built"
    state = {k: stats.median(v) for k, v in states.items() if v}
    return state, (stats.median(peaks) if peaks else None), method


def derive(rows) -> Optional[Raw]:
    """The Raw inputs of one configuration from its stored rows (bench.store.forecasts.RawRows)."""
    measured_rows = [s for s in rows.steps if s["kind"] == "measure"]
    measured = phases(measured_rows)
    if measured is None:
        return None
    state, peak, method = memory(rows.memory)
    return Raw(key=rows.key, measured=measured,
               no_sync=phases([s for s in rows.steps if s["kind"] in ("probe_no_sync", "no_sync")]),
               sync=phases([s for s in rows.steps if s["kind"] == "probe_sync"]),
               buckets=bucket_fractions(rows.buckets), units=fsdp_units(rows.buckets),
               step_ms=[float(r["step_ms"]) for r in stats.slowest_rank_rows(_keyed(measured_rows))],
               state_mib=state, peak_mib=peak, peak_method=method,
               buffer_bytes=float(rows.details.get("buffer_bytes") or 0.0))


def sync_excess_ms(step_ms: list, ranks: int) -> float:
    """How much slower the slowest of `ranks` ranks is than the median, in its median step: with every rank's step
    drawn from the measured spread, the median of their maximum is the spread's quantile 0.5 ** (1 / ranks).
    0 for one rank or fewer than 4 measured steps."""
    if ranks <= 1 or len(step_ms) < 4:
        return 0.0
    x = np.asarray(step_ms, dtype=float)
    return max(0.0, float(np.quantile(x, 0.5 ** (1.0 / ranks)) - np.median(x)))


def quantile_note(step_ms: list, ranks: int) -> str:
    """Past the measured steps the slowest rank's quantile is the largest step seen: said so."""
    if ranks > 1 and len(step_ms) >= 4 and 0.5 ** (1.0 / ranks) > 1 - 1.0 / len(step_ms):
        return f"the slowest of {ranks} ranks lies past the {len(step_ms)} steps measured: taken as the slowest seen"
    return ""


def finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))
