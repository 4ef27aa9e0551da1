"""The network under a forecast: two levels (inside a node, between nodes), each a bus bandwidth, a latency per
algorithm step and a constant per call, fitted from the stored all-reduce microbenchmark, taken from a named preset,
or typed by the user; and, where the sweep measured them (a sweep with FSDP), all-gather's and reduce-scatter's own
fits per level.

    net = network_for(levels_from_comm(comm), preset, explicit, gpus_per_node=8, backend="nccl", own=own_levels(comm))
    allreduce_ms(net, size_bytes, ranks), allgather_ms(...), reduce_scatter_ms(...), broadcast_ms(...)
    collective_words(net)            # for each of all-gather and reduce-scatter: measured or assumed, in words
    redraw(net, rng, draws)          # the range's draws of a measured level (bench.forecast.spread)

The collective cost model (times in ms, S bytes, n ranks on m nodes of g ranks, B a level's bus bandwidth
in nccl-tests' sense, a its latency per algorithm step, c its constant per call):
  ring all-reduce   c + 2(n-1)/n * S / B + latency of 2(n-1) steps      (Patarasuk & Yuan, JPDC 2009; nccl-tests'
                    busbw = algbw * 2(n-1)/n is exactly this bandwidth term, doc/PERFORMANCE.md)
                    One node: B and a of the node level. Across nodes the ring runs through every node, so its
                    bandwidth is the slower level's and 2(m-1) of its steps cross the network:
                    latency = (2(n-1) - 2(m-1)) a_node + 2(m-1) a_net  (NCCL's own tuning model, src/graph/tuning.cc).
  tree all-reduce   NCCL only, across nodes: a chain inside each node and a double binary tree between nodes
                    (Sanders, Speck & Traeff 2009; NCCL 2.4): latency 2((g-1) a_node + ceil(log2 m) a_net), and, as
                    NCCL's tuning model has it for its Simple protocol (src/graph/tuning.cc: tree busBw = 0.9 x the
                    graph's, algbw = busBw / 2, times treeCorrectionFactor per size, 0.5-0.9 from 8 KiB to 128 MiB),
                    time 2 S / (TREE_SHARE x corr(S) x B). Ring's bandwidth term tends to 2 S / B, so tree wins only
                    where latency dominates (many nodes, small buckets).
  The rule: the library's choice is modelled as the cheaper of ring and tree under this model (NCCL picks by
  the same kind of cost table); gloo always runs ring (gloo's allreduce_ring_chunked).
  all-gather and reduce-scatter (S: all-gather's output, reduce-scatter's input, as nccl-tests counts them): ring
                    only, c + (n-1)/n * S / B + latency of n-1 steps, with B, a and c each level's own fit of that
                    collective's rows where the sweep measured it (measured), else the all-reduce's: half an
                    all-reduce (assumed). On gloo the two are slower than half an all-reduce (reduce-scatter is
                    built on an all-reduce), so the difference is large there.
  broadcast         (DDP's buffers before each forward) a pipelined ring: c + S / B + latency of n-1 steps (assumed
                    from the all-reduce's fit: the suite does not measure a broadcast).

The fit (`fit_level`): weighted least squares, non-negative (scipy's nnls), of
time_ms = c + a * steps + (1/B) * f(n-1)/n * S (f = 2 for all-reduce, 1 for all-gather and reduce-scatter; f(n-1)
steps) over the comm rows of one collective at one level (several sizes and counts at once; each count and size the
median over the comm runs: one slow run leaves it), each row weighted by 1/time, so small messages (latency) and large
ones (bandwidth) count alike in relative terms. The per-call constant and the per-step latency are told apart only
by rows at two or more counts; from one count the fixed time is charged per step (the ring's own cost; said in the
level's source). The net level is measured only by rows whose ranks spanned several nodes (scope 'world' of a
multi-node comm run).
A net level's B is a node's whole injection bandwidth (one NIC per GPU: g x the NIC rate), because NCCL runs
one ring per NIC rail and a multi-node ring's bus bandwidth is bounded by it.
Presets: the node levels are nccl-tests all-reduce bus bandwidths published for those machines; the net levels are
NIC line rates of the vendors' reference architectures, an upper bound a measured bus bandwidth falls short of: they
are marked assumed, and docs/forecast.md cites each figure's source.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from bench.config import ConfigError, finite

TREE_SHARE = 0.9                     # tree's bus bandwidth against the graph's in NCCL's tuning model (tuning.cc)
# NCCL's treeCorrectionFactor for its Simple protocol, by log2(bytes / 64) from 0 (64 B) to 21 (128 MiB); 1.0 above
TREE_CORRECTION = (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9)
LEVELS = ("node", "net")             # inside a node, between nodes
RING_FACTOR = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}   # f: the data and steps of a ring, x (n-1)
OWN_FIT = ("all_gather", "reduce_scatter")                              # fitted from their own rows where measured
NAMES = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter"}


@dataclass(frozen=True)
class Level:
    """One level of the network: bus bandwidth (GB/s, 1e9 bytes), latency per algorithm step (us) and per call (us)."""
    busbw_gbps: float
    latency_us: float
    source: str                      # where the figures come from, in words
    measured: bool = False
    rms_error: float = math.nan      # the fit's root-mean-square relative error over its rows
    call_us: float = 0.0             # a fixed cost per collective, whatever the ranks
    rows: int = 0                    # the rows a measured level was fitted over


def origin(level: Level) -> tuple:
    """Where a level's figures come from, the one reading of `Level.source`: ('measured' | 'typed' | 'preset' |
    'flat', the preset's name or the typed flag, '' otherwise)."""
    src = level.source
    if level.measured:
        return "measured", ""
    if src.startswith("preset "):
        return "preset", src.split(":")[0][len("preset "):]
    if src.startswith("--network"):
        return "typed", src.split(":")[0]
    return "flat", ""


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
            400.0, 5.0, "assumed: the NIC line rate, 8x 400 Gb/s InfiniBand NDR per node, one ConnectX-7 per GPU (DGX "
            "H100 reference architecture): 8 x 50 GB/s, not a measured bus bandwidth", "8x H100 NVLink + 400 Gb/s "
            "InfiniBand per GPU"),
    _preset("a100", 8, 230.0, 3.0, "8x A100 SXM over NVLink 3, nccl-tests all-reduce busbw ~230 GB/s; " + _LAT,
            200.0, 5.0, "assumed: the NIC line rate, 8x 200 Gb/s InfiniBand HDR per node, one per GPU (DGX A100 "
            "reference architecture): 8 x 25 GB/s, not a measured bus bandwidth", "8x A100 NVLink + 200 Gb/s "
            "InfiniBand per GPU"),
    _preset("v100", 8, 120.0, 3.0, "assumed: 8x V100 SXM2 over NVLink 2 (DGX-1, p3.16xlarge), all-reduce busbw ~120 "
            "GB/s estimated (no published nccl-tests figure); " + _LAT,
            12.5, 10.0, "assumed: the line rate of 100 Gb/s per node (AWS p3dn.24xlarge networking): 12.5 GB/s",
            "8x V100 NVLink + 100 Gb/s per node"),
    _preset("pcie", 8, 20.0, 2.0, "assumed: 8 GPUs on PCIe 4.0 x16 (32 GB/s per direction per GPU), all-reduce "
            "through the host bridges at 20 GB/s busbw; " + _LAT,
            12.5, 10.0, "assumed: the line rate of 100 Gb/s Ethernet per node: 12.5 GB/s",
            "8 GPUs over PCIe, 100 Gb/s Ethernet per node"),
)}


@dataclass(frozen=True)
class Network:
    """What the forecast's collectives run on."""
    node: Level
    net: Level
    gpus_per_node: int
    backend: str = "nccl"            # nccl: ring or tree, whichever is cheaper; gloo: ring
    own: tuple = ()                  # ((collective, level name, Level), ...): OWN_FIT collectives' own measured fits
    x: tuple = ()                    # ((level name, factor), ...): a draw's times per level (`redraw`), else as fitted

    def assumed(self) -> list:
        return [name for name, lv in (("node", self.node), ("net", self.net)) if not lv.measured]

    def levels(self, op: str) -> tuple:
        """(node, net) Levels the collective `op` runs at: its own fit per level where measured, else the network's."""
        mine = {name: lv for o, name, lv in self.own if o == op}
        return mine.get("node", self.node), mine.get("net", self.net)


# ---------------------------------------------------------------- the collectives

def _ring_ms(net: Network, size_bytes: float, ranks: int, op: str = "all_reduce") -> float:
    """A ring of `op` (RING_FACTOR: 2 for all-reduce, a reduce-scatter then an all-gather; 1 for either alone)."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    factor, (node, inter_level) = RING_FACTOR[op], net.levels(op)
    nodes = math.ceil(ranks / net.gpus_per_node)
    steps = factor * (ranks - 1)
    if nodes == 1:
        bw, lat_us, call_us = node.busbw_gbps, steps * node.latency_us, node.call_us
    else:
        inter = factor * (nodes - 1)
        bw = min(node.busbw_gbps, inter_level.busbw_gbps)
        lat_us = (steps - inter) * node.latency_us + inter * inter_level.latency_us
        call_us = max(node.call_us, inter_level.call_us)
    return factor * (ranks - 1) / ranks * size_bytes / (bw * 1e9) * 1e3 + (lat_us + call_us) / 1e3


def tree_correction(size_bytes: float) -> float:
    """NCCL's treeCorrectionFactor (Simple protocol) for a message of size_bytes."""
    index = int(math.log2(max(size_bytes, 64.0) / 64))
    return TREE_CORRECTION[index] if index < len(TREE_CORRECTION) else 1.0


def _tree_ms(net: Network, size_bytes: float, ranks: int) -> float:
    nodes = math.ceil(ranks / net.gpus_per_node)
    g = min(ranks, net.gpus_per_node)
    lat_us = 2 * ((g - 1) * net.node.latency_us + math.ceil(math.log2(nodes)) * net.net.latency_us)
    lat_us += max(net.node.call_us, net.net.call_us)
    bw = TREE_SHARE * tree_correction(size_bytes) * min(net.node.busbw_gbps, net.net.busbw_gbps)
    return 2 * size_bytes / (bw * 1e9) * 1e3 + lat_us / 1e3


def broadcast_ms(net: Network, size_bytes: float, ranks: int) -> float:
    """A pipelined ring broadcast of size_bytes (DDP's buffers): c + S / B + latency of n-1 steps."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    nodes = math.ceil(ranks / net.gpus_per_node)
    level = net.node if nodes == 1 else min((net.node, net.net), key=lambda lv: lv.busbw_gbps)
    lat_us = (ranks - nodes) * net.node.latency_us + (nodes - 1) * net.net.latency_us + level.call_us
    return (size_bytes / (level.busbw_gbps * 1e9) * 1e3 + lat_us / 1e3) * _x(net, ranks)


def allreduce_algorithm(net: Network, size_bytes: float, ranks: int) -> str:
    """'ring' or 'tree': what the model takes the library to run for this all-reduce (see the module's rule)."""
    if net.backend != "nccl" or ranks <= net.gpus_per_node or size_bytes <= 0:
        return "ring"
    return "tree" if _tree_ms(net, size_bytes, ranks) < _ring_ms(net, size_bytes, ranks) else "ring"


def _x(net: Network, ranks: int):
    """A draw's factor on a collective's time: the level it crosses (between nodes where it spans several), else 1."""
    if not net.x:
        return 1.0
    return dict(net.x).get("node" if ranks <= net.gpus_per_node else "net", 1.0)


def allreduce_ms(net: Network, size_bytes: float, ranks: int) -> float:
    if allreduce_algorithm(net, size_bytes, ranks) == "tree":
        return _tree_ms(net, size_bytes, ranks) * _x(net, ranks)
    return _ring_ms(net, size_bytes, ranks) * _x(net, ranks)


def allgather_ms(net: Network, size_bytes: float, ranks: int) -> float:
    """All-gather of a tensor of size_bytes in all (each rank holds size_bytes / ranks before)."""
    return _ring_ms(net, size_bytes, ranks, "all_gather") * _x(net, ranks)


def reduce_scatter_ms(net: Network, size_bytes: float, ranks: int) -> float:
    """Reduce-scatter of a tensor of size_bytes in all (each rank keeps size_bytes / ranks)."""
    return _ring_ms(net, size_bytes, ranks, "reduce_scatter") * _x(net, ranks)


OPS = {"all_reduce": allreduce_ms, "all_gather": allgather_ms, "reduce_scatter": reduce_scatter_ms}   # op -> model


def redraw(net: Network, rng: np.random.Generator, draws: int) -> Network:
    """A copy whose times per measured level carry a factor over draws + 1 (row 0: 1, as fitted): lognormal, of the
    fit's prediction error for one collective, its rms relative error x sqrt(1 + 1/rows) (the rows' scatter about the
    line, and the line's own uncertainty from them: a step's collective is a new call, not the line's mean). A level
    assumed (preset, typed, the other level's) carries none: `spread_words` says so."""
    x = []
    for name, lv in (("node", net.node), ("net", net.net)):
        if lv.measured and lv.rows >= 3 and math.isfinite(lv.rms_error):
            sd = lv.rms_error * math.sqrt(1 + 1 / lv.rows)
            x.append((name, np.concatenate([[1.0], np.exp(rng.normal(0.0, sd, draws))])))
    return replace(net, x=tuple(x))


def spread_words(net: Network) -> str:
    parts = [f"{name} level: the fit's {lv.rms_error:.0%} rms error over its {lv.rows} rows" for name, lv in
             (("node", net.node), ("net", net.net)) if lv.measured and lv.rows >= 3 and math.isfinite(lv.rms_error)]
    none = [name for name, lv in (("node", net.node), ("net", net.net)) if not (lv.measured and lv.rows >= 3)]
    return ("network's spread: " + "; ".join(parts) if parts else "network's spread: none") + (
        f" ({' and '.join(none)} level{'s' if len(none) > 1 else ''} assumed or too few rows: no spread, outside "
        "the range)" if none else "")


def collective_words(net: Network) -> list:
    """For each OWN_FIT collective, what its cost rests on: its own fit per level (measured) or half an
    all-reduce (assumed)."""
    out = []
    for op in OWN_FIT:
        mine = {name: lv for o, name, lv in net.own if o == op}
        if not mine:
            out.append(f"{NAMES[op]}: half an all-reduce (assumed: the sweep measured no {NAMES[op]}; a sweep with "
                       f"FSDP measures it)")
            continue
        parts = [f"{name} level measured ({mine[name].busbw_gbps:.3g} GB/s, {mine[name].latency_us:.3g} us per step: "
                 f"{mine[name].source})" for name in LEVELS if name in mine]
        parts += [f"{name} level half an all-reduce (assumed: not measured there)" for name in LEVELS if name not in mine]
        out.append(f"{NAMES[op]}: " + "; ".join(parts))
    return out


def faster_net(net: Network, factor: float, source: str) -> Network:
    """The same network with `factor` times the bus bandwidth between nodes, for every collective."""
    def up(lv: Level) -> Level:
        return replace(lv, busbw_gbps=lv.busbw_gbps * factor, source=source, measured=False)
    return replace(net, net=up(net.net), own=tuple((op, name, up(lv) if name == "net" else lv) for op, name, lv in net.own))


# ---------------------------------------------------------------- the fit

def fit_level(rows: Sequence[dict], source: str, node: Optional[Level] = None, op: str = "all_reduce") -> Optional[Level]:
    """Per-call constant, latency per step and bus bandwidth from rows {ranks, size_bytes, time_ms} of one collective
    `op` at one level, by the non-negative weighted least squares in the module's docstring. With `node` the rows
    spanned several nodes ({nodes} in each row): the fit is of the net level, its latency that of the f(m-1) steps
    between nodes, the node level's latency on the others taken off first (the ring's cost in `_ring_ms`). None with
    fewer than 2 usable rows."""
    from scipy.optimize import nnls
    f = float(RING_FACTOR[op])
    pts = [(int(r["ranks"]), float(r["size_bytes"]), float(r["time_ms"]), int(r.get("nodes") or 1)) for r in rows
           if r.get("ranks") and int(r["ranks"]) > 1 and r.get("time_ms") and float(r["time_ms"]) > 0]
    if node is not None:  # the steps inside nodes, at the node level's latency, are not the net level's
        pts = [(n, sz, t - f * ((n - 1) - (m - 1)) * node.latency_us / 1e3, m) for n, sz, t, m in pts]
        pts = [p for p in pts if p[2] > 0 and p[3] > 1]
    measured, pts = pts, _medians(pts)    # one row per count, size and node count: the median over the runs
    if len(pts) < 2:
        return None
    steps = np.array([f * ((m - 1) if node is not None else (n - 1)) for n, _, _, m in pts])
    carried = np.array([f * (n - 1) / n * s for n, s, _, _ in pts])
    t = np.array([x[2] for x in pts])
    per_call = len(set(steps.tolist())) >= 2   # two step counts tell a per-call constant from a per-step latency
    columns = [np.ones_like(t)] if per_call else []
    a = np.column_stack(columns + [steps, carried]) / t[:, None]
    coef = nnls(a, np.ones_like(t))[0]
    call, lat, inv_bw = (coef if per_call else np.concatenate([[0.0], coef])).tolist()
    note = ""
    if inv_bw <= 0:  # the sizes do not resolve the bandwidth (all latency, or noise): the best bus bandwidth seen
        inv_bw = float(np.min(t / carried))
        rest = t - inv_bw * carried
        lat = max(0.0, float(np.sum(steps / t * rest / t) / np.sum((steps / t) ** 2)))
        call = 0.0
        note = "; bandwidth not resolved by these sizes: the best seen"
    n, sz, ms, m = (np.array(v, dtype=float) for v in zip(*measured))   # the error over every row: the runs' spread
    pred = call + lat * f * ((m - 1) if node is not None else (n - 1)) + inv_bw * f * (n - 1) / n * sz
    rms = float(np.sqrt(np.mean((pred / ms - 1) ** 2)))
    counts = ",".join(str(n) for n in sorted({n for n, _, _, _ in pts}))
    split = ("" if per_call else "; one count: its fixed time charged per ring step (a per-call constant needs rows "
             "at two counts)")
    each = f" (each count and size's median over the runs, {len(measured)} rows)" if len(measured) > len(pts) else ""
    return Level(busbw_gbps=1.0 / inv_bw / 1e6, latency_us=lat * 1e3, call_us=call * 1e3,
                 source=f"{source}: fit of {len(pts)} {NAMES[op]} rows{each} at {counts} ranks (rms error {rms:.0%}"
                        f"{note}{split})", measured=True, rms_error=rms, rows=len(pts))


def _medians(pts: list) -> list:
    """[(ranks, size, ms, nodes)], one row per (ranks, size, nodes): the median of the rows (runs) measuring it. Pooled,
    one comm run of three twice as slow moved the fitted bandwidth by a tenth (least squares is a mean), and every
    count's step with it; its spread stays in the fit's error (`fit_level`)."""
    groups: dict = {}
    for n, sz, t, m in pts:
        groups.setdefault((n, sz, m), []).append(t)
    return [(n, sz, float(np.median(ts)), m) for (n, sz, m), ts in groups.items()]


def levels_from_comm(comm: Sequence[tuple], gpus_per_node: Optional[int] = None, op: str = "all_reduce") -> dict:
    """{'node': Level, 'net': Level} fitted from the rows of collective `op` (rows without one are all-reduces)
    in the sweep's comm results [(device_count, nodes, rows)]; a level no row measured is absent."""
    node_rows, net_rows = [], []
    for _count, nodes, rows in comm:
        for r in (r for r in rows if r.get("op", "all_reduce") == op):
            if r.get("scope") == "node" or (r.get("scope", "world") == "world" and int(nodes or 1) == 1):
                node_rows.append(r)
            elif r.get("scope", "world") == "world":
                net_rows.append({**r, "nodes": int(nodes)})
    out = {}
    node = fit_level(node_rows, "measured inside a node", op=op)
    if node is not None:
        out["node"] = node
    net = fit_level(net_rows, "measured across nodes", node or Level(1.0, 0.0, "none"), op=op)
    if net is not None:
        out["net"] = net
    return out


def own_levels(comm: Sequence[tuple]) -> tuple:
    """((collective, level name, Level), ...): each OWN_FIT collective's fit per level the sweep measured it at."""
    return tuple((op, name, lv) for op in OWN_FIT for name, lv in levels_from_comm(comm, op=op).items())


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


def network_for(measured: dict, preset: Optional[Preset], explicit: dict, gpus_per_node: int, backend: str,
                own: tuple = ()) -> Network:
    """Each level: what the user typed (--network LEVEL=...), else measured, else the preset's, else, with no
    preset, the other level's figures (a flat network: said so in its source). The collectives' own fits (`own`)
    count at a level whose all-reduce figures are the measured ones (a level the user typed is the user's for
    every collective)."""
    chosen = {}
    for name in LEVELS:
        chosen[name] = explicit.get(name) or measured.get(name) or (getattr(preset, name) if preset else None)
    if chosen["node"] is None and chosen["net"] is None:
        raise ConfigError("no network to forecast on: the sweep stored no all-reduce microbenchmark (--comm-bench) "
                          f"and --network named none; give --network {'|'.join(PRESETS)} or node=GBPS@US,net=GBPS@US")
    for name, other in (("node", "net"), ("net", "node")):
        if chosen[name] is None:
            o = chosen[other]
            chosen[name] = replace(o, source=f"assumed as fast as the {other} level ({o.source}): nothing measured or "
                                             f"named it; --network {name}=GBPS@US names it", measured=False)
    kept = tuple((op, name, lv) for op, name, lv in own if name not in explicit and chosen[name] is measured.get(name))
    return Network(node=chosen["node"], net=chosen["net"], gpus_per_node=gpus_per_node, backend=backend, own=kept)
