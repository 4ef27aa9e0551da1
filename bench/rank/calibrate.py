"""How many steps the measured window takes: `--steps`, or more where those would last less than
--min-window-s (the default sweep's 1 s), judged from the warm-up's last step, the way pyperf and
pytest-benchmark calibrate a loop to a minimum time before they time it.

    n = measured_steps(spec, warmup_rows, distributed, device)

Every rank must run the same steps (a DDP step is a collective), so the ranks agree on the largest count any
of them asks for. The warm-up's first step carries allocation (and compilation), so the last warm-up step is
the yardstick; with no warm-up step there is nothing to judge by, and `steps` stands.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

MAX_STEPS = 2000   # a bound on the rows stored per rank: 1 s of 0.5 ms steps


def wanted(steps: int, min_window_s: float, step_s: float) -> int:
    """At least `steps`, and enough steps of step_s seconds to fill min_window_s, at most MAX_STEPS."""
    if min_window_s <= 0 or not step_s > 0:
        return steps
    return max(steps, min(MAX_STEPS, math.ceil(min_window_s / step_s)))


def measured_steps(spec, warmup_rows: list, distributed: bool, device: torch.device) -> int:
    """The measured window's step count for this run (the same on every rank)."""
    if spec.min_window_s <= 0 or not warmup_rows:
        return spec.steps
    n = wanted(spec.steps, spec.min_window_s, warmup_rows[-1]["step_ms"] / 1e3)
    if distributed:
        t = torch.tensor([n], dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        n = int(t.item())
    return n
