"""The GPU's state while a window is measured: SM clock, power, temperature and NVML's clock event (throttle) reasons,
sampled by a thread that only calls NVML, which never touches a CUDA stream (nothing of the timed work waits for it).

    sampler = Sampler(devices)          # torch CUDA devices; NVML loaded once per process (bench.machine.gpuinfo)
    sampler.start()                     # right before the measured window opens
    ...                                 # the window
    rows = sampler.stop(rank)           # one row per sample and device: gpu_samples in the store

A sample is t_ms (from start), sm_clock_mhz, power_w, temperature_c and reasons (NVML's bitmask); every row also
carries the device's maximum SM clock and enforced power limit, read once at start. A field NVML cannot give is None.
Samples come every INTERVAL_S; past MAX_SAMPLES per device every other one is dropped (the latest kept) and the
interval doubles, so a long epoch run keeps an evenly spaced record of bounded size. Without CUDA or NVML the sampler
records nothing.
What the reasons mean, and which of them slow the clock against the user's will (THROTTLE), is in REASONS.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional

INTERVAL_S = 0.05
MAX_SAMPLES = 2000          # per device: past it, every other sample goes and the interval doubles
TEMPERATURE_GPU = 0         # nvmlTemperatureSensors_t
# nvmlClocksEventReasons (formerly ClocksThrottleReasons): bit -> what it says, as nvidia-smi -q names them.
REASONS = {0x1: "idle", 0x2: "applications clocks setting", 0x4: "power cap", 0x8: "hardware slowdown",
           0x10: "sync boost", 0x20: "thermal slowdown (software)", 0x40: "thermal slowdown (hardware)",
           0x80: "power brake (hardware)", 0x100: "display clock setting", 0x200: "board limit", 0x400: "reliability"}
# The reasons that hold the clock below what the user asked for: power, heat, the board, a slower GPU of a sync-boost
# group. Idle, the applications clocks the user set and the display clock are not throttling.
THROTTLE = 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x200 | 0x400
COLUMNS = ("rank", "device", "sample", "t_ms", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w",
           "temperature_c", "reasons")


def reason_names(mask: Optional[int]) -> list:
    """The names of the bits set in an NVML reasons mask, lowest bit first."""
    return [name for bit, name in REASONS.items() if mask and mask & bit]


def read(nvml, handle) -> dict:
    """One sample of a GPU now: SM clock (MHz), power (W), temperature (C), clock event reasons (bitmask)."""
    from bench.machine import gpuinfo  # imports torch: the report reads REASONS without it
    mw = gpuinfo.call(nvml, "nvmlDeviceGetPowerUsage", handle)
    reasons = gpuinfo.call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:  # drivers before 535 name it after throttling
        reasons = gpuinfo.call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return {"sm_clock_mhz": gpuinfo.call(nvml, "nvmlDeviceGetClockInfo", handle, gpuinfo.CLOCK_SM),
            "power_w": mw / 1000 if isinstance(mw, (int, float)) else None,
            "temperature_c": gpuinfo.call(nvml, "nvmlDeviceGetTemperature", handle, TEMPERATURE_GPU),
            "reasons": int(reasons) if isinstance(reasons, int) else None}


def limits(nvml, handle) -> dict:
    """What a sample is measured against: the maximum SM clock (MHz) and the enforced power limit (W)."""
    from bench.machine import gpuinfo
    mw = gpuinfo.call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    return {"sm_clock_max_mhz": gpuinfo.call(nvml, "nvmlDeviceGetMaxClockInfo", handle, gpuinfo.CLOCK_SM),
            "power_limit_w": mw / 1000 if isinstance(mw, (int, float)) else None}


class Sampler:
    """A thread sampling NVML for a list of devices from start() to stop(). `devices`: torch devices (CUDA ones are
    sampled); nvml/handles/clock: stand-ins for tests (the pynvml module, one NVML handle per device, a clock in s)."""

    def __init__(self, devices: list, nvml=None, handles: Optional[list] = None, interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.devices = [str(d) for d in devices]
        self.nvml, self.handles = nvml, handles
        self.interval_s, self.clock = interval_s, clock
        self.samples: list = [[] for _ in self.devices]
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "Sampler":
        if self.handles is None:
            self.nvml, self.handles = _handles(self.devices)
        if self.nvml is None or not self.handles or all(h is None for h in self.handles):
            return self  # no CUDA or no NVML: nothing to sample
        self._limits = [limits(self.nvml, h) for h in self.handles]
        self._t0 = self.clock()
        self._stop.clear()
        self._take()  # the window's first sample, before the thread's first wait
        self._thread = threading.Thread(target=self._run, name="bench-gpustate", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        t_ms = (self.clock() - self._t0) * 1e3
        for k, h in enumerate(self.handles):
            if h is not None:
                self.samples[k].append({"t_ms": t_ms, **read(self.nvml, h)})
        if max(len(s) for s in self.samples) > MAX_SAMPLES and len(self.samples[0]) % 2:
            # every other sample, the latest kept, and twice the interval from here: still evenly spaced
            self.samples = [s[::2] for s in self.samples]
            self.interval_s *= 2

    def stop(self, rank: int) -> list:
        """End sampling (one last sample: the window's end) and return the rows of every device."""
        if self._thread is None:
            return []
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._take()
        return [{"rank": rank, "device": d, "sample": i, **self._limits[k], **s}
                for k, d in enumerate(self.devices) for i, s in enumerate(self.samples[k])]


def _handles(devices: list) -> tuple:
    """(the NVML module, one handle per device: None for a CPU device or one NVML cannot find)."""
    import torch
    from bench.machine import gpuinfo
    if not any(d.startswith("cuda") for d in devices) or not torch.cuda.is_available():
        return None, []
    nvml = gpuinfo.load_nvml()
    if nvml is None:
        return None, []
    return nvml, [gpuinfo.nvml_handle(nvml, torch.cuda.get_device_properties(torch.device(d))) if d.startswith("cuda")
                  else None for d in devices]
