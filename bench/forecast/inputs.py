"""The forecast's inputs derived from one configuration's stored rows (bench.store.forecasts.RawRows): phases with and
without gradient synchronisation, DDP's bucket ready times, the spread of its steps and its memory per rank, each with
the repeated measurements its spread is drawn from (bench.forecast.spread).

    raw = derive(rows)                   # Raw, or None when the configuration has no measured step
    tail_excess_ms(raw.step_ms, ranks)   # the slowest of `ranks` ranks over the median step (straggler/jitter)
    tail_words(len(raw.step_ms), source) # how that tail is read, in words

Phases are medians over the slowest rank's steps, scaled so they add up to the central step: the median of the
processes' own median steps (one slow process does not move it), the forecast adds phases, and a sum of medians is
not the median of the sums. Steps of different repeats (processes) share step numbers: every figure keeps them apart
(a repeat's bucket times are divided by its own backward).

Spreads (`Spread`): a step's repeated measurements are its processes (repeats), each one median step; with one
process only, consecutive blocks of its window stand in (BLOCKS of them), said so: the spread between processes is
then not measured.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from bench import stats

PHASES = {"data_ms": ("data_ms", "h2d_ms"), "forward_ms": ("forward_ms",), "backward_ms": ("backward_ms",),
          "optimizer_ms": ("optimizer_ms", "other_ms"), "buffers_ms": ("buffers_ms",)}
STATE = ("params_mib", "grads_mib", "optimizer_mib", "buckets_mib")
BLOCKS = 5                          # one process: its window cut into this many blocks of consecutive steps
MIN_BLOCK_STEPS = 2                 # ...of at least this many steps each
TAIL_BEYOND = 5                     # a quantile is read off the steps when at least this many lie beyond it
MIN_TAIL_STEPS = 8                  # fewer steps tell no tail: the straggler/jitter term is left out, said so
TAIL_FROM = 0.75                    # past the steps, an exponential tail fitted to those above this quantile


def figure(v: float) -> str:
    """'24.1', '667', '1037': three significant figures, never in powers of ten (a peak of 1037 MiB read '1.04e+03')."""
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


@dataclass(frozen=True)
class Spread:
    """The repeated measurements of one figure: one value per process, or per block of one process's window."""
    values: tuple = ()
    per: str = "process"            # 'process' | 'block' (of one process's window) | 'round'

    @property
    def n(self) -> int:
        return len(self.values)

    def words(self, unit: str = "ms") -> str:
        if not self.values:
            return "no repeated measurement"
        shown = ", ".join(figure(v) for v in self.values[:6]) + (", ..." if self.n > 6 else "")
        if self.per == "block":
            return (f"one process ({self.n} blocks of its window: {shown} {unit}; the spread between processes is "
                    "not measured, --repeats 3 measures it)")
        if self.n == 1:
            return f"one {self.per} ({shown} {unit})"
        return f"{self.n} {self.per}{'es' if self.per == 'process' else 's'} ({shown} {unit})"


@dataclass
class Raw:
    """One configuration's raw inputs to the forecast (repeats pooled)."""
    key: str
    measured: dict                   # phase -> ms of the measured window (PHASES' names), with 'step_ms'
    no_sync: Optional[dict]          # the same for DDP's no_sync() probe blocks; None without a probe
    sync: Optional[dict] = None      # and for its synchronised probe blocks (the same step as measured, later)
    buckets: list = field(default_factory=list)     # [(size_bytes, ready_fraction)] of DDP's buckets, in order
    units: list = field(default_factory=list)       # [size_bytes] of FSDP's units, forward order
    step_ms: list = field(default_factory=list)     # the measured window's steps, slowest rank, every repeat (`jitter`)
    step_firsts: tuple = ()                         # the indices in step_ms of each process's first measured step
    state_mib: dict = field(default_factory=dict)   # STATE -> MiB this rank holds (the largest rank, median of repeats)
    peak_mib: Optional[float] = None                # the largest rank's measured peak (median of repeats)
    peak_method: str = ""                           # how: allocator peak (CUDA) or peak RSS less the baseline (CPU)
    buffer_bytes: float = 0.0                       # the module's buffers (DDP broadcasts them each forward)
    spreads: dict = field(default_factory=dict)     # 'measured' | 'no_sync' | 'sync' -> Spread of the median step
    ready: list = field(default_factory=list)       # one observation per (repeat, rank, step): [fraction per bucket]
    peaks: Spread = field(default_factory=Spread)   # the largest rank's peak per process (MiB)
    runtime_mib: Optional[float] = None             # CUDA: the process's level beyond the allocator's peak, whole run;
                                                    # CPU: the process's RSS before its model (`_memory`)


def _keyed(rows: list) -> list:
    """Step rows whose step numbers are unique across repeats."""
    return [{**r, "step": int(r["result_id"]) * 1_000_000 + int(r["step"])} for r in rows]


def _by_process(rows: list) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(r["result_id"], []).append(r)
    return out


def spread(rows: list) -> Spread:
    """The median step (slowest rank) per process; with one process, per block of its window."""
    procs = [stats.slowest_rank_rows(rs) for rs in _by_process(rows).values()]
    procs = [p for p in procs if p]
    if len(procs) >= 2:
        return Spread(tuple(stats.median(r["step_ms"] for r in p) for p in procs), "process")
    if not procs:
        return Spread()
    steps = [float(r["step_ms"]) for r in procs[0]]
    k = min(BLOCKS, len(steps) // MIN_BLOCK_STEPS)
    if k < 2:
        return Spread((stats.median(steps),), "process")
    return Spread(tuple(float(np.median(b)) for b in np.array_split(np.asarray(steps), k)), "block")


def jitter(rows: list, central_ms: float) -> list:
    """The steps (slowest rank) of every process, each process's over its own median times the central step: the
    step-to-step jitter a step's ranks draw from, without the processes' differences (those are the spread between
    processes, not a rank's tail)."""
    out = []
    for rs in _by_process(rows).values():
        steps = [float(r["step_ms"]) for r in stats.slowest_rank_rows(rs)]
        mid = stats.median(steps) if steps else 0.0
        out += [v * central_ms / mid for v in steps] if mid > 0 else []
    return out


def firsts(rows: list) -> tuple:
    """The indices in `jitter`'s list of each process's first measured step: a set-apart step is named by them ('the
    first measured', the step after the warm-up that still carries some of it: an H200's 4.60 ms among 3.31-3.33)."""
    out, at = [], 0
    for rs in _by_process(rows).values():
        steps = [float(r["step_ms"]) for r in stats.slowest_rank_rows(rs)]
        if steps and stats.median(steps) > 0:      # as `jitter` keeps them
            out.append(at)
            at += len(steps)
    return tuple(out)


def phases(rows: list) -> Optional[dict]:
    """{data_ms, forward_ms, backward_ms, optimizer_ms, buffers_ms, step_ms} from step rows (slowest rank per step),
    the step the median of the processes' median steps."""
    slowest = stats.slowest_rank_rows(_keyed(rows))
    if not slowest:
        return None
    per = spread(rows)
    step = stats.median(per.values) if per.per == "process" else stats.median(r["step_ms"] for r in slowest)
    out = {name: sum(stats.median(r.get(c) for r in slowest) if any(r.get(c) is not None for r in slowest) else 0.0
                     for c in cols) for name, cols in PHASES.items()}
    total = sum(out.values())
    if total > 0:
        out = {k: v * step / total for k, v in out.items()}
    out["step_ms"] = step
    return out


def _ready_rows(rows: list) -> tuple:
    ddp = [r for r in rows if r.get("kind", "ddp") == "ddp" and r.get("ready_ms") is not None]
    last: dict = {}
    for r in ddp:
        k = (r["result_id"], r["rank"], r["step"])
        last[k] = max(last.get(k, 0.0), float(r["ready_ms"]))
    return ddp, last


def bucket_fractions(rows: list) -> list:
    """Each DDP bucket's size and its ready time as a fraction of the last bucket's in the same repeat, rank and step
    (backward's gradients all made), medians over repeats, ranks and steps."""
    ddp, last = _ready_rows(rows)
    by_bucket: dict = {}
    for r in ddp:
        by_bucket.setdefault(int(r["bucket"]), []).append(r)
    out = []
    for b in sorted(by_bucket):
        fr = [float(r["ready_ms"]) / last[(r["result_id"], r["rank"], r["step"])] for r in by_bucket[b]
              if last[(r["result_id"], r["rank"], r["step"])] > 0]
        out.append((float(by_bucket[b][0]["size_bytes"]), stats.median(fr) if fr else 1.0))
    return out


def ready_observations(rows: list) -> list:
    """One vector of every bucket's ready fraction per (repeat, rank, step) that saw them all: what a draw resamples."""
    ddp, last = _ready_rows(rows)
    seen: dict = {}
    for r in ddp:
        k = (r["result_id"], r["rank"], r["step"])
        if last[k] > 0:
            seen.setdefault(k, {})[int(r["bucket"])] = float(r["ready_ms"]) / last[k]
    buckets = sorted({int(r["bucket"]) for r in ddp})
    return [[v[b] for b in buckets] for v in seen.values() if len(v) == len(buckets)]


def fsdp_units(rows: list) -> list:
    units = [r for r in rows if r.get("kind") == "fsdp_unit" and r.get("rank") == 0]
    first = min((r["result_id"] for r in units), default=None)
    return [float(r["size_bytes"]) for r in sorted(units, key=lambda r: r["bucket"]) if r["result_id"] == first]


def memory(rows: list) -> tuple:
    """(state MiB, peak MiB, method) of the rank holding the most: per repeat the largest rank, then the median."""
    state, peaks, method, _ = _memory(rows)
    return state, (stats.median(peaks) if peaks else None), method


def _held_mib(r: dict) -> Optional[float]:
    """What the process held on its GPU at most (MiB), as far as its row says: nvidia-smi's process level after the
    window, and the device level over the whole run (bench.rank.memory.run_peaks: compilation and the warm-up, read
    before the peaks were reset) less what other processes held there after the window. None where the row has neither
    (no NVML, an older store). Not the allocator's whole-run reserved peak: in fp32 it holds cuDNN's benchmark
    workspaces, which take what memory is free and do without it where there is none (DeepLabV3 fp32 on one H100:
    21.4 GiB reserved in the warm-up against a 6.3 GiB device level), so it is no need to forecast."""
    others = (max(0.0, r["device_used_mib"] - r["process_used_mib"])
              if r.get("device_used_mib") is not None and r.get("process_used_mib") is not None else 0.0)
    held = [r.get("process_used_mib"),
            r["run_device_used_mib"] - others if r.get("run_device_used_mib") is not None else None]
    held = [v for v in held if v is not None]
    return max(held) if held else None


def _memory(rows: list) -> tuple:
    """(state, [peak per process], method, runtime MiB or None): runtime, on CUDA where the process's level is known
    (`_held_mib`), that level beyond the allocator's steady peak: the CUDA context, NCCL's buffers, the allocator's cache,
    and where the whole run's level, read at the warm-up's end, went higher (compilation) that too: the forecast's device level at the measured
    count is the whole run's, not the measured window's alone. On CPU the peak is the rise of RSS over the process's RSS
    before its model (what the model moves), and runtime what the process held before it (the interpreter, torch): the
    two add up to the largest rank's peak RSS, the memory section's figure. Without it the forecast's 'MiB/device' read
    1037 for DeepLabV3 DDP x2 on a 2-core machine where the memory section gave its peak as 1436 MiB."""
    states, peaks, method, runtime = {k: [] for k in STATE}, [], "", []
    for rs in _by_process(rows).values():
        for k in STATE:
            vals = [r.get(k) for r in rs if r.get(k) is not None]
            if vals:
                states[k].append(max(vals))
        alloc = [r["peak_allocated_mib"] - (r.get("artefact_mib") or 0.0) for r in rs if r.get("peak_allocated_mib") is not None]
        rss = [r["peak_rss_mib"] - r["baseline_rss_mib"] for r in rs
               if r.get("peak_rss_mib") is not None and r.get("baseline_rss_mib") is not None]
        level = [_held_mib(r) - r["peak_allocated_mib"] for r in rs
                 if _held_mib(r) is not None and r.get("peak_allocated_mib") is not None]
        if alloc:
            peaks.append(max(alloc))
            method = "the allocator's peak (torch.cuda.max_memory_allocated), net of the suite's batches"
            if level:
                runtime.append(max(level))
        elif rss:
            peaks.append(max(rss))
            method = "peak RSS less the process's RSS before its model was built"
            runtime.append(max(r["peak_rss_mib"] for r in rs if r.get("peak_rss_mib") is not None) - max(rss))
    state = {k: stats.median(v) for k, v in states.items() if v}
    return state, peaks, method, (max(0.0, stats.median(runtime)) if runtime else None)


def derive(rows) -> Optional[Raw]:
    """The Raw inputs of one configuration from its stored rows (bench.store.forecasts.RawRows)."""
    measured_rows = [s for s in rows.steps if s["kind"] == "measure"]
    measured = phases(measured_rows)
    if measured is None:
        return None
    no_sync_rows = [s for s in rows.steps if s["kind"] in ("probe_no_sync", "no_sync")]
    sync_rows = [s for s in rows.steps if s["kind"] == "probe_sync"]
    state, peaks, method, runtime = _memory(rows.memory)
    return Raw(key=rows.key, measured=measured, no_sync=phases(no_sync_rows), sync=phases(sync_rows),
               buckets=bucket_fractions(rows.buckets), units=fsdp_units(rows.buckets),
               step_ms=jitter(measured_rows, measured["step_ms"]), step_firsts=firsts(measured_rows),
               state_mib=state, peak_mib=stats.median(peaks) if peaks else None, peak_method=method,
               buffer_bytes=float(rows.details.get("buffer_bytes") or 0.0),
               spreads={k: spread(r) for k, r in (("measured", measured_rows), ("no_sync", no_sync_rows),
                                                  ("sync", sync_rows)) if r},
               ready=ready_observations(rows.buckets), peaks=Spread(tuple(peaks), "process"), runtime_mib=runtime)


# ---------------------------------------------------------------- the slowest of N ranks

def tail_quantile(ranks: int) -> float:
    """With every rank's step drawn from the measured spread, the median of their maximum is its quantile 0.5 ** (1/N)."""
    return 0.5 ** (1.0 / ranks)


def direct_up_to(n_steps: int) -> int:
    """The largest count whose quantile has TAIL_BEYOND of n_steps beyond it (read off the steps), 1 with none."""
    if n_steps <= TAIL_BEYOND:
        return 1
    return max(1, int(math.log(0.5) / math.log(1 - TAIL_BEYOND / n_steps)))


def tail_excess_ms(step_ms, ranks: int):
    """How much slower the slowest of `ranks` ranks is than the median, in its median step: the quantile 0.5 ** (1/N)
    of the measured steps less their median. Read off the steps where TAIL_BEYOND of them lie beyond it (robust to one
    outlier: the quantile sits under several steps); past that, an exponential tail fitted to the steps above the upper
    quartile, its scale from their median excess (one outlier moves a median little): u + beta ln((1 - 0.75) / (1 - q)).
    step_ms: (n,) or (draws, n); the result a number or an array over the draws. 0 for one rank or fewer than
    MIN_TAIL_STEPS steps (too few to tell a tail: `tail_words` says so)."""
    x = np.sort(np.asarray(step_ms, dtype=float), axis=-1)
    n = x.shape[-1]
    if ranks <= 1 or n < MIN_TAIL_STEPS:
        return 0.0 if x.ndim == 1 else np.zeros(x.shape[0])
    q = tail_quantile(ranks)
    mid = np.median(x, axis=-1)
    if n * (1 - q) >= TAIL_BEYOND or q <= TAIL_FROM:
        value = np.quantile(x, q, axis=-1)
    else:
        u = np.quantile(x, TAIL_FROM, axis=-1)
        top = x[..., n - max(2, int(round(n * (1 - TAIL_FROM)))):]
        beta = np.median(top - u[..., None], axis=-1) / math.log(2)
        value = u + np.maximum(beta, 0.0) * math.log((1 - TAIL_FROM) / (1 - q))
    out = np.maximum(0.0, value - mid)
    return float(out) if np.ndim(out) == 0 else out


def tail_words(n_steps: int, where: str) -> str:
    """What the straggler/jitter term rests on, in words."""
    if n_steps < MIN_TAIL_STEPS:
        return (f"straggler/jitter (the slowest of N ranks): left out, {where} has {n_steps} measured steps, too few to "
                f"tell a tail (at least {MIN_TAIL_STEPS}; more --steps give one)")
    up = direct_up_to(n_steps)
    return (f"straggler/jitter (the slowest of N ranks, quantile 0.5^(1/N) of the steps): from {where}'s {n_steps} "
            f"measured steps, each process's over its own median (a step's jitter; a rank slow for a whole run, another "
            f"GPU's clocks, is not measured there), read off them up to {up} rank{'s' if up > 1 else ''} (at least "
            f"{TAIL_BEYOND} steps beyond "
            f"the quantile); past that the steps are fewer than it needs: an exponential tail fitted to the steps above "
            f"their upper quartile, its scale from their median excess, which a step or two far out moves little")


def finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def unresolved(s, sources: list) -> str:
    """s: a bench.forecast.settings.Setting. Why the setting's forecast efficiency is not resolved: its single-device baseline or a run its compute is read
    from ran one unstable process (stats.unsteady, the rule the report's recommendation uses); '' where none did. One
    H100's self-check held DDP [bf16] against a single x1 whose steps spread 80% of their median: 152% at 2 GPUs."""
    seen = {}
    for c in [s.single, *sources]:
        if c is not None and hasattr(c, "summary") and hasattr(c, "process_sps"):
            seen.setdefault(c.key, c)
    return stats.unsteady_words(list(seen.values()))


def host_x(s, count: int, per_node: int) -> float:
    """CPU offload: how much longer each rank's share of the host's optimizer step takes than x1's divided by the ranks.
    The node's ranks share its cores: x1 ran on `threads` threads; at `count` each of the node's min(count, per_node)
    ranks has cores / ranks of them, so its shard (1/count of the work) takes x1's time x threads / (its threads) /
    count, never less than divided by the ranks. 1.0 (divided by the ranks, said as assumed) where the sweep stored
    no cores or no one thread count. One H200's offload forecast divided a host step by the ranks as if each GPU had
    its own CPU: 69 samples/s per GPU at 16 against 38.4 measured on one."""
    if not s.offloaded or not s.host_cores or not s.threads:
        return 1.0
    mine = max(1, s.host_cores // max(1, min(count, per_node)))
    return max(1.0, s.threads / mine)


def host_words(s) -> str:
    """What an offloaded optimizer's forecast rests on (`host_x`), in words."""
    if s.host_cores and s.threads:
        return (f"optimizer: on the host (CPU offload), whose {s.host_cores} cores (measured) a node's ranks share: x1's "
                f"step on {s.threads} threads, each rank's shard on its share of the cores (assumed: the step scales "
                "with the cores; the offload's copies over PCIe are not modelled)")
    return ("optimizer: on the host (CPU offload), its time divided by the ranks as if each had its own cores "
            "(assumed, and not so: a node's ranks share its host; this is what makes the rate per GPU rise)")
