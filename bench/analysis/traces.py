"""Figures from profiler traces (--profile), read from the trace's JSON alone: no torch, no HTA.

The method is Holistic Trace Analysis's (HTA, facebookresearch/HolisticTraceAnalysis; its "Temporal
Breakdown" and "Computation-Communication Overlap" features, https://hta.readthedocs.io), written here so
that reading a trace pins no torch version:
  - events are classified by name: `nccl*` or containing `gloo:` is communication, `Memcpy`/`Memset`
    (and the gpu_memcpy/gpu_memset categories) memory copies, every other kernel computation;
  - iterations are the `ProfilerStep#N` annotations; the figures cover the union of them (the traced steps;
    on CUDA up to the end of the last kernel, which runs behind its step's annotation);
  - idle time is the steps' span minus the union of every classified interval;
  - overlap is the time where communication and computation intervals intersect, over communication time.
On CUDA the intervals are the device's kernels and copies, as in HTA. A CPU/gloo trace has no kernels: its
intervals are the profiler's host operations. Computation is the time of every `cpu_op` on its thread less
the communication calls on that thread (DDP's all-reduce is issued from inside autograd's AccumulateGrad,
and a call that blocks is waiting, not computing); communication is gloo's own operations
(`gloo:all_reduce`, `gloo:broadcast` on gloo's threads, which last until every rank has joined) and the
calls that issue them (`c10d::allreduce_`, `record_param_comms`). The breakdown sums to the span with
computation first: communication counts where computation does not hide it (exposed), copies where
neither runs, the rest is idle. A trace cut to its size limit (bench.rank.tracefile) counts up to the cut.

Waiting in collectives (the straggler signal): HTA takes the collective whose duration varies most across
ranks and names the rank that starts it last. Here every collective is matched across ranks by its name and
order, and a rank's wait is how much longer it spent in each than the rank that spent least (durations, so
the hosts' clocks need not agree). The rank that waits markedly less than the others is the one they wait for.

    rows = derive(records)                  # the worker's trace records -> one row of figures per rank
    straggler({rank: wait_ms_per_step}, step_ms)   -> the rank the others wait for, or None
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Optional

from bench.shared import chrometrace

STRAGGLER_RATIO = 0.5          # the straggler waits less than half what the others typically wait ...
STRAGGLER_MIN_STEP_SHARE = 0.10  # ... and at least 10% of a traced step less
COMM_CALLS = ("c10d::", "record_param_comms")
CUT_MARK = "bench: trace cut here"   # bench.rank.tracefile's instant event where it cut a trace
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass
class Figures:
    """One rank's traced steps; every *_ms is summed over the traced steps."""
    steps: int
    span_ms: float
    compute_ms: float
    comm_ms: float          # union of communication intervals
    copy_ms: float          # copies while neither computation nor communication runs
    idle_ms: float
    overlap_ms: float       # communication under computation
    exposed_comm_ms: float  # communication not under computation

    @property
    def shares(self) -> dict:
        span = self.span_ms or math.nan
        return {"compute_share": self.compute_ms / span, "comm_share": self.exposed_comm_ms / span,
                "copy_share": self.copy_ms / span, "idle_share": self.idle_ms / span,
                "overlap_share": self.overlap_ms / self.comm_ms if self.comm_ms > 0 else math.nan}


# ---------------------------------------------------------------- intervals (microseconds)

def union(intervals) -> list:
    out: list = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [tuple(i) for i in out]


def length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def intersect(xs: list, ys: list) -> list:
    """Two unions -> their intersection (a union)."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs: list, ys: list) -> list:
    """A union minus another (both sorted and disjoint), in one pass."""
    out, j = [], 0
    for a, b in xs:
        cur = a
        while j < len(ys) and ys[j][1] <= cur:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            if ys[k][0] > cur:
                out.append((cur, ys[k][0]))
            cur = max(cur, ys[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


# ---------------------------------------------------------------- events

def is_comm(name: str) -> bool:
    low = name.lower()
    return low.startswith("nccl") or "gloo:" in low


def classify(event: dict, device: bool) -> Optional[str]:
    """'comm', 'copy', 'compute' or None (not counted: annotations, host events of a device trace)."""
    name, cat = str(event.get("name", "")), str(event.get("cat", "")).lower()
    if device:
        if cat not in DEVICE_CATEGORIES:
            return None
        if is_comm(name):
            return "comm"
        if cat in ("gpu_memcpy", "gpu_memset") or name.startswith(("Memcpy", "Memset")):
            return "copy"
        return "compute"
    if is_comm(name) or name.startswith(COMM_CALLS):
        return "comm"
    return "compute" if cat == "cpu_op" else None


@dataclass
class Scan:
    """One pass over a trace's events, holding intervals (us) only: what figures() and collectives() need."""
    steps: list
    device: dict      # kind -> [(start, end)] of the device's kernels and copies
    host: dict        # kind -> [(tid, start, end)] of host operations
    calls: dict       # 'device' / 'host' -> [(start, name, ms)] of collectives
    cut_at: Optional[float] = None   # a trace cut to its size limit (bench.rank.tracefile) ends here

    @property
    def on_device(self) -> bool:
        return any(self.device.values())


def scan(events) -> Scan:
    """Classify a trace's complete ('X') events, keeping tuples rather than the events (a trace can be gigabytes)."""
    out = Scan([], {"comm": [], "copy": [], "compute": []}, {"comm": [], "compute": []}, {"device": [], "host": []})
    for e in events:
        if e.get("name") == CUT_MARK and isinstance(e.get("ts"), (int, float)):
            out.cut_at = float(e["ts"])
        if e.get("ph") != "X" or "ts" not in e or "dur" not in e:
            continue
        name, cat = str(e.get("name", "")), str(e.get("cat", "")).lower()
        a = float(e["ts"])
        b = a + float(e["dur"])
        if name.startswith("ProfilerStep#"):
            out.steps.append((a, b))
        if cat in DEVICE_CATEGORIES:
            kind = classify(e, True)
            out.device[kind].append((a, b))
            if kind == "comm" and cat == "kernel":
                out.calls["device"].append((a, name, (b - a) / 1e3))
            continue
        kind = classify(e, False)
        if kind:
            out.host[kind].append((e.get("tid"), a, b))
        if is_comm(name):
            out.calls["host"].append((a, name, (b - a) / 1e3))
    return out


def load(path: str) -> Scan:
    """A Chrome trace file, gzipped or not, scanned as a stream (bench.shared.chrometrace): never held whole."""
    return scan(item[1] for item in chrometrace.events(path) if item[0] == "event")


def figures(trace) -> Figures:
    """One rank's breakdown of its traced steps (the whole trace where it has no ProfilerStep#).
    trace: a Chrome trace (a dict with traceEvents) or its Scan."""
    s = trace if isinstance(trace, Scan) else scan(trace.get("traceEvents", []))
    device = s.on_device
    everything = [*s.steps, *(i for v in s.device.values() for i in v), *((a, b) for v in s.host.values() for _, a, b in v)]
    window = union(s.steps) if s.steps else union([(min(a for a, _ in everything), max(b for _, b in everything))]
                                                   if everything else [])
    if device and s.steps:  # the device runs behind the host: the last step's kernels end after its annotation
        last = max(b for v in s.device.values() for _, b in v)
        window = union([*window, (window[-1][1], max(last, window[-1][1]))])
    if s.cut_at is not None:  # nothing was kept past the cut: it is not idle time
        window = intersect(window, [(float("-inf"), s.cut_at)])
    if device:
        c, m, p = (intersect(union(s.device[k]), window) for k in ("compute", "comm", "copy"))
    else:  # on one thread, the time inside a communication call is communication, whichever op encloses it
        comm_by_tid: dict = {}
        for tid, a, b in s.host["comm"]:
            comm_by_tid.setdefault(tid, []).append((a, b))
        compute_by_tid: dict = {}
        for tid, a, b in s.host["compute"]:
            compute_by_tid.setdefault(tid, []).append((a, b))
        c = union(i for tid, v in compute_by_tid.items() for i in subtract(union(v), union(comm_by_tid.get(tid, []))))
        c = intersect(c, window)
        m = intersect(union((a, b) for _, a, b in s.host["comm"]), window)
        p = []
    exposed = subtract(m, c)
    busy = union([*c, *m, *p])
    span = length(window)
    return Figures(steps=len(s.steps), span_ms=span / 1e3, compute_ms=length(c) / 1e3, comm_ms=length(m) / 1e3,
                   copy_ms=length(subtract(p, union([*c, *m]))) / 1e3, idle_ms=(span - length(busy)) / 1e3,
                   overlap_ms=length(intersect(m, c)) / 1e3, exposed_comm_ms=length(exposed) / 1e3)


def collectives(trace) -> list:
    """(name, duration ms) of each collective the rank took part in, in order: gloo's operations, NCCL's kernels."""
    s = trace if isinstance(trace, Scan) else scan(trace.get("traceEvents", []))
    return [(name, ms) for _, name, ms in sorted(s.calls["device" if s.on_device else "host"])]


def waits_ms(per_rank: dict) -> dict:
    """{rank: [(name, ms)]} -> {rank: ms spent waiting in collectives}: for each collective, matched across ranks
    by name and occurrence, a rank's time in it beyond the least any rank spent in it."""
    keyed = {}
    for rank, items in per_rank.items():
        seen: dict = {}
        keyed[rank] = {}
        for name, ms in items:
            keyed[rank][(name, seen.get(name, 0))] = ms
            seen[name] = seen.get(name, 0) + 1
    common = set.intersection(*(set(k) for k in keyed.values())) if keyed else set()
    return {r: sum(ms[k] - min(keyed[o][k] for o in keyed) for k in common) for r, ms in keyed.items()}


def straggler(wait_ms_per_step: dict, step_ms: float) -> Optional[int]:
    """The rank the others wait for: the one that waits markedly less than the others' median; None if none does."""
    waits = {r: w for r, w in wait_ms_per_step.items() if w is not None and not math.isnan(w)}
    if len(waits) < 2:
        return None
    rank = min(waits, key=waits.get)
    others = sorted(w for r, w in waits.items() if r != rank)
    typical = others[len(others) // 2] if len(others) % 2 else (others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
    gap = typical - waits[rank]
    if waits[rank] < STRAGGLER_RATIO * typical and gap > STRAGGLER_MIN_STEP_SHARE * step_ms:
        return rank
    return None


def derive(records: list) -> list:
    """The worker's per-rank trace records (bench.rank.profile) -> rows of the traces table: the record, the
    rank's figures and its wait in collectives. A trace that cannot be read keeps its record, with a note."""
    rows, colls = [], {}
    for rec in sorted(records, key=lambda r: r.get("rank", 0)):
        row = dict(rec)
        if rec.get("path") and not rec.get("error"):
            t0 = time.perf_counter()
            try:
                trace = load(rec["path"])
                f = figures(trace)
                row.update(asdict(f), **f.shares)
                colls[rec["rank"]] = collectives(trace)
            except (OSError, ValueError, KeyError, TypeError) as e:
                row["note"] = "; ".join(filter(None, [rec.get("note"), f"trace could not be read: {type(e).__name__}: {e}"]))
            row["read_s"] = time.perf_counter() - t0  # what reading it cost the sweep
        rows.append(row)
    waits = waits_ms(colls) if len(colls) > 1 else {}
    for row in rows:
        row["wait_ms"] = waits.get(row.get("rank"))
    return rows
