"""--profile inside a rank: a few more training steps under torch.profiler, after the measured window and
DDP's probe (never around them), and one gzipped Chrome trace per rank, kept under a size limit.

    rows, record = profile.run(spec, t, it)   # bench.rank.worker.measure, after its last window

The profiler's schedule is 1 warm-up step (the profiler starts up; nothing is kept) and then
`spec.profile_steps` recorded steps, each annotated `ProfilerStep#N` (bench.analysis.traces finds the
iterations by them). Every rank starts together (a barrier), as the measured window does. The trace goes
to <spec.trace_prefix>-rank<R>.pt.trace.json.gz: the suffix TensorBoard's profiler plugin looks for;
ui.perfetto.dev opens it as it is. Writing it under `spec.profile_max_mb` (gzipped, cut with a note when
larger, never filling the disk) is bench.rank.tracefile's.

If the profiler fails to start on any rank, no rank runs the traced steps. The profiled steps come back as
rows of kind 'profile_warmup' and 'profile' (stored apart from the measured ones: their time against the
measured steps is what the profiler costs a step). A failure of the profiler
or of writing the trace is returned in the record's `error`, never raised: the configuration's measurements
stand, the failure is stored with them, and the sweep goes on.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from bench.rank import tracefile

PROFILER_WARMUP_STEPS = 1


def trace_path(prefix: str, rank: int) -> str:
    return f"{prefix}-rank{rank}.pt.trace.json.gz"


def run(spec, t, it) -> tuple:
    """Warm-up and profiled steps of Trainer `t` on batch iterator `it`: (step rows, trace record)."""
    record = {"rank": t.rank, "path": None, "steps": spec.profile_steps, "first_step": None, "trace_bytes": None,
              "json_bytes": None, "note": None, "error": None,
              "device_type": t.device.type}  # on CUDA the figures are read from kernels: bench.analysis.traces
    rows: list = []
    t0 = time.perf_counter()
    try:
        rows, prof = _steps(spec, t, it)
        record["first_step"] = rows[PROFILER_WARMUP_STEPS]["step"] if len(rows) > PROFILER_WARMUP_STEPS else None
        steps_s = time.perf_counter() - t0
        t.beat(t.n, "trace export")  # a large trace takes a while to write: not a stall (bench.shared.heartbeat)
        record.update(tracefile.write(prof, trace_path(spec.trace_prefix, t.rank), spec.profile_max_mb * 1e6,
                                      writers=spec.processes))  # every rank writes its trace at the same time
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
