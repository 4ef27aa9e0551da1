"""The changes that could move where a setting's scaling stops paying (the what-ifs), each a forecast series on the same
inputs: the inter-node network faster and slower (its figure is most often a preset's assumed line rate, not a
measurement: a verdict tested only against a faster network showed how far it leaned on the preset one way only),
bigger buckets, and half the bytes on the wire.

    what_ifs(setting, inputs, machine, counts)    # [(what, [Point])]: this network first (with its range)
    regroup(buckets, cap_bytes)                   # the same gradients in buckets of up to cap_bytes
    first_below(points), network_sets(what_ifs)   # the first count under 75%; whether the network sets it
    on_words(machine, sets, short=False)          # the network a verdict is on: 'this network' only where measured
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from bench.forecast import step as fc
from bench.forecast import settings as fs
from bench.forecast import network as nw
from bench.forecast import spread

WHAT_IF_NET = 4.0                                 # "a faster inter-node network": 4x its bus bandwidth
WHAT_IF_SLOWER = 2.0                              # "a slower one": half its bus bandwidth (the preset's is a line rate)
WHAT_IF_BUCKET_MB = 100.0                         # torchtitan's bucket size
EFFICIENT = 0.75                                  # below this, scaling stops paying (bench.forecast.outlook's)


def what_ifs(s: fs.Setting, inp: fs.Inputs, m: fs.Machine, counts: tuple, draws: int = spread.DRAWS) -> list:
    """[(what, points)]: this network (with its range over `draws`), then each change that could move the 75% count
    (central values only): the inter-node network 4x faster and 2x slower, then the strategy's own levers."""
    out = [("this network", fs.series(s, inp, counts, m, draws))]
    if s.strategy == "dp":
        return out
    for factor, what in ((WHAT_IF_NET, f"{WHAT_IF_NET:g}x faster inter-node network"),
                         (1 / WHAT_IF_SLOWER, f"{WHAT_IF_SLOWER:g}x slower inter-node network")):
        out.append((what, fs.series(s, inp, counts, replace(m, net=nw.faster_net(m.net, factor, "what-if")))))
    if s.strategy in ("ddp", "zero"):
        out.append((f"{WHAT_IF_BUCKET_MB:g} MiB buckets",
                    fs.series(s, replace(inp, buckets=regroup(inp.buckets, WHAT_IF_BUCKET_MB * 2**20)), counts, m)))
        half = [fc.Bucket(b.size_bytes / 2, b.ready_fraction) for b in inp.buckets]
        out.append(("bf16 gradients (bf16_compress_hook)", fs.series(s, replace(inp, buckets=half), counts, m)))
    else:
        out.append(("bf16 parameters and gradients",
                    fs.series(s, replace(inp, units=[(g / 2, r / 2) for g, r in inp.units]), counts, m)))
    return out


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


def first_below(points: list, threshold: float = EFFICIENT) -> Optional[int]:
    """The first count whose efficiency is known and under the threshold."""
    return next((p.count for p in points if not p.refused and not math.isnan(p.efficiency) and p.efficiency < threshold),
                None)


def network_sets(whatifs: list) -> str:
    """Whether the network sets the 75% count: '' when a what-if moves it; else what does, in words."""
    if len(whatifs) < 2:
        return ""
    base = first_below(whatifs[0][1])
    if base is None or any(first_below(pts) != base for _, pts in whatifs[1:]):
        return ""
    bound = next(p.bound for p in whatifs[0][1] if p.count == base)
    every = f"every what-if ({', '.join(w for w, _ in whatifs[1:])}) falls under {EFFICIENT:.0%} at {base} too"
    if bound == "exposed communication":
        return f"no what-if moves it: {every}"
    return f"the network does not set it: {every}; {bound} does"


def on_words(m: fs.Machine, sets: list = (), short: bool = False) -> str:
    """The network a verdict is on, where it is read: 'this network' only where both levels were measured. A one-GPU
    H200 sweep read 'past 16 GPUs on this network' where the network was the h100 preset (8x H100 over NVLink 4, 400
    Gb/s InfiniBand between nodes) and no link had been measured: 'an assumed network (the h100 preset: 8x H100 NVLink +
    400 Gb/s InfiniBand per GPU; nothing measured: this sweep ran on one GPU)'; short, for a list or a legend: 'the
    assumed network (preset h100)'."""
    kinds = [nw.origin(m.net.node), nw.origin(m.net.net)]
    if all(k == "measured" for k, _ in kinds):
        return "this network"
    if all(k in ("measured", "typed") for k, _ in kinds):
        return "the network typed (" + ", ".join(w for k, w in kinds if k == "typed") + ")"
    (nk, nw_), (tk, tw) = kinds
    if nk == tk == "preset" and nw_ == tw:
        if short:
            return f"the assumed network (preset {nw_})"
        counts = [n for t in sets for n in t.configs]
        cuda = all(getattr(t.any, "device_type", "cuda") == "cuda" for t in sets)
        why = (f"this sweep ran on one {'GPU' if cuda else 'process'}" if counts and max(counts) == 1 else
               "the sweep stored no all-reduce rows")
        return f"an assumed network (the {nw_} preset: {nw.PRESETS[nw_].summary}; nothing measured: {why})"
    if short:
        return "a partly assumed network"
    said = {"measured": "measured", "typed": "typed", "flat": "assumed as fast as the other level"}
    level = lambda k, w: f"assumed (preset {w})" if k == "preset" else said[k] + (f" ({w})" if w else "")  # noqa: E731
    return (f"a partly assumed network (inside a node {level(nk, nw_)}; between nodes {level(tk, tw)})")
