"""The comm run inside a rank (the worker's 'comm' mode): the collectives microbenchmark, then, with --interference, the
collectives beside computation, whose failure costs only its own rows.

    payload.update(comm_run(spec, device, world, rank))

The bandwidth rows are the run's point (selfcheck's link check, the forecast's network fit, the report's tables), so:
  - rank 0 writes them to the run folder (bench.shared.spec.COMM_ROWS_FILE) before the interference stage starts;
  - the stage runs in a try, in a process group of its own: an exception on every rank (a collective the backend
    lacks, the load out of memory everywhere) is caught where it happens, and the run ends ok with the error beside
    the bandwidth rows ('interference_error'). An exception on one rank leaves the others waiting in the stage's own
    group, where no collective of the world group that follows (the gather of the payloads) can be matched with
    theirs: they time out there (gloo, --pg-timeout) or NCCL's watchdog ends them; if the run then fails, the sweep
    keeps the bandwidth rows from the file (bench.sweep.launch) with the failure as the stage's error.
"""
from __future__ import annotations

import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from bench.rank.commbench import collective_sweep, message_sizes
from bench.shared.spec import COMM_ROWS_FILE, RunSpec

STAGE_ERROR = "interference-error-rank{rank}.txt"   # a rank's own exception, read by the sweep if the run then fails
BUCKET_REACH = 1.5     # a DDP-only sweep's interference: sizes up to 1.5x its largest bucket (no collective is larger)


def interference_sizes(spec: RunSpec) -> list:
    """The sizes the interference stage measures: the microbenchmark's, only up to DDP's buckets in a DDP-only sweep."""
    sizes = message_sizes(spec.comm_max_bytes, extra=spec.comm_extra_bytes)
    if spec.comm_ops == ("all_reduce",) and spec.comm_extra_bytes:  # DDP sends one bucket at a time
        sizes = [s for s in sizes if s <= BUCKET_REACH * max(spec.comm_extra_bytes)] or sizes[:1]
    return sizes


def comm_run(spec: RunSpec, device: torch.device, world: int, rank: int) -> dict:
    """{'comm': rows[, 'interference': rows][, 'interference_error': why]} of this rank (see the module's docstring)."""
    out = {"comm": collective_sweep(device, spec.comm_max_bytes, extra_sizes=spec.comm_extra_bytes,
                                    local_world=int(os.environ.get("LOCAL_WORLD_SIZE", world)), ops=spec.comm_ops)}
    if not spec.interference:
        return out
    if rank == 0:
        tmp = os.path.join(spec.out_dir, COMM_ROWS_FILE + f".tmp{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(out["comm"], f)
        os.replace(tmp, os.path.join(spec.out_dir, COMM_ROWS_FILE))
    try:
        from bench.rank.interference import interference_sweep
        group = dist.new_group(timeout=timedelta(seconds=spec.pg_timeout_s)) if dist.is_initialized() else None
        out["interference"] = interference_sweep(device, interference_sizes(spec), spec.comm_ops, spec.comm_load or None,
                                                 group=group,
                                                 state_bytes=spec.comm_state_bytes or (spec.comm_max_bytes,))
    except Exception as e:  # the bandwidth rows stand; the stage's rows are missing, and why is kept beside them
        out["interference_error"] = f"rank {rank}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
        with open(os.path.join(spec.out_dir, STAGE_ERROR.format(rank=rank)), "w") as f:  # if the run fails after all
            f.write(out["interference_error"])
    return out
