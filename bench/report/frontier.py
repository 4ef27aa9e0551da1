"""The fastest configuration that fits a memory budget (per GPU; on CPU per node), and the memory-speed frontier behind it.

    budget, how = budget_mib(sweep, override_gib)   # MiB per GPU, on CPU per node (None: no budget), how it was set
    blocks(sweep, budget, how)                      # report blocks: one row per workload, precision and optimizer
    frontier_figure(configs, workload, where, budget) -> Figure: samples/s against the peak the budget holds

A configuration's peak memory per device (`peak_mib`): on CUDA the device level on its fullest GPU, what runs out
(nvidia-smi's figure: the CUDA context and NCCL's buffers on top of the allocator's cache; 0.6-1.3 GiB above the
reserved peak on one H100), the larger of the steady state's and the level at the end of the warm-up (compilation's
memory included; cuDNN's benchmark workspaces, given back before that reading, are said beside: `warmup_words`), net
of the suite's pre-generated batches; where no device level was recorded, the allocator's peak reserved, said so
(`peak_source`). On CPU its largest rank's peak RSS per process, and the figure the budget holds (`held_mib`) is the
node's: its processes' peak RSS summed, as a node's ranks share its RAM (a CPU page held DDP x2 at 1.40 GiB a process
to a budget, while its two processes needed 2.80 GiB of the box). The rule is written once, in
bench.analysis.fit.budget_peak: `./run_bench.sh fit` judges its trials by the same figure, so the two never disagree
on one page. The budget:
`./run_bench.sh report --memory-budget-gib`, else the sweep's `--memory-budget-gib`, else on CUDA the smallest GPU's
memory; on CPU none unless given. Rows are per workload, precision and optimizer: those choose the training recipe, the
rest (strategy, settings, count) is how to run it.
"""
from __future__ import annotations

import math
from typing import Optional

from bench.analysis import fit as fitting
from bench.forecast.batches import per_device   # a configuration's batch per device
from bench.forecast import memory as mm
from bench.analysis.results import Sweep
from bench.report import choice, plots
from bench.report.pages import fmt

LISTED = 8   # configurations named per row as not fitting; the rest are counted


def peak_mib(c) -> Optional[float]:
    """Peak memory per device of a configuration, MiB (None: not recorded): see `peak_source`. On CPU per process."""
    return _peak(c)[0]


def processes_per_node(c) -> int:
    """How many of a configuration's processes one node runs (all of them on one node)."""
    return c.device_count // max(int(getattr(c, "nodes", 1) or 1), 1)


def node_mib(c) -> Optional[float]:
    """CPU: the fullest node's peak RSS, its processes' summed (bench.analysis.fit.node_total); None on CUDA."""
    if c.device_type == "cuda":
        return None
    per_node = processes_per_node(c) if int(getattr(c, "nodes", 1) or 1) > 1 else 0
    return fitting.node_total(c.memory_mib, per_node)


def held_mib(c) -> Optional[float]:
    """The peak the memory budget is held against (bench.analysis.fit.budget_peak): per GPU on CUDA (`peak_mib`), the
    node's total on CPU (`node_mib`)."""
    return peak_mib(c) if c.device_type == "cuda" else node_mib(c)


def unit(c) -> str:
    """What the budget is per: 'GPU', or on CPU 'node' (its processes share its RAM)."""
    return "GPU" if c.device_type == "cuda" else "node"


def peak_words(c) -> str:
    """'2.76 GiB per GPU'; on CPU '1.40 GiB per process, 2.80 GiB per node (2 processes)' or '1.17 GiB per node (1
    process)': the node's total, which the budget holds, beside the per-process peak where they differ."""
    if c.device_type == "cuda":
        return f"{size(peak_mib(c))} per GPU"
    k = processes_per_node(c)
    return (f"{size(peak_mib(c))} per process, " if k > 1 else "") + \
        f"{size(node_mib(c))} per node ({k} process{'es' if k > 1 else ''})"


def peak_source(c) -> str:
    """What `peak_mib` holds: 'device level' (CUDA, whole run), 'reserved' (CUDA without a device level), 'RSS'."""
    return _peak(c)[1]


def _peak(c) -> tuple:
    """By bench.analysis.fit.device_peak: the figure fit's verdicts hold to the budget too. `memory_mib` holds the
    allocator's peak allocated per GPU on CUDA, each rank's RSS on CPU."""
    cuda = c.device_type == "cuda"
    return fitting.device_peak(c.device_type, c.device_mib, c.run_device_mib, c.reserved_mib,
                               {} if cuda else c.memory_mib, c.memory_mib if cuda else {})


def warmup(c) -> Optional[tuple]:
    """(MiB the allocator held in the warm-up, that with the CUDA context) where it passed the held peak
    (bench.analysis.fit.warmup_held: not held to the budget, said beside it), else None. run_reserved_mib: the
    whole run's peak reserved per device (bench.analysis.memory_rows.run_reserved), absent from older Configs."""
    if c.device_type != "cuda":
        return None
    return fitting.warmup_held(c.device_mib, c.reserved_mib, getattr(c, "run_reserved_mib", None) or {}, peak_mib(c))


def warmup_words(c, name=lambda c: c.label) -> str:
    """'single device x1: steady 5.45 GiB; during the warm-up the allocator held 20.71 GiB (21.33 GiB with the CUDA
    context), ...', '' where it held no more: the DeepLabV3 fp32 page said '5.45 GiB, cuDNN's autotuning included'."""
    held = warmup(c)
    if held is None:
        return ""
    cudnn = bool((getattr(c, "numerics", None) or {}).get("cudnn_benchmark"))
    return (f"{name(c)}: steady {size(peak_mib(c))}; during the warm-up the allocator held {size(held[0])} "
            f"({size(held[1])} with the CUDA context), given back before the device level was read"
            + (" (cuDNN's benchmark search, on in this run, sizes its workspaces to the memory free: a smaller GPU "
               "searches less rather than runs out)" if cudnn else "") + ": not held to the budget")


def size(mib: Optional[float]) -> str:
    """'2.76 GiB', '431 MiB': a peak or a budget, as the forecast writes them too (bench.forecast.memory.budget_text)."""
    return mm.budget_text(mib)


def over_words(peak: float, budget: float) -> str:
    """'2 MiB (+0.4%)': how far a peak passed the budget, never rounded to 0 (a CPU fit read 'over by 0 MiB (+0%)'
    and 'by 2 MiB (+0%)', as if it had fit): under 1 MiB in KiB, a share under 1% to its first digit that is not 0."""
    share = 100 * (peak - budget) / budget
    digits = 0 if share >= 1 else 1 if share >= 0.1 else 2
    return f"{over_size(peak - budget)} (+{share:.{digits}f}%)"


def over_size(over_mib: float, unit: Optional[str] = None) -> str:
    """An overage in MiB as `size` writes it, under 1 MiB in KiB: never '0 MiB'; with `unit` ('GiB' or 'MiB', from
    `over_unit`) in that unit whatever its size, so one column reads in one."""
    if unit == "GiB":
        return f"{over_mib / 1024:.2f} GiB"
    if over_mib < 1:
        return f"{max(over_mib * 1024, 1):.0f} KiB"
    return f"{over_mib:.0f} MiB" if unit == "MiB" else size(over_mib)


GIB_READABLE_MIB = 10.24   # 0.01 GiB: the least overage GiB's two decimals still tell from none


def over_unit(overs_mib: list) -> Optional[str]:
    """The one unit a column's overages are written in: None where `size` writes them all in one already (all under
    1 GiB: '34 MiB' stays so, not '0.03 GiB'; or all at least 1 GiB); where they straddle 1 GiB, GiB (two decimals, as
    the page's peaks) if each reads at least 0.01 GiB, else MiB. The H200 fit's column read 'over by 922 MiB' beside
    'over by 1.14 GiB'."""
    if all(o < 1024 for o in overs_mib) or all(o >= 1024 for o in overs_mib):
        return None
    return "GiB" if all(o >= GIB_READABLE_MIB for o in overs_mib) else "MiB"


def names(configs: list, batches: bool = False):
    """c -> its name in a sentence: its label, with ' at batch B' where the same label also ran at another per-device
    batch, or everywhere with `batches` (a fit sweep, which measures configurations at their own batches): 'DDP x2
    [fp32, adamw] at batch 3'. A fit report read
    'Fastest: DDP x2 [fp32, adamw] ...; did not fit: DDP x2 [fp32, adamw] ...; the least memory: DDP x2 [fp32,
    adamw]', one label at three batches."""
    seen: dict = {}
    for c in configs:
        seen.setdefault(c.label, set()).add(per_device(c))
    return lambda c: c.label + (f" at batch {per_device(c)}" if batches or len(seen.get(c.label, ())) > 1 else "")


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


def _given(gib: float, u: str, flag: str) -> str:
    """'16.00 GiB per GPU (--memory-budget-gib)': the budget as every other figure of the page writes it (`size`), with
    the value typed where that does not show it exactly: '431 MiB per process (report --memory-budget-gib 0.4205)' (a CPU
    page read '0.4205 GiB per device' above 'Fastest within 431 MiB per process')."""
    exact = gib >= 1 and round(gib, 2) == gib
    return f"{size(gib * 1024)} per {u} ({flag}" + ("" if exact else f" {gib:g}") + ")"


def budget_mib(sweep: Sweep, override_gib: Optional[float] = None) -> tuple:
    """(budget MiB or None, how it was set): per GPU, on CPU per node (`held_mib`); the forecast's rule and figure
    (bench.forecast.memory.budget), in the page's words."""
    mib, source = mm.budget(sweep, override_gib)
    u = "GPU" if any(c.device_type == "cuda" for cs in sweep.bench.values() for c in cs) else "node"
    if source == mm.TYPED:
        return mib, _given(override_gib, u, "report --memory-budget-gib")
    if source == mm.SWEPT:
        return mib, _given(mib / 1024, u, "--memory-budget-gib")
    if source == mm.GPU:
        return mib, f"{size(mib)} per GPU (the GPU's memory; --memory-budget-gib sets another)"
    return None, "none (on CPU --memory-budget-gib sets one, per node)"


def groups(configs: list) -> dict:
    """(precision, optimizer, DeepLabV3's auxiliary head) -> the measured configurations of that recipe and model: an
    unused head is another model (bench.report.choice.models), never the fastest within the budget for the one with
    its loss."""
    out: dict = {}
    for c in configs:
        if not math.isnan(c.samples_per_s) and held_mib(c) is not None:
            out.setdefault((c.precision, c.optimizer, c.aux), []).append(c)
    return out


MEMORY_ALIKE = 0.02   # peaks within 2% of the least are alike: three processes of one CPU configuration peaked 408-413 MiB


def least_memory(cs: list) -> tuple:
    """(the configuration named as holding the least memory, the others alike to it): among those whose peak is within
    MEMORY_ALIKE of the least, the simplest (bench.report.choice.simplicity), then the fastest. A CPU page named
    DataParallel x1, a pass-through timing single again, 'the least memory' at 1144 MiB against single's 1146."""
    low = min(held_mib(c) for c in cs)   # on CPU the node's total: the machine's memory it takes
    alike = [c for c in cs if held_mib(c) <= low * (1 + MEMORY_ALIKE)]
    least = min(alike, key=lambda c: (choice.simplicity(c), -c.samples_per_s))
    return least, [c for c in alike if c is not least]


def _least_words(least, alike: list, name, with_size: bool = True) -> str:
    """'single device x1, 1.12 GiB (DataParallel x1 alike, within 2% of it)'; on CPU '..., 1.12 GiB per node (1
    process)'."""
    figure = size(peak_mib(least)) if least.device_type == "cuda" else peak_words(least)
    return (name(least) + (f", {figure}" if with_size else "")
            + (f" ({', '.join(name(c) for c in alike)} alike, within {MEMORY_ALIKE:.0%} of it)" if alike else ""))


def answer(workload: str, configs: list, budget: Optional[float], batches: bool = False) -> list:
    """[(row, sentence)] for one workload: per precision and optimizer, the configuration the recommendation's rule
    picks among those within the budget (bench.report.choice.choose: the fastest, unless a simpler one is within the
    noise of it; DataParallel only on a lead the noise resolves). The budget table had named DataParallel x1, on CPU a
    pass-through that times single again, on a lead the recommendation above it had refused. Each is named by its label
    (a compiled configuration is never plain 'single device x1'), with its batch where the label ran at several, or
    with `batches` (a fit sweep) always (`names`)."""
    _name = names(configs, batches)
    out = []
    for (precision, optimizer, aux), cs in groups(configs).items():
        fits = [c for c in cs if budget is None or held_mib(c) <= budget]
        over = sorted((c for c in cs if c not in fits), key=lambda c: held_mib(c) - budget)
        best, fastest, tie = choice.choose(fits, _name) if fits else (None, None, None)
        missed = [f"{_name(c)} by {over_words(held_mib(c), budget)}" for c in over[:LISTED]]
        missed += [f"{len(over) - LISTED} more"] if len(over) > LISTED else []
        least, alike = least_memory(cs)
        cuda, u = cs[0].device_type == "cuda", unit(cs[0])
        where = f"(plot: {plots.file_name(workload, 'frontier')})"
        if best is None:
            text = (f"Nothing measured fits {size(budget)} per {u}: the least memory, "
                    f"{_least_words(least, alike, _name, with_size=False)}, needs "
                    f"{size(peak_mib(least)) if cuda else peak_words(least)} {where}.")
        else:
            within = size(budget) + ' per ' + u if budget else 'any memory (no budget)'
            text = _pick_words(best, fastest, tie, within, _name)
            text += (f"; did not fit: {'; '.join(missed)}" if missed else ("; every configuration fits" if budget else ""))
            if best is not least and best not in alike:
                text += (f". The least memory: {_least_words(least, alike, _name)} at "
                         f"{least.samples_per_s:.1f} samples/s")
            text += f" {where}"
            text += "".join(f"; {w}" for w in [warmup_words(best, _name)] if w) + "."
        recipe = f"{precision}, {optimizer}" + choice.model_suffix(aux, configs)
        row = [workload, recipe, _name(best) if best else "nothing fits",
               fmt(best.samples_per_s) if best else "–",
               (size(peak_mib(best)) + (" (reserved)" if peak_source(best) == "reserved" else "")) if best else "–",
               "; ".join(missed) or "–", mfu_cell(best)]
        if best is not None and choice.unresolved(best, tie):   # the recommendation's row: no answer yet, no figures
            row[2:5] = [choice.unresolved_cell(best, fastest, _name), "–", "–"]
            row[-1] = "–"
        if not cuda:   # the node's total beside the per-process peak: the figure the budget holds
            row.insert(5, size(node_mib(best)) if best is not None and row[4] != "–" else "–")
        out.append((row, f"{workload}, {row[1]}: {text}"))
    return out


def _pick_words(best, fastest, tie, within: str, name) -> str:
    """'Recommended within 79.18 GiB per GPU: X, N samples/s at a peak of M per GPU; <why X stands>', or where the pick
    is no answer yet (bench.report.choice.unresolved: it stands only on the fastest's unresolved lead and ran one
    unstable process) both, recommending neither: the H100 self-check's table named DDP x1 [bf16] where its
    recommendation read 'not resolved: --repeats 3 (DDP x1 [bf16], unstable, or DataParallel x1 [bf16])'."""
    def at(c) -> str:
        return f"{name(c)}, {c.samples_per_s:.1f} samples/s at a peak of {peak_words(c)}"
    if tie is not None and choice.unresolved(best, tie):
        faster = "as fast (less than 1% apart)" if tie.gap < 0.005 else f"{tie.gap:.0%} faster"
        return (f"Not resolved within {within}: {at(best)}, unstable, or {at(fastest)}; {name(fastest)} is {faster} "
                f"({choice._margin_note(tie)}): neither is recommended until --repeats 3 tells them apart, as in the "
                "recommendation")
    text = f"{'Fastest' if tie is None else 'Recommended'} within {within}: {at(best)}"
    return text + (f"; {choice.tie_clause(best, fastest, tie, name)}" if tie is not None else "")


WARMUP_RULE = (" cuDNN's benchmark search in the warm-up gives its workspaces back before that level is read, and "
               "sizes them to the memory free: where the allocator held more in the warm-up, the row's sentence says "
               "how much, not held to the budget.")
UNRESOLVED_RULE = ("; 'not resolved: --repeats 3' and both, as in the recommendation, where it stands only on a faster "
                   "one's unresolved lead and ran one unstable process itself")  # said where a row reads so


HEADERS = ["workload", "precision, optimizer", "recommended within the budget", "samples/s", "its peak memory per device",
           "did not fit (over the budget by)", "MFU"]


def mfu_cell(c) -> str:
    """A configuration's MFU as the configuration table gives it (bench.analysis.utilisation.Utilisation.mfu_cell: HFU
    beside it where activation checkpointing recomputes, an error above 100%); '–' without one. The budget table chose
    a configuration by speed and memory alone: how much of the GPU it used was in the main table only (issue 39)."""
    u = getattr(c, "utilisation", None) if c is not None else None
    return u.mfu_cell() if u is not None else "–"


def _cpu_headers() -> list:
    """A CPU page's: the peak per process, then the node's total beside it."""
    out = [h.replace("per device", "per process") for h in HEADERS]
    return out[:5] + ["per node (its processes summed)"] + out[5:]


def blocks(sweep: Sweep, budget: Optional[float], how: str) -> list:
    """The 'fastest within the memory budget' table, one row per workload, precision and optimizer, and its claims."""
    answers = [a for workload, configs in sweep.bench.items() for a in answer(workload, configs, budget, bool(sweep.fit))]
    if not answers:
        return []
    cuda = any(c.device_type == "cuda" for cs in sweep.bench.values() for c in cs)
    peak = ("Peak memory per device: on CUDA the device level (nvidia-smi) on the fullest GPU, the larger of the "
            "steady state's and the level at the end of the warm-up (compilation's memory included): what runs out "
            "(the CUDA context and NCCL's buffers on top of the allocator's cache), net of the suite's pre-generated "
            "batches; where a configuration recorded no device level, its allocator peak reserved, marked "
            "'reserved' (the context then comes on top)." + (WARMUP_RULE if any(
                warmup(c) for cs in sweep.bench.values() for c in cs) else "")
            if cuda
            else "Peak memory per process: the largest rank's peak RSS; per node: the peak RSS of the processes one "
                 "node runs, summed, since they share its RAM: the budget is held against the node's.")
    headers = HEADERS if cuda else _cpu_headers()
    rule = UNRESOLVED_RULE if any(r[2].startswith("not resolved") for r, _ in answers) else ""
    return [("h", 3, "Fastest within the memory budget"),
            ("p", f"Memory budget: {how}. {peak} Every strategy, setting and count of a workload competes; the plot "
                  "shows them all. Each row names the configuration the recommendation's rule picks among those that "
                  "fit: the fastest, unless a simpler one is within the noise of it, DataParallel only on a lead the "
                  f"noise resolves{rule}. "
                  f"Peaks within {MEMORY_ALIKE:.0%} of each other are alike: the least memory names the simplest of them."),
            ("table", headers, [r for r, _ in answers])] + [("p", t) for _, t in answers]
