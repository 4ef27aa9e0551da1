"""What the forecast says, shared by `./run_bench.sh forecast` and the report: the network a stored sweep is
forecast on, a setting's series over counts, the changes that would move it (what-ifs), the count where
scaling efficiency falls below 75%, and the sentence that says so.

    machine = machine(sweep, runs, preset=None, levels={}, gpus_per_node=None)   # forecast.settings.Machine
    rests_on(setting, inputs, machine)                   # what the forecast rests on, measured or assumed, in words
    pts = series(setting, inputs, counts, machine)       # [forecast_sweep.Point]
    what_ifs(setting, inputs, machine, counts)           # [(what, [Point])]: this network first
    first_below(pts), recommendation(setting, pts)
No claim without its basis: where the sweep has no single-device run of the same numerics, efficiency is unknown
and the recommendation says what is missing and what to run instead of a count.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Optional

from bench.forecast import step as fc
from bench.forecast import check as fk
from bench.forecast import settings as fs
from bench.forecast import network as nw
from bench import stats

EFFICIENT = 0.75                                  # below this, scaling stops paying
WHAT_IF_NET = 4.0                                 # "a faster inter-node network": 4x its bus bandwidth
WHAT_IF_BUCKET_MB = 100.0                         # torchtitan's bucket size
GPU_PRESETS = (("H100", "h100"), ("H200", "h100"), ("A100", "a100"), ("V100", "v100"))
DOUBLING = tuple(2**k for k in range(1, 11))      # 2 .. 1024: past one device


def device_memory_mib(sweep) -> Optional[float]:
    """The smallest GPU memory of the sweep's environments (CUDA sees it), None on CPU."""
    sizes = [g.get("memory_total_mib") for e in sweep.envs for g in (json.loads(e.get("json") or "{}").get("gpus") or [])]
    sizes = [float(x) for x in sizes if x]
    return min(sizes) if sizes else None


def shown_efficiency(s: fs.Setting, eff: float, count: int) -> str:
    """Efficiency as the report shows it (bench.stats.shown_efficiency): above 100% only with why; the noise
    is the spread between the processes of the setting and of its single-device baseline."""
    if eff is None or math.isnan(eff):
        return "–"
    noise = stats.noise_bound(s.single.process_sps if s.single is not None else [], s.any.process_sps)
    return stats.shown_efficiency(eff, noise, count).text()


def auto_preset(sweep) -> Optional[nw.Preset]:
    """The preset a CUDA sweep's GPU names (from its environments), for the levels it did not measure."""
    names = " ".join(str(e.get("gpu_names") or "") for e in sweep.envs)
    return next((nw.PRESETS[p] for key, p in GPU_PRESETS if key in names), None)


def gpus_per_node(sweep, given: Optional[int], preset: Optional[nw.Preset]) -> int:
    """Given, else the preset's, else the sweep's resolved --gpus-per-node, else its largest count on one node."""
    if given:
        return given
    if preset is not None:
        return preset.gpus_per_node
    cfg = json.loads(sweep.sweep.get("config_json") or "{}")
    measured = max((c.device_count // max(1, c.nodes) for cs in sweep.bench.values() for c in cs), default=1)
    return int(cfg.get("gpus_per_node") or measured)


def machine(sweep, runs: fk.Runs, preset: Optional[nw.Preset] = None, levels: Optional[dict] = None,
            given_gpus_per_node: Optional[int] = None) -> fs.Machine:
    """The forecast's machine: network levels the user typed, else measured (the sweep's all-reduce rows at every
    count), else the preset (named, or the one the sweep's GPUs name), else the other level's figures
    (bench.forecast.network); the interference the sweep measured, else assumed."""
    levels = levels or {}
    preset = preset or (auto_preset(sweep) if "net" not in levels else None)
    g = gpus_per_node(sweep, given_gpus_per_node, preset)
    return fk.machine_for(runs, tuple(sorted({c for c, _, _ in runs.comm})), preset, levels, g)


def rests_on(s: fs.Setting, inp: fs.Inputs, m: fs.Machine) -> list:
    """What a setting's forecast rests on, in words: its inputs and, for FSDP, where its collectives' costs come from."""
    return inp.words + (nw.collective_words(m.net) if s.strategy in ("fsdp", "hsdp") else [])


def series(s: fs.Setting, inp: fs.Inputs, counts: tuple, m: fs.Machine) -> list:
    return [fs.point(s, inp, n, m) for n in counts]


def what_ifs(s: fs.Setting, inp: fs.Inputs, m: fs.Machine, counts: tuple) -> list:
    """[(what, points)]: this network, then each change that could move the 75% count."""
    out = [("this network", series(s, inp, counts, m))]
    if s.strategy == "dp":
        return out
    faster = replace(m, net=nw.faster_net(m.net, WHAT_IF_NET, "what-if"))
    out.append((f"{WHAT_IF_NET:g}x faster inter-node network", series(s, inp, counts, faster)))
    if s.strategy in ("ddp", "zero"):
        out.append((f"{WHAT_IF_BUCKET_MB:g} MiB buckets",
                    series(s, replace(inp, buckets=fs.regroup(inp.buckets, WHAT_IF_BUCKET_MB * 2**20)), counts, m)))
        half = [fc.Bucket(b.size_bytes / 2, b.ready_fraction) for b in inp.buckets]
        out.append(("bf16 gradients (bf16_compress_hook)", series(s, replace(inp, buckets=half), counts, m)))
    else:
        out.append(("bf16 parameters and gradients",
                    series(s, replace(inp, units=[(g / 2, r / 2) for g, r in inp.units]), counts, m)))
    return out


def first_below(points: list, threshold: float = EFFICIENT) -> Optional[int]:
    """The first count whose efficiency is known and under the threshold."""
    return next((p.count for p in points if not p.refused and not math.isnan(p.efficiency) and p.efficiency < threshold),
                None)


def missing_baseline(s: fs.Setting) -> str:
    """Why efficiency cannot be stated for s ('' when it can)."""
    if s.single is not None:
        return ""
    return (f"efficiency unknown: the sweep has no single-device run of [{s.variant.split(',')[0]}] at 1 device to "
            f"hold the throughput against (run with --strategies single,{s.strategy} --gpus 1,...)")


def recommendation(s: fs.Setting, points: list) -> str:
    """'past N GPUs on this network, scaling stops paying' where the forecast crosses 75%; never a claim from a
    missing value."""
    missing = missing_baseline(s)
    if missing:
        return f"{s.label}: {missing}"
    known = [p for p in points if not p.refused and not math.isnan(p.efficiency)]
    if not known:
        return f"{s.label}: no count forecast"
    below = first_below(known)
    if below is None:
        return f"{s.label}: efficiency stays at or above {EFFICIENT:.0%} up to {max(p.count for p in known)} devices on this network"
    ok = [p.count for p in known if p.count < below]
    if not ok:
        return f"{s.label}: below {EFFICIENT:.0%} already at {below} devices on this network"
    return (f"{s.label}: past {max(ok)} GPU{'s' if max(ok) > 1 else ''} on this network, scaling stops paying "
            f"(efficiency under {EFFICIENT:.0%} at {below})")
