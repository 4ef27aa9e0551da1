"""The forecast's model of one training step at a device count the sweep did not run (pure: no torch, no store).

    step = forecast_ddp(compute, buckets, net, ranks, overlap)      -> Step(step_ms, exposed_comm_ms, ...)
    step = forecast_fsdp(compute, units, net, ranks, overlap)
    bound_of(step)                                                  -> 'compute' | 'exposed communication' | 'data'

DDP (MG-WFBP: Shi, Chu & Li, "MG-WFBP: Efficient Data Communication for Distributed Synchronous SGD Algorithms",
INFOCOM 2019; the wait-free backpropagation pipeline of Poseidon, Zhang et al., USENIX ATC 2017). Backward
produces gradient buckets b = 1..K, bucket b ready at r_b (measured: bench.rank.buckets records, on every rank,
when each of DDP's buckets has all its gradients, as a fraction of that backward; stored in the `buckets` table).
DDP sends them in order, one collective at a time:
    e_0 = 0,   e_b = max(e_{b-1}, r_b) + t(S_b)
    step = data + forward + max(backward, e_K) + optimizer
with t(S) the all-reduce time of S bytes on the forecast's network (bench.analysis.network: a latency-bandwidth
model per level, ring or tree). Bounds: compute + t(S_K) <= step <= compute + sum_b t(S_b).
Overlap: on GPUs the collectives run on their own stream while backward computes (the pipeline above). On the
CPU path (gloo) the collectives run on the same cores as backward (processes x threads fill the machine), so
nothing overlaps: step = compute + sum_b t(S_b), the upper bound. `overlap` picks which.
Without stored bucket times the buckets are DDP's by construction (a first bucket of 1 MiB, then bucket_cap_mb
each) and become ready in proportion to the gradient bytes produced (backward spreads evenly over the bytes).

FSDP (FSDP2's fully_shard per block): every unit's parameters are all-gathered before its forward, again
before its backward when resharded after forward, and its gradients reduce-scattered after its backward.
Assumed: a unit's compute is proportional to its parameter bytes; FSDP2 prefetches one unit ahead; all
collectives share one link in the order they are issued (all-gather of the next unit when a unit's compute
starts, reduce-scatter of a unit when its backward ends); all-gather and reduce-scatter cost their own measured
fit where the sweep measured them, else half a ring all-reduce (bench.analysis.network, `Network.levels`).
Without overlap (CPU) every collective adds to the step.

The compute (data, forward, backward, optimizer per rank) comes from measured runs (bench.commands.forecast
says which); with weak scaling it is the same at every count, with strong scaling it shrinks with the samples
each rank holds (data, forward, backward in proportion; the optimizer not).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from bench.analysis import network as nw

FIRST_BUCKET_BYTES = 2**20          # DDP's first bucket (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES)
BOUND_SHARE = 0.05                   # exposed communication or data wait above 5% of the step names the bound


@dataclass(frozen=True)
class Compute:
    """Per-rank phases of one step without gradient communication (ms)."""
    data_ms: float                   # waiting for the batch and copying it to the device
    forward_ms: float
    backward_ms: float
    optimizer_ms: float

    @property
    def total_ms(self) -> float:
        return self.data_ms + self.forward_ms + self.backward_ms + self.optimizer_ms

    def scaled(self, samples_factor: float) -> "Compute":
        """The same step with samples_factor times the samples per rank (strong scaling)."""
        return replace(self, data_ms=self.data_ms * samples_factor, forward_ms=self.forward_ms * samples_factor,
                       backward_ms=self.backward_ms * samples_factor)


@dataclass(frozen=True)
class Bucket:
    """One gradient bucket: its bytes on the wire and when backward has it ready, as a fraction of backward."""
    size_bytes: float
    ready_fraction: float


@dataclass
class Step:
    """A forecast step at one count."""
    ranks: int
    step_ms: float
    compute: Compute
    exposed_comm_ms: float           # the step beyond data + forward + backward + optimizer
    comm_ms: float                   # every collective's time added up
    algorithm: str = "ring"
    notes: list = field(default_factory=list)


def pipeline_end_ms(ready_ms: Sequence[float], collective_ms: Sequence[float]) -> float:
    """e_K of the MG-WFBP recurrence: e_b = max(e_{b-1}, r_b) + t_b, in order."""
    end = 0.0
    for r, t in zip(ready_ms, collective_ms):
        end = max(end, r) + t
    return end


def default_buckets(grad_bytes: float, bucket_cap_mb: float) -> list:
    """DDP's buckets by construction: 1 MiB first, then bucket_cap_mb each, ready as their bytes are produced."""
    cap = max(1.0, bucket_cap_mb * 2**20)
    sizes, left = [], float(grad_bytes)
    first = min(FIRST_BUCKET_BYTES, left)
    if first > 0:
        sizes.append(first)
        left -= first
    while left > 0:
        sizes.append(min(cap, left))
        left -= sizes[-1]
    out, done = [], 0.0
    for s in sizes:
        done += s
        out.append(Bucket(s, done / grad_bytes if grad_bytes else 1.0))
    return out


def forecast_ddp(compute: Compute, buckets: Sequence[Bucket], net: nw.Network, ranks: int, overlap: bool) -> Step:
    """One DDP step on `ranks` ranks (module docstring)."""
    times = [nw.allreduce_ms(net, b.size_bytes, ranks) for b in buckets]
    comm = sum(times)
    if overlap:
        ready = [b.ready_fraction * compute.backward_ms for b in buckets]
        tail = max(compute.backward_ms, pipeline_end_ms(ready, times))
        step = compute.data_ms + compute.forward_ms + tail + compute.optimizer_ms
    else:
        step = compute.total_ms + comm
    algos = {nw.allreduce_algorithm(net, b.size_bytes, ranks) for b in buckets} or {"ring"}
    return Step(ranks=ranks, step_ms=step, compute=compute, exposed_comm_ms=step - compute.total_ms, comm_ms=comm,
                algorithm="+".join(sorted(algos)))


def forecast_fsdp(compute: Compute, units: Sequence[tuple], net: nw.Network, ranks: int, overlap: bool,
                  reshard: bool = True) -> Step:
    """One FSDP step; units: [(gather_bytes, reduce_bytes)] per unit in forward order (module docstring)."""
    total = sum(g for g, _ in units) or 1.0
    ag = [nw.allgather_ms(net, g, ranks) for g, _ in units]
    rs = [nw.reduce_scatter_ms(net, r, ranks) for _, r in units]
    fwd = [compute.forward_ms * g / total for g, _ in units]
    bwd = [compute.backward_ms * g / total for g, _ in units]
    comm = sum(ag) * (2 if reshard else 1) + sum(rs)
    if not overlap or not units:
        step = compute.total_ms + comm
        return Step(ranks, step, compute, step - compute.total_ms, comm)
    n = len(units)
    # forward: gather k+1 issued when compute of k starts
    link = ag[0]
    gathered = [0.0] * n
    gathered[0] = link
    t = 0.0
    for k in range(n):
        start = max(t, gathered[k])
        if k + 1 < n:
            link = max(link, start) + ag[k + 1]
            gathered[k + 1] = link
        t = start + fwd[k]
    # backward, last unit first: its gather (if resharded) at once, the next one's when a unit's compute starts,
    # a unit's reduce-scatter when its backward ends
    ready = [t] * n
    if reshard:
        link = max(link, t) + ag[n - 1]
        ready[n - 1] = link
    for k in range(n - 1, -1, -1):
        start = max(t, ready[k])
        if k > 0 and reshard:
            link = max(link, start) + ag[k - 1]
            ready[k - 1] = link
        t = start + bwd[k]
        link = max(link, t) + rs[k]
    step = compute.data_ms + max(t, link) + compute.optimizer_ms
    return Step(ranks, step, compute, step - compute.total_ms, comm)


def linear_in_count(points: dict) -> Callable[[int], float]:
    """DataParallel: the step grows with the count (one process replicates the module to every device, scatters
    the batch and reduces the gradients onto device 0, each in proportion to the devices): a least-squares line
    through the measured (count, step_ms) points."""
    xs, ys = list(points), [points[c] for c in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    return lambda n: my + slope * (n - mx)


def bound_of(step: Step) -> str:
    """What limits the step: exposed communication or data wait when it takes more than BOUND_SHARE of the step
    (the larger of the two when both do), else compute."""
    data = step.compute.data_ms
    exposed = max(0.0, step.exposed_comm_ms)
    big = [(v, name) for v, name in ((exposed, "exposed communication"), (data, "data"))
           if v > BOUND_SHARE * step.step_ms]
    return max(big)[1] if big else "compute"


def efficiency(samples_per_s: float, baseline_samples_per_s: float, count: int, scaling: str) -> float:
    """Weak: throughput over count x the baseline's; strong: the same (the global batch is fixed, so throughput
    is the measure either way)."""
    if not baseline_samples_per_s or math.isnan(baseline_samples_per_s) or count <= 0:
        return math.nan
    return samples_per_s / (count * baseline_samples_per_s)
