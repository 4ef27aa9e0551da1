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
    step_waits({rank: [Call]})                  # {rank: [ms waiting in each traced step]}
    straggler({rank: wait_ms_per_step}, step_ms)   -> the rank the others wait for, or None
    straggler_steps({rank: [ms per traced step]}, step_ms, jitter_ms)   -> the same, only where every step names it
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
    step: Optional[int] = None     # the traced step it started in (0, 1, ...), where the trace marks steps


def _keys(items: list) -> list:
    """[(key, ms, step)] of one rank's collectives, keyed as `keyed` keys them."""
    out, seen = [], {}
    for item in items:
        name, ms, seq, step = ((item.name, item.ms, item.seq, item.step) if isinstance(item, Call)
                               else (item[0], item[1], None, None))
        if seq is None:
            key = ("order", name, seen.get(name, 0))
            seen[name] = seen.get(name, 0) + 1
        else:
            key = ("seq", *seq)
        out.append((key, ms, step))
    return out


def keyed(items: list) -> dict:
    """[Call or (name, ms)] of one rank -> {key: ms}: ('seq', group, number, collective) where the trace records a
    sequence number (several kernels of one collective add up), else ('order', name, occurrence)."""
    out: dict = {}
    for key, ms, _ in _keys(items):
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


def step_waits(per_rank: dict) -> dict:
    """{rank: [Call]} -> {rank: [ms waiting in each traced step]}: `match`'s waits, each added to the step the rank's
    collective started in. A rank's wait in one step is what tells a straggler from jitter: the same rank waiting least
    in every traced step (`straggler_steps`). Ranks whose calls carry no step: {}."""
    keys = {r: _keys(items) for r, items in per_rank.items()}
    if not keys or any(step is None for ks in keys.values() for _, _, step in ks):
        return {}
    common = set.intersection(*({k for k, _, _ in ks} for ks in keys.values()))
    totals = {r: {} for r in keys}
    for r, ks in keys.items():
        for k, ms, _ in ks:
            totals[r][k] = totals[r].get(k, 0.0) + ms
    least = {k: min(totals[r][k] for r in keys) for k in common}
    steps = 1 + max(step for ks in keys.values() for _, _, step in ks)
    out = {r: [0.0] * steps for r in keys}
    first_step = {r: {} for r in keys}
    for r, ks in keys.items():
        for k, _, step in ks:
            first_step[r].setdefault(k, step)
    for r in keys:
        for k in common:
            out[r][first_step[r][k]] += totals[r][k] - least[k]
    return out


def waits_ms(per_rank: dict) -> dict:
    """{rank: [Call or (name, ms)]} -> {rank: ms spent waiting in collectives}: for each collective matched across
    ranks (match()), a rank's time in it beyond the least any rank spent in it."""
    return match(per_rank)[0]


MIN_STRAGGLER_STEPS = 2       # one traced step cannot tell a straggler from a slow step


def straggler_steps(waits_by_step: dict, step_ms: float, jitter_ms: float) -> Optional[int]:
    """The straggler, named only on evidence beyond chance: in every traced step (at least MIN_STRAGGLER_STEPS) the same
    rank waits least, and the others' median wait exceeds its wait by more than the step-to-step jitter (jitter_ms: the
    measured steps' spread) and by `straggler`'s margins. With 8 ranks and 3 traced steps a rank picked by chance is the
    same in all three 1 time in 64; picked from the steps' average it is named whenever one step's noise dominates."""
    ranks = {r: w for r, w in waits_by_step.items() if w}
    steps = min((len(w) for w in ranks.values()), default=0)
    if len(ranks) < 2 or steps < MIN_STRAGGLER_STEPS:
        return None
    named = set()
    for k in range(steps):
        at = {r: w[k] for r, w in ranks.items()}
        rank = straggler(at, step_ms)
        others = sorted(w for r, w in at.items() if r != rank)
        typical = others[len(others) // 2] if others else 0.0
        if rank is None or typical - at[rank] <= jitter_ms:
            return None
        named.add(rank)
    return named.pop() if len(named) == 1 else None


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
