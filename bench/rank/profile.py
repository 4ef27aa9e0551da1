"""--profile inside a rank: a few more training steps under torch.profiler, after the measured window and
DDP's probe (never around them), and one gzipped Chrome trace per rank, kept under a size limit.

    rows, record = profile.run(spec, t, it)   # bench.rank.worker.measure, after its last window

The profiler's schedule is 1 warm-up step (the profiler starts up; nothing is kept) and then
`spec.profile_steps` recorded steps, each annotated `ProfilerStep#N` (bench.analysis.traces finds the
iterations by them). Every rank starts together (a barrier), as the measured window does. The trace goes
to <spec.trace_prefix>-rank<R>.pt.trace.json.gz: the suffix TensorBoard's profiler plugin looks for;
ui.perfetto.dev opens it as it is. The profiler's JSON is first written beside it (the traces folder, not
/tmp) and gzipped from there; a gzipped trace above `spec.profile_max_mb` is cut to its first events that
fit, and says so (the `benchCut` key and an instant event at the cut). No trace is written where the
folder has less than ROOM_FACTOR x the limit free: a trace never fills the disk.

If the profiler fails to start on any rank, no rank runs the traced steps. The profiled steps come back as rows of kind 'profile_warmup' and 'profile' (stored apart from the measured
ones: their time against the measured steps is what the profiler costs a step). A failure of the profiler
or of writing the trace is returned in the record's `error`, never raised: the configuration's measurements
stand, the failure is stored with them, and the sweep goes on.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import time

import torch
import torch.distributed as dist

PROFILER_WARMUP_STEPS = 1
ROOM_FACTOR = 10        # the profiler's JSON runs ~10x its gzipped size; it is written before it is gzipped
CUT_TRIES = 4


def trace_path(prefix: str, rank: int) -> str:
    return f"{prefix}-rank{rank}.pt.trace.json.gz"


def run(spec, t, it) -> tuple:
    """Warm-up and profiled steps of Trainer `t` on batch iterator `it`: (step rows, trace record)."""
    record = {"rank": t.rank, "path": None, "steps": spec.profile_steps, "first_step": None, "trace_bytes": None,
              "json_bytes": None, "note": None, "error": None}
    rows: list = []
    t0 = time.perf_counter()
    try:
        rows, prof = _steps(spec, t, it)
        record["first_step"] = rows[PROFILER_WARMUP_STEPS]["step"] if len(rows) > PROFILER_WARMUP_STEPS else None
        steps_s = time.perf_counter() - t0
        t.beat(t.n, "trace export")  # a large trace takes a while to write: not a stall (bench.shared.heartbeat)
        record.update(write(prof, trace_path(spec.trace_prefix, t.rank), spec.profile_max_mb * 1e6))
        record["export_s"] = time.perf_counter() - t0 - steps_s
    except Exception as e:  # the profiler, the trace's folder, a full disk: stated with the result, never fatal
        record["error"] = f"{type(e).__name__}: {e}"
    record["profile_s"] = time.perf_counter() - t0
    return rows, record


def _steps(spec, t, it) -> tuple:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if t.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    schedule = torch.profiler.schedule(wait=0, warmup=PROFILER_WARMUP_STEPS, active=spec.profile_steps, repeat=1)
    prof = torch.profiler.profile(activities=activities, schedule=schedule)
    t.barrier()  # every rank starts its profiled steps together
    start_everywhere(prof, t)
    clock = t.clock()
    first = t.n
    clock.open()
    try:
        for _ in range(PROFILER_WARMUP_STEPS + spec.profile_steps):
            if t.step(it, clock) is None:
                break
            prof.step()
    finally:
        prof.stop()
    clock.close()
    rows = clock.rows()
    for i, row in enumerate(rows):
        row.update(kind="profile_warmup" if i < PROFILER_WARMUP_STEPS else "profile", rank=t.rank, step=first + i)
    return rows, prof


def start_everywhere(prof, t) -> None:
    """Start the profiler on this rank; raise, on every rank, if it failed to start on any (the traced steps hold
    collectives: one rank skipping them would leave the others waiting in an all-reduce)."""
    error = None
    try:
        prof.start()
    except Exception as e:
        error = e
    if t.distributed:
        flag = torch.tensor([0 if error else 1], device=t.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if not int(flag.item()) and error is None:
            prof.stop()
            error = RuntimeError("the profiler did not start on another rank; no rank ran traced steps")
    if error is not None:
        raise error


def write(prof, path: str, max_bytes: float) -> dict:
    """Export the profiler's trace gzipped to `path`, cut to max_bytes; {path, trace_bytes, json_bytes, note}."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < ROOM_FACTOR * max_bytes:
        return {"note": f"no trace written: {folder} has {free / 1e6:.0f} MB free, under {ROOM_FACTOR} x "
                        f"--profile-max-mb {max_bytes / 1e6:g} (the profiler's JSON is written before it is gzipped)"}
    raw = f"{path}.tmp{os.getpid()}.json"
    try:
        prof.export_chrome_trace(raw)
        json_bytes = os.path.getsize(raw)
        with open(raw, "rb") as fin, gzip.open(path, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        note = cut(raw, path, max_bytes) if os.path.getsize(path) > max_bytes else None
    finally:
        if os.path.exists(raw):
            os.remove(raw)
    kept = os.path.exists(path)
    return {"path": path if kept else None, "trace_bytes": os.path.getsize(path) if kept else None,
            "json_bytes": json_bytes, "note": note}


def cut(raw_json: str, path: str, max_bytes: float) -> str:
    """Rewrite `path` with the first events of `raw_json` (in time) that fit in max_bytes gzipped; the note says
    what was kept. Removes the trace when not even a small part fits."""
    size = os.path.getsize(path)
    with open(raw_json) as f:
        trace = json.load(f)
    events = trace.get("traceEvents", [])
    meta = [e for e in events if e.get("ph") == "M" or "ts" not in e]
    timed = sorted((e for e in events if e.get("ph") != "M" and "ts" in e), key=lambda e: float(e["ts"]))
    fraction = 0.9 * max_bytes / size
    for _ in range(CUT_TRIES):
        kept = timed[:int(len(timed) * fraction)]
        if not kept:
            break
        span_ms = (float(kept[-1]["ts"]) - float(kept[0]["ts"])) / 1e3
        note = (f"cut: the trace was {size / 1e6:.1f} MB gzipped, above --profile-max-mb {max_bytes / 1e6:g}; "
                f"kept its first {len(kept)} of {len(timed)} events ({span_ms:.1f} ms)")
        trace["traceEvents"] = meta + kept + [{"name": "bench: trace cut here", "ph": "i", "s": "g",
                                               "ts": kept[-1]["ts"], "pid": kept[-1].get("pid", 0),
                                               "tid": kept[-1].get("tid", 0), "args": {"note": note}}]
        trace["benchCut"] = note
        with gzip.open(path, "wt") as f:
            json.dump(trace, f)
        if os.path.getsize(path) <= max_bytes:
            return note
        fraction /= 2
    os.remove(path)
    return f"no trace kept: the trace was {size / 1e6:.1f} MB gzipped and not even a small part fits --profile-max-mb {max_bytes / 1e6:g}"
