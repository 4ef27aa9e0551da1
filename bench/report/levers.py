"""What each memory lever bought and cost, measured: every configuration with a lever on beside its twin with that lever
off (the same strategy, count, precision, optimizer and other settings), its peak memory per device and its step time.

    blocks(sweep)   # report blocks: one table over the workloads, a sentence per pair

Levers: activation checkpointing (--activation-checkpointing: memory for recomputation), FSDP's CPU offload
(--fsdp-offload cpu: GPU memory for host copies and a CPU optimizer step) and DDP's find_unused_parameters
(--find-unused-parameters true: a graph traversal each step, for models that need it; where none needs it, its cost).
Peak memory per device as the fastest-that-fits table takes it (bench.report.frontier.peak_mib); the time as the
ratio of throughputs (samples/s over the measured windows: the step time's inverse).
"""
from __future__ import annotations

import math

from bench.report.frontier import peak_mib, size

LEVERS = (("activation_checkpointing", "activation checkpointing"), ("offload", "CPU offload"),
          ("find_unused_parameters", "find_unused_parameters"))


def _without(c, lever: str) -> tuple:
    """The identity of c's twin with `lever` off."""
    options = {k: v for k, v in c.options.items() if k != lever}
    ac = "none" if lever == "activation_checkpointing" else c.activation_checkpointing
    return (c.strategy, c.device_count, c.precision, c.channels_last, c.compiled, c.optimizer, ac, tuple(sorted(options.items())))


def _on(c, lever: str) -> bool:
    if lever == "activation_checkpointing":
        return c.activation_checkpointing != "none"
    return c.options.get(lever) not in (None, False, "none")


def pairs(configs: list) -> list:
    """[(lever's words, on, off)] for every configuration with a lever on whose twin without it was measured."""
    by_identity = {_without(c, ""): c for c in configs}
    out = []
    for lever, words in LEVERS:
        for c in configs:
            twin = by_identity.get(_without(c, lever)) if _on(c, lever) else None
            if twin is not None and not math.isnan(c.samples_per_s) and not math.isnan(twin.samples_per_s):
                what = f"{words} {c.activation_checkpointing}" if lever == "activation_checkpointing" else words
                out.append((what, c, twin))
    return out


def blocks(sweep) -> list:
    rows, sentences = [], []
    for workload, configs in sweep.bench.items():
        for what, on, off in pairs(configs):
            p_on, p_off = peak_mib(on), peak_mib(off)
            saved = (p_off - p_on) / p_off if p_on is not None and p_off else math.nan
            slower = off.samples_per_s / on.samples_per_s
            u = "GPU" if on.device_type == "cuda" else "process"
            shown = "–" if math.isnan(saved) else f"{saved:.0%}" if saved >= 0 else f"none ({-saved:.0%} more)"
            rows.append([workload, what, off.label, size(p_off), size(p_on), shown, f"{slower:.2f}x"])
            mem = ("" if math.isnan(saved) else
                   f"{'saves' if saved >= 0 else 'costs'} {size(abs(p_off - p_on))} of peak memory per {u} "
                   f"({size(p_off)} to {size(p_on)}, {abs(saved):.0%})")
            sentences.append(f"{workload}, {off.label}: {what} {mem}{' and ' if mem else ''}makes a step {slower:.2f}x as long "
                             f"({off.samples_per_s:.1f} to {on.samples_per_s:.1f} samples/s).")
    if not rows:
        return []
    return [("h", 3, "What the memory levers saved and cost"),
            ("p", "Each configuration with a lever on beside the same configuration without it, measured in this sweep. "
                  "Peak memory per device as in the table above; step time as the ratio of throughputs."),
            ("table", ["workload", "lever", "configuration", "peak without", "peak with", "memory saved",
                       "step time with / without"], rows)] + [("p", s) for s in sentences]
