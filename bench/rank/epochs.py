"""Whole epochs as the worker times them (--epochs): each epoch's batches with the memory peaks reset after
the warm-up (the whole run's peaks read just before), and torch.compile's compilation run before any epoch's window.

    t.compile_s = compile_before_epochs(t, wl, devices)          # with --compile, before epoch 0
    t.window(started_inside(wl, epoch, t, warmup, devices, reset, run), None, f"epoch{epoch}")
"""
from __future__ import annotations

import time

import torch

from bench.rank import memory, timing
from bench.rank.loop import Trainer
from bench.rank.strategies import unwrap


def started_inside(wl, epoch: int, t: Trainer, warmup: int, devices: list, reset: list, run: dict):
    """The epoch's batches, its loader started at the first next(): inside the window that times the epoch.
    The peaks are reset (cache emptied) as the first step after the warm-up takes its batch, once (`reset`):
    steady-state memory, as in fixed-step runs; in the epoch that holds the warm-up steps anyway. Just before, the
    whole run's peaks so far (compilation, the warm-up, cuDNN's autotuning) are read into `run` (memory.run_peaks),
    which the reset would lose."""
    for batch in wl.batches(epoch):
        if not reset and t.n >= warmup:
            run.update(memory.run_peaks(devices))
            memory.reset_peaks(devices)
            reset.append(t.n)
        yield batch


class _NoStep:
    """The optimizer's stand-in for the compiling step: gradients dropped, parameters left as they were."""

    def __init__(self, opt):
        self.opt = opt

    def step(self) -> None:
        pass

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)


def compile_before_epochs(t: Trainer, wl, devices: list) -> float:
    """torch.compile compiles at the first forward and backward: run one on epoch 0's first batch before any
    epoch's window, then undo what it changed (no optimizer or scaler step; BatchNorm statistics restored;
    the step count rewound), so epoch 0 trains as it would have, without the compilation in its time.
    Returns its wall time, s."""
    buffers = [b.detach().clone() for b in unwrap(t.model).buffers()]
    opt, scaler, n = t.opt, t.scaler, t.n
    t.barrier()
    t0 = time.perf_counter()
    t.opt, t.scaler, t.compiling = _NoStep(opt), None, True
    try:
        t.step(iter(wl.batches(0)), timing.HostClock())
        for d in devices:
            if d.type == "cuda":
                torch.cuda.synchronize(d)
    finally:
        t.opt, t.scaler, t.compiling, t.n = opt, scaler, False, n
    with torch.no_grad():
        for b, saved in zip(unwrap(t.model).buffers(), buffers):
            b.copy_(saved)
    return time.perf_counter() - t0
