"""What the GPU did during a configuration's measured windows, from the NVML samples its ranks stored (gpu_samples,
bench.machine.gpustate): the SM clock against its maximum, power against its limit, the hottest temperature, and each
throttle reason with the share of the window it held the clock down.

    state = summarise(rows)          # GpuState, or None without samples (CPU, no NVML, an older store)
    state.throttled                  # a throttle reason held for at least THROTTLED_SHARE of the window
    state.words()                    # 'power cap: SM clock 1410 of 1980 MHz for 40% of the window'

Every sample of every rank, device and repeat counts alike (the sampler spaces them evenly in time), so a share of
samples is a share of the window, the GPUs' together.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bench import stats
from bench.machine.gpustate import REASONS, THROTTLE

THROTTLED_SHARE = 0.05      # a reason that held the clock down for 5% of the window or more flags the configuration


@dataclass(frozen=True)
class Throttle:
    reason: str
    share: float                 # of the samples
    sm_clock_mhz: float          # the median SM clock while it held


@dataclass(frozen=True)
class GpuState:
    samples: int
    sm_clock_mhz: float          # median over the window
    sm_clock_max_mhz: Optional[float]
    power_w: float               # median
    power_limit_w: Optional[float]
    temperature_max_c: float
    throttles: tuple = field(default_factory=tuple)   # Throttle per reason seen, the largest share first

    @property
    def throttled(self) -> bool:
        return any(t.share >= THROTTLED_SHARE for t in self.throttles)

    def words(self) -> str:
        """Each throttle reason that held for THROTTLED_SHARE of the window or more, with the clock it left."""
        top = f" of {self.sm_clock_max_mhz:.0f}" if self.sm_clock_max_mhz else ""
        return "; ".join(f"{t.reason}: SM clock {t.sm_clock_mhz:.0f}{top} MHz for {t.share:.0%} of the window"
                         for t in self.throttles if t.share >= THROTTLED_SHARE)

    def clock_text(self) -> str:
        """'1980 of 1980 MHz' (median SM clock of its maximum)."""
        top = f" of {self.sm_clock_max_mhz:.0f}" if self.sm_clock_max_mhz else ""
        return f"{self.sm_clock_mhz:.0f}{top} MHz"


def summarise(rows: list) -> Optional[GpuState]:
    """The state over every stored sample of a configuration (any ranks, devices, repeats); None without any."""
    rows = [r for r in rows if r.get("sm_clock_mhz") is not None or r.get("reasons") is not None]
    if not rows:
        return None
    throttles = []
    for bit, name in REASONS.items():
        if not bit & THROTTLE:
            continue
        held = [r for r in rows if r.get("reasons") and r["reasons"] & bit]
        if held:
            throttles.append(Throttle(name, len(held) / len(rows), stats.median(r.get("sm_clock_mhz") for r in held)))

    def top(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return max(vals) if vals else None
    return GpuState(samples=len(rows), sm_clock_mhz=stats.median(r.get("sm_clock_mhz") for r in rows),
                    sm_clock_max_mhz=top("sm_clock_max_mhz"), power_w=stats.median(r.get("power_w") for r in rows),
                    power_limit_w=top("power_limit_w"), temperature_max_c=top("temperature_c") or float("nan"),
                    throttles=tuple(sorted(throttles, key=lambda t: -t.share)))
