"""The fastest configuration that fits a memory budget per device, and the memory-speed frontier behind it.

    budget, how = budget_mib(sweep, override_gib)   # MiB per device (None: no budget), and how it was set
    blocks(sweep, budget, how)                      # report blocks: one row per workload, precision and optimizer
    frontier_figure(configs, workload, where, budget) -> Figure: samples/s against peak memory per device

A configuration's peak memory per device (`peak_mib`): on CUDA the allocator's peak reserved on its fullest GPU
(what it held from the driver, net of the suite's pre-generated batches; the CUDA context comes on top), on CPU its
largest rank's peak RSS. The budget: `./run_bench.sh report --memory-budget-gib`, else the sweep's
`--memory-budget-gib`, else on CUDA the smallest GPU's memory; on CPU none unless given. Rows are per workload,
precision and optimizer: those choose the training recipe, the rest (strategy, settings, count) is how to run it.
"""
from __future__ import annotations

import json
import math
from typing import Optional

from matplotlib.figure import Figure

from bench.report import plots, training_state
from bench.report.pages import fmt
from bench.analysis.results import STRATEGY_NAMES, Sweep

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LISTED = 8   # configurations named per row as not fitting; the rest are counted


def peak_mib(c) -> Optional[float]:
    """Peak memory per device of a configuration, MiB (None: not recorded)."""
    mem = (c.reserved_mib or c.memory_mib) if c.device_type == "cuda" else c.memory_mib
    return max(mem.values()) if mem else None


def size(mib: Optional[float]) -> str:
    if mib is None or math.isnan(mib):
        return "–"
    return f"{mib / 1024:.2f} GiB" if abs(mib) >= 1024 else f"{mib:.0f} MiB"


def budget_arg(text: str) -> float:
    """`report --memory-budget-gib`'s value: a finite number of GiB > 0 (argparse's error, exit 2, otherwise)."""
    import argparse
    from bench.config import ConfigError, finite
    try:
        value = finite(text, "--memory-budget-gib")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g} is not allowed; expected GiB > 0")
    return value


def _gpu_memory_mib(sweep: Sweep) -> Optional[float]:
    totals = [g.get("memory_total_mib") for e in sweep.envs for g in (json.loads(e.get("json") or "{}").get("gpus") or [])]
    totals = [t for t in totals if t]
    return min(totals) if totals else None


def budget_mib(sweep: Sweep, override_gib: Optional[float] = None) -> tuple:
    """(budget MiB per device or None, how it was set)."""
    if override_gib:
        return override_gib * 1024, f"{override_gib:g} GiB per device (report --memory-budget-gib)"
    given = json.loads(sweep.sweep.get("config_json") or "{}").get("memory_budget_gib")
    cuda = any(c.device_type == "cuda" for cs in sweep.bench.values() for c in cs)
    gpu = _gpu_memory_mib(sweep) if cuda else None
    if given and gpu and abs(given * 1024 - gpu) < 16:
        return given * 1024, f"{size(given * 1024)} per GPU (the GPU's memory; --memory-budget-gib sets another)"
    if given:
        return given * 1024, f"{given:g} GiB per {'GPU' if cuda else 'process'} (--memory-budget-gib)"
    if gpu:
        return gpu, f"{size(gpu)} per GPU (the GPU's memory; --memory-budget-gib sets another)"
    return None, "none (on CPU --memory-budget-gib sets one, held against each rank's peak RSS)"


def _groups(configs: list) -> dict:
    out: dict = {}
    for c in configs:
        if not math.isnan(c.samples_per_s) and peak_mib(c) is not None:
            out.setdefault((c.precision, c.optimizer), []).append(c)
    return out


def _name(c) -> str:
    opts = [f"{k}={v}" for k, v in sorted(c.options.items())]
    return f"{STRATEGY_NAMES.get(c.strategy, c.strategy)} x{c.device_count}" + (f" ({', '.join(opts)})" if opts else "")


def answer(workload: str, configs: list, budget: Optional[float]) -> list:
    """[(row, sentence)] for one workload: per precision and optimizer, the fastest configuration within the budget."""
    out = []
    for (precision, optimizer), cs in _groups(configs).items():
        fits = [c for c in cs if budget is None or peak_mib(c) <= budget]
        over = sorted((c for c in cs if c not in fits), key=lambda c: peak_mib(c) - budget)
        best = max(fits, key=lambda c: c.samples_per_s) if fits else None
        missed = [f"{_name(c)} by {size(peak_mib(c) - budget)} (+{peak_mib(c) / budget - 1:.0%})" for c in over[:LISTED]]
        missed += [f"{len(over) - LISTED} more"] if len(over) > LISTED else []
        least = min(cs, key=lambda c: (peak_mib(c), -c.samples_per_s))
        u = "GPU" if cs[0].device_type == "cuda" else "process"
        where = f"(plot: {plots.file_name(workload, 'frontier')})"
        if best is None:
            text = (f"Nothing measured fits {size(budget)} per {u}: the least memory, {_name(least)}, needs "
                    f"{size(peak_mib(least))} {where}.")
        else:
            text = (f"Fastest within {size(budget) + ' per ' + u if budget else 'any memory (no budget)'}: {_name(best)}, "
                    f"{best.samples_per_s:.1f} samples/s at a peak of {size(peak_mib(best))} per {u}")
            text += (f"; did not fit: {'; '.join(missed)}" if missed else ("; every configuration fits" if budget else ""))
            if least is not best:
                text += f". The least memory: {_name(least)}, {size(peak_mib(least))} at {least.samples_per_s:.1f} samples/s"
            text += f" {where}."
        row = [workload, f"{precision}, {optimizer}", _name(best) if best else "nothing fits",
               fmt(best.samples_per_s) if best else "–", size(peak_mib(best)) if best else "–", "; ".join(missed) or "–"]
        out.append((row, f"{workload}, {precision}, {optimizer}: {text}"))
    return out


HEADERS = ["workload", "precision, optimizer", "fastest within the budget", "samples/s", "its peak memory per device",
           "did not fit (over the budget by)"]


def blocks(sweep: Sweep, budget: Optional[float], how: str) -> list:
    """The 'fastest within the memory budget' table, one row per workload, precision and optimizer, and its claims."""
    answers = [a for workload, configs in sweep.bench.items() for a in answer(workload, configs, budget)]
    if not answers:
        return []
    return [("h", 3, "Fastest within the memory budget"),
            ("p", f"Memory budget: {how}. Peak memory per device: on CUDA the allocator's peak reserved on the fullest "
                  "GPU, net of the suite's pre-generated batches (the CUDA context comes on top); on CPU the largest "
                  "rank's peak RSS. Every strategy, setting and count of a workload competes; the plot shows them all."),
            ("table", HEADERS, [r for r, _ in answers])] + [("p", t) for _, t in answers]


def frontier(points: list) -> list:
    """The (memory, speed) points no other point beats on both (less or equal memory and more speed), by memory."""
    out, best = [], -math.inf
    for mem, sps in sorted(points, key=lambda p: (p[0], -p[1])):
        if sps > best:
            out.append((mem, sps))
            best = sps
    return out


def frontier_figure(configs: list, workload: str, where: str, budget: Optional[float]) -> Figure:
    """samples/s against peak memory per device: one point per configuration (colour: strategy, marker: count), the
    frontier through the points nothing beats (one per precision and optimizer), the budget as a vertical line."""
    cuda = configs[0].device_type == "cuda"
    scale, unit = (1024.0, "GiB") if cuda else (1.0, "MiB")
    fig = Figure(figsize=(9.0, 5.5), layout="constrained")
    ax = fig.subplots()
    fig.suptitle(f"Speed against peak memory per {'GPU' if cuda else 'process'}\n{workload} on {where}".replace("$", r"\$"))
    counts = sorted({c.device_count for c in configs})
    shown = [c for c in configs if not math.isnan(c.samples_per_s) and peak_mib(c) is not None]
    seen = set()
    for c in shown:
        x = peak_mib(c) / scale
        label = STRATEGY_NAMES.get(c.strategy, c.strategy) if c.strategy not in seen else None
        seen.add(c.strategy)
        ax.scatter([x], [c.samples_per_s], color=plots.COLORS.get(c.strategy, "#333333"),
                   marker=MARKERS[counts.index(c.device_count) % len(MARKERS)], s=50, label=label, zorder=3)
        ax.annotate(training_state.label(c), (x, c.samples_per_s), textcoords="offset points", xytext=(4, 4), fontsize=7)
    groups = _groups(shown)  # one frontier per training recipe: precision and optimizer
    for i, ((precision, optimizer), cs) in enumerate(groups.items()):
        line = frontier([(peak_mib(c) / scale, c.samples_per_s) for c in cs])
        ax.step([p[0] for p in line], [p[1] for p in line], where="post", color="#999999", zorder=2,
                linestyle=plots.STYLES[(i + 1) % len(plots.STYLES)],
                label="frontier (nothing faster for less memory)" + (f" [{precision}, {optimizer}]" if len(groups) > 1 else ""))
    if budget:
        ax.axvline(budget / scale, color="#d62728", linestyle=":", label=f"budget {size(budget)}")
    for n in counts:
        ax.scatter([], [], color="#777777", marker=MARKERS[counts.index(n) % len(MARKERS)], label=f"x{n}")
    ax.set(xlabel=f"peak memory per {'GPU, allocator reserved' if cuda else 'process, RSS'} ({unit})",
           ylabel="throughput (samples/s)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def save_plots(configs: list, workload: str, where: str, plots_dir: str, budget: Optional[float]) -> dict:
    """The frontier plot and the training state plot of one workload: {question: path}."""
    import os
    figs = {"frontier": frontier_figure(configs, workload, where, budget)}
    if any(c.state_mib for c in configs):
        figs["memory_state"] = training_state.state_figure(configs, workload, where)
    out = {}
    for question, fig in figs.items():
        out[question] = os.path.join(plots_dir, plots.file_name(workload, question))
        fig.savefig(out[question], dpi=100)
    return out
