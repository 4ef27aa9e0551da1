"""Clocks for a measured window of training steps: its wall time, and every step's and phase's time.

A window is `open()`, then steps (`mark(phase)` at the end of each phase, `step_end()` at the end of
the step), then `close()`, which returns the window's wall time in seconds; `rows()` afterwards gives
one dict per step: `step_ms` and `<phase>_ms`. Consecutive steps share their boundary, so the steps
of a window add up to it (nothing between two steps goes unmeasured).

    CUDA (EventClock): the window holds no host synchronisation. open() synchronises every device
        the step uses and reads the host clock; each mark records a CUDA event on the current stream
        (the host does not wait); close() records the last boundary, synchronises and reads the host
        clock. Events are read in rows(), after the window. The host can run ahead of the GPU inside
        the window, as in real training: DataParallel's scatter and replicate of step k+1 overlap the
        GPU's tail of step k. Throughput is samples over the window's wall time.
    CPU (HostClock): CPU work is synchronous, marks read the monotonic clock (time.perf_counter_ns).

The device API (event factory and synchronise) is a parameter: tests drive the CUDA path on a CPU
with a stand-in that records every call and fails a synchronisation inside the window.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

PHASES = ("data", "h2d", "forward", "backward", "optimizer")
_STEP = "<step>"


class CudaAPI:
    """The real device API: CUDA events and synchronisation."""

    def event(self):
        return torch.cuda.Event(enable_timing=True)

    def stream(self, device: torch.device):
        return torch.cuda.current_stream(device)

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)

    def new_stream(self, device: torch.device):
        return torch.cuda.Stream(device)

    def wait_stream(self, stream, other) -> None:
        stream.wait_stream(other)

    def use(self, stream):
        return torch.cuda.stream(stream)


class HostClock:
    """Monotonic host clock; the CPU path."""
    method = "cpu_clock"

    def __init__(self):
        self._marks: list = []
        self.is_open = False

    def _now(self):
        return time.perf_counter_ns()

    def _ms(self, a, b) -> float:
        return (b - a) / 1e6

    def open(self) -> None:
        self._t0 = time.perf_counter()
        self._marks = [(_STEP, self._now())]
        self.is_open = True

    def mark(self, phase: str) -> None:
        self._marks.append((phase, self._now()))

    def step_end(self) -> None:
        self._marks.append((_STEP, self._now()))

    def close(self) -> float:
        self.is_open = False
        return time.perf_counter() - self._t0

    def rows(self) -> list:
        """Per step: step_ms from boundary to boundary, each phase's ms (summed when a step has several
        micro-batches), and other_ms for what falls between the last phase and the boundary."""
        out, cur, prev = [], None, None
        for name, t in self._marks:
            if prev is not None:
                dt = self._ms(prev, t)
                if cur is None:
                    cur = {"step_ms": 0.0, **{f"{p}_ms": 0.0 for p in PHASES}, "other_ms": 0.0}
                cur["step_ms"] += dt
                key = "other_ms" if name == _STEP else f"{name}_ms"
                cur[key] = cur.get(key, 0.0) + dt
                if name == _STEP:
                    out.append(cur)
                    cur = None
            prev = t
        return out


class EventClock(HostClock):
    """CUDA events on the current stream of `device`; synchronises `sync_devices` at open and close only."""
    method = "cuda_window_events"

    def __init__(self, device: torch.device, sync_devices: Optional[list] = None, api=None):
        super().__init__()
        self.device = device
        self.sync_devices = sync_devices or [device]
        self.api = api or CudaAPI()

    def _now(self):
        e = self.api.event()
        e.record(self.api.stream(self.device))
        return e

    def _ms(self, a, b) -> float:
        return float(a.elapsed_time(b))

    def open(self) -> None:
        for d in self.sync_devices:
            self.api.synchronize(d)
        super().open()

    def close(self) -> float:
        self.is_open = False  # the last step_end() event was the window's last boundary; this is its end
        for d in self.sync_devices:
            self.api.synchronize(d)
        return super().close()


def make_clock(device: torch.device, sync_devices: Optional[list] = None, api=None) -> HostClock:
    """EventClock on CUDA, HostClock on CPU."""
    if device.type == "cuda":
        return EventClock(device, sync_devices, api)
    return HostClock()
