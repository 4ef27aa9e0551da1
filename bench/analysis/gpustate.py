"""What the GPU did during a configuration's measured windows, from the NVML samples its ranks stored (gpu_samples,
bench.machine.gpustate): the SM clock against its maximum, power against its limit, the hottest temperature, and each
throttle reason with the share of the window it held the clock down.

    state = summarise(rows)          # GpuState, or None without samples (CPU, no NVML, an older store)
    state.throttled                  # a throttle reason held one GPU for at least THROTTLED_SHARE of its window
    state.words()                    # 'power cap on rank 3 (cuda:3), 1 of 8 GPUs: SM clock 1410 of 1980 MHz for 30%
                                     #  of the window' (one GPU: 'power cap: SM clock ...')
    state.too_few                    # no throttle seen, but a GPU gave too few samples to see one (MIN_SAMPLES)
    state.power_text()               # '548 of 700', or 'not updated in the window (75 ms)'
    state.shortfall()                # 0.019: the slowest GPU's mean SM clock under the maximum (nan: not known)
    state.magnitude()                # 'the SM clock averaged 1943 of 1980 MHz (-1.9%, as low as 1710 MHz), power 668
                                     #  of 700 W (median)': how much a throttle held it down

A throttle is judged per GPU (rank and device; its repeats pooled, the sampler spaces samples evenly in time, so a share
of samples is a share of the window) and flagged on the GPU it held longest: a DDP step runs at its slowest GPU's pace,
and one GPU capped for 30% of the window would pool with seven free ones to 3.75%, under the threshold. The clock,
power and temperature columns summarise the configuration, every GPU's samples together.

A "no" needs samples enough to see a throttle: one sample of N is 1/N of the window, so a GPU sampled fewer than
MIN_SAMPLES times (20: one sample is THROTTLED_SHARE) cannot show a reason held for 5% of it, and says "too few samples"
instead (a self-check's 75 ms windows gave 2-4 samples, and read "no"). Power is NVML's nvmlDeviceGetPowerUsage, which
on Ampere and newer GPUs (GA100 aside) is the average over the last second, refreshed about every 100 ms: a reading
less than POWER_AVERAGE_S into a window averages in the draw from before it, and a window whose readings never change
was not updated at all (a self-check's 43-150 ms windows on an H100 read 123 W, the idle draw, where DeepLabV3's read
510-574 W). So power counts only from POWER_AVERAGE_S into windows whose readings changed, and where fewer than
MIN_POWER_READINGS such readings remain it is not given (None: "not updated in the window"). Readings are counted per
physical GPU (node and device), once: in a rehearsal both ranks sample cuda:0, and the H100 rehearsal's FSDP x2 met the
5 with 3 readings of its one GPU counted once per rank (`_power`).

How much a throttle cost is the slowest GPU's mean SM clock (its samples are evenly spaced, so the mean is over time)
against the maximum, with its lowest: an H200 capped at 700 W for 93% of a window read 'SM clock 1965 of 1980 MHz'
(the median while capped), and 'its speed is the throttled machine's' read as a degraded number, where the clock
averaged 1943 MHz (-1.9%, as low as 1710): clock-bound work runs at most that much slower (`shortfall`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from bench import stats
from bench.machine.gpustate import REASONS, THROTTLE

THROTTLED_SHARE = 0.05      # a reason that held one GPU's clock down for 5% of its window or more flags the config
MIN_SAMPLES = math.ceil(1 / THROTTLED_SHARE)   # 20: fewer samples of a GPU and one of them is over THROTTLED_SHARE
POWER_AVERAGE_S = 1.0       # NVML's power reading averages the last second (Ampere and newer, GA100 aside)
MIN_POWER_READINGS = 5      # readings past POWER_AVERAGE_S into changing windows, fewer: power not given


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
    power_w: Optional[float]     # median of the readings past POWER_AVERAGE_S into windows that changed; None: none
    power_limit_w: Optional[float]
    temperature_max_c: float
    throttles: tuple = field(default_factory=tuple)   # Throttle per reason seen, the largest share first
    gpus: int = 1                # GPUs sampled (rank, device)
    fewest: int = 0              # samples of the GPU sampled least (its repeats pooled)
    window_ms: float = math.nan  # the longest measured window sampled (first to last sample)
    clock_mean_mhz: float = math.nan   # the slowest GPU's mean SM clock (its samples evenly spaced: over time)
    clock_low_mhz: float = math.nan    # that GPU's lowest sample
    slowest_gpu: str = ""              # that GPU: 'rank 3 (cuda:3)'

    @property
    def throttled(self) -> bool:
        return any(t.share >= THROTTLED_SHARE for t in self.throttles)

    @property
    def too_few(self) -> bool:
        """No throttle seen, but a GPU was sampled too few times to see one held for THROTTLED_SHARE of its window."""
        return not self.throttled and self.fewest < MIN_SAMPLES

    def verdict(self) -> str:
        """The throttled column: the reasons (words()), 'too few samples (N)' or 'no'."""
        if self.throttled:
            return self.words()
        return f"too few samples ({self.fewest})" if self.too_few else "no"

    def power_text(self) -> str:
        """'548 of 700' (median of the limit, W), or 'not updated in the window (75 ms)' where NVML's reading did not
        follow the window (too short for its one-second average, or never refreshed)."""
        if self.power_w is None:
            return "not updated in the window" + (f" ({self.window_ms:.0f} ms)" if not math.isnan(self.window_ms) else "")
        return f"{self.power_w:.0f}" + (f" of {self.power_limit_w:.0f}" if self.power_limit_w else "")

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

    def shortfall(self) -> float:
        """How far the slowest GPU's mean SM clock stayed under the maximum (0.019: 1.9%); nan where either is not
        known. Clock-bound work runs at most this much slower than at an uncapped clock; memory-bound work less."""
        if not self.sm_clock_max_mhz or math.isnan(self.clock_mean_mhz):
            return math.nan
        return 1 - self.clock_mean_mhz / self.sm_clock_max_mhz

    def magnitude(self) -> str:
        """'the SM clock averaged 1943 of 1980 MHz (-1.9%, as low as 1710 MHz), power 668 of 700 W (median)'; with
        several GPUs the slowest is named. '' without clock samples."""
        if math.isnan(self.clock_mean_mhz):
            return ""
        who = f"the SM clock of {self.slowest_gpu}, the slowest GPU," if self.gpus > 1 else "the SM clock"
        top = f" of {self.sm_clock_max_mhz:.0f}" if self.sm_clock_max_mhz else ""
        short = self.shortfall()
        gap = f"{-short:+.1%}, " if not math.isnan(short) else ""
        power = f", power {self.power_text()} W (median)" if self.power_w is not None else ""
        return f"{who} averaged {self.clock_mean_mhz:.0f}{top} MHz ({gap}as low as {self.clock_low_mhz:.0f} MHz){power}"

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


def _slowest(by_gpu: dict) -> tuple:
    """(mean SM clock, lowest, the GPU) of the GPU whose mean clock is lowest: a step runs at its slowest GPU's pace;
    (nan, nan, '') without clock samples."""
    means = {}
    for gpu, rows in by_gpu.items():
        clocks = [r["sm_clock_mhz"] for r in rows if r.get("sm_clock_mhz") is not None]
        if clocks:
            means[gpu] = (sum(clocks) / len(clocks), min(clocks))
    if not means:
        return math.nan, math.nan, ""
    gpu = min(means, key=lambda g: means[g][0])
    return (*means[gpu], gpu)


def _windows(rows: list) -> dict:
    """(result, rank, device) -> that GPU's samples in one measured window (one repeat), in order."""
    out: dict = {}
    for r in rows:
        out.setdefault((r.get("result_id"), r.get("rank"), r.get("device")), []).append(r)
    return {k: sorted(v, key=lambda r: r.get("t_ms") or 0.0) for k, v in out.items()}


def _span_ms(window: list) -> float:
    ts = [r["t_ms"] for r in window if r.get("t_ms") is not None]
    return max(ts) - min(ts) if ts else math.nan


def _physical(windows: dict, ranks_per_node: int) -> dict:
    """(result, node, device) -> one window of each physical GPU: the lowest rank's where several ranks sampled the
    same GPU (a rehearsal's ranks share cuda:0; NVML's reading is one figure of that GPU, not one per rank).
    ranks_per_node: 0 where every rank ran on one node."""
    out: dict = {}
    for (result, rank, device), w in sorted(windows.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0, str(kv[0][2]))):
        node = (rank or 0) // ranks_per_node if ranks_per_node else 0
        out.setdefault((result, node, device), w)
    return out


def _power(windows: dict, ranks_per_node: int = 0) -> Optional[float]:
    """The median power over the readings that average the window's own work: POWER_AVERAGE_S or more into a window
    whose readings changed, each physical GPU's once (`_physical`); None with fewer than MIN_POWER_READINGS of them."""
    readings = []
    for w in _physical(windows, ranks_per_node).values():
        values = [r["power_w"] for r in w if r.get("power_w") is not None]
        if len(set(values)) < 2:   # never refreshed in the window: the reading from before it
            continue
        readings += [r["power_w"] for r in w if r.get("power_w") is not None and r.get("t_ms") is not None
                     and r["t_ms"] >= POWER_AVERAGE_S * 1e3]
    return stats.median(readings) if len(readings) >= MIN_POWER_READINGS else None


def summarise(rows: list, ranks_per_node: int = 0) -> Optional[GpuState]:
    """The state over every stored sample of a configuration (any ranks, devices, repeats), throttles judged per GPU;
    None without any. ranks_per_node: how a rank's node is found (rank // it), so that power counts each physical GPU
    once; 0 where every rank ran on one node."""
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
    mean, low, slowest = _slowest(by_gpu)
    windows = _windows(rows)
    spans = [s for s in map(_span_ms, windows.values()) if not math.isnan(s)]
    return GpuState(samples=len(rows), sm_clock_mhz=stats.median(r.get("sm_clock_mhz") for r in rows),
                    sm_clock_max_mhz=top("sm_clock_max_mhz"), power_w=_power(windows, ranks_per_node),
                    power_limit_w=top("power_limit_w"), temperature_max_c=top("temperature_c") or float("nan"),
                    throttles=tuple(sorted(throttles, key=lambda t: -t.share)), gpus=len(by_gpu),
                    fewest=min(len(v) for v in by_gpu.values()), window_ms=max(spans) if spans else math.nan,
                    clock_mean_mhz=mean, clock_low_mhz=low, slowest_gpu=slowest)
