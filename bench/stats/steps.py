"""Statistics of one run's raw rows: step-time summaries, throughput from timed windows, speed-up and efficiency,
collective bandwidths. The measured loop only records raw times; the store keeps them; every summary is computed
here (or in bench.stats.noise, for what tells processes apart), from raw values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict
from typing import Iterable, Optional, Sequence

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


class student_t:  # noqa: N801 (used as scipy.stats.t is)
    """Student's t distribution: scipy.stats.t's ppf, cdf and sf, computed by scipy.special (stdtrit, stdtr). The same
    values without importing scipy.stats, which took 0.7 s of every sweep process that records a result."""

    @staticmethod
    def ppf(q: float, df: float) -> float:
        from scipy.special import stdtrit
        return float(stdtrit(df, q))

    @staticmethod
    def cdf(t: float, df: float) -> float:
        from scipy.special import stdtr
        return float(stdtr(df, t))

    @staticmethod
    def sf(t: float, df: float) -> float:
        from scipy.special import stdtr
        return float(stdtr(df, -t))


def summarize(values_ms: Sequence[float]) -> Summary:
    """Summary of raw step times in milliseconds (at least one value)."""
    x = np.asarray(list(values_ms), dtype=float)
    if x.size == 0:
        raise ValueError("summarize: no values")
    q10, q25, q50, q75, q90 = np.percentile(x, [10, 25, 50, 75, 90])
    mean = float(x.mean())
    if x.size > 1:
        half = float(student_t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    else:
        half = float("nan")
    iqr = float(q75 - q25)
    return Summary(n=int(x.size), median_ms=float(q50), p10_ms=float(q10), p90_ms=float(q90), iqr_ms=iqr,
                   mean_ms=mean, ci95_low_ms=mean - half, ci95_high_ms=mean + half,
                   unstable=bool(q50 > 0 and iqr > UNSTABLE_IQR_FRACTION * q50))


def loss_not_finite(rows: Iterable[dict]) -> Optional[dict]:
    """{'steps': how many, 'of': steps with a loss, 'kind', 'step', 'rank' of the first in the rows' order, 'last': the
    last loss of some rank is not finite} of one run's step rows (every kind: warm-up, measured, probe; every rank, in the
    order each ran them) whose loss is NaN or infinite; None where every recorded loss is finite. A run whose last loss
    is not finite trains nothing (a diverged model, uninitialised weights: NaN stays) and its steps may be cheaper than
    training's; one whose loss was finite again by its last step met a transient overflow (fp16's scaler skips those).
    Read from the worker's rows before they are stored (SQLite keeps a NaN as NULL)."""
    seen, bad, last = 0, [], {}
    for r in rows:
        loss = r.get("loss")
        if loss is None:
            continue
        seen += 1
        finite = math.isfinite(float(loss))
        last[int(r.get("rank", 0))] = finite
        if not finite:
            bad.append((str(r.get("kind", "measure")), int(r.get("step", 0)), int(r.get("rank", 0))))
    if not bad:
        return None
    kind, step, rank = bad[0]
    return {"steps": len(bad), "of": seen, "kind": kind, "step": step, "rank": rank, "last": not all(last.values())}


def loss_words(bad: Optional[dict], verdict: bool = True) -> str:
    """'loss not finite at 6 of 8 steps (first: measured step 2, rank 0): timed, but not training' for loss_not_finite's
    record (', finite again by the last step' where it recovered; verdict=False: the count alone, for a sentence that
    says the rest); '' for None."""
    if not bad:
        return ""
    kind = {"measure": "measured", "warmup": "warm-up"}.get(bad["kind"], bad["kind"])
    said = f"loss not finite at {bad['steps']} of {bad['of']} steps (first: {kind} step {bad['step']}, rank {bad['rank']})"
    if not verdict:
        return said
    return said + (": timed, but not training" if bad.get("last", True) else ", finite again by the last step")


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
    """nccl-tests' algorithm bandwidth: the collective's size S over its time, GB/s (1 GB = 1e9 bytes)."""
    return size_bytes / (time_ms / 1000.0) / 1e9 if time_ms > 0 else float("nan")


def busbw_gbps(algbw: float, ranks: int, op: str = "all_reduce") -> float:
    """nccl-tests' bus bandwidth (doc/PERFORMANCE.md): algbw * 2(n-1)/n for all-reduce, (n-1)/n for all-gather and
    reduce-scatter."""
    if ranks <= 0:
        return float("nan")
    return algbw * (ranks - 1) / ranks * (2 if op == "all_reduce" else 1)


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
    """DDP communication the step waits for: median step time of the probe's synchronised blocks minus
    the median of its no_sync() blocks (no gradient all-reduce; buffers broadcast in both). nan without both."""
    if not len(step_ms) or not len(no_sync_step_ms):
        return float("nan")
    return summarize(step_ms).median_ms - summarize(no_sync_step_ms).median_ms


# ---------------------------------------------------------------- throughput from timed windows

def window_throughput(windows: Iterable[dict]) -> tuple:
    """(samples/s, wall s) of a run from its raw windows (one per rank and kind, bench.rank.loop).

    The measured window ('measure') when there is one: all ranks' samples over the slowest rank's wall
    time. Epoch runs: every epoch's samples over the sum of the epochs' slowest-rank wall times (the
    time to train, warm-up included, as the reference experiment measured it). (nan, nan) if neither.
    """
    by_kind: dict = {}
    for w in windows:
        by_kind.setdefault(w["kind"], []).append(w)
    kinds = ["measure"] if "measure" in by_kind else sorted(k for k in by_kind if k.startswith("epoch")) or \
        (["loader"] if "loader" in by_kind else [])
    samples = sum(int(w["samples"]) for k in kinds for w in by_kind[k])
    wall = sum(max(float(w["wall_s"]) for w in by_kind[k]) for k in kinds)
    if not kinds or wall <= 0:
        return float("nan"), float("nan")
    return samples / wall, wall


def result_summary(steps: list, windows: list, global_batch: int) -> dict:
    """Everything the results table summarises of one run, from its raw rows."""
    out: dict = {}
    measured = [s for s in steps if s.get("kind", "measure") == "measure"]
    if measured:
        out["summary"] = summarize(step_times_ms(measured))
    sps, wall = window_throughput(windows)
    if not math.isnan(sps):
        out["samples_per_s"], out["window_s"] = sps, wall
    elif measured:  # stores of schema 1 had no windows: throughput from the median step
        out["samples_per_s"] = samples_per_s(global_batch, out["summary"].median_ms)
    sync = [s for s in steps if s.get("kind") == "probe_sync"]
    nosync = [s for s in steps if s.get("kind") in ("probe_no_sync", "no_sync")]
    if nosync:
        reference = sync or measured  # schema 1 compared the measured steps with a no_sync block
        out["exposed_comm_ms"] = exposed_comm_ms(step_times_ms(reference), step_times_ms(nosync))
    return out
