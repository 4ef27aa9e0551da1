"""Memory per device at any count, for every strategy, from what the sweep counted and measured (pure: no store).

    base = base_of(raw, config)                      # Base: the state one rank held at the measured count, and the rest
    m = per_device(base, "fsdp", count, options)     # Memory: the breakdown (MiB) and its total
    fit_words(points, budget_mib, strategy, name, highs=None)   # 'fits in the GPU's 79.18 GiB at every count'
    budget(sweep, given_gib) -> (MiB, TYPED | SWEPT | GPU | '')   # the budget the report and the forecast hold to
    budget_text(mib)                                 # '79.18 GiB', '431 MiB': the one format of a budget on a page

Terms (MiB per device), each from the sweep's own measurements (bench.rank.memory counts the state from the tensors
each rank holds; the peak is the allocator's on CUDA, the peak RSS less the process's RSS before its model on CPU):
    parameters P, gradients G, optimizer state O    counted at the measured count, unsharded by its shard count
    DDP's gradient buckets Bk                       counted (0 with gradient_as_bucket_view: the gradients are views)
    activations and the rest A                      the measured peak less the counted state, at the measured count
                                                    (activations, workspaces, the runtime's own), the same per device
                                                    at every count with weak scaling, in proportion to the samples
                                                    each rank holds with strong scaling
    FSDP's gathered units                           the root's unit (never resharded after forward) and two others
                                                    gathered at once (one unit of prefetch), plus the largest unit's
                                                    unsharded gradients before its reduce-scatter; without
                                                    resharding, every unit stays gathered from forward to backward
Per strategy at n devices (s: HSDP's shard size, the devices it shards over):
    single, dp, ddp     P + G + O + Bk + A                 (DataParallel's device 0 holds more: its gathered outputs)
    zero                P + G + O / n + Bk + A             (ZeroRedundancyOptimizer shards the optimizer state)
    fsdp                (P + G + O) / n + gathered + A
    hsdp                (P + G + O) / s + gathered + A
On CUDA what runs out is the device level: the CUDA context, NCCL's buffers and the allocator's cache beside the
tensors. Where nvidia-smi's process level was measured (bench.rank.memory) its excess over the allocator's peak is
carried as it was measured (`runtime_mib`; NCCL's buffers grow with its peers, which this does not model) and the
device level (`Memory.device_mib`) is what the budget holds; the check holds the allocator's peak to the forecast's.
On CPU the process's RSS before its model (the interpreter, torch's libraries) is carried the same way (`runtime_mib`):
the device level is then the largest rank's peak RSS, the figure the report's memory section shows and its budget holds,
and the check holds the rise over that baseline to the forecast's.
On CPU the peak RSS cannot be reset after the model is built, so a rank's RSS peak holds the whole model once
however it is sharded later (FSDP, HSDP build it whole, then shard): the check's forecast on CPU is the larger of the
steady state and that construction floor (P + A), said so.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Optional

from bench.shared.spec import STRATEGY_NAMES

SHARDED = {"single": 1, "dp": 1, "ddp": 1, "zero": 1}      # parameters, gradients unsharded; fsdp/hsdp: by the shard


@dataclass(frozen=True)
class Base:
    """One rank's memory at the measured count, unsharded where the strategy shards."""
    count: int
    strategy: str
    params_mib: float
    grads_mib: float
    optimizer_mib: float
    buckets_mib: float
    rest_mib: float                  # the measured peak less the counted state: activations and everything else
    units_mib: tuple = ()            # FSDP's units (forward order, the root first), unsharded parameter MiB
    method: str = ""
    device_type: str = "cpu"
    samples: float = 0.0             # samples per rank at the measured count (strong scaling scales A)
    peak_mib: float = 0.0            # the measured peak the rest was read from
    runtime_mib: Optional[float] = None   # CUDA: the device level beyond the allocator's peak (context, NCCL, cache);
                                          # CPU: the process's RSS before its model


@dataclass
class Memory:
    count: int
    parts: dict = field(default_factory=dict)        # term -> MiB
    floor_mib: float = 0.0                           # CPU: the whole model once, before sharding (RSS peak)
    runtime_mib: float = 0.0                         # CUDA: the context, NCCL's buffers, the allocator's cache;
                                                     # CPU: the process's RSS before its model

    @property
    def total_mib(self) -> float:
        """The allocator's steady state (CPU: the RSS over the baseline): what the check holds the measured peak to."""
        return sum(self.parts.values())

    @property
    def device_mib(self) -> float:
        """The device level (CUDA: the CUDA context and NCCL's buffers included; CPU: the peak RSS, the pre-model RSS
        included): what runs out, held to the budget. On CPU at least the construction floor: a sharded rank's RSS
        peak holds the whole model once (review: FSDP x8 on CPU read its shards' steady state and 'fits' under a
        budget its construction peak passes)."""
        return self.checked_mib + self.runtime_mib

    @property
    def checked_mib(self) -> float:
        """What the measured peak is held against: the steady state, or on CPU at least the construction floor."""
        return max(self.total_mib, self.floor_mib)


def shards(strategy: str, count: int, options: dict) -> int:
    """Over how many devices the parameters, gradients and optimizer state of `strategy` are sharded."""
    if strategy == "fsdp":
        return count
    if strategy == "hsdp":
        return int(options.get("shard_size") or count)
    return 1


def base_of(strategy: str, count: int, options: dict, state: dict, peak_mib: Optional[float], method: str,
            units_bytes: list, device_type: str, samples: float, runtime_mib: Optional[float] = None) -> Optional[Base]:
    """The Base of a configuration from its counted state and measured peak; None without both."""
    if not state or peak_mib is None or not all(k in state for k in ("params_mib", "grads_mib", "optimizer_mib")):
        return None
    k = shards(strategy, count, options)          # parameters and gradients held 1/k per rank
    p, g = state["params_mib"] * k, state["grads_mib"] * k
    o = state["optimizer_mib"] * (count if strategy == "zero" else k)   # ZeRO shards the optimizer state over all
    bk = state.get("buckets_mib", 0.0) or 0.0
    gathered = _gathered([u / 2**20 for u in units_bytes], p, g, k, options) if strategy in ("fsdp", "hsdp") else 0.0
    counted = state["params_mib"] + state["grads_mib"] + state["optimizer_mib"] + bk + gathered
    return Base(count, strategy, p, g, o, bk, max(0.0, peak_mib - counted), tuple(u / 2**20 for u in units_bytes),
                method, device_type, samples, peak_mib, runtime_mib)


def _gathered(units_mib: list, params_mib: float, grads_mib: float, k: int, options: dict) -> float:
    """FSDP's unsharded parameters and gradients held at once (module docstring); 0 on one device (nothing sharded)."""
    if k <= 1:
        return 0.0
    units = units_mib or [params_mib]
    grad_share = grads_mib / params_mib if params_mib else 1.0
    if not bool(options.get("reshard", True)):
        return params_mib + max(units) * grad_share
    root, others = units[0], sorted(units[1:], reverse=True)
    return root + sum(others[:2]) + max(units) * grad_share


def per_device(base: Base, strategy: str, count: int, options: dict, scaling: str = "weak",
               samples: Optional[float] = None) -> Memory:
    """The memory per device of `strategy` at `count` devices (module docstring)."""
    k = shards(strategy, count, options)
    rest = base.rest_mib * ((samples / base.samples) if scaling == "strong" and samples and base.samples else 1.0)
    parts = {"parameters": base.params_mib / k, "gradients": base.grads_mib / k,
             "optimizer state": base.optimizer_mib / (count if strategy == "zero" else k)}
    if strategy in ("ddp", "zero"):
        parts["DDP buckets"] = base.buckets_mib
    if strategy in ("fsdp", "hsdp"):
        parts["gathered units"] = _gathered(list(base.units_mib), base.params_mib, base.grads_mib, k, options)
    parts["activations and the rest (measured)"] = rest
    floor = base.params_mib + rest if base.device_type == "cpu" and k > 1 else 0.0
    return Memory(count, parts, floor, base.runtime_mib or 0.0)


def fits(memory: Memory, budget_mib: Optional[float]) -> Optional[bool]:
    return None if budget_mib is None or math.isnan(budget_mib) else memory.device_mib <= budget_mib


def budget_text(mib: Optional[float]) -> str:
    """'79.18 GiB', '16.00 GiB', '431 MiB', '–': a size as the report writes its peaks and every budget (GiB with two
    decimals, under 1 GiB in MiB). One format for the budget on a page: its frontier read 'within 79.18 GiB per GPU'
    above a forecast that read 'fits in the GPU's 79.2 GiB'."""
    if mib is None or math.isnan(mib):
        return "–"
    return f"{mib / 1024:.2f} GiB" if abs(mib) >= 1024 else f"{mib:.0f} MiB"


GPU_MEMORY_TOLERANCE_MIB = 16.0   # a sweep's stored budget this close to the GPU's memory is the GPU's (module: budget)
TYPED, SWEPT, GPU = "typed", "sweep", "gpu"   # where a budget comes from (`budget`)


def device_memory_mib(sweep) -> Optional[float]:
    """The smallest GPU memory (MiB, nvidia-smi's total) of the sweep's environments; None where none was recorded."""
    gpus = [g for e in sweep.envs for g in (json.loads(e.get("json") or "{}").get("gpus") or [])]
    sizes = [g.get("memory_total_mib") for g in gpus]
    sizes = [float(x) for x in sizes if x]
    return min(sizes) if sizes else None


def budget(sweep, given_gib: Optional[float] = None) -> tuple:
    """(MiB per device or None, where it comes from: TYPED, SWEPT, GPU or ''): the budget the report and the forecast
    hold memory to, one rule for both. The one typed (report or forecast --memory-budget-gib), else the sweep's own
    --memory-budget-gib, else on CUDA the smallest GPU's memory; on CPU none unless given. A CUDA sweep without the flag
    stores the GPU's memory as its budget, rounded to 0.01 GiB (bench.sweep.resolve, from torch's total): within
    GPU_MEMORY_TOLERANCE_MIB of nvidia-smi's total it is the GPU's, and the GPU's figure is held. Written twice before,
    the page's table held such a sweep to the stored 79.18 GiB and its forecast to the GPU's 81079 MiB, up to 16 MiB
    apart; a CPU sweep on a host with a GPU had its forecast held to that GPU's memory, its table to none."""
    if given_gib:
        return given_gib * 1024, TYPED
    cuda = any(getattr(c, "device_type", "") == "cuda" for cs in sweep.bench.values() for c in cs)
    gpu = device_memory_mib(sweep) if cuda else None
    swept = json.loads(sweep.sweep.get("config_json") or "{}").get("memory_budget_gib")
    if swept and not (gpu and abs(swept * 1024 - gpu) < GPU_MEMORY_TOLERANCE_MIB):
        return swept * 1024, SWEPT
    return (gpu, GPU) if gpu else (None, "")


def fit_words(points: list, budget_mib: Optional[float], strategy: str, name: str = "", per_node: int = 0,
              highs: Optional[dict] = None) -> str:
    """'fits in NAME at every count' / 'fits from N devices' / 'does not fit up to N', over [Memory] in count order.
    name: which budget it is ("the sweep's 16.00 GiB budget", "the GPU's 139.80 GiB"; default its size, `budget_text`,
    not a second format of it: '0.421 GiB' beside the page's '431 MiB'): a fit sweep's forecast read 'fits in 140 GiB'
    at 17.5 GiB per device while the same page held it to the sweep's 16 GiB. per_node (CPU: the processes a node
    runs; 0 on CUDA): the budget is a node's, held against its processes' peak RSS summed, as the report's memory
    section holds it (bench.analysis.fit.budget_peak), not against one process's. highs ({count: MiB per device}: the
    high end of each count's range, bench.forecast.spread): where one passes the budget the central fits under, what
    fits at the high end follows ('; at its range's high end it fits ... up to 4 devices', '...; at its range's high end
    FSDP fits from 4 devices'): 79.5 GiB (78.9-80.3) read 'fits in 80 GiB at every count'."""
    if budget_mib is None:
        return ("no memory budget: --memory-budget-gib sets one, held against a node's processes summed" if per_node
                else "no memory budget: --memory-budget-gib (CUDA: the device's memory) sets one")
    name = (name or budget_text(budget_mib)) + (" per node" if per_node else "")
    x = {m.count: min(m.count, per_node) if per_node else 1 for m in points}
    held = {m.count: m.device_mib * x[m.count] for m in points}
    said = _verdict(points, held, budget_mib, strategy, name, per_node)
    top = {n: (highs or {}).get(n, math.nan) * x[n] for n in held}
    top = {n: v if v >= held[n] else held[n] for n, v in top.items()}      # nan (no range) leaves the central
    if any(held[n] <= budget_mib < top[n] for n in held):
        high = _verdict(points, top, budget_mib, strategy, name, per_node)
        said.append("at its range's high end " + (high[-1] if len(high) > 1 else "it " + high[0]))
    return "; ".join(said)


def _verdict(points: list, held: dict, budget_mib: float, strategy: str, name: str, per_node: int) -> list:
    """`fit_words`' verdict on `held` ({count: MiB held to the budget}), as its clauses: the last says where it fits."""
    ok = [m.count for m in points if held[m.count] <= budget_mib]
    if not ok:
        least = min(held.values())
        return [f"does not fit in {name} at any count up to {points[-1].count} (at least {least:.0f} MiB per "
                + ("node)" if per_node else "device)")]
    if len(ok) == len(points):
        return [f"fits in {name} at every count"]
    if strategy in ("fsdp", "hsdp", "zero") and ok == [m.count for m in points if m.count >= min(ok)]:
        return ["does not fit on one device at this batch",
                f"{STRATEGY_NAMES.get(strategy, strategy)} fits from {min(ok)} devices"]
    return [f"fits in {name} up to {max(ok)} devices"]
