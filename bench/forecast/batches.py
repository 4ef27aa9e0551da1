"""The batch a forecast rests on, named where a reader needs it: in a fit sweep (each configuration measured at its own
batch, its trials at others) or a sweep whose runs of a workload used several per-device batches. An H200 fit's
forecast read 'transformer DDP [bf16, adamw]: ... memory: does not fit in the sweep's 16 GiB budget at any count up to
1024', which reads as 'this model never fits 16 GiB'; it was the forecast of the batch-14 run, over the budget already
at one GPU, while the fit's trials at batch 12 fitted.

    mark(sets, sweep)            # each Setting's `batch`: 'at batch 14 a GPU' where the batch matters, else ''
    head_words(s)                # the sentence's first clause: what the forecast rests on ('' where nothing is said)
    over_words(s, budget_mib, peak_mib)   # '; at batch 14 a GPU over the budget already at x1 (17.56 GiB measured)'
"""
from __future__ import annotations

from bench.shared.spec import STRATEGY_NAMES


def per_device(c) -> float:
    """A configuration's batch per device (its global batch over its devices), an int where it is one."""
    n = c.global_batch / max(1, c.device_count)
    return int(n) if n == int(n) else n


def matters(sweep, workload: str) -> bool:
    """Whether the batch needs naming for the workload's forecasts: a fit sweep, or runs of several per-device batches."""
    if getattr(sweep, "fit", None):
        return True
    return len({per_device(c) for c in sweep.bench.get(workload, [])}) > 1


def unit(s) -> str:
    """'a GPU' / 'a process': one device in the sweep's unit (on CPU a device is a gloo process)."""
    return "a GPU" if getattr(s.any, "device_type", "cuda") == "cuda" else "a process"


def words(s) -> str:
    """'at batch 14 a GPU' (weak scaling: the per-device batch of the run the forecast's compute comes from, which is
    what every count is forecast at), 'at global batch 64' (strong scaling: the global batch is shared out)."""
    base = s.configs[min(s.configs)]
    if getattr(base, "scaling", "weak") == "strong":
        return f"at global batch {base.global_batch}"
    return f"at batch {per_device(base)} {unit(s)}"


def mark(sets: list, sweep) -> None:
    """Set each setting's `batch` (bench.forecast.settings.Setting) where its workload's batch matters, else ''."""
    for s in sets:
        s.batch = words(s) if matters(sweep, s.workload) else ""


def head_words(s) -> str:
    """'forecast at batch 14 a GPU, the batch of DDP x1's run (the sweep ran others); ' or ''."""
    if not s.batch:
        return ""
    base = s.configs[min(s.configs)]
    return (f"forecast {s.batch}, the batch of {STRATEGY_NAMES.get(s.strategy, s.strategy)} x{base.device_count}'s "
            "run (the sweep ran others); ")


def over_words(s, budget_mib, peak_mib) -> str:
    """'; at batch 14 a GPU over the budget already at x1 (17.56 GiB measured)' where the batch is named and the
    setting's smallest measured count's peak per device, `peak_mib` (the caller's: the figure the page holds to the
    budget, bench.report.frontier.held_mib: per GPU, on CPU a node's processes summed), is over the budget: the memory verdict is that batch's, not the model's."""
    if not s.batch or not budget_mib or peak_mib is None or peak_mib <= budget_mib:
        return ""
    return f"; {s.batch} over the budget already at x{min(s.configs)} ({peak_mib / 1024:.2f} GiB measured)"
