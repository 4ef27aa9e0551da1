"""How busy each GPU is in a measured step, from the stored traces (bench.analysis.results: Config.traces): per rank
(`per_rank`: the traced steps' shares, averaged over repeats), per device where one process drives several
(`device_rows`: DataParallel's GPUs on their own, not their union), and the bound's evidence (`busy`: computation and
copies per traced step against the measured median step, collectives left out: a kernel waiting for a peer is not work).

    busy(c) -> Busy or None          per_rank(c) -> {rank: figures}          device_rows(f) -> [(device, shares)]
    percent(share) -> '103%'         # past 100% never printed as '100%'
    window_of(row) -> 'gpu_steps' | 'launches' | 'host_start' | ''   # '' : read by the old window (a store before it)

The figures are stored as the sweep read them (bench.analysis.traces), never read again from the trace files. Traces
read before bench.analysis.kernelsteps began each step's window at the host's start of the first traced step, where a
GPU running behind the host still ran the step before it (its kernels counted as the traced steps' work); their rows
carry no `window` in devices_json, and a share of theirs past 100% says that window is its likely cause (`Busy.error`).
"""
from __future__ import annotations

import json
import math
import dataclasses
from dataclasses import dataclass
from typing import Optional

SEGMENTS = (("compute_share", "computation", "#2ca02c"), ("comm_share", "exposed communication", "#d62728"),
            ("copy_share", "memory copies", "#e377c2"), ("idle_share", "idle", "#c7c7c7"))
COMPUTE_BOUND_BUSY = 0.85  # the GPU's own work fills at least 85% of a measured step: compute-bound, nothing else


def _mean(values) -> float:
    vs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vs) / len(vs) if vs else math.nan


def per_rank(c) -> dict:
    """rank -> its figures, averaged over repeats; *_per_step_ms divide the traced steps' sums by their count."""
    out: dict = {}
    for rank in sorted({t["rank"] for t in c.traces}):
        rows = [t for t in c.traces if t["rank"] == rank]
        ok = [t for t in rows if t.get("span_ms") is not None and t.get("steps")]
        fig = {k: _mean(t.get(k) for t in ok) for k, _, _ in SEGMENTS}
        fig["overlap_share"] = _mean(t.get("overlap_share") for t in ok)
        for k in ("span_ms", "wait_ms", "exposed_comm_ms", "comm_ms"):
            fig[k.replace("_ms", "_per_step_ms")] = _mean(t[k] / t["steps"] if t.get(k) is not None else None for t in ok)
        fig["trace_mb"] = _mean((t.get("trace_bytes") or 0) / 1e6 if t.get("trace_bytes") else None for t in rows)
        fig["mb_per_step"] = _mean(t["trace_bytes"] / 1e6 / t["steps"] for t in rows if t.get("trace_bytes") and t.get("steps"))
        fig["profile_s"] = _mean(t.get("profile_s") for t in rows)
        fig["traced_step_ms"] = _mean(t.get("traced_step_ms") for t in rows)
        fig["paths"] = [t["path"] for t in rows if t.get("path")]
        fig["notes"] = [t.get("error") or t.get("note") for t in rows if t.get("error") or t.get("note")]
        fig["methods"] = sorted({t["method"] for t in ok if t.get("method")})
        fig["wait_matches"] = sorted({t["wait_match"] for t in ok if t.get("wait_match")})
        fig["devices"] = _devices(rank, ok)
        out[rank] = fig
    return out


def _devices(rank: int, rows: list) -> dict:
    """'rank R' (one GPU per rank) or 'cuda:D' (a process that drives several) -> {work, comm} ms per traced step,
    averaged over repeats; {} where the rows were read from host operations. Rows stored before the device's work was
    (schema 5): computation plus copies outside it, from their shares."""
    out: dict = {}
    for t in rows:
        if t.get("method") != "device_kernels" or not t.get("steps"):
            continue
        per = json.loads(t["devices_json"]) if t.get("devices_json") else {}
        if len(per) <= 1:
            work = t.get("work_ms")
            if work is None:
                work = (t.get("compute_ms") or 0.0) + (t.get("copy_ms") or 0.0)
            per = {f"rank {rank}": {"work_ms": work, "exposed_comm_ms": t.get("exposed_comm_ms") or 0.0}}
        else:
            per = {f"cuda:{d}": v for d, v in per.items()}
        for d, v in per.items():
            got = out.setdefault(d, {"work": [], "comm": [], "idle": []})
            got["work"].append(v["work_ms"] / t["steps"])
            got["comm"].append((v.get("exposed_comm_ms") or 0.0) / t["steps"])
            got["idle"].append(v["idle_ms"] / t["steps"] if v.get("idle_ms") is not None else None)
    return {d: {"work_ms": _mean(v["work"]), "comm_ms": _mean(v["comm"]), "idle_ms": _mean(v["idle"])}
            for d, v in out.items()}


def device_rows(f: dict) -> list:
    """[(device, {work, exposed comm, idle} as shares of its traced steps)] of a rank that drives several GPUs
    (DataParallel), each GPU on its own: the rank's own shares are the GPUs' union, where a starved GPU reads busy
    beside a busy one. [] for a rank with one GPU."""
    devs, span = f["devices"], f["span_per_step_ms"]
    if len(devs) < 2 or not span or math.isnan(span):
        return []
    return [(d, {k: v[f"{k}_ms"] / span for k in ("work", "comm", "idle")}) for d, v in sorted(devs.items())]


def percent(share: float) -> str:
    """'103%'; a share over 100% that rounds to 100% keeps a decimal ('100.3%'), so 'over 100%' never stands beside a
    figure that reads 100%."""
    text = f"{share:.0%}"
    return f"{share:.1%}" if share > 1.0 and text == "100%" else text


@dataclass(frozen=True)
class Busy:
    """How busy the GPUs are in a measured step, from their kernels in the traced steps: work (computation and copies;
    collectives left out: a kernel waiting for a peer is not work) per traced step against the measured median step
    (a traced step runs slower on the host, the profiler's own work; the kernels' time does not move). `share` is the
    least busy GPU's, at most 1 (`over` and `measured` say where its kernels exceed the step); `devices` every GPU's,
    unclamped; comm_share: that GPU's collectives outside its work; idle_share: the rest."""
    share: float
    work_ms: float
    step_ms: float
    device: str
    devices: dict
    comm_share: float
    measured: float = math.nan   # the least busy GPU's work over the measured median step, unclamped
    span_ms: float = math.nan    # the trace's window per traced step (its steps, to the end of the last one's kernels)
    traced_ms: float = math.nan  # the traced steps' own wall time (steps of kind 'profile'), where their rows carry it
    old_window: bool = False     # a row was read by the window from the host's start (stored before kernelsteps)
    old_reading: float = math.nan  # `without_lag`'s: the old window's figure over 100% this Busy is mended from

    @property
    def idle_share(self) -> float:
        return max(0.0, 1.0 - self.share - self.comm_share)

    @property
    def over(self) -> bool:
        """The least busy GPU's kernels add up to more than the measured median step, the step every printed share is
        of: a measurement error, never 'full'. One step for the verdict and its figure: judged against the traced
        steps, 111 ms of kernels beside a 108.4 ms traced step and a 112 ms median read 'GPU busy 99%: over 100%', and
        beside a 115 ms traced step and a 108 ms median a silent 'GPU busy 100%'."""
        return not math.isnan(self.measured) and self.measured > 1.0

    @property
    def is_mended(self) -> bool:
        """Whether this is `without_lag`'s figure, mended from an old window's reading over 100%."""
        return not math.isnan(self.old_reading)

    def words(self) -> str:
        """'GPU busy 38%', with the least and the busiest GPU where there are several; above 100% it says that is an
        error of the measurement (the committed H100 DeepLabV3 read 'GPU busy 100%' from 111.0 ms in 108.0 ms steps).
        The busiest is another GPU than the least: two equally busy ranks read 'GPU busy 10% (rank 0; rank 0 10%)'."""
        if self.over:
            return f"GPU busy {percent(self.measured)}: over 100%, a measurement error"
        if self.is_mended:
            return f"GPU busy at least {percent(self.share)}, the old window's {percent(self.old_reading)} less its lag"
        if len(self.devices) < 2:
            return f"GPU busy {percent(self.share)}"
        others = {d: v for d, v in self.devices.items() if d != self.device}  # equally busy GPUs: the other one
        top = max(others, key=others.get)
        beyond = ": over 100%, a measurement error" if others[top] > 1.0 else ""
        return f"GPU busy {percent(self.share)} ({self.device}; {top} {percent(others[top])}{beyond})"

    def error(self) -> str:
        """Why a share above 100% is an error, with its likely cause from the trace ('' where it is not over). Each
        share stands beside the figure it is of: the H100 DeepLabV3's read '103% ... against 108.4 ms (traced steps'
        own wall time)', where 111.0/108.4 is 102% and the 103% was against the 108.0 ms measured median."""
        if not self.over:
            return ""
        own = (f" ({percent(self.work_ms / self.traced_ms)} of the traced steps' own wall time, {self.traced_ms:.1f} ms)"
               if not math.isnan(self.traced_ms) else "")
        head = (f"GPU busy {percent(self.measured)} is a measurement error, not a full GPU: {self.work_ms:.1f} ms of "
                f"kernels per traced step against the {self.step_ms:.1f} ms measured median step{own}; likely cause: "
                f"{self._cause()}")
        lag = self.lag_ms
        if not self.old_window or math.isnan(lag):
            return head + ". A compute-bound verdict read on it rests on that error"
        own_work = self.work_ms - lag
        return (f"{head}. This store's traces were read with the old window, which began at the host's start of the "
                f"first traced step while the GPU, behind the host, still ran the step before it, and counted its kernels: "
                f"up to {lag:.1f} ms a step (as far as the window runs past the traced steps), so at least "
                f"{own_work:.1f} ms of kernels a step, {percent(own_work / self.step_ms)} of the measured step, are the "
                f"traced steps' own. The figure over 100% is that window's error, not the GPU's: no verdict rests on it "
                f"(a sweep with this version counts each traced step's own kernels)")

    def without_lag(self) -> Optional["Busy"]:
        """Over 100% read by the old window, with how far that window ran past the traced steps known: the traced steps'
        own kernels at the least (each GPU's work less that lag), which a verdict can rest on where the 103% could
        not; None otherwise. The H100 DeepLabV3 single x1: 111.0 ms less at most 5.2 ms of the step before, at least
        105.9 ms of a 108.0 ms step, 98%."""
        lag = self.lag_ms
        if not (self.over and self.old_window) or math.isnan(lag):
            return None
        cut = lag / self.step_ms
        measured = self.measured - cut
        return dataclasses.replace(self, work_ms=self.work_ms - lag, measured=measured, share=min(1.0, measured),
                                   devices={d: v - cut for d, v in self.devices.items()}, old_reading=self.measured)

    def mended(self) -> str:
        """The sentence a verdict read on `without_lag`'s figure carries ('' where it is not one)."""
        if not self.is_mended:
            return ""
        return (f"; read on the traced steps' own kernels at the least: the store's {percent(self.old_reading)} came "
                f"from the old window, which began at the host's start of the first traced step and counted up to "
                f"{(self.old_reading - self.measured) * self.step_ms:.1f} ms a step of the step before it")

    @property
    def lag_ms(self) -> float:
        """How far per traced step the trace's window ran past the traced steps' own wall time (else the measured step):
        the GPU running behind the host at the end, and so, at most, what the old window counted of the step before the
        first at its start; NaN where the window does not run past."""
        beyond = self.traced_ms if not math.isnan(self.traced_ms) else self.step_ms
        return self.span_ms - beyond if not math.isnan(self.span_ms) and self.span_ms > beyond else math.nan

    def _cause(self) -> str:
        """The likely cause of kernels past the measured step: where they fit the traced steps' own wall time, the
        kernels ran longer there than in the measured steps; else the trace's window where it reaches past the traced
        step (read by the old window: kernels of the step before the first counted), or streams counted twice."""
        traced = not math.isnan(self.traced_ms)
        if traced and self.work_ms <= self.traced_ms:
            return (f"the kernels fit the traced steps' {self.traced_ms:.1f} ms but not the measured step: they ran "
                    "longer under the profiler than in the measured steps, or kernels on overlapping streams were "
                    "counted twice")
        beyond = self.traced_ms if traced else self.step_ms
        held = f"the traced steps' {beyond:.1f} ms" if traced else f"the measured step's {beyond:.1f} ms"
        if math.isnan(self.span_ms) or self.span_ms <= beyond:
            return "kernels on overlapping streams counted twice, or kernels outside the traced steps"
        if not self.old_window:   # each step read from where it began on the GPU: no earlier step's kernels in it
            return (f"the traced steps span {self.span_ms:.1f} ms a step on the GPU, past {held} on the host: the GPU "
                    "ran them longer than the host's steps last (the profiler's own work on the device)")
        return (f"the trace's window spans {self.span_ms:.1f} ms a traced step, past {held}, so it counts kernels "
                "outside the traced steps (the GPU runs behind the host)")


def busy(c) -> Optional[Busy]:
    """The bound's evidence (`Busy`) where the traces read the device's kernels; None otherwise (CPU, host operations,
    no traces). One H100, DeepLabV3 bf16 at batch 8: 23 ms of kernels in a 60 ms step, busy 38%."""
    step = c.summary.median_ms
    if not step or math.isnan(step) or step <= 0:
        return None
    ranks = per_rank(c)
    devs = {d: v for f in ranks.values() for d, v in f["devices"].items() if not math.isnan(v["work_ms"])}
    if not devs:
        return None
    measured = {d: v["work_ms"] / step for d, v in devs.items()}   # every GPU's, unclamped: past 1.0 an error, said
    least = min(measured, key=measured.get)
    share = min(1.0, measured[least])   # the bound's figure; `over` says where the measured one passes the step
    comm = min(1.0 - share, devs[least]["comm_ms"] / step) if not math.isnan(devs[least]["comm_ms"]) else 0.0
    span = _mean(f["span_per_step_ms"] for f in ranks.values())
    old = any(t.get("method") == "device_kernels" and t.get("steps") and not window_of(t) for t in c.traces)
    return Busy(share, devs[least]["work_ms"], step, least, measured, max(0.0, comm), measured[least], span,
                _mean(t.get("traced_step_ms") for t in c.traces), old)


def window_of(row: dict) -> str:
    """How a stored traces row's kernels were told apart by step (bench.analysis.kernelsteps.RULES, kept in each
    device's figures in devices_json); '' where the row does not say: read by the old window, from the host's start."""
    try:
        per = json.loads(row["devices_json"]) if row.get("devices_json") else {}
    except (TypeError, ValueError):
        return ""
    return next((v["window"] for v in per.values() if isinstance(v, dict) and v.get("window")), "")


def verdict_busy(c) -> Optional[Busy]:
    """`busy` as a verdict and the export read it: a share over 100% read by the old window mended to the traced
    steps' own kernels at the least (`Busy.without_lag`), so the label, the compile-twin comparison and
    gpu_busy_share give one figure (the export read the 103% the verdict had set aside)."""
    b = busy(c)
    return (b.without_lag() or b) if b is not None else None
