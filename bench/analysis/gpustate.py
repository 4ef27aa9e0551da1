"""What the GPU did during a configuration's measured windows, from the NVML samples its ranks stored (gpu_samples,
bench.machine.gpustate): the SM clock against its maximum, power against its limit, the hottest temperature, and each
throttle reason with the share of the window it held the clock down.

    state = summarise(rows)          # GpuState, or None without samples (CPU, no NVML, an older store)
    state.throttled                  # a throttle reason held one GPU for at least THROTTLED_SHARE of its window
    state.words()                    # 'power cap on rank 3 (cuda:3), 1 of 8 GPUs: SM clock 1410 of 1980 MHz for 30%
                                     #  of the window' (one GPU: 'power cap: SM clock ...')

A throttle is judged per GPU (rank and device; its repeats pooled, the sampler spaces samples evenly in time, so a share
of samples is a share of the window) and flagged on the GPU it held longest: a DDP step runs at its slowest GPU's pace,
and one GPU capped for 30% of the window would pool with seven free ones to 3.75%, under the threshold. The clock,
power and temperature columns summarise the configuration, every GPU's samples together.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bench import stats
from bench.machine.gpustate import REASONS, THROTTLE

THROTTLED_SHARE = 0.05      # a reason that held one GPU's clock down for 5% of its window or more flags the config


@dataclass(frozen=True)
class Throttle:
    reason: str
    share: float                 # of the samples of the GPU it held longest
    sm_clock_mhz: float          # that GPU's median SM clock while it held
    gpu: str = ""                # that GPU: 'rank 3 (cuda:3)'
    gpus_throttled: int = 1      # GPUs it held for THROTTLED_SHARE of their window or more


@dataclass(frozen=True)
class GpuState:
    samples: int
    sm_clock_mhz: float          # median over the window
    sm_clock_max_mhz: Optional[float]
    power_w: float               # median
    power_limit_w: Optional[float]
    temperature_max_c: float
    throttles: tuple = field(default_factory=tuple)   # Throttle per reason seen, the largest share first
    gpus: int = 1                # GPUs sampled (rank, device)

    @property
    def throttled(self) -> bool:
        return any(t.share >= THROTTLED_SHARE for t in self.throttles)

    def words(self) -> str:
        """Each throttle reason that held a GPU for THROTTLED_SHARE of its window or more, the GPU it held longest
        (named where the configuration had several), with the clock it left there."""
        top = f" of {self.sm_clock_max_mhz:.0f}" if self.sm_clock_max_mhz else ""
        return "; ".join(f"{t.reason}{self._where(t)}: SM clock {t.sm_clock_mhz:.0f}{top} MHz for {t.share:.0%} of the "
                         "window" for t in self.throttles if t.share >= THROTTLED_SHARE)

    def _where(self, t: Throttle) -> str:
        if self.gpus <= 1:
            return ""
        if t.gpus_throttled <= 1:
            return f" on {t.gpu}, 1 of {self.gpus} GPUs"
        return f" on {t.gpus_throttled} of {self.gpus} GPUs, longest {t.gpu}"

    def clock_text(self) -> str:
        """'1980 of 1980 MHz' (median SM clock of its maximum)."""
        top = f" of {self.sm_clock_max_mhz:.0f}" if self.sm_clock_max_mhz else ""
        return f"{self.sm_clock_mhz:.0f}{top} MHz"


def _gpu(row: dict) -> str:
    return f"rank {row.get('rank')} ({row.get('device')})"


def _throttle(name: str, bit: int, by_gpu: dict) -> Optional[Throttle]:
    """The reason's share of each GPU's samples; the GPU it held longest (None where it never held)."""
    shares = {}
    for gpu, rows in by_gpu.items():
        held = [r for r in rows if r.get("reasons") and r["reasons"] & bit]
        if held:
            shares[gpu] = (len(held) / len(rows), held)
    if not shares:
        return None
    gpu = max(shares, key=lambda g: shares[g][0])
    share, held = shares[gpu]
    return Throttle(name, share, stats.median(r.get("sm_clock_mhz") for r in held), gpu,
                    sum(s >= THROTTLED_SHARE for s, _ in shares.values()))


def summarise(rows: list) -> Optional[GpuState]:
    """The state over every stored sample of a configuration (any ranks, devices, repeats), throttles judged per GPU;
    None without any."""
    rows = [r for r in rows if r.get("sm_clock_mhz") is not None or r.get("reasons") is not None]
    if not rows:
        return None
    by_gpu: dict = {}
    for r in rows:
        by_gpu.setdefault(_gpu(r), []).append(r)
    throttles = [t for bit, name in REASONS.items() if bit & THROTTLE
                 for t in [_throttle(name, bit, by_gpu)] if t is not None]

    def top(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return max(vals) if vals else None
    return GpuState(samples=len(rows), sm_clock_mhz=stats.median(r.get("sm_clock_mhz") for r in rows),
                    sm_clock_max_mhz=top("sm_clock_max_mhz"), power_w=stats.median(r.get("power_w") for r in rows),
                    power_limit_w=top("power_limit_w"), temperature_max_c=top("temperature_c") or float("nan"),
                    throttles=tuple(sorted(throttles, key=lambda t: -t.share)), gpus=len(by_gpu))
