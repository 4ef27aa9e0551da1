"""The forecast of a stored sweep: for each DDP, FSDP and DataParallel setting (workload, strategy, precision and
settings), what the model (bench.analysis.forecast) rests on, said in words, the forecast at any count, and the
check against every measured count from the smaller counts alone.

    sets = settings(sweep, raw)                      # sweep: bench.analysis.results.Sweep; raw: store.forecasts.read_inputs
    inp = inputs(s, below=None)                      # Inputs, or a str: why this setting cannot be forecast
    point(s, inp, count, net)                        # Point: step_ms, samples/s, efficiency, bound
    checks = validate(s, measured_levels, preset, explicit, created_at, own)   # [dict]: forecast from smaller counts vs measured

Sources: DDP's compute is the setting's own run at the largest count allowed, under no_sync() (the probe's
blocks: compute without gradient communication) or, at one device, its measured steps (whose collectives are
local copies every count also pays); where the setting was not run at an allowed count, single at 1 device of
the same numerics. FSDP's compute is its run at the smallest count (one rank: its collectives are local). The
buckets and units are the stored ones (bench.rank.buckets), else DDP's by construction. The check's network is
fitted from the collectives microbenchmark rows (every count, the target's included: it is a separate
measurement of the network alone; all-gather and reduce-scatter their own where measured, `own`); its compute
only from counts below the target.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from bench.analysis import forecast as fc
from bench.analysis import network as nw

CHECK_TARGET = 0.10                  # errors beyond 10% are called out, with what the model left out
COMPRESSED = {"fp16": 0.5, "bf16": 0.5}


@dataclass
class Setting:
    workload: str
    strategy: str
    variant: str
    configs: dict                    # count -> results.Config
    raws: dict                       # config key -> store.forecasts.Raw
    single: Optional[object] = None  # single at 1 device of the same numerics (the efficiency baseline)

    @property
    def label(self) -> str:
        return f"{self.workload} {self.strategy.upper() if self.strategy != 'dp' else 'DataParallel'} [{self.variant}]"

    @property
    def any(self):
        return next(iter(self.configs.values()))


@dataclass
class Inputs:
    compute: fc.Compute
    per_rank_samples: float
    buckets: list = field(default_factory=list)       # [fc.Bucket]
    units: list = field(default_factory=list)         # [(gather bytes, reduce bytes)]
    dp_points: dict = field(default_factory=dict)     # count -> step_ms
    overlap: bool = True
    words: list = field(default_factory=list)         # what was measured and what assumed
    from_counts: tuple = ()


@dataclass
class Point:
    count: int
    nodes: int
    step_ms: float = math.nan
    samples_per_s: float = math.nan
    efficiency: float = math.nan
    bound: str = ""
    exposed_comm_ms: float = math.nan
    algorithm: str = ""
    refused: str = ""


def settings(sweep, raw: dict) -> list:
    """Every DDP, FSDP and DataParallel setting of the sweep with its configurations by count."""
    out = []
    for workload, configs in sweep.bench.items():
        singles = {(c.precision, c.channels_last, c.compiled): c for c in configs if c.strategy == "single" and c.device_count == 1}
        by: dict = {}
        for c in configs:
            if c.strategy in ("ddp", "fsdp", "dp") and c.key in raw:
                by.setdefault((c.strategy, c.variant), {})[c.device_count] = c
        for (strategy, variant), cs in sorted(by.items()):
            any_c = next(iter(cs.values()))
            single = singles.get((any_c.precision, any_c.channels_last, any_c.compiled))
            raws = {c.key: raw[c.key] for c in cs.values()}
            if single is not None and single.key in raw:
                raws[single.key] = raw[single.key]
            out.append(Setting(workload, strategy, variant, dict(sorted(cs.items())), raws, single))
    return out


def _compute(p: dict) -> fc.Compute:
    return fc.Compute(p["data_ms"], p["forward_ms"], p["backward_ms"], p["optimizer_ms"])


def inputs(s: Setting, below: Optional[int] = None):
    """What a forecast of setting s rests on, from its counts below `below` (None: every count). A str when none."""
    allowed = {n: c for n, c in s.configs.items() if below is None or n < below}
    overlap = s.any.device_type == "cuda"
    words = [] if overlap else ["CPU/gloo: collectives share the cores with backward, so none overlaps (the no-overlap bound)"]
    if s.strategy == "dp":
        pts = {n: c.summary.median_ms for n, c in allowed.items()}
        if s.single is not None and 1 not in pts:
            pts[1] = s.single.summary.median_ms
        if len(pts) < 2:
            return f"DataParallel's step is read off a line through two measured counts; {len(pts)} below {below or 'any'}"
        base = s.configs[max(allowed)] if allowed else s.single
        return Inputs(fc.Compute(0, 0, 0, 0), base.global_batch / base.device_count, dp_points=pts, overlap=overlap,
                      words=[f"step: a line through the measured steps at {','.join(map(str, sorted(pts)))} device(s)"],
                      from_counts=tuple(sorted(pts)))
    if s.strategy == "ddp":
        base = allowed[max(allowed)] if allowed else None
    else:
        base = allowed[min(allowed)] if allowed else None
    if base is None:
        base = s.single
        if base is None or (below is not None and base.device_count >= below):
            return f"no {s.strategy.upper()} run below {below} and no single-device run to take the compute from"
        words.append(f"compute: single device x1 (measured; no {s.strategy.upper()} run below {below})")
    raw = s.raws[base.key]
    if s.strategy == "ddp" and base.strategy == "ddp" and base.device_count > 1 and raw.no_sync:
        compute = _compute(raw.no_sync)
        words.append(f"compute: DDP x{base.device_count} under no_sync() (measured)")
    else:
        compute = _compute(raw.measured)
        if base.strategy == s.strategy:
            words.append(f"compute: {s.strategy.upper()} x{base.device_count} measured steps"
                         + (" (one rank: its collectives are local copies)" if base.device_count == 1 else ""))
    inp = Inputs(compute, base.global_batch / base.device_count, overlap=overlap, words=words, from_counts=(base.device_count,))
    grad_bytes = (s.any.grad_mib or 0) * 2**20
    opts = s.any.options
    if s.strategy == "ddp":
        hook = str(opts.get("comm_hook", "none")).split(":")[0]
        if hook == "powersgd":
            return "PowerSGD's low-rank all-reduces are not modelled"
        stored = next((r.buckets for r in (s.raws.get(c.key) for c in [base] + list(s.configs.values())) if r and r.buckets), [])
        factor = COMPRESSED.get(hook, 1.0)
        if stored:
            inp.buckets = [fc.Bucket(size * factor, fr) for size, fr in stored]
            inp.words.append(f"buckets: {len(stored)} measured (" + ", ".join(f"{sz / 2**20:.1f} MiB at {fr:.0%}" for sz, fr in stored)
                             + " of backward)")
        else:
            cap = float(opts.get("bucket_cap_mb") or 25.0)
            inp.buckets = [fc.Bucket(b.size_bytes * factor, b.ready_fraction) for b in fc.default_buckets(grad_bytes, cap)]
            inp.words.append(f"buckets: assumed, none stored (DDP's construction: 1 MiB, then {cap:g} MiB, ready as "
                             f"the gradient bytes are produced)")
        if factor != 1.0:
            inp.words.append(f"{hook} compression hook: half the bytes on the wire")
    else:
        units = next((r.units for r in s.raws.values() if r.units), [])
        gather = 0.5 if opts.get("mixed_precision") == "bf16" else 1.0
        if units:
            inp.units = [(u * gather, u) for u in units]
            inp.words.append(f"FSDP units: {len(units)} measured ({sum(units) / 2**20:.1f} MiB)")
        else:
            inp.units = [(grad_bytes * gather, grad_bytes)]
            inp.words.append("FSDP units: assumed, none stored (all parameters in one unit)")
    return inp


def regroup(buckets: list, cap_bytes: float) -> list:
    """The same gradients in buckets of up to cap_bytes (what a bigger bucket_cap_mb would make): consecutive
    buckets merge, ready when the last of them is."""
    out, size, ready = [], 0.0, 0.0
    for b in buckets:
        if size and size + b.size_bytes > cap_bytes:
            out.append(fc.Bucket(size, ready))
            size = 0.0
        size, ready = size + b.size_bytes, b.ready_fraction
    if size:
        out.append(fc.Bucket(size, ready))
    return out


def point(s: Setting, inp: Inputs, count: int, net: nw.Network) -> Point:
    nodes = math.ceil(count / net.gpus_per_node)
    p = Point(count=count, nodes=nodes)
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
    elif s.strategy == "ddp":
        step = fc.forecast_ddp(compute, inp.buckets, net, count, inp.overlap)
    else:
        step = fc.forecast_fsdp(compute, inp.units, net, count, inp.overlap, bool(s.any.options.get("reshard", True)))
    p.step_ms, p.exposed_comm_ms, p.algorithm = step.step_ms, step.exposed_comm_ms, step.algorithm
    p.bound = "DataParallel: linear in the count" if s.strategy == "dp" else fc.bound_of(step)
    p.samples_per_s = samples * count / (step.step_ms / 1e3) if step.step_ms > 0 else math.nan
    base = s.single.samples_per_s if s.single is not None else math.nan
    if s.single is not None and s.single.summary.median_ms > 0:  # steps against steps (the forecast has no windows)
        base = s.single.global_batch / (s.single.summary.median_ms / 1e3)
    p.efficiency = fc.efficiency(p.samples_per_s, base, count, scaling)
    return p


def check_network(measured: dict, preset, explicit: dict, target, own: tuple = ()) -> nw.Network:
    """The network of a measured configuration: its own topology, the measured levels first."""
    g = max(1, target.device_count // max(1, target.nodes))
    return nw.network_for(measured, preset, {k: v for k, v in explicit.items() if k not in measured}, g,
                          "nccl" if target.device_type == "cuda" else "gloo", own=own)


def validate(s: Setting, measured: dict, preset, explicit: dict, created_at: str, own: tuple = ()) -> list:
    """One row per measured count above the smallest: the forecast from the smaller counts alone beside it."""
    rows = []
    counts = sorted(s.configs)
    smallest = min(counts + ([1] if s.single is not None else []))
    for n in counts:
        if n <= smallest:
            continue
        target = s.configs[n]
        inp = inputs(s, below=n)
        row = {"config_key": target.key, "workload": s.workload, "strategy": s.strategy, "variant": s.variant,
               "device_count": n, "measured_step_ms": target.summary.median_ms,
               "measured_samples_per_s": target.samples_per_s, "created_at": created_at}
        if isinstance(inp, str):
            rows.append({**row, "from_counts": "", "why": inp})
            continue
        net = check_network(measured, preset, explicit, target, own)
        p = point(s, inp, n, net)
        err = p.step_ms / target.summary.median_ms - 1
        words = "; ".join(nw.collective_words(net)) if s.strategy == "fsdp" else ""
        row.update(from_counts=",".join(map(str, inp.from_counts)), forecast_step_ms=p.step_ms, error=err,
                   forecast_samples_per_s=p.samples_per_s,
                   network=(f"node: {net.node.source}; net: {net.net.source}" if net.gpus_per_node < n
                            else f"node: {net.node.source}") + (f"; {words}" if words else ""))
        mine = s.raws[target.key].no_sync if s.strategy == "ddp" else None
        if mine:
            row["compute_error"] = (inp.compute.total_ms - mine["step_ms"]) / target.summary.median_ms
        again = s.raws[target.key].sync if s.strategy == "ddp" else None
        row["noise"] = again["step_ms"] / target.summary.median_ms - 1 if again else None
        row["settling"] = settling(target.step_ms)
        measured_ops = {op for op, _, _ in net.own} == set(nw.OWN_FIT)
        row["why"] = why(row, inp, mine, s.any.device_type, measured_ops) if abs(err) > CHECK_TARGET else ""
        rows.append(row)
    return rows


def settling(step_ms: list) -> float:
    """How much slower the first quarter of the measured steps ran than the rest (medians): a warm-up too short
    leaves the window's start slower. nan with fewer than 8 steps."""
    if len(step_ms) < 8:
        return math.nan
    q = len(step_ms) // 4
    head, rest = sorted(step_ms[:q]), sorted(step_ms[q:])
    return head[len(head) // 2] / rest[len(rest) // 2] - 1


def why(row: dict, inp: Inputs, own: Optional[dict], device_type: str, collectives_measured: bool = False) -> str:
    """What the model left out, read off the measured configuration (only to explain, never to forecast); own: the
    target's own compute under no_sync (DDP); collectives_measured: FSDP's all-gather and reduce-scatter had their
    own fits."""
    m, f = row["measured_step_ms"], row["forecast_step_ms"]
    parts = []
    if own:
        fc_ms, mc_ms = inp.compute.total_ms, own["step_ms"]
        parts.append(f"compute without gradient sync was {mc_ms:.1f} ms at x{row['device_count']} against {fc_ms:.1f} ms "
                     f"at x{row['from_counts']}" + (" (the ranks share this machine's cores and memory bandwidth, and "
                                                    "whatever else runs on it: the smaller counts cannot show that)"
                                                    if device_type == "cpu" and mc_ms > fc_ms * 1.05 else ""))
        parts.append(f"communication added {m - mc_ms:.1f} ms to the step against {f - fc_ms:.1f} ms from the "
                     f"microbenchmark" + (" (gloo's collectives inside a step compete with backward for the cores; "
                                          "the microbenchmark ran them alone)" if device_type == "cpu" and m - mc_ms > f - fc_ms else ""))
    if row.get("noise") is not None and abs(row["noise"]) > CHECK_TARGET / 2:
        parts.append(f"the measurement itself moved: the same step in the probe's synchronised blocks, later in the same "
                     f"processes, took {row['noise']:+.0%} against the measured window (load on the machine)")
    if not math.isnan(row.get("settling", math.nan)) and row["settling"] > CHECK_TARGET:
        parts.append(f"the first quarter of the measured steps ran {row['settling']:+.0%} slower than the rest "
                     f"(a longer --warmup settles it)")
    if row["strategy"] == "fsdp" and collectives_measured:
        parts.append("FSDP2's per-unit copy-in/copy-out and sharded optimizer work are outside the model (its "
                     "all-gathers and reduce-scatters cost what the microbenchmark measured them at, run alone)")
    elif row["strategy"] == "fsdp":
        parts.append("FSDP2's per-unit copy-in/copy-out and sharded optimizer work are outside the model, and its "
                     "all-gathers and reduce-scatters were assumed half an all-reduce (none measured; on gloo they "
                     "are slower)")
    return "; ".join(parts)
