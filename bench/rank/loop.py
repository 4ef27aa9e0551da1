"""The training loop the worker times: one step, a window of steps, epochs, and DDP's communication probe.

A step takes the next batch, splits it into micro-batches when a replica holds more samples than fit
at once (gradient accumulation, no gradient synchronisation until the last), runs forward under the
precision's autocast, backward (through the gradient scaler for fp16) and the optimizer. It marks
its phases on the window's clock (bench.rank.timing) and returns the loss as a device tensor: nothing in a
step waits for the GPU. The heartbeat (bench.shared.heartbeat) learns each phase by a plain assignment.

    t = Trainer(spec, model, opt, wl, clock_factory, ...)
    t.window(it, steps, "measure")   -> {"rows": per-step rows, "window": {"wall_s", "samples", "steps"}}
    t.epoch(epoch, ...)               -> one epoch as one window
    t.probe(it, block)                -> alternating synchronised and no_sync() blocks (DDP)
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import nn

from bench.rank import precision as prec
from bench.rank.strategies import is_ddp, unwrap


class NoMeasuredStep(RuntimeError):
    """The run produced no step to measure (an epoch shorter than the warm-up, an empty split)."""


def micro_batches(x: torch.Tensor, y: torch.Tensor, replicas: int, accum: int, split_replicas: bool) -> list:
    """The pieces one step feeds forward, in order. x holds `replicas` chunks of per-replica batches
    (replica-major); micro-batch k of the step is micro-batch k of every chunk. split_replicas: feed each
    replica's piece on its own (the one-process reference of per-replica BatchNorm)."""
    if accum == 1 and not split_replicas:
        return [(x, y)]
    xs = x.reshape(replicas, accum, -1, *x.shape[1:])
    ys = y.reshape(replicas, accum, -1, *y.shape[1:])
    out = []
    for k in range(accum):
        if split_replicas:
            out += [(xs[c, k], ys[c, k]) for c in range(replicas)]
        else:
            out.append((xs[:, k].reshape(-1, *x.shape[1:]), ys[:, k].reshape(-1, *y.shape[1:])))
    return out


def sync_context(model: nn.Module, sync: bool):
    """No gradient synchronisation for this backward when sync is False (DDP no_sync, FSDP2's switch)."""
    if sync:
        return contextlib.nullcontext()
    inner = getattr(model, "_orig_mod", model)
    if is_ddp(model):
        return inner.no_sync()
    if hasattr(inner, "set_requires_gradient_sync"):
        return _fsdp_no_sync(inner)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _fsdp_no_sync(model):
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def broadcast_buffers(module: nn.Module) -> None:
    """Rank 0's buffers to every rank, coalesced per dtype: what DDP does before each synchronised forward."""
    by_dtype: dict = {}
    for b in module.buffers():
        by_dtype.setdefault(b.dtype, []).append(b)
    for bufs in by_dtype.values():
        flat = torch.cat([b.reshape(-1) for b in bufs])
        dist.broadcast(flat, 0)
        offset = 0
        for b in bufs:
            b.copy_(flat[offset:offset + b.numel()].view_as(b))
            offset += b.numel()


@dataclass
class Trainer:
    spec: object                       # RunSpec
    model: nn.Module
    opt: torch.optim.Optimizer
    wl: object                         # Workload
    device: torch.device
    clock: Callable                    # () -> a fresh clock (bench.rank.timing)
    rank: int = 0
    replicas: int = 1                  # replica chunks in this process's batch
    split_replicas: bool = False
    scaler: object = None
    beat: Callable = lambda step, phase: None
    fault: Optional[Callable] = None
    distributed: bool = False
    n: int = 0                         # steps begun so far, warm-up and probe included
    explicit_buffers: bool = False     # probe: broadcast buffers ourselves (DDP skips it under no_sync)
    compile_s: Optional[float] = None
    windows: list = field(default_factory=list)
    compiling: bool = False            # the first step of a compiled model: its heartbeat phase says so
    syncing: bool = True               # False inside a no_sync() probe block

    def step(self, it, clock) -> Optional[tuple]:
        """One step; (loss tensor, samples, host data wait s) or None when the iterator is exhausted."""
        spec, n = self.spec, self.n
        self._beat(n, "start")
        if self.fault:
            self.fault(n)
        self._beat(n, "data")
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            return None
        wait_s = time.perf_counter() - t0
        clock.mark("data")
        if not self.wl.on_device:
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        if spec.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        clock.mark("h2d")
        pieces = micro_batches(x, y, self.replicas, spec.accum_steps, self.split_replicas)
        total = None
        for k, (xm, ym) in enumerate(pieces):
            if self.explicit_buffers and k == 0:  # once per step, as DDP does (its first forward after a sync)
                broadcast_buffers(unwrap(self.model))
                clock.mark("buffers")
            with sync_context(self.model, k == len(pieces) - 1 and self.syncing):
                self._beat(n, "forward")
                with prec.autocast(spec.precision, self.device.type):
                    loss = self.wl.loss_fn(self.model(xm), ym) / len(pieces)
                clock.mark("forward")
                self._beat(n, "backward")
                (self.scaler.scale(loss) if self.scaler else loss).backward()
                clock.mark("backward")
            total = loss.detach() if total is None else total + loss.detach()
        self._beat(n, "optimizer")
        if self.scaler:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        clock.mark("optimizer")
        clock.step_end()
        self._beat(n, "end")
        self.n += 1
        return total, int(x.shape[0]), wait_s

    def _beat(self, n: int, phase: str) -> None:
        self.beat(n, "compile" if self.compiling else phase)

    def barrier(self) -> None:
        if self.distributed:
            self.beat(self.n, "barrier")
            dist.barrier()

    def window(self, it, steps: Optional[int], kind: str, before_close: Optional[Callable] = None) -> dict:
        """Up to `steps` steps (None: until the iterator ends) as one timed window; host reads only after it."""
        self.barrier()  # every rank starts the window together
        clock = self.clock()
        first = self.n
        clock.open()
        losses, waits, samples = [], [], 0
        while steps is None or len(losses) < steps:
            got = self.step(it, clock)
            if got is None:
                break
            losses.append(got[0])
            samples += got[1]
            waits.append(got[2])
        if before_close:
            before_close()
        wall_s = clock.close()
        rows = clock.rows()
        values = torch.stack(losses).float().tolist() if losses else []  # the window's one device-to-host read
        for i, (row, loss, wait) in enumerate(zip(rows, values, waits)):
            row.update(kind=kind, rank=self.rank, step=first + i, loss=loss, host_data_ms=wait * 1e3)
        window = {"kind": kind, "rank": self.rank, "wall_s": wall_s, "samples": samples, "steps": len(rows),
                  "first_step": first}
        self.windows.append(window)
        return {"rows": rows, "window": window, "losses": values}

    def warmup(self, it, steps: int) -> list:
        """Warm-up steps, each synchronised on its own: the first one's wall time is its compilation."""
        rows = []
        for i in range(steps):
            self.compiling = i == 0 and self.spec.compile
            try:
                out = self.window(it, 1, "warmup")
            finally:
                self.compiling = False
            if i == 0 and self.spec.compile:
                self.compile_s = out["window"]["wall_s"]
            rows += out["rows"]
        return rows

    def probe(self, it, block: int, blocks: int = 2) -> list:
        """DDP's exposed communication: `blocks` synchronised and `blocks` no_sync() blocks of `block` steps,
        alternated AB BA so drift cancels. In no_sync() DDP also skips its per-forward buffer broadcast;
        the probe broadcasts the buffers itself there (its own phase), so the difference is the gradient
        all-reduce alone."""
        rows = []
        buffers = is_ddp(self.model) and getattr(self.model, "_orig_mod", self.model).will_sync_module_buffers()
        for b in range(blocks):
            for syncing in ((True, False) if b % 2 == 0 else (False, True)):
                self.syncing, self.explicit_buffers = syncing, buffers and not syncing
                try:
                    rows += self.window(it, block, "probe_sync" if syncing else "probe_no_sync")["rows"]
                finally:
                    self.syncing, self.explicit_buffers = True, False
        return rows
