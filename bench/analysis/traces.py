"""Figures from profiler traces (--profile), read from the trace's JSON alone: no torch, no HTA.

On CUDA the method is Holistic Trace Analysis's (HTA, facebookresearch/HolisticTraceAnalysis; its "Temporal
Breakdown" and "Computation-Communication Overlap" features, https://hta.readthedocs.io), written here so
that reading a trace pins no torch version:
  - the device's kernels are classified by name: `nccl*` or containing `gloo:` is communication,
    `Memcpy`/`Memset` (and the gpu_memcpy/gpu_memset categories) memory copies, every other kernel computation;
  - iterations are the host's `ProfilerStep#N` annotations (Kineto's copies of them on each GPU stream,
    category gpu_user_annotation, are not steps: HTA drops them too); the figures cover the union of the steps,
    on CUDA each step from where its GPU work began (the copies; else its first kernel, matched to its launch by
    correlation id; else the host's start) to where the next one's began, the last to the end of its GPU work: the
    GPU runs behind the host, and only the kernels the counted steps launched are counted (bench.analysis.kernelsteps:
    a window from the host's start counted the previous step's kernels, 'GPU busy 103%' on a GPU-bound H100 step);
  - idle time is the steps' span minus the union of every classified interval;
  - overlap is the time where communication and computation intervals intersect, over communication time.
The device's work (`work_ms`) is its computation and copies only: a collective's kernel spends its time moving data
and waiting for the slowest peer to arrive, so it is not counted as the device being busy; where a process drives
several GPUs (DataParallel) each GPU's figures are kept apart (`devices`), never pooled into one union, so a
starved GPU beside a busy one shows.
A CPU/gloo trace has no kernels, and neither has a CUDA trace where CUPTI recorded none. Its figures are this
suite's own adaptation of HTA's method to the profiler's host operations (HTA reads kernels only): computation
is the time of every `cpu_op` on its thread less the communication calls on that thread (DDP's all-reduce is
issued from inside autograd's AccumulateGrad, and a call that blocks is waiting, not computing);
communication is gloo's own operations (`gloo:all_reduce`, `gloo:broadcast` on gloo's threads, which last until
every rank has joined) and the calls that issue them (`c10d::allreduce_`, `record_param_comms`). Which of the
two read a trace is its `method` ('device_kernels' or 'host_ops'), stored with its figures and named by the report
(bench.report.tracewords); a CUDA rank read from host operations says why in its note. The breakdown sums to the span with computation first:
communication counts where computation does not hide it (exposed), copies where neither runs, the rest is idle.
A trace cut to its size limit (bench.rank.tracefile) counts the steps whose work it kept whole, up to the cut.

Waiting in collectives, across the ranks (the straggler signal), is bench.analysis.waits': each rank's collectives
here (calls: NCCL's kernels, or the host's gloo operations, with the sequence number Kineto records where it does),
matched across ranks there.

    rows = derive(records)                  # the worker's trace records -> one row of figures per rank
                                            #   (its waits per traced step too: step_waits, the straggler's evidence)
    f = figures(load(path)); calls(load(path))     # one rank's breakdown; its collectives
    straggler({rank: wait_ms_per_step}, step_ms)   -> the rank the others wait for, or None (bench.analysis.waits)
"""
from __future__ import annotations

import json
import math
import time
from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from typing import Optional

from bench.analysis import kernelsteps
from bench.analysis.waits import Call, match, step_waits, straggler, waits_ms  # noqa: F401 (public here too)
from bench.shared import chrometrace

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
    method: str = "host_ops"  # what the intervals are: 'device_kernels' or 'host_ops'
    work_ms: float = math.nan  # the device's work: computation and copies, collectives left out (device_kernels only)
    devices: dict = field(default_factory=dict)  # device -> {work_ms, comm_ms, exposed_comm_ms, idle_ms, window}
    window: str = ""          # how the steps' kernels were told apart (bench.analysis.kernelsteps; device_kernels only)

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


def seq_key(event: dict) -> Optional[tuple]:
    """(process group, sequence number, collective) from Kineto's collective args ("Seq", "Process Group Name",
    "Collective name"; torch records them with NCCL's operations), or None where the event has no sequence number.
    A send and its receive carry different names: they are not a collective every rank waits in."""
    args = event.get("args") or {}
    seq = args.get("Seq")
    if seq is None or isinstance(seq, bool):
        return None
    try:
        seq = int(seq)
    except (TypeError, ValueError):
        return None
    return (str(args.get("Process Group Name", "")), seq, str(args.get("Collective name", event.get("name", ""))))


@dataclass
class Scan:
    """One pass over a trace's events, holding intervals (us) only: what figures() and collectives() need."""
    steps: list       # [(start, host end, end of its GPU work too, start of its GPU work)] of the host's ProfilerStep#N
                      # (chrometrace.step_spans; the GPU's start resolved by bench.analysis.kernelsteps)
    device: dict      # kind -> [(start, end)] of the device's kernels and copies
    by_device: dict   # device index -> kind -> [(start, end)]: the same, per GPU (a DataParallel process drives several)
    host: dict        # kind -> [(tid, start, end)] of host operations
    calls: dict       # 'device' / 'host' -> [(start, name, ms, seq key or None)] of collectives
    cut_at: Optional[float] = None   # a trace cut to its size limit (bench.rank.tracefile) ends here
    by_name: dict = field(default_factory=dict)   # the steps as scanned: name -> [host start, host end, end, GPU start]
    device_steps: bool = False       # Kineto copied the step annotations onto the GPU's streams
    window: str = ""                 # how the counted steps' kernels were told apart (kernelsteps.RULES; '' no step)
    kernels: int = 0                 # the device's kernels and copies in the trace, the counted steps' or not

    @property
    def on_device(self) -> bool:
        return self.kernels > 0 or any(self.device.values())

    @property
    def method(self) -> str:
        return "device_kernels" if self.on_device else "host_ops"


def scan(events) -> Scan:
    """Classify a trace's complete ('X') events, keeping tuples rather than the events (a trace can be gigabytes).
    The device's kernels are kept where the counted steps launched them (bench.analysis.kernelsteps)."""
    out = Scan([], {"comm": [], "copy": [], "compute": []}, {}, {"comm": [], "compute": []}, {"device": [], "host": []})
    kernels, launches = [], {}   # [(start, end, correlation, kind, device, call or None)]; correlation -> launch time
    for e in events:
        if e.get("name") == CUT_MARK and isinstance(e.get("ts"), (int, float)):
            out.cut_at = float(e["ts"])
        if e.get("ph") != "X" or "ts" not in e or "dur" not in e:
            continue
        chrometrace.note_step(out.by_name, e)
        name, cat = str(e.get("name", "")), str(e.get("cat", "")).lower()
        a = float(e["ts"])
        b = a + float(e["dur"])
        if cat in DEVICE_CATEGORIES:
            kind = classify(e, True)
            call = (a, name, (b - a) / 1e3, seq_key(e)) if kind == "comm" and cat == "kernel" else None
            kernels.append((a, b, kernelsteps.correlation(e), kind, _device_of(e), call))
            continue
        if cat == chrometrace.DEVICE_ANNOTATION:  # Kineto's copy of a host annotation on a GPU stream: not an op
            out.device_steps = out.device_steps or name.startswith(chrometrace.STEP_PREFIX)
            continue
        if cat in kernelsteps.LAUNCH_CATEGORIES and kernelsteps.correlation(e) is not None:
            launches[kernelsteps.correlation(e)] = a
        kind = classify(e, False)
        if kind:
            out.host[kind].append((e.get("tid"), a, b))
        if is_comm(name):
            out.calls["host"].append((a, name, (b - a) / 1e3, seq_key(e)))
    out.steps = chrometrace.step_spans(out.by_name, gpu=True)
    out.window, out.steps, kept = kernelsteps.assign(out.steps, counted_steps(out), kernels, launches)
    out.kernels = len(kernels)
    for a, b, _, kind, device, call in kept:
        out.device[kind].append((a, b))
        out.by_device.setdefault(device, {"comm": [], "copy": [], "compute": []})[kind].append((a, b))
        if call:
            out.calls["device"].append(call)
    out.window = out.window if out.on_device else ""
    return out


def _device_of(event: dict) -> str:
    """The GPU an event ran on: Kineto's args.device, else its pid (Kineto gives each GPU a process of its own)."""
    args = event.get("args") or {}
    return str(args.get("device", event.get("pid", "?")))


def load(path: str) -> Scan:
    """A Chrome trace file, gzipped or not, scanned as a stream (bench.shared.chrometrace): never held whole."""
    return scan(item[1] for item in chrometrace.events(path) if item[0] == "event")


def _scan(trace) -> Scan:
    return trace if isinstance(trace, Scan) else scan(trace.get("traceEvents", []))


def counted_steps(s: Scan) -> list:
    """The traced steps the figures count: all of them, or in a cut trace those whose work (the GPU's included)
    ended by the cut."""
    return [st for st in s.steps if s.cut_at is None or st[2] <= s.cut_at]


def window(s: Scan) -> list:
    """The time the figures cover (a union, us): the counted steps; on CUDA each from where its GPU work began to where
    the next one's did, the last to the end of its GPU work (bench.analysis.kernelsteps: the GPU runs behind the host);
    the whole trace where it has no ProfilerStep#; never past a cut."""
    steps = counted_steps(s)
    if steps and not s.on_device:
        out = union((a, b) for a, b, _, _ in steps)
    elif steps:
        nexts = [g for *_, g in steps[1:]] + [-math.inf]
        out = union((g, max(end, nxt)) for (_, _, end, g), nxt in zip(steps, nexts))
        if not s.device_steps:  # without the annotations' GPU copies: to the last counted kernel's end
            # (a GPU behind the host by more than a step starts the last step after its host end: that interval is
            # empty, and with one counted step nothing else is left; the window then starts where its GPU work did)
            tail = out[-1][1] if out else steps[-1][3]
            last = max((b for v in s.device.values() for _, b in v), default=tail)
            out = union([*out, (tail, max(last, tail))])
    elif s.steps:  # a cut trace that kept no whole step
        out = []
    else:
        spans = [*(i for v in s.device.values() for i in v), *((a, b) for v in s.host.values() for _, a, b in v)]
        out = union([(min(a for a, _ in spans), max(b for _, b in spans))]) if spans else []
    if s.cut_at is not None:  # nothing was kept past the cut: it is not idle time
        out = intersect(out, [(float("-inf"), s.cut_at)])
    return out


def figures(trace) -> Figures:
    """One rank's breakdown of its traced steps (the whole trace where it has no ProfilerStep#).
    trace: a Chrome trace (a dict with traceEvents) or its Scan."""
    s = _scan(trace)
    device = s.on_device
    span_window = window(s)
    if device:
        c, m, p = (intersect(union(s.device[k]), span_window) for k in ("compute", "comm", "copy"))
    else:  # on one thread, the time inside a communication call is communication, whichever op encloses it
        comm_by_tid: dict = {}
        for tid, a, b in s.host["comm"]:
            comm_by_tid.setdefault(tid, []).append((a, b))
        compute_by_tid: dict = {}
        for tid, a, b in s.host["compute"]:
            compute_by_tid.setdefault(tid, []).append((a, b))
        c = union(i for tid, v in compute_by_tid.items() for i in subtract(union(v), union(comm_by_tid.get(tid, []))))
        c = intersect(c, span_window)
        m = intersect(union((a, b) for _, a, b in s.host["comm"]), span_window)
        p = []
    exposed = subtract(m, c)
    busy = union([*c, *m, *p])
    span = length(span_window)
    per_device = ({d: dict(_device_figures(kinds, span_window), window=s.window) for d, kinds in sorted(s.by_device.items())}
                  if device else {})
    return Figures(steps=len(counted_steps(s)), span_ms=span / 1e3, compute_ms=length(c) / 1e3, comm_ms=length(m) / 1e3,
                   copy_ms=length(subtract(p, union([*c, *m]))) / 1e3, idle_ms=(span - length(busy)) / 1e3,
                   overlap_ms=length(intersect(m, c)) / 1e3, exposed_comm_ms=length(exposed) / 1e3, method=s.method,
                   work_ms=length(union([*c, *p])) / 1e3 if device else math.nan, devices=per_device, window=s.window)


def _device_figures(kinds: dict, span_window: list) -> dict:
    """One GPU's figures over the traced steps (ms): its work (computation and copies), its collectives, those not
    under its work (exposed), and the time it ran nothing (idle)."""
    c, m, p = (intersect(union(kinds[k]), span_window) for k in ("compute", "comm", "copy"))
    work = union([*c, *p])
    return {"work_ms": length(work) / 1e3, "comm_ms": length(m) / 1e3, "exposed_comm_ms": length(subtract(m, work)) / 1e3,
            "idle_ms": (length(span_window) - length(union([*work, *m]))) / 1e3}


def calls(trace) -> list:
    """[Call] of each collective the rank took part in within the counted steps, in order: NCCL's kernels on a device
    trace, gloo's (or NCCL's) host operations otherwise; each with the traced step it started in (0, 1, ...)."""
    s = _scan(trace)
    inside = window(s)
    starts = [a for a, _ in inside]
    step_starts = [g if s.on_device else a for a, _, _, g in counted_steps(s)]  # on the GPU, where its steps began
    out = []
    for a, name, ms, key in sorted(s.calls["device" if s.on_device else "host"], key=lambda c: c[0]):
        k = bisect_right(starts, a) - 1
        if k >= 0 and a < inside[k][1]:
            out.append(Call(name, ms, key, step=max(0, bisect_right(step_starts, a) - 1) if step_starts else None))
    return out


def collectives(trace) -> list:
    """(name, duration ms) of each collective the rank took part in, in order (calls() without the sequence keys)."""
    return [(c.name, c.ms) for c in calls(trace)]


def _add_note(row: dict, note: str) -> None:
    row["note"] = "; ".join(filter(None, [row.get("note"), note]))


def derive(records: list) -> list:
    """The worker's per-rank trace records (bench.rank.profile) -> rows of the traces table: the record, the
    rank's figures, how they were read (`method`), its wait in collectives and how the collectives were matched
    across ranks (`wait_match`). A trace that cannot be read keeps its record, with a note."""
    rows, colls, methods = [], {}, {}
    for rec in sorted(records, key=lambda r: r.get("rank", 0)):
        row = dict(rec)
        if rec.get("path") and not rec.get("error"):
            t0 = time.perf_counter()
            try:
                trace = load(rec["path"])
                f = figures(trace)
                if trace.cut_at is not None and not f.steps:
                    _add_note(row, "no traced step was kept whole: no figures")
                else:
                    row.update(asdict(f), **f.shares)
                    row["devices_json"] = json.dumps(row.pop("devices"), sort_keys=True) if f.devices else None
                    colls[rec["rank"]], methods[rec["rank"]] = calls(trace), f.method
                    if f.method == "host_ops" and rec.get("device_type") == "cuda":
                        _add_note(row, "the profiler recorded no GPU kernels (CUPTI gave none): figures from host "
                                       "operations, whose times on CUDA are launches, not the GPU's work")
            except (OSError, ValueError, KeyError, TypeError) as e:
                _add_note(row, f"trace could not be read: {type(e).__name__}: {e}")
            row["read_s"] = time.perf_counter() - t0  # what reading it cost the sweep
        rows.append(row)
    waits, how, by_step = {}, None, {}
    if len(set(methods.values())) > 1:  # a kernel's time and a host call's are not the same thing: not compared
        note = "ranks read by different methods (" + ", ".join(f"rank {r}: {m}" for r, m in sorted(methods.items())) \
               + "): waits in collectives not compared"
        for row in rows:
            if row.get("rank") in methods:
                _add_note(row, note)
    elif len(colls) > 1:
        waits, how = match(colls)
        waits = waits if how else {}  # no collective common to every rank: no wait to tell
        by_step = step_waits(colls) if how else {}
    for row in rows:
        row["wait_ms"] = waits.get(row.get("rank"))
        row["wait_match"] = how if row.get("rank") in waits else None
        waits_by_step = by_step.get(row.get("rank"))  # the wait in each traced step: the straggler's evidence
        row["step_waits_json"] = json.dumps(waits_by_step) if waits_by_step else None
    return rows
