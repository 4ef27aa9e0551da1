"""Timing of training steps and their phases, and peak memory: correct on CUDA and on CPU.

CUDA: one `torch.cuda.synchronize()` at the step boundary, CUDA events for the phases (events do
not stall the GPU, synchronising inside each phase would distort the step). CPU: the monotonic
wall clock (`time.perf_counter_ns`), since CPU work is synchronous. The same `PhaseTimer` serves
both: `start()`, `mark(phase)` at the end of each phase, `stop()` returns milliseconds.
"""
from __future__ import annotations

import resource
import sys
import time

import torch

PHASES = ("data", "h2d", "forward", "backward", "optimizer")


class PhaseTimer:
    """Phases are timed on `device` (where the step's inputs and outputs live); the step boundary
    synchronises every device in `sync_devices` (all GPUs of a DataParallel process)."""

    def __init__(self, device: torch.device, sync_devices: list | None = None):
        self.cuda = device.type == "cuda"
        self.device = device
        self.sync_devices = sync_devices or [device]

    def start(self) -> None:
        self._marks = []
        self._t0 = time.perf_counter_ns()
        if self.cuda:
            self._e0 = torch.cuda.Event(enable_timing=True)
            self._e0.record()

    def mark(self, phase: str) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self._marks.append((phase, e))
        else:
            self._marks.append((phase, time.perf_counter_ns()))

    def stop(self) -> dict:
        """End the step (the one synchronisation on CUDA). Returns {'step_ms', '<phase>_ms'...}."""
        if self.cuda:
            for d in self.sync_devices:
                torch.cuda.synchronize(d)
        t1 = time.perf_counter_ns()
        out = {"step_ms": (t1 - self._t0) / 1e6}
        prev = self._e0 if self.cuda else self._t0
        for phase, m in self._marks:
            out[f"{phase}_ms"] = prev.elapsed_time(m) if self.cuda else (m - prev) / 1e6
            prev = m
        return out


def reset_peaks(devices: list) -> None:
    for d in devices:
        if d.type == "cuda":
            torch.cuda.reset_peak_memory_stats(d)


def peak_memory(devices: list, rank: int) -> list:
    """Peak memory of every device this process used (all GPUs of a DataParallel process), plus its RSS."""
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform != "darwin" else 2**20)
    rows = []
    for d in devices:
        if d.type == "cuda":
            rows.append({"rank": rank, "device": str(d), "device_name": torch.cuda.get_device_name(d),
                         "peak_allocated_mib": torch.cuda.max_memory_allocated(d) / 2**20,
                         "peak_reserved_mib": torch.cuda.max_memory_reserved(d) / 2**20,
                         "peak_rss_mib": rss_mib})
    if not rows:
        rows.append({"rank": rank, "device": "cpu", "device_name": "cpu", "peak_allocated_mib": None,
                     "peak_reserved_mib": None, "peak_rss_mib": rss_mib})
    return rows
