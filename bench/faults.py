"""Fault injection, for tests only: make a chosen rank raise, exit, hang or die at a chosen step.

Set BENCH_FAULT to KIND@RANK:STEP (several separated by commas) in the environment of a sweep;
it reaches every worker process (torchrun passes the environment on). STEP counts every training
step of the run from 0, warm-up included. KIND is one of:
    raise    raise RuntimeError("injected fault ...")
    exit     os._exit(3) without cleanup
    hang     sleep forever (the process-group or per-configuration timeout must end it)
    sigkill  SIGKILL itself, as the out-of-memory killer would
Example: BENCH_FAULT=sigkill@1:3 ./run_bench.sh --strategies ddp --workloads synthetic
"""
from __future__ import annotations

import os
import signal
import time

KINDS = ("raise", "exit", "hang", "sigkill")


def parse(text: str) -> list:
    faults = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            kind, where = item.split("@")
            rank, step = (int(v) for v in where.split(":"))
        except ValueError:
            raise ValueError(f"BENCH_FAULT item {item!r}: expected KIND@RANK:STEP, e.g. raise@1:3") from None
        if kind not in KINDS:
            raise ValueError(f"BENCH_FAULT item {item!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
        faults.append((kind, rank, step))
    return faults


def hook(rank: int):
    """A function step -> None that fires this rank's injected faults; None when there are none."""
    mine = [(k, s) for k, r, s in parse(os.environ.get("BENCH_FAULT", "")) if r == rank]
    if not mine:
        return None

    def fire(step: int) -> None:
        for kind, at in mine:
            if step != at:
                continue
            if kind == "raise":
                raise RuntimeError(f"injected fault: rank {rank} raised at step {step}")
            if kind == "exit":
                os._exit(3)
            if kind == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "hang":
                while True:
                    time.sleep(3600)
    return fire
