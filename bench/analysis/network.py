"""The network under a forecast: two levels (inside a node, between nodes), each a per-step latency and a bus
bandwidth, fitted from the stored all-reduce microbenchmark, taken from a named preset, or typed by the user.

    net = network_for(comm, preset="h100", explicit=parse_levels("net=50@5"), gpus_per_node=8, backend="nccl")
    allreduce_ms(net, size_bytes, ranks), allgather_ms(...), reduce_scatter_ms(...)

The collective cost model (times in ms, S bytes, n ranks on m nodes of g ranks, B a level's bus bandwidth
in nccl-tests' sense, a its latency per algorithm step):
  ring all-reduce   2(n-1)/n * S / B + latency of 2(n-1) steps       (Patarasuk & Yuan, JPDC 2009; nccl-tests'
                    busbw = algbw * 2(n-1)/n is exactly this bandwidth term, doc/PERFORMANCE.md)
                    One node: B and a of the node level. Across nodes the ring runs through every node, so its
                    bandwidth is the slower level's and 2(m-1) of its steps cross the network:
                    latency = (2(n-1) - 2(m-1)) a_node + 2(m-1) a_net  (NCCL's own tuning model, src/graph/tuning.cc).
  tree all-reduce   NCCL only, across nodes: a chain inside each node and a double binary tree between nodes
                    (Sanders, Speck & Traeff 2009; NCCL 2.4): latency 2((g-1) a_node + ceil(log2 m) a_net),
                    bandwidth 2 S / (TREE_SHARE * B): NCCL's tuning model credits tree with 0.27 of ring's bus
                    bandwidth, so tree wins only where latency dominates (many nodes, small buckets).
  The rule: the library's choice is modelled as the cheaper of ring and tree under this model (NCCL picks by
  the same kind of cost table); gloo always runs ring (gloo's allreduce_ring_chunked).
  all-gather and reduce-scatter: ring only, half an all-reduce: (n-1)/n * S / B + latency of n-1 steps.

The fit (`fit_level`): weighted least squares of time_ms = a * steps + (1/B) * 2(n-1)/n * S over the comm rows
of one level (several sizes and counts at once), each row weighted by 1/time, so small messages (latency) and
large ones (bandwidth) count alike in relative terms; a negative latency is refitted as zero. The net level
is measured only by all-reduces whose ranks spanned several nodes (scope 'world' of a multi-node comm run).
A net level's B is a node's whole injection bandwidth (one NIC per GPU: g x the NIC rate), because NCCL runs
one ring per NIC rail and a multi-node ring's bus bandwidth is bounded by it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from bench.config import ConfigError, finite

TREE_SHARE = 0.27                    # tree's bus bandwidth against ring's in NCCL's tuning model (tuning.cc)
LEVELS = ("node", "net")             # inside a node, between nodes


@dataclass(frozen=True)
class Level:
    """One level of the network: bus bandwidth (GB/s, 1e9 bytes) and latency per algorithm step (us)."""
    busbw_gbps: float
    latency_us: float
    source: str                      # where the figures come from, in words
    measured: bool = False
    rms_error: float = math.nan      # the fit's root-mean-square relative error over its rows


@dataclass(frozen=True)
class Preset:
    """A named network with the public figures it rests on."""
    name: str
    gpus_per_node: int
    node: Level
    net: Level
    summary: str


def _preset(name: str, g: int, node_bw: float, node_lat: float, node_src: str, net_bw: float, net_lat: float,
            net_src: str, summary: str) -> Preset:
    return Preset(name, g, Level(node_bw, node_lat, f"preset {name}: {node_src}"),
                  Level(net_bw, net_lat, f"preset {name}: {net_src}"), summary)


_LAT = "latency per ring step of the order of NCCL's tuning constants (src/graph/tuning.cc hwLat)"
PRESETS = {p.name: p for p in (
    _preset("h100", 8, 370.0, 3.0, "8x H100 SXM over NVLink 4, nccl-tests all-reduce busbw ~370 GB/s (NVIDIA; "
            "480 with NVLink SHARP); " + _LAT,
            400.0, 5.0, "8x 400 Gb/s InfiniBand NDR per node, one ConnectX-7 per GPU (DGX H100 reference "
            "architecture): 8 x 50 GB/s", "8x H100 NVLink + 400 Gb/s InfiniBand per GPU"),
    _preset("a100", 8, 230.0, 3.0, "8x A100 SXM over NVLink 3, nccl-tests all-reduce busbw ~230 GB/s; " + _LAT,
            200.0, 5.0, "8x 200 Gb/s InfiniBand HDR per node, one per GPU (DGX A100 reference architecture): "
            "8 x 25 GB/s", "8x A100 NVLink + 200 Gb/s InfiniBand per GPU"),
    _preset("v100", 8, 120.0, 3.0, "8x V100 SXM2 over NVLink 2 (DGX-1, p3.16xlarge), all-reduce busbw ~120 GB/s "
            "estimated; " + _LAT,
            12.5, 10.0, "100 Gb/s per node (AWS p3dn.24xlarge networking): 12.5 GB/s", "8x V100 NVLink + 100 Gb/s per node"),
    _preset("pcie", 8, 20.0, 2.0, "8 GPUs on PCIe 4.0 x16 (32 GB/s per direction per GPU), all-reduce through the "
            "host bridges assumed at 20 GB/s busbw; " + _LAT,
            12.5, 10.0, "100 Gb/s Ethernet per node: 12.5 GB/s", "8 GPUs over PCIe, 100 Gb/s Ethernet per node"),
)}


@dataclass(frozen=True)
class Network:
    """What the forecast's collectives run on."""
    node: Level
    net: Level
    gpus_per_node: int
    backend: str = "nccl"            # nccl: ring or tree, whichever is cheaper; gloo: ring

    def assumed(self) -> list:
        return [name for name, lv in (("node", self.node), ("net", self.net)) if not lv.measured]


# ---------------------------------------------------------------- the collectives

def _ring_ms(net: Network, size_bytes: float, ranks: int, factor: int) -> float:
    """factor 2: all-reduce (reduce-scatter then all-gather); 1: all-gather or reduce-scatter alone."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    nodes = math.ceil(ranks / net.gpus_per_node)
    steps = factor * (ranks - 1)
    if nodes == 1:
        bw, lat_us = net.node.busbw_gbps, steps * net.node.latency_us
    else:
        inter = factor * (nodes - 1)
        bw = min(net.node.busbw_gbps, net.net.busbw_gbps)
        lat_us = (steps - inter) * net.node.latency_us + inter * net.net.latency_us
    return factor * (ranks - 1) / ranks * size_bytes / (bw * 1e9) * 1e3 + lat_us / 1e3


def _tree_ms(net: Network, size_bytes: float, ranks: int) -> float:
    nodes = math.ceil(ranks / net.gpus_per_node)
    g = min(ranks, net.gpus_per_node)
    lat_us = 2 * ((g - 1) * net.node.latency_us + math.ceil(math.log2(nodes)) * net.net.latency_us)
    bw = TREE_SHARE * min(net.node.busbw_gbps, net.net.busbw_gbps)
    return 2 * size_bytes / (bw * 1e9) * 1e3 + lat_us / 1e3


def allreduce_algorithm(net: Network, size_bytes: float, ranks: int) -> str:
    """'ring' or 'tree': what the model takes the library to run for this all-reduce (see the module's rule)."""
    if net.backend != "nccl" or ranks <= net.gpus_per_node or size_bytes <= 0:
        return "ring"
    return "tree" if _tree_ms(net, size_bytes, ranks) < _ring_ms(net, size_bytes, ranks, 2) else "ring"


def allreduce_ms(net: Network, size_bytes: float, ranks: int) -> float:
    if allreduce_algorithm(net, size_bytes, ranks) == "tree":
        return _tree_ms(net, size_bytes, ranks)
    return _ring_ms(net, size_bytes, ranks, 2)


def allgather_ms(net: Network, size_bytes: float, ranks: int) -> float:
    """All-gather of a tensor of size_bytes in all (each rank holds size_bytes / ranks before)."""
    return _ring_ms(net, size_bytes, ranks, 1)


def reduce_scatter_ms(net: Network, size_bytes: float, ranks: int) -> float:
    """Reduce-scatter of a tensor of size_bytes in all (each rank keeps size_bytes / ranks)."""
    return _ring_ms(net, size_bytes, ranks, 1)


# ---------------------------------------------------------------- the fit

def fit_level(rows: Sequence[dict], source: str, node: Optional[Level] = None) -> Optional[Level]:
    """Latency and bus bandwidth from all-reduce rows {ranks, size_bytes, time_ms} of one level, by the weighted
    least squares in the module's docstring. With `node` the rows spanned several nodes ({nodes} in each row):
    the fit is of the net level, its latency that of the 2(m-1) steps between nodes, the node level's latency
    on the others taken off first (the ring's cost in `_ring_ms`). None with fewer than 2 usable rows."""
    pts = [(int(r["ranks"]), float(r["size_bytes"]), float(r["time_ms"]), int(r.get("nodes") or 1)) for r in rows
           if r.get("ranks") and int(r["ranks"]) > 1 and r.get("time_ms") and float(r["time_ms"]) > 0]
    if node is not None:  # the steps inside nodes, at the node level's latency, are not the net level's
        pts = [(n, sz, t - (2 * (n - 1) - 2 * (m - 1)) * node.latency_us / 1e3, m) for n, sz, t, m in pts]
        pts = [p for p in pts if p[2] > 0 and p[3] > 1]
    if len(pts) < 2:
        return None
    steps = np.array([2.0 * ((m - 1) if node is not None else (n - 1)) for n, _, _, m in pts])
    carried = np.array([2.0 * (n - 1) / n * s for n, s, _, _ in pts])
    t = np.array([x[2] for x in pts])
    a = np.column_stack([steps, carried]) / t[:, None]
    coef = np.linalg.lstsq(a, np.ones_like(t), rcond=None)[0]
    note = ""
    if coef[1] <= 0:  # the sizes do not resolve the bandwidth (all latency, or noise): the best bus bandwidth seen
        coef[1] = float(np.min(t / carried))
        coef[0] = float(np.sum(steps / t * (1 - coef[1] * carried / t)) / np.sum((steps / t) ** 2))
        note = "; bandwidth not resolved by these sizes: the best seen"
    if coef[0] < 0:  # latency cannot be negative: bandwidth alone
        coef = np.array([0.0, float(np.sum(carried / t) / np.sum((carried / t) ** 2))])
    pred = coef[0] * steps + coef[1] * carried
    rms = float(np.sqrt(np.mean((pred / t - 1) ** 2)))
    counts = ",".join(str(n) for n in sorted({n for n, _, _, _ in pts}))
    return Level(busbw_gbps=1.0 / coef[1] / 1e6, latency_us=float(coef[0]) * 1e3,
                 source=f"{source}: fit of {len(pts)} all-reduce rows at {counts} ranks (rms error {rms:.0%}{note})",
                 measured=True, rms_error=rms)


def levels_from_comm(comm: Sequence[tuple], gpus_per_node: Optional[int] = None) -> dict:
    """{'node': Level, 'net': Level} fitted from the sweep's comm results [(device_count, nodes, rows)];
    a level no row measured is absent."""
    node_rows, net_rows = [], []
    for _count, nodes, rows in comm:
        for r in rows:
            if r.get("scope") == "node" or (r.get("scope", "world") == "world" and int(nodes or 1) == 1):
                node_rows.append(r)
            elif r.get("scope", "world") == "world":
                net_rows.append({**r, "nodes": int(nodes)})
    out = {}
    node = fit_level(node_rows, "measured inside a node")
    if node is not None:
        out["node"] = node
    net = fit_level(net_rows, "measured across nodes", node or Level(1.0, 0.0, "none"))
    if net is not None:
        out["net"] = net
    return out


# ---------------------------------------------------------------- what the user names

_LEVEL_TEXT = re.compile(r"^(node|net)=([^@]+)@(.+)$")


def parse_network(text: str) -> tuple:
    """--network: a preset name, or LEVEL=GBPS@US[,LEVEL=GBPS@US] (LEVEL node or net; bus bandwidth in GB/s,
    latency per step in us), or a preset followed by such levels (h100,net=25@5). Returns (preset or None,
    {level: Level}). ConfigError naming the bad part."""
    preset, levels = None, {}
    for part in [p.strip() for p in text.split(",")]:
        if part.lower() in PRESETS and preset is None and not levels:
            preset = PRESETS[part.lower()]
            continue
        m = _LEVEL_TEXT.match(part)
        if not m:
            raise ConfigError(f"--network {text!r}: {part!r} is neither a preset ({', '.join(PRESETS)}) nor "
                              f"LEVEL=GBPS@US with LEVEL node or net (e.g. net=50@5: 50 GB/s bus bandwidth, 5 us per step)")
        level, bw, lat = m.group(1), finite(m.group(2), f"--network {part}: bandwidth"), finite(m.group(3), f"--network {part}: latency")
        if bw <= 0:
            raise ConfigError(f"--network {part}: bandwidth {m.group(2)!r} GB/s must be above 0")
        if lat < 0:
            raise ConfigError(f"--network {part}: latency {m.group(3)!r} us must be 0 or more")
        if level in levels:
            raise ConfigError(f"--network {text!r}: level {level!r} given twice")
        levels[level] = Level(bw, lat, f"--network {part}")
    return preset, levels


def network_for(measured: dict, preset: Optional[Preset], explicit: dict, gpus_per_node: int, backend: str) -> Network:
    """Each level: what the user typed (--network LEVEL=...), else measured, else the preset's, else, with no
    preset, the other level's figures (a flat network: said so in its source)."""
    chosen = {}
    for name in LEVELS:
        chosen[name] = explicit.get(name) or measured.get(name) or (getattr(preset, name) if preset else None)
    if chosen["node"] is None and chosen["net"] is None:
        raise ConfigError("no network to forecast on: the sweep stored no all-reduce microbenchmark (--comm-bench) "
                          f"and --network named none; give --network {'|'.join(PRESETS)} or node=GBPS@US,net=GBPS@US")
    for name, other in (("node", "net"), ("net", "node")):
        if chosen[name] is None:
            o = chosen[other]
            chosen[name] = Level(o.busbw_gbps, o.latency_us, f"assumed as fast as the {other} level ({o.source}): "
                                 f"nothing measured or named it; --network {name}=GBPS@US names it", measured=False)
    return Network(node=chosen["node"], net=chosen["net"], gpus_per_node=gpus_per_node, backend=backend)
