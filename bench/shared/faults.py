"""Fault injection, for tests only: make a chosen rank, or the sweep itself, raise, exit, hang, stop, die or slow down.

Set BENCH_FAULT to KIND@WHERE:STEP (several separated by commas) in the environment of a sweep; it
reaches every worker process (the sweep and torchrun pass the environment on). KIND is one of:
    raise    raise RuntimeError("injected fault ...")
    exit     os._exit(3) without cleanup
    hang     sleep forever while its other threads run (a deadlock; the heartbeat must name it)
    stop     SIGSTOP itself: the whole process freezes, heartbeat thread included
    sigkill  SIGKILL itself, as the out-of-memory killer would
    oom      raise torch.OutOfMemoryError with CUDA's message, the class a failed CUDA allocation raises (fit's
             out-of-memory trial through the real worker and sweep, on a machine without a GPU)
    slow     `slow@R:P`: every step of rank R takes P% longer (it busy-waits P% of its previous step's
             time): a real slowdown for compare's A/B tests (here the number is a percentage, not a step)
    nap      `nap@R:MS`: every step of rank R sleeps MS milliseconds first: slow progress that costs no CPU
             (a run still progressing when its limit comes; here the number is milliseconds, not a step)
WHERE is a rank: STEP counts every training step of that rank's run from 0, warm-up included
(`sigkill@1:3`: rank 1 dies at its fourth step, typically inside backward's all-reduce). It fires in
every configuration that has that rank and reaches that step.
WHERE is `sweep`: the sweep process itself, while it writes its STEP-th result (from 0) to the store,
after the result row and before its raw rows, inside the transaction (`sigkill@sweep:1`: a kill at the
worst moment, to show that a result is stored whole or not at all).
Examples:
    BENCH_FAULT=sigkill@1:3 ./run_bench.sh --strategies ddp --workloads synthetic
    BENCH_FAULT=hang@1:2 ./run_bench.sh --strategies ddp --pg-timeout 10 --timeout 30
    BENCH_FAULT=sigkill@sweep:0 ./run_bench.sh --strategies single --workloads synthetic
    BENCH_FAULT=raise@sweep:0 ./run_bench.sh ...        # an internal error of the sweep: exit 3, no traceback
    BENCH_FAULT=slow@0:10 ./run_bench.sh --repeats 5     # every step of rank 0 10% slower
"""
from __future__ import annotations

import os
import signal
import time
from typing import Callable, Optional, Union

KINDS = ("raise", "exit", "hang", "stop", "sigkill", "oom", "slow", "nap")
SWEEP = "sweep"


def parse(text: str) -> list:
    """'KIND@WHERE:STEP,...' -> [(kind, rank or 'sweep', step)]; ValueError naming a bad item."""
    faults = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            kind, where = item.split("@")
            who, step_text = where.split(":")
            rank: Union[int, str] = SWEEP if who == SWEEP else int(who)
            step = int(step_text)
        except ValueError:
            raise ValueError(f"BENCH_FAULT item {item!r}: expected KIND@RANK:STEP or KIND@sweep:N, "
                             f"e.g. raise@1:3") from None
        if kind not in KINDS:
            raise ValueError(f"BENCH_FAULT item {item!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
        faults.append((kind, rank, step))
    return faults


def _fire(kind: str, where: str) -> None:
    if kind == "raise":
        raise RuntimeError(f"injected fault: {where}")
    if kind == "oom":
        import torch  # only a rank fires it, and a rank has torch imported already
        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 2.00 GiB (injected fault: {where})")
    if kind == "exit":
        os._exit(3)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    if kind == "hang":
        while True:
            time.sleep(3600)


def _hook(who: Union[int, str], what: str) -> Optional[Callable[[int], None]]:
    mine = [(k, s) for k, r, s in parse(os.environ.get("BENCH_FAULT", "")) if r == who]
    if not mine:
        return None
    slow = sum(s for k, s in mine if k == "slow") / 100.0
    nap_s = sum(s for k, s in mine if k == "nap") / 1000.0
    last = [None]

    def fire(step: int) -> None:
        if nap_s:
            time.sleep(nap_s)
        if slow:  # called at the start of each step: the time since the last call is the last step's
            now = time.perf_counter()
            if last[0] is not None:
                until = now + slow * (now - last[0])
                while time.perf_counter() < until:
                    pass
            last[0] = time.perf_counter()
        for kind, at in mine:
            if step == at and kind not in ("slow", "nap"):
                _fire(kind, f"{what} {step}")
    return fire


def hook(rank: int) -> Optional[Callable[[int], None]]:
    """A function step -> None that fires this rank's injected faults; None when there are none."""
    return _hook(rank, f"rank {rank} raised at step")


_results_written = 0


def sweep_writing_result() -> None:
    """Called by the store inside each result's transaction: fires `KIND@sweep:N` at the N-th result."""
    global _results_written
    fire = _hook(SWEEP, "the sweep raised while writing result")
    n, _results_written = _results_written, _results_written + 1
    if fire:
        fire(n)
