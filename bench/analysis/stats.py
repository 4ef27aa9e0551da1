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


@dataclass(frozen=True)
class ShownEfficiency:
    """How a measured scaling efficiency is shown (`shown_efficiency`): `shown` is what a table prints, `measured` what
    the throughputs give; `note` says why they differ, or why an efficiency above 100% stands ("" when neither)."""
    measured: float
    shown: float
    note: str
    within_noise: bool = False

    def text(self, spec: str = ".0%") -> str:
        """'87%', '100% (within noise: measured 103%, noise 25%)' or '131% (above the ideal by more than ...)'."""
        if math.isnan(self.shown):
            return "–"
        return f"{self.shown:{spec}}" + (f" ({self.note})" if self.note else "")


def shown_efficiency(efficiency: float, noise: float, device_count: int = 0) -> ShownEfficiency:
    """The rule for an efficiency above 100% (the report's tables and sentences and the forecast use it alike).
    efficiency: measured against the 1-device baseline of the same sweep (fraction); noise: the relative throughput
    difference that the configuration and its baseline cannot be told apart within (`noise_bound`, fraction).
    Up to 100%: as measured. Above, by no more than the noise: 100%, with the measured value and the noise (two
    processes of one device read 103% and 97% of each other as often). Above by more: the measured value stands,
    with why it can exceed the ideal (superlinear: the per-device share fits a cache; or the baseline ran slow; at
    device_count 1, the same device's work: the processes ran differently, which is not scaling)."""
    if efficiency is None or math.isnan(efficiency) or efficiency <= 1.0:
        return ShownEfficiency(float("nan") if efficiency is None else efficiency,
                               float("nan") if efficiency is None else efficiency, "")
    noise_txt = f"{noise:.0%}" if not math.isnan(noise) else "unknown"
    if not math.isnan(noise) and efficiency - 1.0 <= noise:
        return ShownEfficiency(efficiency, 1.0, f"within noise: measured {efficiency:.0%}, noise {noise_txt}", True)
    if device_count == 1:
        return ShownEfficiency(efficiency, efficiency, f"faster than the baseline on one device by more than the {noise_txt} "
                                                       "noise: the processes ran differently, not scaling")
    return ShownEfficiency(efficiency, efficiency, f"above the ideal by more than the {noise_txt} noise: superlinear "
                                                   "(each device's share fits its caches) or a slow baseline")


def noise_bound(a_sps: Sequence[float], b_sps: Sequence[float]) -> float:
    """The relative throughput difference (fraction) within which two configurations cannot be told apart: the larger
    spread between their processes where both ran several (`repeat_spread`), else PROCESS_NOISE."""
    spreads = [repeat_spread(a_sps), repeat_spread(b_sps)]
    return PROCESS_NOISE if any(math.isnan(v) for v in spreads) else max(spreads)


def significance(a_ms: Sequence[float], b_ms: Sequence[float]) -> float:
    """Two-sided Mann-Whitney p-value of two sets of raw step times of ONE process each. The steps of
    one process share its luck (placement, frequency, neighbours): this separates nothing across
    processes; bench.analysis.compare uses `compare_processes` instead."""
    from scipy import stats as st
    a, b = list(a_ms), list(b_ms)
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    return float(st.mannwhitneyu(a, b, alternative="two-sided").pvalue)


# ---------------------------------------------------------------- processes as the independent samples

UNSTABLE_REPEAT_SPREAD = 0.10   # repeats' throughputs spread more than 10% of their median: "may be unstable"
PROCESS_NOISE = 0.25            # without repeats: identical code differed by up to 1.22x between fresh processes here


def repeat_spread(values: Sequence[float]) -> float:
    """(max - min) / median of per-process throughputs; nan with fewer than two."""
    x = [float(v) for v in values if v is not None and not math.isnan(v)]
    if len(x) < 2:
        return float("nan")
    return (max(x) - min(x)) / float(np.median(x))


@dataclass(frozen=True)
class ProcessComparison:
    ratio: float              # candidate / baseline throughput (geometric means over processes)
    ci95: tuple               # 95% confidence interval of the ratio (nan without repeats on both sides)
    p_slower: float           # one-sided p-value that the candidate is slower (Welch t on log throughput)
    p_two_sided: float
    n_a: int
    n_b: int
    spread: float             # largest between-process spread seen on either side (fraction)
    decided_by: str = "processes"  # processes (repeats on both sides) | pairs (interleaved A/B) | evidence (earlier sweeps)

    @property
    def decidable(self) -> bool:
        return self.decided_by == "evidence" or (self.n_a >= 2 and self.n_b >= 2)


def compare_processes(a_sps: Sequence[float], b_sps: Sequence[float]) -> ProcessComparison:
    """Compare per-process throughputs (samples/s, one value per fresh process) of two sweeps.

    Log throughput makes the ratio symmetric; Welch's t-test does not assume equal spread. With one
    process on a side nothing about process-to-process noise is known and the p-values are nan.
    """
    la = np.log([float(v) for v in a_sps])
    lb = np.log([float(v) for v in b_sps])
    ratio = float(np.exp(lb.mean() - la.mean()))
    spread = max([v for v in (repeat_spread(a_sps), repeat_spread(b_sps)) if not math.isnan(v)], default=float("nan"))
    if len(la) < 2 or len(lb) < 2:
        return ProcessComparison(ratio, (float("nan"), float("nan")), float("nan"), float("nan"), len(la), len(lb), spread)
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        p1 = 0.0 if ratio < 1 else 1.0
        p2 = 0.0 if ratio != 1 else 1.0
        ci = (ratio, ratio)
    else:
        df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
        t = (lb.mean() - la.mean()) / se
        p1, p2 = float(student_t.cdf(t, df)), float(2 * student_t.sf(abs(t), df))
        half = float(student_t.ppf(0.975, df) * se)
        ci = (float(np.exp(lb.mean() - la.mean() - half)), float(np.exp(lb.mean() - la.mean() + half)))
    return ProcessComparison(ratio, ci, p1, p2, len(la), len(lb), spread)


def compare_pairs(a_sps: Sequence[float], b_sps: Sequence[float]) -> ProcessComparison:
    """Compare interleaved A/B processes pair by pair (A and B run back to back, alternately first):
    a paired t-test on log(b/a), so the machine's drift between pairs cancels. n_a = n_b = pairs."""
    d = np.log(np.asarray(b_sps, dtype=float) / np.asarray(a_sps, dtype=float))
    ratio = float(np.exp(d.mean()))
    spread = max([v for v in (repeat_spread(a_sps), repeat_spread(b_sps)) if not math.isnan(v)], default=float("nan"))
    n = len(d)
    if n < 2:
        return ProcessComparison(ratio, (float("nan"), float("nan")), float("nan"), float("nan"), n, n, spread, "pairs")
    se = float(d.std(ddof=1) / math.sqrt(n))
    if se == 0:
        return ProcessComparison(ratio, (ratio, ratio), 0.0 if ratio < 1 else 1.0, 0.0 if ratio != 1 else 1.0, n, n,
                                 spread, "pairs")
    t = float(d.mean() / se)
    half = float(student_t.ppf(0.975, n - 1) * se)
    return ProcessComparison(ratio, (float(np.exp(d.mean() - half)), float(np.exp(d.mean() + half))),
                             float(student_t.cdf(t, n - 1)), float(2 * student_t.sf(abs(t), n - 1)), n, n, spread, "pairs")


@dataclass(frozen=True)
class Evidence:
    """What is known of one configuration's noise, on log throughput: the spread between its processes
    (sd_process, from repeats inside sweeps) and between its sweeps (sd_sweep, the drift of a shared machine,
    from earlier sweeps of it); `sd_diff` is the standard deviation of the baseline-to-candidate difference
    they predict for the processes compared, with `df` degrees of freedom. `sweeps` counts the known-good sweeps
    (earlier ones and the baseline) it rests on."""
    sd_process: float
    sd_sweep: float
    sd_diff: float
    df: float
    sweeps: int
    processes: int

    def bound(self, alpha: float) -> float:
        """The slowdown (fraction) this evidence would call at one-sided level alpha."""
        return float(math.expm1(student_t.ppf(1 - alpha, self.df) * self.sd_diff))


MIN_EVIDENCE_SWEEPS = 3         # earlier sweeps + the baseline before the spread between sweeps is used


def evidence(history: Sequence[Sequence[float]], a_sps: Sequence[float], b_sps: Sequence[float]):
    """The noise model of one configuration from its processes (samples/s): `history` holds one list per earlier
    sweep of it, a_sps the baseline's, b_sps the candidate's. A sweep's mean is mu + drift + process noise: its
    variance is sd_sweep^2 + sd_process^2 / n (a random-effects model), so the baseline-to-candidate difference
    has variance 2 sd_sweep^2 + sd_process^2 (1/n_a + 1/n_b). sd_process pools the spread inside every sweep
    with repeats (the candidate's too: a shift does not change it); sd_sweep comes from the spread of the
    known-good sweeps' means (never the candidate's). None with fewer than MIN_EVIDENCE_SWEEPS of them: then
    the drift between sweeps is unknown (compare falls back to repeats and a fixed drift bound, or cannot decide)."""
    logs = lambda xs: [math.log(float(x)) for x in xs if x is not None and float(x) > 0]  # noqa: E731
    known = [g for g in (logs(h) for h in history) if g] + [logs(a_sps)]
    cand = logs(b_sps)
    if len(known) < MIN_EVIDENCE_SWEEPS or not known[-1] or not cand:
        return None
    within = [g for g in known + [cand] if len(g) >= 2]
    df_w = sum(len(g) - 1 for g in within)
    var_p = sum(float(np.var(g, ddof=1)) * (len(g) - 1) for g in within) / df_w if df_w else None
    means = [float(np.mean(g)) for g in known]
    var_m = float(np.var(means, ddof=1))
    n_a, n_b = len(known[-1]), len(cand)
    if var_p is None:  # every sweep one process: the spread of the means is process noise and drift together
        var_d, var_diff = var_m, 2 * var_m
        var_p_shown = float("nan")
    else:
        var_d = max(0.0, var_m - var_p * float(np.mean([1.0 / len(g) for g in known])))
        var_diff = 2 * var_d + var_p * (1.0 / n_a + 1.0 / n_b)
        var_p_shown = var_p
    return Evidence(sd_process=math.sqrt(var_p_shown) if var_p is not None else float("nan"), sd_sweep=math.sqrt(var_d),
                    sd_diff=math.sqrt(var_diff), df=float(len(known) - 1), sweeps=len(known),
                    processes=sum(map(len, known)) + n_b)


def compare_with_evidence(a_sps: Sequence[float], b_sps: Sequence[float], ev: Evidence) -> ProcessComparison:
    """Baseline against candidate through a configuration's own noise model (`evidence`): a t-test of the
    difference of mean log throughputs with ev.sd_diff and ev.df (the sweeps' spread is the scarcer estimate)."""
    la, lb = np.log(np.asarray(a_sps, dtype=float)), np.log(np.asarray(b_sps, dtype=float))
    d = float(lb.mean() - la.mean())
    spread = max([v for v in (repeat_spread(a_sps), repeat_spread(b_sps)) if not math.isnan(v)], default=float("nan"))
    if ev.sd_diff == 0:
        p1, p2 = (0.0 if d < 0 else 1.0), (0.0 if d != 0 else 1.0)
        return ProcessComparison(math.exp(d), (math.exp(d), math.exp(d)), p1, p2, len(la), len(lb), spread)
    t = d / ev.sd_diff
    half = float(student_t.ppf(0.975, ev.df) * ev.sd_diff)
    return ProcessComparison(math.exp(d), (math.exp(d - half), math.exp(d + half)), float(student_t.cdf(t, ev.df)),
                             float(2 * student_t.sf(abs(t), ev.df)), len(la), len(lb), spread, decided_by="evidence")


def holm(p_values: dict, alpha: float) -> set:
    """Keys whose p-value stays significant at family-wise level alpha (Holm-Bonferroni)."""
    ordered = sorted((p, k) for k, p in p_values.items() if not math.isnan(p))
    out, m = set(), len(ordered)
    for i, (p, k) in enumerate(ordered):
        if p > alpha / (m - i):
            break
        out.add(k)
    return out


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
