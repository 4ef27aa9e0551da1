"""Waiting in collectives, across a configuration's ranks: each collective matched across the ranks' traces, each
rank's wait in it, and the straggler (the rank the others wait for). Reads what bench.analysis.traces took from
each rank's trace; used by it (the traces table's wait_ms, wait_match) and by the report (bench.report.traces).

HTA (Holistic Trace Analysis) takes the collective whose duration varies most across ranks and names the rank
that starts it last. Here every collective is matched across ranks, and a rank's wait is how much longer it spent
in each than the rank that spent least (durations, so the hosts' clocks need not agree). A collective is matched
by the sequence number torch records with it (Kineto's `Seq`, per `Process Group Name`, on NCCL's kernels and
record_param_comms) where the trace has one; else by its name and occurrence, where one extra collective on one
rank misaligns every later pair of that name (gloo's operations carry no sequence number on torch 2.15).

    waits, how = match({rank: [Call]})          # {rank: ms waiting}, 'seq' / 'order' / 'seq+order' / None
    waits_ms({rank: [(name, ms)]})              # the same, the waits alone
    straggler({rank: wait_ms_per_step}, step_ms)   -> the rank the others wait for, or None
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

STRAGGLER_RATIO = 0.5          # the straggler waits less than half what the others typically wait ...
STRAGGLER_MIN_STEP_SHARE = 0.10  # ... and at least 10% of a traced step less
WAIT_MATCHES = {"seq": "by the sequence number the trace records with each collective",
                "order": "by name and order (the trace records no sequence numbers)",
                "seq+order": "by sequence number where the trace records one, else by name and order"}


@dataclass(frozen=True)
class Call:
    """One collective a rank took part in: its name, its time (ms) and, where the trace records it, its key across
    ranks: (process group, sequence number, collective)."""
    name: str
    ms: float
    seq: Optional[tuple] = None


def keyed(items: list) -> dict:
    """[Call or (name, ms)] of one rank -> {key: ms}: ('seq', group, number, collective) where the trace records a
    sequence number (several kernels of one collective add up), else ('order', name, occurrence)."""
    out: dict = {}
    seen: dict = {}
    for item in items:
        name, ms, seq = (item.name, item.ms, item.seq) if isinstance(item, Call) else (item[0], item[1], None)
        if seq is None:
            key = ("order", name, seen.get(name, 0))
            seen[name] = seen.get(name, 0) + 1
        else:
            key = ("seq", *seq)
        out[key] = out.get(key, 0.0) + ms
    return out


def match(per_rank: dict) -> tuple:
    """{rank: [Call or (name, ms)]} -> ({rank: ms waiting in the collectives every rank has}, how they were matched:
    'seq', 'order', 'seq+order', or None where no collective is common to every rank)."""
    keys = {r: keyed(items) for r, items in per_rank.items()}
    common = set.intersection(*(set(k) for k in keys.values())) if keys else set()
    kinds = sorted({k[0] for k in common}, reverse=True)
    how = "+".join(kinds) or None
    least = {k: min(keys[r][k] for r in keys) for k in common}
    return {r: sum(ms[k] - least[k] for k in common) for r, ms in keys.items()}, how


def waits_ms(per_rank: dict) -> dict:
    """{rank: [Call or (name, ms)]} -> {rank: ms spent waiting in collectives}: for each collective matched across
    ranks (match()), a rank's time in it beyond the least any rank spent in it."""
    return match(per_rank)[0]


def straggler(wait_ms_per_step: dict, step_ms: float) -> Optional[int]:
    """The rank the others wait for: the one that waits markedly less than the others' median; None if none does."""
    waits = {r: w for r, w in wait_ms_per_step.items() if w is not None and not math.isnan(w)}
    if len(waits) < 2:
        return None
    rank = min(waits, key=waits.get)
    others = sorted(w for r, w in waits.items() if r != rank)
    typical = others[len(others) // 2] if len(others) % 2 else (others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
    gap = typical - waits[rank]
    if waits[rank] < STRAGGLER_RATIO * typical and gap > STRAGGLER_MIN_STEP_SHARE * step_ms:
        return rank
    return None
