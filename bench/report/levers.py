"""What each memory lever bought and cost, measured: every configuration with a lever on beside its twin with that lever
off (the same strategy, count, precision, optimizer and other settings), its peak memory per device and its step time.

    blocks(sweep)   # report blocks: one table over the workloads, a sentence per pair

Levers: activation checkpointing (--activation-checkpointing: memory for recomputation), FSDP's CPU offload
(--fsdp-offload cpu: GPU memory for host copies and a CPU optimizer step) and DDP's find_unused_parameters
(--find-unused-parameters true: a graph traversal each step, for models that need it; where none needs it, its cost).
Peak memory per device as the fastest-that-fits table takes it (bench.report.frontier.peak_mib); the time as the
ratio of throughputs (samples/s over the measured windows: the step time's inverse), 'not resolved' where either side
ran one process whose steps were unstable (bench.report.choice.unsteady): on one H100 the same lever read 1.51x, 1.80x
and 1.90x on three near-identical setups, each from one process whose steps spread 19-34% of their median, a spread
that was their noise, not the strategies'.
"""
from __future__ import annotations

import math

from bench.report.choice import instability, unsteady, unsteady_words
from bench.report.frontier import mfu_cell, peak_mib, size

LEVERS = (("activation_checkpointing", "activation checkpointing"), ("offload", "CPU offload"),
          ("find_unused_parameters", "find_unused_parameters"))


def _without(c, lever: str) -> tuple:
    """The identity of c's twin with `lever` off: every other setting alike, the batch and DeepLabV3's
    auxiliary head too (the global batch at its count; an H200 sweep of --deeplabv3-aux true,unused --find-unused-parameters false,true set
    [find_unused_parameters, aux=unused] beside [aux=true], and gave find_unused_parameters the 12% that a
    configuration with unused parameters cost; its true twin, [aux=unused] without it, DDP refuses)."""
    options = {k: v for k, v in c.options.items() if k != lever}
    ac = "none" if lever == "activation_checkpointing" else c.activation_checkpointing
    return (c.strategy, c.device_count, c.nodes, c.global_batch, c.precision, c.channels_last, c.compiled,
            c.optimizer, ac, c.aux, tuple(sorted(options.items())))


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


def stability(on, off) -> str:
    """The table's stability cell: 'stable'; which side ran one unstable process and its spread (IQR / median); or,
    where both ran several, what makes either unstable (choice.instability: an H200's checkpointing pairs read
    'stable' beside two processes a side 14-21% apart)."""
    shaky = [f"{side} {c.summary.iqr_ms / c.summary.median_ms:.0%}" for side, c in (("with", on), ("without", off))
             if unsteady(c)]
    if shaky:
        return f"unstable, one process (IQR: {', '.join(shaky)})"
    spread = [f"{side}: {instability(c)[0][0]}" for side, c in (("with", on), ("without", off)) if instability(c)]
    return "stable" if not spread else "unstable (" + "; ".join(spread) + ")"


def spread_words(on, off, slower: float) -> str:
    """Where either side's processes spread as far as the ratio is from 1 (a 1.10x against processes 21% apart), the
    ratio is no more than that spread: its words, else ''."""
    wide = [c for c in (on, off) if len(c.process_sps) > 1 and c.repeat_spread >= abs(slower - 1.0)]
    return "; ".join(f"{c.label}'s {len(c.process_sps)} processes spread {c.repeat_spread:.0%}" for c in wide)


def mfu_pair(on, off) -> str:
    """'7.0% (HFU 8.6%) / 7.4%': each side's MFU cell (bench.analysis.utilisation.Utilisation.mfu_cell, HFU where
    activation checkpointing recomputes); '–' where neither has one. An H200's checkpointing pair gave its step-time
    ratio here and its HFU (8.6% against 7.0% MFU) in the configuration table alone."""
    cells = [mfu_cell(c) for c in (on, off)]
    return "–" if cells == ["–", "–"] else " / ".join(cells)


def blocks(sweep) -> list:
    rows, sentences = [], []
    for workload, configs in sweep.bench.items():
        for what, on, off in pairs(configs):
            p_on, p_off = peak_mib(on), peak_mib(off)
            saved = (p_off - p_on) / p_off if p_on is not None and p_off else math.nan
            slower = off.samples_per_s / on.samples_per_s
            u = "GPU" if on.device_type == "cuda" else "process"
            shown = "–" if math.isnan(saved) else f"{saved:.0%}" if saved >= 0 else f"none ({-saved:.0%} more)"
            shaky = unsteady_words([on, off]) or spread_words(on, off, slower)
            ratio = f"{slower:.2f}x" if not shaky else f"not resolved ({slower:.2f}x)"
            rows.append([workload, what, off.label, size(p_off), size(p_on), shown, ratio, stability(on, off),
                         mfu_pair(on, off)])
            mem = ("" if math.isnan(saved) else
                   f"{'saves' if saved >= 0 else 'costs'} {size(abs(p_off - p_on))} of peak memory per {u} "
                   f"({size(p_off)} to {size(p_on)}, {abs(saved):.0%})")
            sentences.append(f"{workload}, {off.label}: {what} {mem}{' and ' if mem else ''}makes a step {slower:.2f}x as "
                             f"long ({off.samples_per_s:.1f} to {on.samples_per_s:.1f} samples/s)"
                             + (f", not resolved: {shaky}, and the ratio may be no more than that spread" if shaky else "") + ".")
    if not rows:
        return []
    return [("h", 3, "What the memory levers saved and cost"),
            ("p", "Each configuration with a lever on beside the same configuration without it, measured in this sweep. "
                  "Peak memory per device as in the table above; step time as the ratio of throughputs, 'not resolved' "
                  "where either side ran one process whose steps were unstable (their spread may be all the ratio says). "
                  "MFU with / without: the model's FLOPs against the dense peak, as in the table above; where "
                  "activation checkpointing recomputes, the hardware's FLOPs utilisation (HFU, the recomputed forward "
                  "included) beside it: the GPU's work, which the model's FLOPs do not count."),
            ("table", ["workload", "lever", "configuration", "peak without", "peak with", "memory saved",
                       "step time with / without", "stability", "MFU with / without"], rows)] + [("p", s) for s in sentences]
