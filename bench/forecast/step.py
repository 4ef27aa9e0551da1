"""The forecast's model of one training step at a device count the sweep did not run (pure: no torch, no store).

    step = forecast_ddp(compute, buckets, net, ranks, inter, sync_ms=..., buffer_bytes=...)   -> Step
    step = forecast_fsdp(compute, units, net, ranks, inter, reshard=True, sync_ms=...)
    simulate(tasks)                                  # the two-lane pipeline both are built on
    bound_of(step, local=LOCAL)                      -> 'exposed communication' | 'straggler/jitter' | 'data' | local
    local_bound(measured)                            # 'local step' or 'local step (host-bound, measured)': `local`

The pipeline (`simulate`): a step's work after forward runs on two lanes, the device's computation and the
communication link, each task in its lane's order once what it waits for has started or ended. Alone, a task takes
its own time; while both lanes are busy, the collective runs at 1/comm_x of its speed and the computation at
1/compute_x of its own, the two slowdowns measured for that collective and size on this machine
(bench.forecast.interference; Lumos, MLSys 2025, and Echo, 2024, model the same overlap slowdown). With both at 1 it
is the classic wait-free backpropagation pipeline; with computation stopped (compute_x large) it is the no-overlap
bound, compute + every collective.

DDP (MG-WFBP: Shi, Chu & Li, INFOCOM 2019; Poseidon's wait-free backpropagation, Zhang et al., USENIX ATC 2017):
backward produces gradient buckets b = 1..K, ready when r_b of backward's computation is done (measured per rank:
bench.rank.buckets; else DDP's construction, ready as the gradient bytes are produced). DDP sends them in order,
one collective at a time, each as soon as it is ready and the one before it is done:
    step = data + forward + buffers + max(backward, last bucket's all-reduce) + optimizer + sync
buffers: DDP's broadcast of the module's buffers before each forward (BatchNorm statistics), a ring broadcast.
sync: a step is as slow as its slowest rank; the caller gives the expected excess of the slowest of N ranks over the
median (bench.forecast.settings: from the per-step spread the sweep measured). It is its own term and bound,
straggler/jitter, never counted as communication (`terms`).

Every figure may be an array over draws (bench.forecast.spread): `simulate_draws` runs the pipeline for all of them at
once (numpy over the draws, one loop step per event), and the Step's figures are then arrays too.

FSDP (FSDP2's fully_shard per block; units in forward order, the root first): every unit's parameters are
all-gathered before its forward (the next unit's all-gather issued when a unit's forward starts: one unit of
prefetch), again before its backward when resharded after forward (the root never is: FSDP2's rule), and its
gradients reduce-scattered after its backward; all on one link in the order issued. A unit's computation is its
share of forward and backward in proportion to its parameter bytes. The optimizer steps on this rank's shard:
its time divided by the ranks (assumed in proportion to the shard).

The compute (data, forward, backward, optimizer per rank, each alone) comes from measured runs
(bench.forecast.settings says which); with weak scaling the same at every count, with strong scaling
data, forward and backward in proportion to the samples each rank holds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from bench.forecast import interference as itf
from bench.forecast import network as nw

FIRST_BUCKET_BYTES = 2**20          # DDP's first bucket (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES)
BOUND_SHARE = 0.05                   # exposed communication or data wait above 5% of the step names the bound
_EPS = 1e-9


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

    def slowed(self, factor: float) -> "Compute":
        """Every phase but data `factor` times longer (ranks sharing a node's cores and memory bandwidth)."""
        return replace(self, forward_ms=self.forward_ms * factor, backward_ms=self.backward_ms * factor,
                       optimizer_ms=self.optimizer_ms * factor)


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
    exposed_comm_ms: float           # the step beyond data + forward + backward + optimizer + sync (communication)
    comm_ms: float                   # every collective's time alone, added up
    algorithm: str = "ring"
    sync_ms: float = 0.0             # the slowest rank's excess over the median, included in step_ms
    stretch_ms: float = 0.0          # backward's computation stretched by the collectives it overlapped
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class Task:
    """One task of the pipeline: lane 'compute' or 'comm', its time alone, what must have started or ended first
    ((task index, 'start' | 'end'), ...); a comm task's slowdown beside computation and the one it imposes."""
    lane: str
    work_ms: float
    after: tuple = ()
    comm_x: float = 1.0
    compute_x: float = 1.0


def _as_rows(values: list) -> np.ndarray:
    """(B, T) from T per-task values, each a number or an array of B draws."""
    b = max((np.size(v) for v in values), default=1)
    return np.stack([np.broadcast_to(np.asarray(v, dtype=float), (b,)) for v in values], axis=1)


def simulate_draws(tasks: Sequence[Task]) -> tuple:
    """(start_ms, end_ms), each (B, T): the pipeline (`simulate`) run for B draws at once, a task's work_ms, comm_x
    and compute_x each a number or an array of B (numpy over the draws; the loop runs once per event, at most 2T)."""
    n = len(tasks)
    work = _as_rows([t.work_ms for t in tasks])
    comm_x, compute_x = _as_rows([t.comm_x for t in tasks]), _as_rows([t.compute_x for t in tasks])
    b = work.shape[0]
    work = np.broadcast_to(work, (b, n))
    comm_x, compute_x = np.broadcast_to(comm_x, (b, n)), np.broadcast_to(compute_x, (b, n))
    left = np.maximum(0.0, work).copy()
    start, end = np.full((b, n), np.nan), np.full((b, n), np.nan)
    depth = max((len(t.after) for t in tasks), default=0) or 1
    dep = np.zeros((n, depth), dtype=int)
    dep_end, dep_on = np.zeros((n, depth), dtype=bool), np.zeros((n, depth), dtype=bool)
    for i, t in enumerate(tasks):
        for k, (j, when) in enumerate(t.after):
            dep[i, k], dep_end[i, k], dep_on[i, k] = j, when == "end", True
    queues = {lane: np.array([i for i, t in enumerate(tasks) if t.lane == lane], dtype=int) for lane in ("compute", "comm")}
    pos = {lane: np.zeros(b, dtype=int) for lane in queues}
    active = {lane: np.full(b, -1) for lane in queues}
    now, rows = np.zeros(b), np.arange(b)
    for _ in range(2 * n + 2):
        changed = True
        while changed:  # start what can start; zero-length tasks end at once
            changed = False
            for lane, queue in queues.items():
                idle = np.nonzero((active[lane] < 0) & (pos[lane] < len(queue)))[0]
                if not idle.size:
                    continue
                cand = queue[pos[lane][idle]]
                j = dep[cand]
                seen = np.where(dep_end[cand], end[idle[:, None], j], start[idle[:, None], j])
                ok = np.all(~dep_on[cand] | ~np.isnan(seen), axis=1)
                if not ok.any():
                    continue
                idle, cand = idle[ok], cand[ok]
                start[idle, cand] = now[idle]
                pos[lane][idle] += 1
                active[lane][idle] = cand
                zero = left[idle, cand] <= _EPS
                end[idle[zero], cand[zero]] = now[idle[zero]]
                active[lane][idle[zero]] = -1
                changed = True
        c, m = active["compute"], active["comm"]
        busy_c, busy_m = c >= 0, m >= 0
        waiting = (pos["compute"] < len(queues["compute"])) | (pos["comm"] < len(queues["comm"]))
        if np.any(~busy_c & ~busy_m & waiting):
            raise ValueError("pipeline deadlock: a task waits for one that never runs")
        if not np.any(busy_c | busy_m):
            return start, end
        ci, mi = np.where(busy_c, c, 0), np.where(busy_m, m, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate_c = np.where(busy_c, np.where(busy_m, 1.0 / compute_x[rows, mi], 1.0), 0.0)
            rate_m = np.where(busy_m, np.where(busy_c, 1.0 / comm_x[rows, mi], 1.0), 0.0)
            t_c = np.where(busy_c & (rate_c > 0), left[rows, ci] / rate_c, np.inf)
            t_m = np.where(busy_m & (rate_m > 0), left[rows, mi] / rate_m, np.inf)
        dt = np.minimum(t_c, t_m)
        dt = np.where(np.isfinite(dt), dt, 0.0)
        now += dt
        for lane, i, busy, rate in (("compute", ci, busy_c, rate_c), ("comm", mi, busy_m, rate_m)):
            left[rows[busy], i[busy]] -= dt[busy] * rate[busy]
            done = busy & (left[rows, i] <= _EPS * np.maximum(1.0, work[rows, i]))
            end[rows[done], i[done]] = now[done]
            active[lane][done] = -1
    raise ValueError("pipeline did not finish: a task made no progress")


def simulate(tasks: Sequence[Task]) -> list:
    """[(start_ms, end_ms)] per task: each lane runs its tasks in order, each once its `after` holds; while both lanes
    are busy, the comm task runs at 1/comm_x and the compute task at 1/compute_x (the comm task's figures). Numbers
    where every task's figures are numbers (`_simulate_one`, plain Python: the what-ifs' central values), else arrays
    over the draws (`simulate_draws`)."""
    if all(np.ndim(v) == 0 for t in tasks for v in (t.work_ms, t.comm_x, t.compute_x)):
        return _simulate_one(tasks)
    start, end = simulate_draws(tasks)
    return list(zip(start.T, end.T))


def _simulate_one(tasks: Sequence[Task]) -> list:
    """`simulate` for numbers: the same events, one task at a time."""
    n = len(tasks)
    start, end = [math.nan] * n, [math.nan] * n
    left = [max(0.0, float(t.work_ms)) for t in tasks]
    queues = {lane: [i for i, t in enumerate(tasks) if t.lane == lane] for lane in ("compute", "comm")}
    active: dict = {"compute": None, "comm": None}
    now = 0.0

    def ready(i: int) -> bool:
        return all(not math.isnan(start[j] if when == "start" else end[j]) for j, when in tasks[i].after)
    while True:
        changed = True
        while changed:  # start what can start; zero-length tasks end at once
            changed = False
            for lane, queue in queues.items():
                if active[lane] is None and queue and ready(queue[0]):
                    i = queue.pop(0)
                    start[i], active[lane], changed = now, i, True
                    if left[i] <= _EPS:
                        end[i], active[lane] = now, None
        c, m = active["compute"], active["comm"]
        if c is None and m is None:
            if any(queues.values()):
                raise ValueError("pipeline deadlock: a task waits for one that never runs")
            return list(zip(start, end))
        rate_c = (1.0 / tasks[m].compute_x if m is not None else 1.0) if c is not None else 0.0
        rate_m = (1.0 / tasks[m].comm_x if c is not None else 1.0) if m is not None else 0.0
        dt = min(left[c] / rate_c if c is not None and rate_c > 0 else math.inf,
                 left[m] / rate_m if m is not None and rate_m > 0 else math.inf)
        now += dt
        for i, rate, lane in ((c, rate_c, "compute"), (m, rate_m, "comm")):
            if i is not None:
                left[i] -= dt * rate
                if left[i] <= _EPS * max(1.0, tasks[i].work_ms):
                    end[i], active[lane] = now, None


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


NETWORK_OPS = nw.OPS


def collective_ms(net: nw.Network, inter: itf.Interference, op: str, size: float, ranks: int) -> float:
    """A collective alone: as a step issues it where the interference run measured this count on as many nodes, else
    the network model's anchored to those rows (bench.forecast.interference.anchor_x)."""
    if ranks <= 1 or size <= 0:
        return 0.0
    mine = inter.alone_ms(op, size, ranks, math.ceil(ranks / net.gpus_per_node))
    return mine if mine is not None else NETWORK_OPS[op](net, size, ranks) * itf.anchor_x(net, inter, op, size, ranks)


def _comm_task(op: str, size: float, ms: float, ranks: int, inter: itf.Interference, after: tuple) -> Task:
    return Task("comm", ms, after, inter.comm_x(op, size, ranks), inter.compute_x(op, size, ranks))


def _last(values: list):
    """The largest of per-task numbers or arrays over the draws (0 with none)."""
    return np.max(np.stack(np.broadcast_arrays(*values)), axis=0) if values else 0.0


def _scalar(v):
    return float(v) if np.ndim(v) == 0 else v


def forecast_ddp(compute: Compute, buckets: Sequence[Bucket], net: nw.Network, ranks: int,
                 inter: itf.Interference | None = None, sync_ms=0.0, buffer_bytes: float = 0.0) -> Step:
    """One DDP step on `ranks` ranks (module docstring). Any of compute's phases, a bucket's ready_fraction, sync_ms
    and the interference's and network's draws may be arrays over draws: the Step's figures are then arrays too."""
    inter = inter or itf.Interference()
    times = [collective_ms(net, inter, "all_reduce", b.size_bytes, ranks) for b in buckets]
    tasks, done = [], 0.0
    for b, t in zip(buckets, times):  # DDP launches in bucket order: a bucket is sent once it and those before are ready
        ready = np.minimum(1.0, np.maximum(done, b.ready_fraction))
        tasks.append(Task("compute", _scalar((ready - done) * compute.backward_ms)))
        tasks.append(_comm_task("all_reduce", b.size_bytes, t, ranks, inter, ((len(tasks) - 1, "end"),)))
        done = ready
    tasks.append(Task("compute", _scalar((1.0 - done) * compute.backward_ms)))
    multi = ranks > 1
    spans = simulate(tasks) if multi else [(0.0, t.work_ms) for t in tasks]
    tail = _last([e for _, e in spans]) if multi else compute.backward_ms
    buffers = nw.broadcast_ms(net, buffer_bytes, ranks) if buffer_bytes else 0.0
    sync = sync_ms if multi else 0.0
    step = compute.data_ms + compute.forward_ms + buffers + tail + compute.optimizer_ms + sync
    comp_end = _last([e for (_, e), t in zip(spans, tasks) if t.lane == "compute"])
    algos = {nw.allreduce_algorithm(net, b.size_bytes, ranks) for b in buckets} or {"ring"}
    return Step(ranks=ranks, step_ms=step, compute=compute, exposed_comm_ms=step - compute.total_ms - sync,
                comm_ms=sum(times) + buffers, algorithm="+".join(sorted(algos)), sync_ms=sync,
                stretch_ms=np.maximum(0.0, comp_end - compute.backward_ms) if multi else 0.0)


def forecast_fsdp(compute: Compute, units: Sequence[tuple], net: nw.Network, ranks: int,
                  inter: itf.Interference | None = None, reshard: bool = True, sync_ms=0.0) -> Step:
    """One FSDP step; units: [(gather_bytes, reduce_bytes)] per unit in forward order, the root first. Arrays over
    draws as forecast_ddp."""
    inter = inter or itf.Interference()
    units = list(units) or [(0.0, 0.0)]
    n, total = len(units), sum(g for g, _ in units) or 1.0
    ag = [collective_ms(net, inter, "all_gather", g, ranks) for g, _ in units]
    rs = [collective_ms(net, inter, "reduce_scatter", r, ranks) for _, r in units]
    tasks: list = []

    def add(task: Task) -> int:
        tasks.append(task)
        return len(tasks) - 1
    gather, fwd = [0] * n, [0] * n
    gather[0] = add(_comm_task("all_gather", units[0][0], ag[0], ranks, inter, ()))
    for k in range(n):
        fwd[k] = add(Task("compute", _scalar(compute.forward_ms * units[k][0] / total), ((gather[k], "end"),)))
        if k + 1 < n:  # one unit of prefetch: the next gather is issued when this unit's forward starts
            gather[k + 1] = add(_comm_task("all_gather", units[k + 1][0], ag[k + 1], ranks, inter, ((fwd[k], "start"),)))
    again = {k: k > 0 and reshard for k in range(n)}  # the root is not resharded after forward (FSDP2's rule)
    regather: dict = {}
    if again[n - 1]:
        regather[n - 1] = add(_comm_task("all_gather", units[n - 1][0], ag[n - 1], ranks, inter, ((fwd[n - 1], "end"),)))
    for k in range(n - 1, -1, -1):
        wait = ((regather[k], "end"),) if k in regather else ((fwd[n - 1], "end"),)
        bwd = add(Task("compute", _scalar(compute.backward_ms * units[k][0] / total), wait))
        if k > 0 and again[k - 1]:
            regather[k - 1] = add(_comm_task("all_gather", units[k - 1][0], ag[k - 1], ranks, inter, ((bwd, "start"),)))
        add(_comm_task("reduce_scatter", units[k][1], rs[k], ranks, inter, ((bwd, "end"),)))
    comm = sum(ag) + sum(ag[k] for k in regather) + sum(rs)
    multi = ranks > 1
    tail = _last([e for _, e in simulate(tasks)]) if multi else compute.forward_ms + compute.backward_ms
    optimizer = compute.optimizer_ms / max(1, ranks)
    sync = sync_ms if multi else 0.0
    step = compute.data_ms + tail + optimizer + sync
    return Step(ranks, step, compute, step - compute.total_ms - sync, comm, sync_ms=sync)


def linear_in_count(points: dict) -> Callable[[int], float]:
    """DataParallel: the step grows with the count (one process replicates the module to every device, scatters
    the batch and reduces the gradients onto device 0, each in proportion to the devices): a least-squares line
    through the measured (count, step_ms) points."""
    xs, ys = list(points), [points[c] for c in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    return lambda n: my + slope * (n - mx)


def terms(step: Step) -> dict:
    """The step's terms beyond its computation (ms, central figures): exposed communication (the link's time not
    hidden behind computation, stretch included), straggler/jitter (the slowest of N ranks over the median: the
    measured step-to-step spread, no communication in it) and data (waiting for the batch)."""
    return {"exposed communication": max(0.0, central(step.exposed_comm_ms)), "straggler/jitter": central(step.sync_ms),
            "data": central(step.compute.data_ms)}


def central(v) -> float:
    """A figure's central value: itself, or row 0 of an array over draws (bench.forecast.spread)."""
    return float(np.ravel(v)[0]) if np.ndim(v) else float(v)


LOCAL = "local step"                 # no term beyond the one-device step passes BOUND_SHARE: the step on one device


def local_bound(measured: str = "") -> str:
    """The fall-through bound in words: the one-device step, and where the caller measured what bounds it (the
    report's bound of the source configuration at one device, e.g. 'host-bound (GPU busy 39%)') its head, as
    'local step (host-bound, measured)': narrow enough for a table's column; the figure goes in the words beside."""
    head = measured.split(" (")[0].strip()
    return f"{LOCAL} ({head}, measured)" if head else LOCAL


def bound_of(step: Step, local: str = LOCAL) -> str:
    """What limits the step: the largest of its terms (`terms`) when it takes more than BOUND_SHARE of the step, else
    the step on one device, `local` (never 'compute': a host-bound step is not compute-bound, `local_bound`)."""
    big = [(v, name) for name, v in terms(step).items() if v > BOUND_SHARE * central(step.step_ms)]
    return max(big)[1] if big else local
