"""Which of a trace's kernels are the traced steps' own, and where each step begins on the GPU (bench.analysis.traces).

The GPU runs behind the host. When a GPU-bound step's ProfilerStep#N begins on the host, the kernels of the step before
it still run on the device for as long as the GPU lags. A window that began at the host's start counted them as the
first traced step's work: three steps of 100 ms of kernels on a GPU 20 ms behind read 320 ms, 106.7 ms a step, and the
committed H100 DeepLabV3 (single x1 fp32) 111.0 ms of kernels a traced step in a 108.0 ms step ('GPU busy 103%').
The rule each trace is read by (its `how`, stored with its figures: bench.report.busy tells the old window apart):
  - 'gpu_steps': Kineto copied the step annotations onto the GPU's streams (gpu_user_annotation, from a step's first
    kernel to its last): a step begins on the GPU where the earliest of its copies does;
  - 'launches': without the copies, each kernel is matched to the host call that launched it by the trace's
    correlation id (args "correlation" on the kernel, the copy or the memset, and on its cudaLaunchKernel or
    cudaMemcpyAsync, category cuda_runtime or cuda_driver): a step begins on the GPU at the first kernel it launched;
  - 'host_start': with neither, a step begins where the host's annotation does.
Under every rule a kernel launched in no counted step is left out whole (the step before the first, or after the
last), and one whose launch the trace does not hold counts only where it started inside the window: one that began
before it is an earlier step's, never clipped in. A trace without steps keeps every kernel ('').

    how, steps, kept = assign(steps, counted, kernels, launches)
    correlation(event) -> int or None
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Optional

LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")   # the host's calls that launch kernels, copies and memsets
RULES = ("gpu_steps", "launches", "host_start")


def correlation(event: dict) -> Optional[int]:
    """The event's correlation id (CUPTI's, shared by a kernel and the call that launched it), or None."""
    c = (event.get("args") or {}).get("correlation")
    return c if isinstance(c, int) and not isinstance(c, bool) else None


def assign(steps: list, counted: list, kernels: list, launches: dict) -> tuple:
    """steps: the trace's [(host start, host end, end, GPU start or None)] (bench.shared.chrometrace.step_spans with
    gpu=True); counted: those the figures count, in order; kernels: [(start, end, correlation or None, ...)];
    launches: correlation -> the launching call's host time.
    -> (how, the steps with each one's GPU start resolved (never None), the kernels the counted steps own)."""
    if not counted:
        return "", [(a, b, e, a if g is None else g) for a, b, e, g in steps], list(kernels)
    host = [(a, b) for a, b, _, _ in counted]
    starts = [a for a, _ in host]
    copies = any(g is not None for *_, g in counted)
    kept, unmatched, firsts = [], [], {}
    for k in kernels:
        at = launches.get(k[2]) if k[2] is not None else None
        if at is None:
            unmatched.append(k)
            continue
        i = bisect_right(starts, at) - 1
        if i >= 0 and at < host[i][1]:
            kept.append(k)
            firsts[i] = min(firsts.get(i, k[0]), k[0])
    how = "gpu_steps" if copies else "launches" if len(unmatched) < len(kernels) else "host_start"
    index = {a: i for i, (a, _) in enumerate(host)}
    resolved = []
    for a, b, e, g in steps:
        if g is None and how == "launches":
            g = firsts.get(index.get(a, -1))
        resolved.append((a, b, e, a if g is None else g))
    first = next(g for a, _, _, g in resolved if a == host[0][0])   # where the window begins
    return how, resolved, kept + [k for k in unmatched if k[0] >= first]
