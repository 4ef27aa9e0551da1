"""The collectives microbenchmark, measured as nccl-tests measures it: all-reduce, all-gather and reduce-scatter
over the configuration's backend and device count.

Run inside an initialised process group (the worker's 'comm' mode). For each collective and each message size up
to the model's gradient size, plus DDP's own bucket sizes, it reports nccl-tests' quantities (doc/PERFORMANCE.md):
    algbw = S / t            busbw = algbw * factor     (GB/s, 1 GB = 1e9 bytes)
with S, as nccl-tests counts it, the size of the whole array (`size_bytes`):
    op              call (torch 2.13's name; before it)                   S                                    factor
    all_reduce      dist.all_reduce                                       the tensor every rank holds          2(n-1)/n
    all_gather      dist.all_gather_single (all_gather_into_tensor)       the OUTPUT: n x each rank's input    (n-1)/n
    reduce_scatter  dist.reduce_scatter_single (reduce_scatter_tensor)    the INPUT: n x each rank's output    (n-1)/n
busbw is what each rank's link carries in a ring and does not depend on n, so one figure per collective can be
set against the hardware and against a step's exposed communication. NCCL runs all three natively; gloo has
had the two tensor forms since torch 2.3 (checked on 2.15), its reduce-scatter built on an all-reduce
(pytorch#118911): on 2 CPU ranks it took 1-2.2x an all-reduce of the same S from 16 MiB up, all-gather 0.7-1.9x,
where a ring's figure is half (docs/measuring.md, "Collectives as nccl-tests measures them").

Timing: one code path, a timer chosen by device type (`make_timer`); the method is stored with each row (`timing`).
    cuda_events  a CUDA event on the current stream before the timed loop, one after it, one synchronisation
                 after the second. They bracket the collectives: with async_op=False (the default)
                 ProcessGroupNCCL launches them on the current stream (torch >= 2.8, pytorch#150398), or, before,
                 on its own stream, which first waits for the current one and which the current one waits for
                 before the call returns (work.wait()). The host's launches are inside, as in nccl-tests.
    host_clock   gloo's collectives on CPU are synchronous: the monotonic host clock around the loop.
Iterations (`iterations`): nccl-tests runs 5 warm-ups and 20 timed iterations (-w 5 -n 20) at every size. Here
each (collective, size) gets at least MIN_ITERS timed iterations and at least MIN_TIMED_S of timed work, so small
messages are averaged over many launches, within its share of BUDGET_S per size, warm-ups included, which bounds
the largest messages on the CPU (down to one timed call). A first call sets up buffers and connections (on gloo
a first 4 KiB all-gather took 80 ms, the next 0.5 ms), so the faster of the next two, timed on the host, is the
probe that sets the counts; the group's first rank chooses them and broadcasts them, so every rank runs the same. The time is
the slowest rank's. Across several nodes it runs twice: over every rank (scope 'world': the inter-node links)
and within each node (scope 'node').

Which collectives run is the plan's choice (bench.sweep.plan): all-reduce always, all-gather and reduce-scatter
when the sweep has FSDP, so a DDP sweep's comm run costs what it did when all-reduce was the only one.
"""
from __future__ import annotations

import math
import time
from typing import Optional

import torch
import torch.distributed as dist

from bench.rank import timing

OPS = ("all_reduce", "all_gather", "reduce_scatter")
MIN_BYTES = 4096                 # the smallest message
SIZE_STEP = 4                    # message sizes grow by this factor
FLOAT_BYTES = 4                  # the messages are float32
WARMUP_ITERS = 5                 # nccl-tests' -w 5, the first call and the probe included
MIN_ITERS = 20                   # nccl-tests' -n 20
MIN_TIMED_S = 0.01               # at least this much timed work per (collective, size), budget allowing
BUDGET_S = 0.5                   # per size, all collectives together, warm-ups included
SHORTEST_PROBE_S = 1e-6          # a probe faster than the clock's resolution counts as this
PROBE_CALLS = 3                  # the first call and two probes, before the counts are known (a single probe once
                                 # took 8 ms for a 4 KiB gloo all-reduce, preempted, and cut its timed calls to 18)


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw for a collective on `ranks` ranks."""
    share = (ranks - 1) / ranks
    return 2 * share if op == "all_reduce" else share


def bus_bandwidth_gbps(size_bytes: int, time_ms: float, world_size: int, op: str = "all_reduce") -> tuple:
    """(algbw, busbw) in GB/s for one collective of size_bytes (nccl-tests' S) taking time_ms on world_size ranks."""
    algbw = size_bytes / (time_ms / 1000.0) / 1e9
    return algbw, algbw * bus_factor(op, world_size)


def message_sizes(max_bytes: int, min_bytes: int = MIN_BYTES, extra: tuple = ()) -> list:
    """Powers of 4 from min_bytes below max_bytes, max_bytes itself (the model's gradients) and the extra sizes."""
    sizes, s = set(), min_bytes
    while s < max_bytes:
        sizes.add(s)
        s *= SIZE_STEP
    sizes.add(max_bytes)
    sizes |= {int(e) for e in extra if 0 < e <= max(max_bytes, min_bytes)}
    return sorted(sizes)


def iterations(probe_s: float, budget_s: float) -> tuple:
    """(more warm-ups, timed iterations) for a collective whose probe took probe_s, within budget_s, the first
    call and the probe included: at least MIN_ITERS and MIN_TIMED_S of timed work where the budget holds them
    (else as many as it holds, at least one), then warm-ups up to WARMUP_ITERS in what is left."""
    probe_s = max(probe_s, SHORTEST_PROBE_S)
    affordable = int(budget_s / probe_s) - PROBE_CALLS
    iters = max(1, min(max(MIN_ITERS, math.ceil(MIN_TIMED_S / probe_s)), affordable))
    return max(0, min(WARMUP_ITERS - PROBE_CALLS, affordable - iters)), iters


class HostTimer:
    """The monotonic host clock; the CPU path (gloo's collectives return when they are done)."""
    method = "host_clock"

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop_ms(self) -> float:
        return (time.perf_counter() - self._t0) * 1000.0


class EventTimer:
    """CUDA events on the current stream of `device` around the timed loop; the host synchronises after the
    second only. `api` makes the events (bench.rank.timing.CudaAPI; tests pass a stand-in)."""
    method = "cuda_events"

    def __init__(self, device: torch.device, api=None):
        self.device, self.api = device, api or timing.CudaAPI()

    def _record(self):
        e = self.api.event()
        e.record(self.api.stream(self.device))
        return e

    def start(self) -> None:
        self._start = self._record()

    def stop_ms(self) -> float:
        end = self._record()
        self.api.synchronize(self.device)
        return float(self._start.elapsed_time(end))


def make_timer(device: torch.device, api=None):
    """EventTimer on CUDA, HostTimer on CPU."""
    return EventTimer(device, api) if device.type == "cuda" else HostTimer()


def buffers(op: str, size_bytes: int, ranks: int, device: torch.device) -> tuple:
    """(input, output, S in bytes) of one collective of about size_bytes: S rounded to whole float32 elements,
    for all-gather and reduce-scatter to a multiple of the ranks."""
    if op == "all_reduce":
        x = torch.ones(max(1, size_bytes // FLOAT_BYTES), dtype=torch.float32, device=device)
        return x, x, x.numel() * FLOAT_BYTES
    per_rank = max(1, size_bytes // FLOAT_BYTES // ranks)
    small = torch.ones(per_rank, dtype=torch.float32, device=device)
    whole = torch.ones(per_rank * ranks, dtype=torch.float32, device=device)
    if op == "all_gather":
        return small, whole, whole.numel() * FLOAT_BYTES
    if op == "reduce_scatter":
        return whole, small, whole.numel() * FLOAT_BYTES
    raise ValueError(f"collective {op!r}: expected one of {', '.join(OPS)}")


# torch 2.13 renamed the tensor forms (the old names warn, once per process, in every rank's log; accelerate
# PR 4272: same arguments, same semantics); older torch has only the old ones
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def run_op(op: str, inp: torch.Tensor, out: torch.Tensor, group, async_op: bool = False):
    """One collective of `group`: its Work handle where async_op, else None (issued as torch issues a blocking one)."""
    if op == "all_reduce":
        return dist.all_reduce(inp, group=group, async_op=async_op)
    if op == "all_gather":
        return _ALL_GATHER(out, inp, group=group, async_op=async_op)
    return _REDUCE_SCATTER(out, inp, group=group, async_op=async_op)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(op: str, size_bytes: int, device: torch.device, group, ranks: int, timer, budget_s: float) -> dict:
    """One row: the slowest rank's mean time of `op` on about size_bytes (see `buffers`), algbw/busbw, the timed
    iterations and the timing method."""
    inp, out, size = buffers(op, size_bytes, ranks, device)
    run_op(op, inp, out, group)  # sets up buffers and connections: not timed
    _sync(device)
    probes = []
    for _ in range(PROBE_CALLS - 1):  # the faster of two: one call preempted on a shared machine is not the rate
        t0 = time.perf_counter()
        run_op(op, inp, out, group)
        _sync(device)
        probes.append(time.perf_counter() - t0)
    warmups, iters = iterations(min(probes), budget_s)
    counts = torch.tensor([warmups, iters], dtype=torch.int64, device=device)
    dist.broadcast(counts, dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    warmups, iters = (int(v) for v in counts.tolist())
    for _ in range(warmups):
        run_op(op, inp, out, group)
    dist.barrier(group=group)
    timer.start()
    for _ in range(iters):
        run_op(op, inp, out, group)
    t = torch.tensor([timer.stop_ms() / iters], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)  # the collective is as slow as its slowest rank
    time_ms = float(t.item())
    algbw, busbw = bus_bandwidth_gbps(size, time_ms, ranks, op)
    return {"op": op, "ranks": ranks, "size_bytes": size, "time_ms": time_ms, "algbw_gbps": algbw,
            "busbw_gbps": busbw, "iters": iters, "timing": timer.method}


def collective_sweep(device: torch.device, max_bytes: int, extra_sizes: tuple = (), local_world: int = 0,
                     ops: tuple = OPS, budget_s: float = BUDGET_S, timer: Optional[object] = None) -> list:
    """One row per (scope, collective, size); each collective has an equal share of budget_s per size."""
    world = dist.get_world_size()
    scopes = [("world", None, world)]
    if 1 < local_world < world:
        node_group, _ = dist.new_subgroups(group_size=local_world)
        scopes.append(("node", node_group, local_world))
    timer = timer or make_timer(device)
    rows = []
    for scope, group, n_ranks in scopes:
        for op in ops:
            for size in message_sizes(max_bytes, extra=extra_sizes):
                rows.append({"scope": scope, **measure(op, size, device, group, n_ranks, timer, budget_s / len(ops))})
    return rows
