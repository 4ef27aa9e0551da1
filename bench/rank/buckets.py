"""When each of DDP's gradient buckets becomes ready during backward, and FSDP's communication units: what the
forecast (bench.forecast.step) needs to place each collective in the backward pipeline.

    rows = record(trainer, it)     # after the measured window and DDP's probe: nothing stored before changes

DDP: BUCKET_STEPS[device type] more synchronised steps, with a post-accumulate-grad hook on every parameter that notes
when its gradient is ready: on the host clock on CPU, as a CUDA event on the current stream on a GPU (no host
sync in the step; the events are read after the last step). A bucket is ready when its last parameter is
(DDP launches it then); its members and bytes come from DDP's reducer as it is after the first step's
rebuild. Rows: one per rank, step and bucket: size_bytes, ready_ms (from the start of that step's backward)
and backward_ms (the whole backward of that step). The hooks are removed afterwards.
FSDP: one row per fully_shard unit (kind 'fsdp_unit', forward order, the root first): its parameters' bytes.
Anything the private reducer API does not give is left out: the forecast then says it assumed the buckets.
"""
from __future__ import annotations

import time
from typing import Optional

import torch
from torch import nn

from bench.rank.strategies import is_ddp

# CPU: 2, at 0.7-0.9 s a DeepLabV3 step; a bucket's ready fraction moved 1-3% between one run's steps at one rank
# (the processes, 3 on CPU, are the samples that differ), and the third step cost 5 s of the default sweep.
BUCKET_STEPS = {"cuda": 3, "cpu": 2}


def bucket_steps(device_type: str) -> int:
    return BUCKET_STEPS.get(device_type, BUCKET_STEPS["cuda"])


class _BackwardClock:
    """The step's clock interface (bench.rank.timing) noting only where backward starts and ends."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.start = self.end = None
        self.ready: dict = {}           # parameter index -> time (float s or CUDA event)
        self.steps: list = []           # (start, end, ready) per step

    def now(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def mark(self, phase: str) -> None:
        if phase == "forward":      # backward begins (with micro-batches the last one's, which synchronises)
            self.start, self.ready = self.now(), {}
        elif phase == "backward":
            self.end = self.now()

    def step_end(self) -> None:
        self.steps.append((self.start, self.end, self.ready))


def _ddp_buckets(ddp: nn.Module) -> list:
    """[(bucket index, bytes, [parameter indices])] from DDP's reducer; [] when the private API is missing."""
    params = [p for p in ddp.module.parameters() if p.requires_grad]
    ids = {id(p): i for i, p in enumerate(params)}
    try:
        grad_buckets = ddp.reducer._get_zeros_like_grad_buckets()
    except Exception:  # private API: without it the forecast assumes DDP's buckets
        return []
    out = []
    for b in grad_buckets:
        members = [ids[id(p)] for p in b.parameters() if id(p) in ids]
        out.append((int(b.index()), int(b.buffer().numel() * b.buffer().element_size()), members))
    return out


def fsdp_units(model: nn.Module, rank: int) -> list:
    """One row per FSDP2 unit: the bytes of the parameters it gathers itself (not those of units inside it)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return []
    inner = getattr(model, "_orig_mod", model)
    units = [m for m in inner.modules() if isinstance(m, FSDPModule)]
    rows = []
    for k, unit in enumerate(units):
        nested = {id(p) for m in unit.modules() if m is not unit and isinstance(m, FSDPModule) for p in m.parameters()}
        own = [p for p in unit.parameters() if id(p) not in nested]
        size = sum(p.numel() * p.element_size() for p in own)
        rows.append({"kind": "fsdp_unit", "rank": rank, "step": 0, "bucket": k, "size_bytes": int(size),
                     "ready_ms": None, "backward_ms": None})
    return rows


def record(t, it, steps: Optional[int] = None) -> list:
    """DDP bucket rows from `steps` (default BUCKET_STEPS of its device) more steps of trainer t (module docstring);
    FSDP unit rows; else []."""
    if not is_ddp(t.model):
        return fsdp_units(t.model, t.rank) if hasattr(getattr(t.model, "_orig_mod", t.model), "reshard") else []
    ddp = getattr(t.model, "_orig_mod", t.model)
    buckets = _ddp_buckets(ddp)
    if not buckets:
        return []
    clock = _BackwardClock(t.device.type == "cuda")
    steps = bucket_steps(t.device.type) if steps is None else steps
    params = [p for p in ddp.module.parameters() if p.requires_grad]

    def hook(i):
        return lambda _p: clock.ready.__setitem__(i, clock.now())
    handles = [p.register_post_accumulate_grad_hook(hook(i)) for i, p in enumerate(params)]
    try:
        t.barrier()
        first = t.n
        for _ in range(steps):
            if t.step(it, clock) is None:
                break
    finally:
        for h in handles:
            h.remove()
    if clock.cuda:
        torch.cuda.synchronize(t.device)
    rows = []
    for s, (start, end, ready) in enumerate(clock.steps):
        if start is None or end is None:
            continue
        backward_ms = clock.ms(start, end)
        for index, size, members in buckets:
            times = [clock.ms(start, ready[i]) for i in members if i in ready]
            if len(times) == len(members) and members:
                rows.append({"kind": "ddp", "rank": t.rank, "step": first + s, "bucket": index, "size_bytes": size,
                             "ready_ms": max(times), "backward_ms": backward_ms})
    return rows
