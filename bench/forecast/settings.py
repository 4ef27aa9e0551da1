"""The forecast of a stored sweep: for each DDP, FSDP (and ZeRO, HSDP) and DataParallel setting (workload, strategy,
precision and settings), what the model (bench.forecast.step) rests on, said in words, and the forecast at any
count, step time and memory per device. The check against measured counts is bench.forecast.check.

    sets = settings(sweep, raw, unstable)               # sweep: bench.analysis.results.Sweep; raw: {key: forecast_inputs.Raw};
                                                        # unstable: {key: words} of the configurations the analysis calls unstable
    inp = inputs(s, machine, below=None)                # Inputs, or a str: why this setting cannot be forecast
    point(s, inp, count, machine)                       # Point: step_ms, samples/s, efficiency, bound, memory
    series(s, inp, counts, machine, draws=DRAWS)        # [Point], each with its range (bench.forecast.spread)

Sources, nothing of a count at or above `below` (the check's judged count) read:
  compute   a run without gradient communication: DDP's no_sync() probe at its largest allowed count above 1 (plus
            DDP's own gradient work at one rank, its probe's synchronised minus no_sync() blocks at x1, where measured),
            else the strategy's own run at 1 device (its collectives are local copies every count also pays), else
            single at 1 device of the same numerics. FSDP and HSDP at 1 device or single only: their measured steps at a
            larger count hold their collectives, which the model adds again. Scaled to the forecast count's ranks per
            node by the measured co-run slowdown (ranks of a node computing at once).
  buckets   DDP's measured ready times at the allowed counts (bench.rank.buckets), else DDP's construction
  tail      the slowest of N ranks (straggler/jitter): the per-step spread of the compute's own run, each process's
            steps over its own median (bench.forecast.inputs.tail_excess_ms)
  unstable  a compute run (DataParallel: a point of its line) the caller calls unstable (`Setting.unstable`): said
            beside the compute and the straggler/jitter term, which are read from its spread
  bound     no term past its share: the local step, with the caller's measured bound at one device (`Setting.bounds`)
  spreads   what the range draws from: the compute run's processes, the bucket observations, the steps, the peaks
  machine   the network and the interference: the collectives microbenchmark and its interference rows, a
            measurement of the machine apart from any training step (`Machine`: which counts, said by the caller)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional

from bench.forecast import step as fc
from bench.forecast import inputs as fi
from bench.forecast import interference as itf
from bench.forecast import memory as mm
from bench.forecast import network as nw
from bench.forecast import spread
from bench.shared.spec import STRATEGY_NAMES, default_mesh

import numpy as np

COMPRESSED = {"fp16": 0.5, "bf16": 0.5}
TIME_STRATEGIES = ("ddp", "zero", "fsdp", "hsdp", "dp")


@dataclass
class Setting:
    workload: str
    strategy: str
    variant: str
    configs: dict                    # count -> results.Config
    raws: dict                       # config key -> forecast_inputs.Raw
    single: Optional[object] = None  # single at 1 device of the same numerics (the efficiency baseline)
    unstable: dict = field(default_factory=dict)   # config key -> why the analysis calls it unstable (the caller's words)
    bounds: dict = field(default_factory=dict)     # config key at 1 device -> its measured bound (the caller's words)
    host_cores: Optional[int] = None               # the sweep's host: its CPU cores (measured) ...
    threads: Optional[int] = None                  # ... and the threads each process ran with (CPU offload's optimizer)
    batch: str = ""                                # 'at batch 14 a GPU' where the page names it (bench.forecast.batches)

    @property
    def offloaded(self) -> bool:
        """FSDP's CPU offload: the optimizer steps on the host, whose cores a node's ranks share (`host_x`)."""
        return self.strategy in ("fsdp", "hsdp") and str(self.any.options.get("offload", "")) == "cpu"

    @property
    def label(self) -> str:
        return f"{self.workload} {STRATEGY_NAMES.get(self.strategy, self.strategy)} [{self.variant}]"

    @property
    def any(self):
        return next(iter(self.configs.values()))


@dataclass
class Inputs:
    compute: fc.Compute
    per_rank_samples: float
    inter: itf.Interference = field(default_factory=itf.Interference)
    buckets: list = field(default_factory=list)       # [fc.Bucket]
    units: list = field(default_factory=list)         # [(gather bytes, reduce bytes)]
    dp_points: dict = field(default_factory=dict)     # count -> step_ms
    step_ms: list = field(default_factory=list)       # the compute's run's steps (the slowest-rank spread)
    step_firsts: tuple = ()                           # the indices in step_ms of each process's first measured step
    buffer_bytes: float = 0.0
    co_run_base: float = 1.0                          # the co-run slowdown already inside the compute
    own_ms: float = 0.0                               # DDP's own gradient work inside the compute (bucket copies, x1's
                                                      # probe): what a no_sync() step leaves out
    memory: Optional[mm.Base] = None
    words: list = field(default_factory=list)         # what was measured and what assumed
    from_counts: tuple = ()
    # the spreads a range draws from (bench.forecast.spread), and a drawn copy's factors (1.0: the central)
    compute_spread: fi.Spread = field(default_factory=fi.Spread)
    ready_obs: list = field(default_factory=list)     # [[fraction per bucket]] per (repeat, rank, step)
    dp_spreads: dict = field(default_factory=dict)    # count -> fi.Spread of DataParallel's step
    peak_spread: fi.Spread = field(default_factory=fi.Spread)
    co_run_at: tuple = (1, 1)                         # (count, nodes) the compute was measured at
    process_x: object = 1.0                           # a fresh run's luck on the whole step
    memory_x: object = 1.0                            # on the measured peak
    unsteady: str = ""                                # the unstable configuration the compute and tail are read from
    unresolved: str = ""                              # stats.unsteady_words of the efficiency's inputs (its baseline,
                                                      # the compute's run): one unstable process each, '' where none
    local: str = fc.LOCAL                             # the bound when no term beyond the one-device step counts


@dataclass
class Point:
    count: int
    nodes: int
    step_ms: float = math.nan
    samples_per_s: float = math.nan
    efficiency: float = math.nan
    bound: str = ""
    exposed_comm_ms: float = math.nan
    sync_ms: float = 0.0
    algorithm: str = ""
    refused: str = ""
    unsteady: str = ""                               # Inputs.unsteady: the unstable run the figures are read from
    unresolved: str = ""                             # Inputs.unresolved: why its efficiency is not resolved
    optimizer_ms: float = math.nan                   # the optimizer's time per rank here (central) ...
    optimizer_one_ms: float = math.nan               # ... and at one rank: ZeRO and FSDP divide it by the ranks
    basis: str = ""                                  # a measured row's throughput basis ('windows', outlook.WINDOWS);
                                                     # '' for a forecast: its step against single x1's median step
    memory: Optional[mm.Memory] = None
    terms: dict = field(default_factory=dict)        # the step's terms beyond computation (ms): fc.terms
    ranges: dict = field(default_factory=dict)       # 'step_ms' | 'samples_per_s' | 'efficiency' | 'memory_mib' -> (lo, hi)
    draws: dict = field(default_factory=dict)        # the same names -> the draws' values (central left out)

    def range_of(self, name: str) -> tuple:
        return self.ranges.get(name, (math.nan, math.nan))


def options_at(s, count: int, per_node: int) -> dict:
    """The setting's options as they stand at `count`: HSDP's default mesh (one shard group per node: the measured run's
    shard size equal to its devices per node) is min(count, devices per node) there, a shard size the user chose stays.
    Once HSDP x1 and x2 were one series, the forecast priced every count at x1's shard of 1 and its x2 check erred -48%."""
    opts = dict(s.any.options)
    if s.strategy == "hsdp" and default_mesh(opts.get("shard_size"), s.any.device_count // max(1, s.any.nodes)):
        opts["shard_size"] = min(count, per_node)
    return opts


def settings(sweep, raw: dict, unstable: Optional[dict] = None) -> list:
    """Every setting of the sweep the forecast covers, with its configurations by count; unstable: {config key: words}
    for the configurations the caller's analysis calls unstable (the forecast says so where it reads one)."""
    unstable = unstable or {}
    out = []
    cores = min((int(e["cpu_cores"]) for e in getattr(sweep, "envs", []) if e.get("cpu_cores")), default=None)
    threads = getattr(sweep, "threads", [])
    threads = int(threads[0]) if len(threads) == 1 else None     # one figure for every run, else not said
    for workload, configs in sweep.bench.items():
        singles = {c.label: c for c in configs if c.strategy == "single" and c.device_count == 1}
        by: dict = {}
        for c in configs:
            if c.strategy in TIME_STRATEGIES and c.key in raw:
                by.setdefault((c.strategy, c.variant), {})[c.device_count] = c
        for (strategy, variant), cs in sorted(by.items()):
            single = baseline_single(cs.values(), singles)
            raws = {c.key: raw[c.key] for c in cs.values()}
            if single is not None and single.key in raw:
                raws[single.key] = raw[single.key]
            keys = set(raws)
            out.append(Setting(workload, strategy, variant, dict(sorted(cs.items())), raws, single,
                               {k: w for k, w in unstable.items() if k in keys and w}, host_cores=cores,
                               threads=threads))
    return out


def baseline_single(configs, singles: dict):
    """The single device x1 the analysis holds these configurations against: the one whose label is their `baseline`
    (bench.analysis.results picks it by precision, layout, compile, optimizer, activation checkpointing and aux), None
    where it is not a single device x1 (the analysis then falls back to the series' own x1). Read off the label rather
    than keyed here again: a key of its own drifted from the analysis's (it left out activation checkpointing, and a
    sweep with --activation-checkpointing none,full held every setting against single x1 [ac=full], 62% efficiency
    where its own baseline gave 44%), and the forecast may not import the analysis (tests/test_layout.py)."""
    labels = {getattr(c, "baseline", "") for c in configs} - {""}
    return next((singles[b] for b in sorted(labels) if b in singles), None)


def _compute(p: dict) -> fc.Compute:
    return fc.Compute(p["data_ms"], p["forward_ms"], p["backward_ms"], p["optimizer_ms"])


def _source(s: Setting, allowed: dict) -> tuple:
    """(config the compute comes from, phases, words) or (None, None, why)."""
    if s.strategy in ("ddp", "zero"):
        probed = [n for n, c in allowed.items() if n > 1 and s.raws[c.key].no_sync]
        if probed:
            c = allowed[max(probed)]
            return c, s.raws[c.key].no_sync, f"compute: {STRATEGY_NAMES.get(s.strategy, s.strategy)} x{c.device_count} under no_sync() (measured)"
    if 1 in allowed:
        c = allowed[1]
        return c, s.raws[c.key].measured, f"compute: {STRATEGY_NAMES.get(s.strategy, s.strategy)} x1 measured steps (one rank: its collectives are local)"
    if s.single is not None and s.single.key in s.raws:
        c = s.single
        return c, s.raws[c.key].measured, "compute: single device x1 (measured)"
    what = "no run without gradient communication (DDP's probe, or any run at 1 device)"
    return None, None, f"{what} below {min(s.configs)}; a run at 1 device (--gpus 1,...) gives one"


def inputs(s: Setting, machine: "Machine", below: Optional[int] = None):
    """What a forecast of setting s rests on, from its counts below `below` (None: every count). A str when none."""
    allowed = {n: c for n, c in s.configs.items() if below is None or n < below}
    if s.strategy == "dp":
        pts = {n: c.summary.median_ms for n, c in allowed.items()}
        if s.single is not None and 1 not in pts:
            pts[1] = s.single.summary.median_ms
        if len(pts) < 2:
            return f"DataParallel's step is read off a line through two measured counts; {len(pts)} below {below or 'any'}"
        base = allowed[max(allowed)] if allowed else s.single
        configs = {**({1: s.single} if s.single is not None and 1 not in allowed else {}), **allowed}
        shaky = "; ".join(s.unstable[c.key] for n, c in sorted(configs.items()) if n in pts and c.key in s.unstable)
        return Inputs(fc.Compute(0, 0, 0, 0), base.global_batch / base.device_count, dp_points=pts,
                      words=[f"step: a line through the measured steps at {','.join(map(str, sorted(pts)))} device(s)"]
                      + ([f"the line rests on {shaky}"] if shaky else []),
                      from_counts=tuple(sorted(pts)), unsteady=shaky,
                      unresolved=fi.unresolved(s, [c for n, c in sorted(configs.items()) if n in pts]),
                      dp_spreads={n: s.raws[c.key].spreads.get("measured", fi.Spread()) for n, c in configs.items()
                                  if c.key in s.raws})
    base, ph, said = _source(s, allowed)
    if base is None:
        return said
    raw = s.raws[base.key]
    compute = _compute(ph)
    words = [said]
    unsteady = s.unstable.get(base.key, "")
    if unsteady:
        words.append(f"the compute and the straggler/jitter term rest on {unsteady}")
    measured = s.bounds.get(base.key, "") if base.device_count == 1 else ""
    if measured:
        words.append(f"the step on one device: {measured}, measured on {getattr(base, 'label', 'its run')}")
    one = allowed.get(1)
    own = None   # DDP's own gradient work at one rank: x1's probe, synchronised blocks against no_sync() ones
    if one is not None and s.raws[one.key].sync and s.raws[one.key].no_sync:
        own = max(0.0, s.raws[one.key].sync["backward_ms"] - s.raws[one.key].no_sync["backward_ms"])
    if ph is raw.no_sync and own is not None:
        compute = replace(compute, backward_ms=compute.backward_ms + own)
        words.append(f"DDP's own gradient work at one rank (bucket copies): {own:.2f} ms (x1's probe, measured)")
    inter = for_setting(s, machine).inter   # the co-run of this model's bytes, where measured per model
    inp = Inputs(compute, base.global_batch / base.device_count, inter=inter, step_ms=raw.step_ms,
                 step_firsts=raw.step_firsts,
                 buffer_bytes=raw.buffer_bytes if s.strategy in ("ddp", "zero") else 0.0,
                 co_run_base=inter.co_run_x(base.device_count, base.nodes), words=words, from_counts=(base.device_count,),
                 compute_spread=raw.spreads.get("no_sync" if ph is raw.no_sync else "measured", fi.Spread()),
                 co_run_at=(base.device_count, base.nodes),
                 own_ms=own if own is not None and (ph is raw.no_sync or base is one) else 0.0,
                 unsteady=unsteady, local=fc.local_bound(measured), unresolved=fi.unresolved(s, [base]))
    inp.words.append(inter.words())
    inp.words.append(fi.tail_words(len(raw.step_ms), f"x{base.device_count}"))
    grad_bytes = (s.any.grad_mib or 0) * 2**20
    opts = s.any.options
    if s.strategy in ("ddp", "zero"):
        hook = str(opts.get("comm_hook", "none")).split(":")[0]
        if hook == "powersgd":
            return "PowerSGD's low-rank all-reduces are not modelled"
        stored = next((s.raws[c.key].buckets for c in [base] + [allowed[n] for n in sorted(allowed, reverse=True)]
                       if c.key in s.raws and s.raws[c.key].buckets), [])
        factor = COMPRESSED.get(hook, 1.0)
        if stored:
            inp.buckets = [fc.Bucket(size * factor, fr) for size, fr in stored]
            inp.ready_obs = next(s.raws[c.key].ready for c in [base] + [allowed[n] for n in sorted(allowed, reverse=True)]
                                 if c.key in s.raws and s.raws[c.key].buckets)
            inp.words.append(f"buckets: {len(stored)} measured (" + ", ".join(f"{sz / 2**20:.1f} MiB at {fr:.0%}" for sz, fr in stored)
                             + " of backward)")
        else:
            cap = float(opts.get("bucket_cap_mb") or 25.0)
            inp.buckets = [fc.Bucket(b.size_bytes * factor, b.ready_fraction) for b in fc.default_buckets(grad_bytes, cap)]
            inp.words.append(f"buckets: assumed, none stored (DDP's construction: 1 MiB, then {cap:g} MiB, ready as "
                             f"the gradient bytes are produced)")
        if factor != 1.0:
            inp.words.append(f"{hook} compression hook: half the bytes on the wire")
        if raw.buffer_bytes:
            inp.words.append(f"buffers: {raw.buffer_bytes / 2**20:.2f} MiB broadcast before each forward (a ring "
                             "broadcast on the network's all-reduce fit: assumed)")
    else:
        units = next((r.units for r in s.raws.values() if r.units), [])
        gather = 0.5 if opts.get("mixed_precision") == "bf16" else 1.0
        if units:
            inp.units = [(u * gather, u) for u in units]
            inp.words.append(f"FSDP units: {len(units)} measured ({sum(units) / 2**20:.1f} MiB)")
        else:
            inp.units = [(grad_bytes * gather, grad_bytes)]
            inp.words.append("FSDP units: assumed, none stored (all parameters in one unit)")
        inp.words.append(fi.host_words(s) if s.offloaded else
                         "optimizer: on this rank's shard, its time divided by the ranks (assumed)")
    sized = ([("all_reduce", max(b.size_bytes for b in inp.buckets))] if inp.buckets else
             [(op, max(u[i] for u in inp.units)) for i, op in enumerate(("all_gather", "reduce_scatter"))] if inp.units
             else [])
    inp.words += [w for w in (itf.anchor_words(machine.net, inter, op, size) for op, size in sized) if w]
    if allowed:  # memory: the strategy's own smallest allowed count (its activations measured there)
        c = allowed[min(allowed)]
        r = s.raws[c.key]
        units = next((x.units for x in s.raws.values() if x.units), [])
        inp.memory = mm.base_of(s.strategy, c.device_count, opts, r.state_mib, r.peak_mib, r.peak_method, units,
                                c.device_type, c.global_batch / c.device_count, r.runtime_mib)
        inp.peak_spread = r.peaks
    return inp


def series(s: Setting, inp: Inputs, counts: tuple, machine: Machine, draws: int = 0) -> list:
    """[Point] at each count; with draws, each with its range (bench.forecast.spread: the same draws at every count)."""
    machine = for_setting(s, machine)
    if draws:
        inp, machine = spread.draw(inp, machine, draws)
    return [point(s, inp, n, machine) for n in counts]


def for_setting(s: Setting, machine: "Machine") -> "Machine":
    """The machine with the co-run measured for this setting's model bytes (bench.forecast.interference.for_state)."""
    return replace(machine, inter=machine.inter.for_state((s.any.grad_mib or 0) * 2**20))


@dataclass
class Machine:
    """The machine under a forecast: its network, its interference, the devices per node, and whence."""
    net: nw.Network
    inter: itf.Interference
    counts: tuple = ()               # the counts whose machine measurements these are
    words: str = ""

    @property
    def gpus_per_node(self) -> int:
        return self.net.gpus_per_node


def point(s: Setting, inp: Inputs, count: int, machine: Machine) -> Point:
    """The forecast at `count`: its central figures, and where inp and machine are drawn (bench.forecast.spread) the
    range of each over the draws."""
    net = machine.net
    nodes = math.ceil(count / net.gpus_per_node)
    p = Point(count=count, nodes=nodes, unsteady=inp.unsteady, unresolved=inp.unresolved)
    scaling = s.any.scaling
    if scaling == "strong":
        samples = s.any.global_batch / count
        compute = inp.compute.scaled(samples / inp.per_rank_samples)
    else:
        samples, compute = inp.per_rank_samples, inp.compute
    if s.strategy == "dp":
        if nodes > 1:
            p.refused = "DataParallel is one process driving the devices of one node: it cannot span nodes"
            return p
        step = fc.Step(count, fc.linear_in_count(inp.dp_points)(count), fc.Compute(0, 0, 0, 0), 0.0, 0.0)
    else:
        compute = compute.slowed(machine.inter.co_run_x(count, nodes) / inp.co_run_base)
        # the slowest of N ranks: the measured spread's tail, relative to its own median step, on this compute
        steps = np.asarray(inp.step_ms, dtype=float)
        sync = (fi.tail_excess_ms(steps, count) * compute.total_ms / np.median(steps, axis=-1)) if steps.size else 0.0
        opts = options_at(s, count, net.gpus_per_node)
        inter = machine.inter
        if s.strategy in ("ddp", "zero"):
            if s.strategy == "zero":  # the optimizer on this rank's shard, then every rank's shard broadcast
                p.optimizer_one_ms = fc.central(compute.optimizer_ms)
                compute = replace(compute, optimizer_ms=compute.optimizer_ms / count)
                p.optimizer_ms = fc.central(compute.optimizer_ms)
            step = fc.forecast_ddp(compute, inp.buckets, net, count, inter, sync, inp.buffer_bytes)
            if s.strategy == "zero" and count > 1:
                extra = nw.allgather_ms(net, (s.any.params or 0) * 4, count)
                step.step_ms = step.step_ms + extra
                step.exposed_comm_ms = step.exposed_comm_ms + extra
        else:
            shard = int(opts.get("shard_size") or count) if s.strategy == "hsdp" else count
            p.optimizer_one_ms = fc.central(compute.optimizer_ms)
            compute = replace(compute, optimizer_ms=compute.optimizer_ms * fi.host_x(s, count, net.gpus_per_node))
            p.optimizer_ms = fc.central(compute.optimizer_ms) / max(1, min(shard, count))
            step = fc.forecast_fsdp(compute, inp.units, net, min(shard, count), inter, bool(opts.get("reshard", True)), sync)
            if s.strategy == "hsdp" and count > shard:  # the shards' gradients all-reduced across the replicas
                extra = nw.allreduce_ms(net, sum(r for _, r in inp.units) / shard, count // shard)
                step.step_ms = step.step_ms + extra
                step.exposed_comm_ms = step.exposed_comm_ms + extra
        if inp.memory is not None:
            p.memory = mm.per_device(inp.memory, s.strategy, count, opts, scaling, samples)
    step_ms = step.step_ms * inp.process_x
    p.terms = fc.terms(step)
    p.step_ms, p.exposed_comm_ms, p.algorithm = fc.central(step_ms), fc.central(step.exposed_comm_ms), step.algorithm
    p.sync_ms = fc.central(step.sync_ms)
    p.bound = "DataParallel: linear in the count" if s.strategy == "dp" else fc.bound_of(step, inp.local)
    step_s = np.asarray(step_ms, dtype=float) / 1e3
    # samples/s only where a step has a time (np.where would divide by zero first, and warn)
    sps = np.divide(samples * count, step_s, out=np.full(np.shape(step_s), np.nan), where=step_s > 0)
    base = math.nan
    if s.single is not None and s.single.summary.median_ms > 0:  # steps against steps (the forecast has no windows)
        base = s.single.global_batch / (s.single.summary.median_ms / 1e3)
    eff = np.asarray(sps) / (count * base) if base > 0 else np.full(np.shape(sps), np.nan)   # weak or strong alike: throughput is the measure
    p.samples_per_s, p.efficiency = fc.central(sps), fc.central(eff)
    figures = {"step_ms": step_ms, "samples_per_s": sps, "efficiency": eff}
    if p.memory is not None and np.ndim(inp.memory_x):
        rest = inp.memory.rest_mib
        share = p.memory.parts["activations and the rest (measured)"] / rest if rest else 1.0
        figures["memory_mib"] = p.memory.device_mib + inp.memory.peak_mib * (np.asarray(inp.memory_x) - 1) * share
    for name, v in figures.items():
        if np.ndim(v) and np.shape(v)[0] > 2:
            p.ranges[name] = spread.interval(v)
            p.draws[name] = np.asarray(v, dtype=float)[1:]
    return p


def on_cpu(settings) -> bool:
    """Whether every setting ran on CPU: the forecast section, its plots and the terminal's forecast read it alike."""
    return all(getattr(s.any, "device_type", "cuda") == "cpu" for s in settings)
