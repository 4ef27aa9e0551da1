"""Collectives beside computation: how much a collective and the computation it overlaps slow each other on this
machine, measured apart from any training step, as the forecast's pipeline needs it (bench.forecast.interference).

    rows = interference_sweep(device, sizes, ops, load_shape)     # in the comm run, after the microbenchmark

The load is a GEMM (M x K) @ (K x K) in float32, one "chunk", sized like the model's layers (the synthetic MLP's
batch x width; LOAD_DEFAULT otherwise): a property of the machine, not of any model's step. For each collective
and size, rounds on every rank at once, each of:
    alone      the collective by itself, issued as a step issues its last bucket: each rank computes PRE_MS of the
               load, then issues it on its own (no barrier between): its time from issue to completion, the wait for
               a later rank included (a lone 12 MiB gloo all-reduce took 9.6 ms so against 7.5 after a barrier,
               and 9.7-10.5 ms as DDP's last bucket)
    together   behind the same PRE_MS of load, the collective started, then k chunks of the load, k sized so that
               the load outlasts the collective (k x chunk >= OUTLAST x the collective alone); the collective's time
               from its start to its completion, and the k chunks' time. Both behind one lead-in: ranks drift apart
               over it (a GPU a few % slower, a later start), and a lead-in before "alone" only put that drift, a wait
               for the later rank, in "alone" alone: at 4-8 GPUs collectives read faster beside computation than
               alone, clamped to "no interference"
With the collective in flight for t_c of the chunks' time T, the load at 1/s of its own speed meanwhile and at full
speed after (k x chunk of work in all):  T = t_c + (k chunk - t_c / s), so
    compute_slowdown  s = t_c / (t_c - (T - k chunk))      (no progress at all while it ran: s = STOPPED)
    comm_slowdown       = t_c / alone
A round whose collective outlasted the load tells neither; it does not count and k doubles. The figures are the
slowest rank's (each round's times reduced with MAX: a step waits for its slowest rank); a row is the median of
its rounds, and keeps every valid round's raw times (`rounds_json`: the forecast draws from their spread).
Co-run (op 'co_run'; size 0, on CPU a model's gradient bytes, a row per workload's): the load on every rank at once
against rank 0's alone while the others wait in a barrier (ranks of a node sharing its cores, caches and memory
bandwidth). On CPU its load trains layers in turn whose parameters hold the model's bytes (`training_chunk`): what two
ranks share there is the working set's, which one GEMM does not have.

Drivers, one per device type, sharing everything else:
    HostDriver   the collective asynchronous (gloo runs it on its own threads, as DDP's reducer does), a thread
                 blocked in its wait() stamps its completion, the load on the rank's own thread (host clock)
    CudaDriver   the collective on a side stream (as DDP's NCCL work runs beside the compute stream), the load on
                 the current stream, CUDA events on both, one synchronisation per round (timing.CudaAPI: tests
                 pass a stand-in). Every timed span starts behind a lead-in, LEAD_MS of the load queued on the
                 current stream first: its start events fire when the lead-in ends, by when the host has issued
                 what the span holds, so a span is device time, never the host's launch latency. Without it, on one
                 H100 (a one-rank NCCL group) a lone all-reduce read 0.09-0.21 ms and the same beside the load
                 0.04-0.15 ms: a "slowdown" of 0.4, the host's issue time counted alone and hidden beside the load;
                 with it, 0.001 ms (in place: nothing to do) and 0.004-0.07 ms (the gathers' copies), and beside
                 a (256 x 4096) load the copies 2.7-3.5x slower (they wait for SMs), beside (4096 x 4096) either
                 as fast or a whole 2 ms chunk later (a GEMM holding every SM until it ends)
"""
from __future__ import annotations

import json
import math
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.distributed as dist

from bench.rank import timing
from bench.rank.commbench import buffers, run_op

LOAD_DEFAULT = {"cpu": (64, 1024), "cuda": (4096, 4096)}   # (M, K) of the chunk where no model layer sizes it
MIN_BYTES = 64 * 1024            # smaller collectives are all latency: the smallest measured size stands for them
OUTLAST = 2.0                    # the load lasts this many times the collective alone
ROUNDS = 5                       # valid rounds per (collective, size), within BUDGET_S
MIN_ROUNDS = 2
BUDGET_S = 1.5                   # per (collective, size), every round included
MAX_DOUBLINGS = 4
STOPPED = 100.0                  # compute_slowdown when the load made no progress while the collective ran
PRE_MS = 5.0                     # the load before a lone collective (a step's last bucket follows backward)
LEAD_MS = 2.0                    # CUDA: device work queued ahead of each timed span (host issue latency ~0.1 ms)
CO_RUN_CHUNKS = 20               # at least this many chunks per co-run round...
CO_RUN_ROUND_MS = 50.0           # ...and at least this long (one 30 ms round of a shared machine swung 1.06-1.20x)
CO_RUN_MS = 500.0                # rounds (ROUNDS at most, MIN_CO_RUN_ROUNDS at least) until both halves last this long:
MIN_CO_RUN_ROUNDS = 3            # DeepLabV3's 56 layers make a round of 2 x 0.28 s, and 3 of them take 1.7 s, not 2.8
MAX_CO_RUN_BYTES = 2**28          # the CPU co-run's layers hold at most this many parameter bytes (x3 per rank)...
MAX_CO_RUN_LAYERS = 512           # ...in at most this many layers


@dataclass(frozen=True)
class Round:
    """One round, the slowest rank's times (ms)."""
    comm_alone_ms: float
    comm_ms: float                   # the collective while the load ran
    load_ms: float                   # the k chunks while the collective ran
    load_alone_ms: float             # k x the chunk alone

    def slowdowns(self) -> Optional[tuple]:
        """(comm_slowdown, compute_slowdown), or None when the collective outlasted the load."""
        if self.comm_ms >= self.load_ms or self.comm_alone_ms <= 0:
            return None
        extra = self.load_ms - self.load_alone_ms
        s = self.comm_ms / (self.comm_ms - extra) if self.comm_ms > extra else STOPPED
        return self.comm_ms / self.comm_alone_ms, min(s, STOPPED)


class HostDriver:
    """CPU/gloo: collective(async_op) -> work with .wait(); chunk() runs one chunk of the load."""
    timing = "host_clock"

    def __init__(self, collective: Callable, chunk: Callable):
        self.collective, self.chunk = collective, chunk

    def alone_ms(self) -> float:
        t0 = time.perf_counter()
        self.collective(async_op=True).wait()
        return (time.perf_counter() - t0) * 1e3

    def lead_in(self, k: int) -> None:
        """k chunks of the load, as backward before a step's last bucket (host: they run now)."""
        for _ in range(k):
            self.chunk()

    def chunks_ms(self, k: int) -> float:
        t0 = time.perf_counter()
        for _ in range(k):
            self.chunk()
        return (time.perf_counter() - t0) * 1e3

    def together_ms(self, k: int) -> tuple:
        done: dict = {}
        t0 = time.perf_counter()
        work = self.collective(async_op=True)

        def stamp():  # wait() releases the GIL: this thread costs nothing until the collective completes
            work.wait()
            done["t"] = time.perf_counter()
        waiter = threading.Thread(target=stamp, daemon=True)
        waiter.start()
        for _ in range(k):
            self.chunk()
        t1 = time.perf_counter()
        waiter.join()
        return (done["t"] - t0) * 1e3, (t1 - t0) * 1e3


class CudaDriver:
    """GPU: the collective (synchronous form) on a side stream, the load on the current stream, events on both."""
    timing = "cuda_events"

    def __init__(self, collective: Callable, chunk: Callable, device: torch.device, api=None, lead: int = 2):
        self.collective, self.chunk, self.device = collective, chunk, device
        self.api = api or timing.CudaAPI()
        self.side = self.api.new_stream(device)
        self.lead = lead   # chunks queued ahead of each timed span (interference_sweep: LEAD_MS of them)

    def lead_in(self, k: int) -> None:
        """k chunks queued on the current stream, not waited for: what follows starts on the device when they end."""
        for _ in range(k):
            self.chunk()

    def _span(self, stream, work: Callable) -> tuple:
        start, end = self.api.event(), self.api.event()
        start.record(stream)
        work()
        end.record(stream)
        return start, end

    def _on_side(self, work: Callable) -> tuple:
        self.api.wait_stream(self.side, self.api.stream(self.device))  # the side stream starts after what came before
        with self.api.use(self.side):
            return self._span(self.side, work)

    def alone_ms(self) -> float:
        self.lead_in(self.lead)
        start, end = self._on_side(lambda: self.collective(async_op=False))
        self.api.synchronize(self.device)
        return float(start.elapsed_time(end))

    def chunks_ms(self, k: int) -> float:
        self.lead_in(self.lead)
        start, end = self._span(self.api.stream(self.device), lambda: [self.chunk() for _ in range(k)])
        self.api.synchronize(self.device)
        return float(start.elapsed_time(end))

    def together_ms(self, k: int) -> tuple:
        self.lead_in(self.lead)   # both spans start on the device when it ends, together
        comm = self._on_side(lambda: self.collective(async_op=False))   # launched first: both run at once on the GPU
        load = self._span(self.api.stream(self.device), lambda: [self.chunk() for _ in range(k)])
        self.api.synchronize(self.device)
        return float(comm[0].elapsed_time(comm[1])), float(load[0].elapsed_time(load[1]))


def _max(values: list, device: torch.device, group) -> list:
    """Each value's maximum over the group's ranks (a no-op without a process group: tests)."""
    if not dist.is_initialized():
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [float(v) for v in t.tolist()]


def _barrier(group) -> None:
    if dist.is_initialized():
        dist.barrier(group=group)


def measure(driver, chunk_ms: float, device: torch.device, group=None, rounds: int = ROUNDS,
            budget_s: float = BUDGET_S) -> dict:
    """{comm_alone_ms, comm_contended_ms, compute_alone_ms, compute_contended_ms, comm_slowdown, compute_slowdown,
    rounds} of one collective: medians over the valid rounds; slowdowns None with fewer than MIN_ROUNDS valid rounds."""
    driver.alone_ms()  # buffers and connections set up: not timed
    got, k, doublings = [], 0, 0
    pre = max(2, math.ceil(PRE_MS / max(chunk_ms, 1e-3)))
    deadline = time.perf_counter() + budget_s
    while len(got) < rounds:
        _barrier(group)
        driver.lead_in(pre)         # then the collective at once, each rank on its own, as after backward
        alone = driver.alone_ms()
        if not k:
            k = max(2, math.ceil(OUTLAST * _max([alone], device, group)[0] / max(chunk_ms, 1e-3)))
        _barrier(group)
        driver.lead_in(pre)         # the same lead-in: the ranks' skew over it is in both figures, not in one
        comm, load = driver.together_ms(k)
        r = Round(*_max([alone, comm, load, k * chunk_ms], device, group))
        if r.slowdowns() is not None:
            got.append(r)
        elif doublings < MAX_DOUBLINGS:
            k, doublings = 2 * k, doublings + 1
        out_of_time = _max([float(time.perf_counter() > deadline)], device, group)[0] > 0  # every rank stops together
        if out_of_time and (len(got) >= MIN_ROUNDS or doublings >= MAX_DOUBLINGS):
            break
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    ratios = [r.slowdowns() for r in got] if len(got) >= MIN_ROUNDS else []  # one round is one moment, not a rate
    comm_c, load_c = med([r.comm_ms for r in got]), med([r.load_ms / max(1, r.load_alone_ms / chunk_ms) for r in got])
    return {"comm_alone_ms": med([r.comm_alone_ms for r in got]), "comm_contended_ms": comm_c,
            "compute_alone_ms": chunk_ms, "compute_contended_ms": load_c,
            "comm_slowdown": med([c for c, _ in ratios]), "compute_slowdown": med([s for _, s in ratios]),
            "rounds": len(got), "rounds_json": json.dumps([[r.comm_alone_ms, r.comm_ms, r.load_ms, r.load_alone_ms]
                                                           for r in got])}


def load_chunk(shape: tuple, device: torch.device) -> Callable:
    """One chunk of the load: (M x K) @ (K x K) in float32 into a preallocated output."""
    m, k = shape
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(m, k, generator=g).to(device)
    w = torch.randn(k, k, generator=g).to(device)
    out = torch.empty(m, k, device=device)
    return lambda: torch.mm(a, w, out=out)


def training_chunk(shape: tuple, state_bytes: int, device: torch.device) -> tuple:
    """(chunk, layers): one chunk is one layer's training work, the next layer's at each call, cycling through as many
    (K x K) float32 layers as hold `state_bytes` of parameters (at most MAX_CO_RUN_BYTES): its forward GEMM, the GEMMs
    of its input's and its weight's gradients and a momentum-SGD update of the weight, so that the load's working set
    (weights, gradients, momentum) is sized as the model's. The co-run's load on CPU, where ranks share the cores'
    caches and memory: beside the MLP (16 MiB of parameters) two ranks training at once took 1.15x in training and
    1.13-1.15x with this load, 1.01-1.18x with one GEMM; beside DeepLabV3's 233 MB 1.00-1.09x and 1.01-1.03x."""
    m, k = shape
    layers = max(1, min(math.ceil(min(state_bytes, MAX_CO_RUN_BYTES) / (4 * k * k)), MAX_CO_RUN_LAYERS))
    g = torch.Generator(device="cpu").manual_seed(0)
    x, dy = (torch.randn(m, k, generator=g).to(device) for _ in range(2))
    out = torch.empty(m, k, device=device)
    w = [torch.randn(k, k, generator=g).to(device) * 0.01 for _ in range(layers)]
    grad = [torch.zeros(k, k, device=device) for _ in range(layers)]
    momentum = [torch.zeros(k, k, device=device) for _ in range(layers)]
    at = [0]

    def chunk():
        i = at[0] = (at[0] + 1) % layers
        torch.mm(x, w[i], out=out)
        torch.mm(dy, w[i].t(), out=out)
        torch.mm(x.t(), dy, out=grad[i])
        momentum[i].mul_(0.9).add_(grad[i])
        w[i].add_(momentum[i], alpha=-1e-6)
    chunk.weights = w
    return chunk, layers


def co_rounds(round_ms: float) -> int:
    """Rounds of a co-run whose halves each last round_ms: ROUNDS of short ones, fewer (MIN_CO_RUN_ROUNDS at least)
    where that many already last CO_RUN_MS."""
    return max(MIN_CO_RUN_ROUNDS, min(ROUNDS, math.ceil(CO_RUN_MS / max(round_ms, 1e-3))))


def co_run(driver, device: torch.device, group=None, rank: int = 0, chunk_ms: float = 1.0,
           rounds: Optional[int] = None, min_chunks: int = CO_RUN_CHUNKS) -> dict:
    """The load on every rank at once against rank 0's alone while the others wait, alternated `rounds` times (default
    `co_rounds`), each at least CO_RUN_CHUNKS chunks and CO_RUN_ROUND_MS long (medians: one slow moment of a shared
    machine is not the rate)."""
    chunks = max(min_chunks, math.ceil(CO_RUN_ROUND_MS / max(chunk_ms, 1e-3)))
    rounds = co_rounds(chunks * chunk_ms) if rounds is None else rounds
    solos, togethers = [], []
    for _ in range(rounds):
        _barrier(group)
        solo = driver.chunks_ms(chunks) / chunks if rank == 0 else 0.0
        _barrier(group)
        together = driver.chunks_ms(chunks) / chunks
        solo, together = _max([solo, together], device, group)
        solos.append(solo)
        togethers.append(together)
    ratio = statistics.median(t / s for s, t in zip(solos, togethers) if s > 0) if any(solos) else None
    return {"op": "co_run", "size_bytes": 0, "compute_alone_ms": statistics.median(solos),
            "compute_contended_ms": statistics.median(togethers), "compute_slowdown": ratio, "rounds": rounds,
            "rounds_json": json.dumps([[s, t] for s, t in zip(solos, togethers)])}


def interference_sweep(device: torch.device, sizes: list, ops: tuple, load_shape: Optional[tuple] = None,
                       scope: str = "world", group=None, api=None, state_bytes: tuple = ()) -> list:
    """One row per (collective, size >= MIN_BYTES, or the largest size where none is) and the co-run's rows (on CPU one
    per model's bytes in state_bytes, else one), for the group's ranks (bench.store.schema: interference)."""
    ranks = dist.get_world_size(group) if dist.is_initialized() else 1
    rank = dist.get_rank(group) if dist.is_initialized() else 0
    shape = tuple(load_shape or LOAD_DEFAULT[device.type])
    chunk = load_chunk(shape, device)
    load = f"float32 GEMM ({shape[0]} x {shape[1]}) @ ({shape[1]} x {shape[1]}) per chunk"
    measured = [s for s in sizes if s >= MIN_BYTES] or sorted(sizes)[-1:]

    def driver_for(op: str, size: int):
        inp, out, nbytes = buffers(op, size, ranks, device)
        collective = lambda async_op: run_op(op, inp, out, group, async_op)  # noqa: E731
        d = CudaDriver(collective, chunk, device, api, lead) if device.type == "cuda" else HostDriver(collective, chunk)
        return d, nbytes

    lead = 2
    base, _ = driver_for(ops[0], measured[0])
    for _ in range(3):
        chunk()  # the load's own first calls (allocation, kernel selection) are not its speed
    chunk_ms = _max([base.chunks_ms(10) / 10], device, group)[0]
    lead = base.lead = max(2, math.ceil(LEAD_MS / max(chunk_ms, 1e-3)))
    states = sorted({int(b) for b in state_bytes if b > 0})
    rows = []
    if device.type == "cpu" and states:  # on CPU the co-run's load trains layers holding each model's bytes
        for size in states:
            train, layers = training_chunk(shape, size, device)
            trainer = HostDriver(base.collective, train)
            train()
            train()  # first calls; the layers' memory is written at construction, so one timed pass is the warm-up too
            train_ms = _max([trainer.chunks_ms(layers) / layers], device, group)[0]
            m, k = shape
            what = (f"{layers} layer(s) ({m} x {k}) @ ({k} x {k}) trained in turn (forward, both gradients, momentum "
                    f"SGD: {layers * 4 * k * k / 2**20:.3g} MiB of parameters)")
            co = co_run(trainer, device, group, rank, train_ms, min_chunks=max(CO_RUN_CHUNKS, layers))
            rows.append({"scope": scope, "ranks": ranks, "timing": base.timing, **co, "size_bytes": size, "load": what})
            del train, trainer
    else:
        rows.append({"scope": scope, "ranks": ranks, "timing": base.timing, **co_run(base, device, group, rank, chunk_ms),
                     "load": load})
    for op in ops:
        for size in measured:
            d, nbytes = driver_for(op, size)
            rows.append({"scope": scope, "ranks": ranks, "op": op, "size_bytes": nbytes, "load": load,
                         "timing": d.timing, **measure(d, chunk_ms, device, group)})
    return rows
