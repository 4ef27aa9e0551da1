"""Statistics derived from raw per-step values: the one place they are computed.

The measured loop only records raw times; the store keeps them, and everything that summarises
them (median, percentiles, IQR, mean with a 95% confidence interval, throughput, the "unstable"
flag, speed-up and efficiency, significance of a difference) is computed here, from raw values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict
from typing import Iterable, Sequence

import numpy as np

UNSTABLE_IQR_FRACTION = 0.10  # IQR above 10% of the median: the result "may be unstable"


@dataclass(frozen=True)
class Summary:
    n: int
    median_ms: float
    p10_ms: float
    p90_ms: float
    iqr_ms: float
    mean_ms: float
    ci95_low_ms: float
    ci95_high_ms: float
    unstable: bool

    def asdict(self) -> dict:
        return asdict(self)


def summarize(values_ms: Sequence[float]) -> Summary:
    """Summary of raw step times in milliseconds (at least one value)."""
    x = np.asarray(list(values_ms), dtype=float)
    if x.size == 0:
        raise ValueError("summarize: no values")
    q10, q25, q50, q75, q90 = np.percentile(x, [10, 25, 50, 75, 90])
    mean = float(x.mean())
    if x.size > 1:
        from scipy import stats as st
        half = float(st.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    else:
        half = float("nan")
    iqr = float(q75 - q25)
    return Summary(n=int(x.size), median_ms=float(q50), p10_ms=float(q10), p90_ms=float(q90), iqr_ms=iqr,
                   mean_ms=mean, ci95_low_ms=mean - half, ci95_high_ms=mean + half,
                   unstable=bool(q50 > 0 and iqr > UNSTABLE_IQR_FRACTION * q50))


def step_times_ms(rows: Iterable[dict]) -> list:
    """Per-step time of a (possibly multi-rank) run: the slowest rank's time at each step.

    rows: dicts with 'step', 'rank', 'step_ms'. A DDP step is not over until every rank is.
    """
    by_step: dict = {}
    for r in rows:
        s = int(r["step"])
        by_step[s] = max(by_step.get(s, 0.0), float(r["step_ms"]))
    return [by_step[s] for s in sorted(by_step)]


def samples_per_s(global_batch: int, median_step_ms: float) -> float:
    return global_batch / (median_step_ms / 1000.0) if median_step_ms > 0 else float("nan")


def speedup(throughput: float, baseline_throughput: float) -> float:
    return throughput / baseline_throughput if baseline_throughput > 0 else float("nan")


def efficiency(throughput: float, baseline_throughput: float, device_count: int, scaling: str = "weak") -> float:
    """Scaling efficiency: speed-up over the ideal linear speed-up (device_count).

    Weak and strong scaling both use throughput (samples/s) against the single-device baseline:
    for weak scaling the ideal is n x the baseline throughput; for strong scaling (fixed global
    batch) the ideal is the step time falling by n, which is the same n x throughput.
    """
    return speedup(throughput, baseline_throughput) / device_count


def significance(a_ms: Sequence[float], b_ms: Sequence[float]) -> float:
    """Two-sided p-value that the two sets of raw step times come from the same distribution
    (Mann-Whitney U: no normality assumed, robust to stragglers)."""
    from scipy import stats as st
    a, b = list(a_ms), list(b_ms)
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    return float(st.mannwhitneyu(a, b, alternative="two-sided").pvalue)


# ---------------------------------------------------------------- helpers for reports and comparisons

PHASES_MS = ("data_ms", "h2d_ms", "forward_ms", "backward_ms", "optimizer_ms")


def median(values: Iterable[float]) -> float:
    """Median of the values that are not None; nan when there are none."""
    x = [float(v) for v in values if v is not None]
    return float(np.median(x)) if x else float("nan")


def slowest_rank_rows(rows: Iterable[dict]) -> list:
    """Per step, the whole row of the slowest rank: the same rank step_times_ms takes the time from,
    so a phase breakdown built from these rows adds up to the step time that is reported."""
    by_step: dict = {}
    for r in rows:
        s = int(r["step"])
        if s not in by_step or float(r["step_ms"]) > float(by_step[s]["step_ms"]):
            by_step[s] = r
    return [by_step[s] for s in sorted(by_step)]


def train_time_s(samples_per_s: float, images: int, epochs: int) -> float:
    """Time to train `epochs` passes over `images` samples at a throughput, in seconds."""
    return epochs * images / samples_per_s if samples_per_s > 0 else float("nan")


def algbw_gbps(size_bytes: float, time_ms: float) -> float:
    """nccl-tests' algorithm bandwidth: bytes reduced over time, GB/s (1 GB = 1e9 bytes)."""
    return size_bytes / (time_ms / 1000.0) / 1e9 if time_ms > 0 else float("nan")


def busbw_gbps(algbw: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of a ring all-reduce: algbw * 2(n-1)/n."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 0 else float("nan")


def allreduce_ms_at(size_bytes: float, sizes_bytes: Sequence[float], times_ms: Sequence[float]) -> float:
    """All-reduce time of size_bytes read off measured (size, time) points: linear interpolation
    between them, and beyond the largest size that size's bandwidth."""
    pts = sorted(zip(map(float, sizes_bytes), map(float, times_ms)))
    if not pts:
        return float("nan")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if size_bytes > xs[-1]:
        return ys[-1] * size_bytes / xs[-1]
    return float(np.interp(size_bytes, xs, ys))


def exposed_comm_ms(step_ms: Sequence[float], no_sync_step_ms: Sequence[float]) -> float:
    """DDP communication the step waits for: median step time minus the median time of the same
    steps run under no_sync() (no gradient all-reduce). nan without both sets."""
    if not len(step_ms) or not len(no_sync_step_ms):
        return float("nan")
    return summarize(step_ms).median_ms - summarize(no_sync_step_ms).median_ms
