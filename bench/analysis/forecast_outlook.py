"""What the forecast says, shared by `./run_bench.sh forecast` and the report: the network a stored sweep is
forecast on, a setting's series over counts, the changes that would move it (what-ifs), the count where
scaling efficiency falls below 75%, and the sentence that says so.

    net = network(sweep, preset=None, levels={}, gpus_per_node=None)
    rests_on(setting, inputs, net)                       # what the forecast rests on, measured or assumed, in words
    pts = series(setting, inputs, counts, net)           # [forecast_sweep.Point]
    what_ifs(setting, inputs, net, counts)               # [(what, [Point])]: this network first
    first_below(pts), recommendation(setting, pts)
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Optional

from bench.analysis import forecast as fc
from bench.analysis import forecast_sweep as fs
from bench.analysis import network as nw

EFFICIENT = 0.75                                  # below this, scaling stops paying
WHAT_IF_NET = 4.0                                 # "a faster inter-node network": 4x its bus bandwidth
WHAT_IF_BUCKET_MB = 100.0                         # torchtitan's bucket size
GPU_PRESETS = (("H100", "h100"), ("H200", "h100"), ("A100", "a100"), ("V100", "v100"))
DOUBLING = tuple(2**k for k in range(1, 11))      # 2 .. 1024: past one device


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


def network(sweep, preset: Optional[nw.Preset] = None, levels: Optional[dict] = None,
            given_gpus_per_node: Optional[int] = None) -> nw.Network:
    """The forecast's network: levels the user typed, else measured (the sweep's all-reduce rows), else the preset
    (named, or the one the sweep's GPUs name), else the other level's figures (bench.analysis.network); with
    all-gather's and reduce-scatter's own fits where the sweep measured them."""
    levels = levels or {}
    measured = nw.levels_from_comm(sweep.comm)
    preset = preset or (auto_preset(sweep) if "net" not in levels else None)
    g = gpus_per_node(sweep, given_gpus_per_node, preset)
    backend = "nccl" if any(c.device_type == "cuda" for cs in sweep.bench.values() for c in cs) else "gloo"
    return nw.network_for({k: v for k, v in measured.items() if k not in levels}, preset, levels, g, backend,
                          own=nw.own_levels(sweep.comm))


def rests_on(s: fs.Setting, inp: fs.Inputs, net: nw.Network) -> list:
    """What a setting's forecast rests on, in words: its inputs and, for FSDP, where its collectives' costs come from."""
    return inp.words + (nw.collective_words(net) if s.strategy == "fsdp" else [])


def series(s: fs.Setting, inp: fs.Inputs, counts: tuple, net: nw.Network) -> list:
    return [fs.point(s, inp, n, net) for n in counts]


def what_ifs(s: fs.Setting, inp: fs.Inputs, net: nw.Network, counts: tuple) -> list:
    """[(what, points)]: this network, then each change that could move the 75% count."""
    out = [("this network", series(s, inp, counts, net))]
    if s.strategy == "dp":
        return out
    faster = nw.faster_net(net, WHAT_IF_NET, "what-if")
    out.append((f"{WHAT_IF_NET:g}x faster inter-node network", series(s, inp, counts, faster)))
    if s.strategy == "ddp":
        out.append((f"{WHAT_IF_BUCKET_MB:g} MiB buckets",
                    series(s, replace(inp, buckets=fs.regroup(inp.buckets, WHAT_IF_BUCKET_MB * 2**20)), counts, net)))
        half = [fc.Bucket(b.size_bytes / 2, b.ready_fraction) for b in inp.buckets]
        out.append(("bf16 gradients (bf16_compress_hook)", series(s, replace(inp, buckets=half), counts, net)))
    else:
        out.append(("bf16 parameters and gradients",
                    series(s, replace(inp, units=[(g / 2, r / 2) for g, r in inp.units]), counts, net)))
    return out


def first_below(points: list, threshold: float = EFFICIENT) -> Optional[int]:
    return next((p.count for p in points if not p.refused and p.efficiency < threshold), None)


def recommendation(s: fs.Setting, points: list) -> str:
    """'past N GPUs on this network, scaling stops paying' where the forecast crosses 75%."""
    below = first_below(points)
    if below is None:
        top = max((p.count for p in points if not p.refused), default=0)
        return f"{s.label}: efficiency stays at or above {EFFICIENT:.0%} up to {top} devices on this network"
    ok = [p.count for p in points if p.count < below and not p.refused]
    if not ok:
        return f"{s.label}: below {EFFICIENT:.0%} already at {below} devices on this network"
    return (f"{s.label}: past {max(ok)} GPU{'s' if max(ok) > 1 else ''} on this network, scaling stops paying "
            f"(efficiency under {EFFICIENT:.0%} at {below})")
