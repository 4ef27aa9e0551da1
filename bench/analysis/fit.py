"""The largest per-device batch that fits, derived: what one trial of `./run_bench.sh fit` says (its verdict, from its
outcome and its measured peak), how the search walks the batches, and each search's answer read back from a sweep.

    verdict("ok", "", peak_mib=900, budget_mib=1024)       -> "fits"
    verdict("failed", "rank 1: OutOfMemoryError: CUDA out of memory ...", None, 81559) -> "out of memory"
    largest, smallest_not, tried = search(try_batch, start=1, max_batch=4096)
    answer, measured = settle(measure, try_batch, largest, tried)   # the measured run at the answer fits too
    searches(rows, memory_of, names)                         -> [Search], one per configuration searched

A trial fits when it ran and its peak per device stayed within the budget, by the figure the report's fastest-that-fits
table holds to the same budget (`budget_peak`, the one rule for both: per GPU, on CPU per node): on CUDA the device level on its fullest GPU
(nvidia-smi's figure, what runs out: the allocator's cache, the CUDA context and NCCL's buffers), the larger of the
steady state's and the whole run's, net of the suite's pre-generated batches; where no device level was recorded, the
allocator's peak reserved (source 'reserved'); on CPU the node's total, its processes' peak RSS summed (`budget_peak`:
a node's ranks share its RAM). It is held against the GPU's memory or --memory-budget-gib (on CPU --memory-budget-gib). Judged by the reserved peak alone, an H200 fit of the transformer
said DDP x1 fits 14 in 16 GiB (its trial's reserved peak 15.61 GiB, its device level 16.90 GiB; its measured run's 17.56
GiB), and the fastest-that-fits table on the same page said nothing fits. A CUDA out-of-memory error, or a rank the
kernel killed (SIGKILL: its out-of-memory killer, the usual reason), does not fit; any other failure is an error, which
ends that configuration's search. A store's verdicts are read back as stored (details 'fit') and held to this rule
(`Search.now`): a fit run before it was judged by the reserved peak, and a 'fits' whose peak is over the budget by
today's figure counts as over it, so no answer is a batch the same page says does not fit.

A trial's two steps can understate a longer run's peak (on the CPU glibc's heap grows for several steps more), so the
answer is the batch whose measured run (--steps, --repeats, by the same rule) fits: where the measured run at the
largest batch passes the budget, that batch does not fit, and the next smaller one is measured (`settle`). Each
measured run's row carries details 'fit' {search, batch, verdict, peak_mib, budget_mib}, so `searches` reads the
answer back from the store alone; its trials stay as they ran.
"""
from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from typing import Callable, Optional

FITS, OVER, OOM, ERROR = "fits", "over the budget", "out of memory", "error"
NOT_FITTING = (OVER, OOM)
IN_MEASURED_RUN = " in the measured run"   # OVER + IN_MEASURED_RUN: a batch whose trial fit and measured run did not
OOM_WORDS = ("OutOfMemoryError", "out of memory", "CUDA error: out of memory", "SIGKILL")
MAX_BATCH = 4096    # --max-batch's default: the search stops there


DEVICE_LEVEL, RESERVED, RSS = "device level", "reserved", "RSS"
NODE_RSS = "RSS, node total"   # budget_peak's CPU figure: the peak RSS of a node's processes, summed


def device_peak(device_type: str, level: dict, run_level: dict, reserved: dict, rss: dict,
                allocated: Optional[dict] = None) -> tuple:
    """(peak memory per device in MiB or None, its source): per GPU the figure a budget is held against (`budget_peak`),
    per process on CPU the page's figure beside the node's total. Each dict maps a device (or rank) to MiB, net of the pre-generated
    batches: level, the steady state's device level; run_level, the whole run's (read at the end of the warm-up:
    compilation's memory still held, cuDNN's benchmark workspaces already given back, `warmup_held`); reserved, the allocator's peak reserved (allocated, its peak allocated, stands in where no reserved
    peak was recorded); rss, a rank's peak RSS. CUDA: per device the larger of its two device levels, on the fullest
    one ('device level'); where none was recorded, the largest reserved peak ('reserved': the context then comes on
    top). CPU: the largest rank's RSS ('RSS')."""
    if device_type != "cuda":
        return (max(rss.values()) if rss else None), RSS
    levels = {d: max(level.get(d, 0.0), run_level.get(d, 0.0)) for d in {**level, **run_level}}
    if levels:
        return max(levels.values()), DEVICE_LEVEL
    mem = reserved or allocated
    return (max(mem.values()) if mem else None), RESERVED


WARMUP_MARGIN = 0.02   # a warm-up held under 2% more than the device level is the same figure (peaks alike)


def warmup_held(level: dict, reserved: dict, run_reserved: dict, peak: Optional[float]) -> Optional[tuple]:
    """(what the allocator held in the warm-up, MiB; that with the CUDA context, MiB) on the GPU where it was most,
    where it passes `peak` (device_peak's figure) by more than WARMUP_MARGIN; else None. run_reserved: the whole run's
    peak reserved per device; the context: the steady device level less the steady peak reserved, on that device.

    Not held to the budget, by design, and said beside it instead: PyTorch empties its cache at the end of cuDNN's
    benchmark search, so the whole run's device level (read at the end of the warm-up) misses what the search held (DeepLabV3 fp32 on an
    H200: 20.7 GiB reserved in the warm-up, 5.45 GiB steady, where the page said '5.45 GiB, cuDNN's autotuning
    included'). That search sizes its workspaces to the memory free and skips what does not fit, so on a smaller GPU,
    or beside another job, it searches less rather than runs out: what runs out for this run is the device level.
    The transient still takes what is free while it lasts (another process allocating then can be refused), so the
    page says it. The forecast holds the device level too (docs/memory.md), for the same reason."""
    held = {d: (mib, mib + max(level.get(d, 0.0) - reserved.get(d, 0.0), 0.0)) for d, mib in run_reserved.items()}
    top = max(held.values(), key=lambda h: h[1], default=None)
    if top is None or peak is None or top[1] <= peak * (1 + WARMUP_MARGIN):
        return None
    return top


def node_total(rss: dict, per_node: int = 0) -> Optional[float]:
    """The fullest node's memory on CPU, MiB: the peak RSS of the processes it runs, summed (None: none recorded). A
    node's ranks share its RAM: a CPU page read DDP x2 'at a peak of 1.40 GiB per process' within a budget a user
    would set to the box's RAM, while its two processes together needed 2.80 GiB. rss: 'rank R' -> that rank's peak
    (over repeats: peaks that need not coincide, so the sum errs high, never low); per_node: ranks per node of a
    multi-node run, torchrun numbering ranks node by node (0: one node, every rank on it)."""
    nodes: dict = {}
    for label, mib in rss.items():
        rank = int(str(label).split()[-1])
        node = rank // per_node if per_node else 0
        nodes[node] = nodes.get(node, 0.0) + float(mib)
    return max(nodes.values()) if nodes else None


def budget_peak(device_type: str, level: dict, run_level: dict, reserved: dict, rss: dict,
                allocated: Optional[dict] = None, per_node: int = 0) -> tuple:
    """(the figure a memory budget is held against, MiB or None; its source), in fit's verdicts and the report's
    fastest-that-fits table alike: on CUDA `device_peak`'s (each GPU has its own memory); on CPU the node's total
    (`node_total`, 'RSS, node total'), not one rank's peak: the ranks of a node share its RAM."""
    if device_type != "cuda":
        return node_total(rss, per_node), NODE_RSS
    return device_peak(device_type, level, run_level, reserved, rss, allocated)


def _per_device(memory_rows: list, column: str, device_type: str) -> dict:
    """device (CUDA) or rank (CPU) -> the largest `column` among its rows, net of the pre-generated batches on CUDA
    (as bench.analysis.results nets them); rows without it are passed over."""
    out: dict = {}
    for m in memory_rows:
        if m.get(column) is None:
            continue
        if device_type == "cuda":
            if not str(m.get("device", "")).startswith("cuda"):
                continue
            key, mib = str(m["device"]), float(m[column]) - float(m.get("artefact_mib") or 0.0)
        else:
            key, mib = f"rank {m.get('rank', 0)}", float(m[column])
        out[key] = max(out.get(key, mib), mib)
    return out


def peak_of_rows(memory_rows: list, device_type: str, per_node: int = 0) -> tuple:
    """(the peak held to the budget, MiB or None; its source) of one run's memory rows, by `budget_peak`: per GPU on
    CUDA, per node on CPU. per_node: ranks per node of a multi-node run (0: one node)."""
    cols = ("device_used_mib", "run_device_used_mib", "peak_reserved_mib", "peak_rss_mib", "peak_allocated_mib")
    return budget_peak(device_type, *(_per_device(memory_rows, c, device_type) for c in cols), per_node=per_node)


def peak_mib(memory_rows: list, device_type: str, per_node: int = 0) -> Optional[float]:
    """The peak of one run held to the budget, MiB (`peak_of_rows`); None where nothing was recorded."""
    return peak_of_rows(memory_rows, device_type, per_node)[0]


def verdict(status: str, reason: str, peak: Optional[float], budget_mib: float) -> str:
    """fits | over the budget | out of memory | error."""
    if status == "ok":
        if peak is None:
            return ERROR
        return FITS if peak <= budget_mib else OVER
    return OOM if any(w in (reason or "") for w in OOM_WORDS) else ERROR


def search(try_batch: Callable[[int], str], start: int, max_batch: int, smallest: int = 1) -> tuple:
    """Powers of two from `start` (2x each time, at most `max_batch`) until a batch does not fit, then bisection between
    the largest that fit and the smallest that did not, to one sample. A start that does not fit is bisected down to
    `smallest`. try_batch(b) -> a verdict. Returns (largest that fits or None, smallest that does not or None: the cap
    was reached, the verdicts by batch in the order tried); an error ends the search where it stands."""
    tried: dict = {}

    def trial(b: int) -> str:
        tried[b] = try_batch(b)
        return tried[b]

    lo, hi, b = smallest - 1, None, start
    while True:
        v = trial(b)
        if v == ERROR:
            return (lo if lo >= smallest else None), hi, tried
        if v != FITS:
            hi = b
            break
        lo = b
        if b >= max_batch:
            return lo, None, tried
        b = min(2 * b, max_batch)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        v = trial(mid)
        if v == ERROR:
            break
        lo, hi = (mid, hi) if v == FITS else (lo, mid)
    return (lo if lo >= smallest else None), hi, tried


def settle(measure: Callable[[int], str], try_batch: Callable[[int], str], largest: Optional[int], tried: dict,
           smallest: int = 1) -> tuple:
    """The search's answer held to its measured run: measure(b) -> the measured run's verdict at b (the worst of its
    repeats). Where it does not fit, b does not: the largest trial below it that fit is measured next, and so on down;
    once a measured run fits, bisection between it and the smallest whose measured run did not (a trial, then where it
    fits the measured run, at each batch; trials in `tried` are not run again, new ones are added to it), to one sample.
    An error (a trial's or the measured run's) ends it where it stands, as in `search`. Returns (the largest batch
    whose measured run fit, or None; the measured verdicts by batch in the order measured)."""
    measured: dict = {}
    lo, hi, b = None, None, largest      # lo: the largest batch whose measured run fit; hi: the smallest that did not
    while b is not None:
        measured[b] = measure(b)
        if measured[b] == ERROR:
            return b, measured
        lo, hi = (lo, b) if measured[b] in NOT_FITTING else (b, hi)
        if lo is None:
            b = max((x for x, v in tried.items() if v == FITS and x < hi), default=None)
            continue
        b = None
        while hi is not None and hi - lo > 1:
            mid = (lo + hi) // 2
            if mid not in tried:
                tried[mid] = try_batch(mid)
            if tried[mid] == ERROR:
                break
            if tried[mid] == FITS:
                b = mid
                break
            hi = mid
    return (lo if lo is not None and lo >= smallest else None), measured


def _worse(a: tuple, b: tuple) -> tuple:
    """Of two measured runs' (verdict, peak) at one batch, the one that says more against it."""
    rank = lambda vp: (vp[0] in NOT_FITTING, vp[0] == ERROR, vp[1] if vp[1] is not None else -1.0)  # noqa: E731
    return max(a, b, key=rank)


@dataclass
class Search:
    """One configuration's search, read back: its trials and the measured run at its largest batch."""
    search: str                         # the configuration without its batch (details' 'search')
    workload: str
    strategy: str
    device_type: str
    device_count: int
    name: str                           # 'DDP x2 (ac=full)'
    label: str                          # 'DDP x2 (ac=full) [bf16, adamw]': the name and the recipe where not the default
    recipe: tuple                       # (precision, optimizer): what the comparison sentence groups by
    budget_mib: float
    trials: list = field(default_factory=list)   # [(batch, verdict, peak MiB or None, reason)], by batch
    bench_keys: dict = field(default_factory=dict)  # batch -> the config key of the measured run at that batch
    measured: dict = field(default_factory=dict)    # batch -> (verdict, peak MiB or None) of its measured runs (the
                                                    # worst repeat), where their rows carry details 'fit'
    order: list = field(default_factory=list)       # the trials' batches in the order the search tried them
    speeds: dict = field(default_factory=dict)      # batch -> its trial's samples/s (one measured step: a trial's figure)
    measured_reasons: dict = field(default_factory=dict)  # batch -> why a measured run there failed (its error's text)

    def now(self, v: str, peak: Optional[float]) -> str:
        """A stored verdict held to today's rule: 'fits' whose peak (device_peak's figure) is over the budget is over it.
        A store written while fit judged by the allocator's peak reserved kept DDP x1 of the H200 transformer at 14
        (device level 16.90 GiB; its measured run 17.56 GiB, in 16 GiB) beside 'nothing fits the budget' on one page."""
        return OVER if v == FITS and peak is not None and peak > self.budget_mib else v

    @property
    def judged(self) -> list:
        """The trials as `trials` holds them, each verdict by today's rule (`now`)."""
        return [(b, self.now(v, p), p, r) for b, v, p, r in self.trials]

    def measured_now(self, batch: int) -> Optional[tuple]:
        """(verdict by today's rule, peak) of the measured runs at `batch`, or None where none ran."""
        v, p = self.measured.get(batch, (None, None))
        return (self.now(v, p), p) if v is not None else None

    @property
    def restated(self) -> list:
        """Batches stored as fitting (a trial or a measured run) whose peak by today's figure is over the budget."""
        out = {b for b, v, p, _ in self.trials if self.now(v, p) != v}
        return sorted(out | {b for b, (v, p) in self.measured.items() if self.now(v, p) != v})

    @property
    def largest(self) -> Optional[int]:
        """The largest batch whose trial fit and whose measured run, where one ran, fit too, by today's rule."""
        fits = [b for b, v, _, _ in self.judged if v == FITS and (self.measured_now(b) or (FITS,))[0] not in NOT_FITTING]
        return max(fits) if fits else None

    @property
    def overturned(self) -> list:
        """[(batch, the trial's peak, the measured run's verdict, its peak)] where the trial fit and the measured run
        did not, by batch."""
        return [(b, p, *self.measured_now(b)) for b, v, p, _ in self.judged
                if v == FITS and (self.measured_now(b) or (FITS,))[0] in NOT_FITTING]

    @property
    def ran_over(self) -> list:
        """[(batch, the measured run's peak)] where a measured run did not fit and its trial, by today's rule, did not
        either: a store whose trial was judged fitting by an older figure, then measured at that batch."""
        trial = {b: v for b, v, _, _ in self.judged}
        return [(b, self.measured_now(b)[1]) for b in sorted(self.measured)
                if self.measured_now(b)[0] in NOT_FITTING and trial.get(b) != FITS]

    @property
    def smallest_not(self) -> Optional[tuple]:
        """(batch, verdict, peak, reason) of the smallest batch that did not fit, a measured run's verdict 'over the
        budget in the measured run' with its peak; None if every trial and measured run fit."""
        out = [t for t in self.judged if t[1] in NOT_FITTING]
        out += [(b, v + IN_MEASURED_RUN, mp, "") for b, _, v, mp in self.overturned]
        return min(out) if out else None

    @property
    def untried(self) -> list:
        """The batches between the largest that fits and the smallest that did not, by today's rule, that no trial
        tried. The search bisects to one sample, but under the rule of its time: the H200 fit ran 8, 16, 12, 14, 15
        (14 fit by the allocator's peak reserved), so once 14 is held to today's rule, 12 fits and 14 does not, and 13
        was never tried; '12 fits, 14 does not' would read as a resolved boundary."""
        nxt = self.smallest_not
        if self.largest is None or nxt is None:
            return []
        return [b for b in range(self.largest + 1, nxt[0]) if b not in {t[0] for t in self.trials}]

    @property
    def errors(self) -> list:
        return [t for t in self.trials if t[1] == ERROR]

    def peak_at(self, batch: Optional[int]) -> Optional[float]:
        return next((p for b, _, p, _ in self.trials if b == batch), None)

    @property
    def capped(self) -> bool:
        """Every batch tried fit and no error ended the search: it stopped at its cap (--max-batch), so its largest is
        a lower bound, not the limit (the H200 fit read 'fits 128' with 15.5 GiB left and no batch out of memory)."""
        return self.largest is not None and self.smallest_not is None and not self.errors

    def mib_per_sample(self) -> Optional[float]:
        """How much the trials' peak grew per sample between the two largest batches that fit, MiB (None: fewer than two
        with a peak, or no growth): what reads the memory a batch beyond the largest tried would take."""
        fit = sorted((b, p) for b, v, p, _ in self.judged if v == FITS and p is not None)
        if len(fit) < 2:
            return None
        (b0, p0), (b1, p1) = fit[-2:]
        return (p1 - p0) / (b1 - b0) if p1 > p0 else None


def is_answer(r: dict) -> bool:
    """A fit's row that did not fit is an answer, not a failed run: a trial that did not error, or a measured run
    (details 'fit') that ran out of memory."""
    if r["mode"] == "fit":
        return verdict(r["status"], r["reason"], 0.0, 1.0) != ERROR
    return r["mode"] == "bench" and _details(r).get("verdict") == OOM


def _details(r: dict) -> dict:
    return json.loads(r["details_json"] or "{}").get("fit") or {}


def _per_node(r: dict) -> int:
    """A results row's ranks per node where it ran on several nodes, else 0 (one node: every rank on it)."""
    nodes = int(r.get("nodes") or 1)
    return int(r["device_count"]) // nodes if nodes > 1 else 0


def searches(rows: list, memory_of: Callable[[int], list], names: dict) -> list:
    """[Search] from a sweep's results rows, in the order the sweep searched them: its trials (mode 'fit'), and the
    measured runs at a search's batches (mode 'bench' with details 'fit'); other rows are passed over. memory_of(
    result_id) -> a run's memory rows; names: strategy -> its name in words."""
    out: dict = {}
    for r in rows:
        d = _details(r) if r["mode"] in ("fit", "bench") and r["status"] != "interrupted" else {}
        if not d.get("search"):   # an interrupted run (no details) is no trial: the page lists it with the problems
            continue
        s = out.get(d["search"])
        if r["mode"] == "bench":
            if s is not None:
                peak = peak_mib(memory_of(r["result_id"]), r["device_type"], _per_node(r)) if r["status"] == "ok" else None
                peak = peak if peak is not None else d.get("peak_mib")
                got = (d.get("verdict") or verdict(r["status"], r["reason"], peak, s.budget_mib), peak)
                b = int(r["per_device_batch"])
                s.measured[b] = _worse(s.measured[b], got) if b in s.measured else got
                if r["status"] != "ok":
                    s.measured_reasons[b] = r["reason"] or ""
                s.bench_keys[b] = r["config_key"]
            continue
        if s is None:
            opts = [f"{k}={v}" for k, v in sorted(json.loads(r["options_json"] or "{}").items())]
            ac = r.get("activation_checkpointing") or "none"
            opts += [f"ac={ac}"] if ac != "none" else []
            rest = [x for x in ((r["precision"] or "fp32"), (r.get("optimizer") or "sgd")) if x not in ("fp32", "sgd")]
            name = f"{names.get(r['strategy'], r['strategy'])} x{r['device_count']}" + (f" ({', '.join(opts)})" if opts else "")
            label = name + (f" [{', '.join(rest)}]" if rest else "")
            s = out[d["search"]] = Search(d["search"], r["workload"], r["strategy"], r["device_type"], int(r["device_count"]),
                                          name, label, (r["precision"] or "fp32", r.get("optimizer") or "sgd"),
                                          float(d.get("budget_mib") or math.nan))
        batch = int(r["per_device_batch"])
        peak = peak_mib(memory_of(r["result_id"]), r["device_type"], _per_node(r)) if r["status"] == "ok" else None
        s.order.append(batch)
        if r["status"] == "ok" and r.get("samples_per_s") is not None:
            s.speeds[batch] = float(r["samples_per_s"])
        s.trials.append((batch, d.get("verdict") or verdict(r["status"], r["reason"], peak, s.budget_mib), peak,
                         r["reason"] or ""))
        s.bench_keys.setdefault(batch, d.get("bench_key", ""))
    for s in out.values():
        s.trials.sort()
    return list(out.values())


def max_batch_of(command_line: str) -> Optional[int]:
    """The --max-batch a fit was given on its stored command line (None: not given, so MAX_BATCH), where the search
    stopped doubling; the report says the search's start and cap from the stored sweep, not from the defaults."""
    try:
        argv = shlex.split(command_line or "")
    except ValueError:
        return None
    for i, a in enumerate(argv):
        value = a.split("=", 1)[1] if a.startswith("--max-batch=") else argv[i + 1] if a == "--max-batch" and i + 1 < len(argv) else None
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None
