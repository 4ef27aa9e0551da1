"""What tells two configurations apart: the spread between processes (the independent samples), the noise a
difference must clear and where that figure came from (`Noise`), comparisons of per-process throughputs (Welch,
paired, with a configuration's own evidence over sweeps), Holm's correction, and how an efficiency above 100% is shown.

The noise of a comparison rests on evidence measured on the device and at the precision it speaks of, never on another
device's or precision's (`pair_noise`): the two configurations' own repeats where both ran in several processes; else
this sweep's spread between the processes of the configurations of that workload it repeated on this device at that
precision (`sweep_noise`: on CUDA the sweep runs its cheapest configuration of every precision in 3 processes for it,
bench.sweep.plan); else the same workload's figure from an earlier sweep or from `selfcheck` (`host_noise`, kept by
bench.store.hostnoise); else another workload's, this sweep's or selfcheck's, named with that workload wherever it
shows (bench.analysis.results.noise); else it is not measured (NOT_MEASURED, or `not_carried` where another
precision's was), and no lead and no tie is called on it. One precision's figure does not speak for another's: on one H200 three fp32
processes of DeepLabV3 single x1 ran 0.6% apart (75.09-75.55 samples/s, compute-bound, GPU busy 91%) and two bf16 ones
of it 144 and 200 samples/s (host-bound, GPU busy 39-56%), 38% apart. That story stays here and in docs/verdicts.md: a
report says only why the figures do not carry over, never that run's figures, which are not of the device it reports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from bench.stats.steps import UNSTABLE_IQR_FRACTION, student_t


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


def shown_efficiency(efficiency: float, noise, device_count: int = 0) -> ShownEfficiency:
    """The rule for an efficiency above 100% (the report's tables and sentences and the forecast use it alike).
    efficiency: measured against the 1-device baseline of the same sweep (fraction); noise: the relative throughput
    difference that the configuration and its baseline cannot be told apart within (a fraction or a `Noise`; nan or
    NOT_MEASURED: not measured). Up to 100%: as measured. Above, by no more than the noise: 100%, with the measured
    value and the noise (two processes of one device read 103% and 97% of each other as often). Above with the noise
    not measured: as measured, saying it cannot be told from 100%. Above by more: the measured value stands, with why
    it can exceed the ideal (superlinear: the per-device share fits a cache; or the baseline ran slow; at device_count
    1, the same device's work: the processes ran differently, which is not scaling)."""
    noise = noise.fraction if isinstance(noise, Noise) else noise
    if efficiency is None or math.isnan(efficiency) or efficiency <= 1.0:
        return ShownEfficiency(float("nan") if efficiency is None else efficiency,
                               float("nan") if efficiency is None else efficiency, "")
    if noise is None or math.isnan(noise):
        return ShownEfficiency(efficiency, efficiency, f"measured {efficiency:.0%}; the noise between processes is not "
                                                       "measured on this device, so not told from 100%: rerun with --repeats 3")
    noise_txt = percent(noise)
    if efficiency - 1.0 <= noise:
        return ShownEfficiency(efficiency, 1.0, f"within noise: measured {efficiency:.0%}, noise {noise_txt}", True)
    if device_count == 1:
        return ShownEfficiency(efficiency, efficiency, f"faster than the baseline on one device by more than the {noise_txt} "
                                                       "noise: the processes ran differently, not scaling")
    return ShownEfficiency(efficiency, efficiency, f"above the ideal by more than the {noise_txt} noise: superlinear "
                                                   "(each device's share fits its caches) or a slow baseline")


@dataclass(frozen=True)
class Noise:
    """The process-to-process noise a comparison is held against: a relative throughput spread (fraction; nan when not
    measured), where it came from (`source`: 'repeats', 'sweep', 'host' or 'none') and that in words (`detail`)."""
    fraction: float
    source: str
    detail: str
    workload: str = ""   # the workload it was measured on ('the synthetic MLP'), named wherever it shows: always for
                         # 'host', for 'sweep' where it stands in for another workload's (bench.analysis.results.noise)
    low: float = math.nan      # the slowest and fastest process behind it (samples/s): the figure's own evidence
    high: float = math.nan
    processes: int = 0
    configuration: str = ""    # the configuration those processes ran ('single device x1 [bf16]')
    unstable: int = 0          # how many of them stepped unsteadily (IQR above 10% of their median)
    where: str = ""            # its source as the noise line names it: 'this sweep', 'sweep 1 of this store, 2026-11-27'

    @property
    def measured(self) -> bool:
        return self.source != "none" and not math.isnan(self.fraction)

    def source_words(self) -> str:
        """Where the figure came from, short: 'their repeats', 'this sweep', 'sweep 1 of this store', 'selfcheck on
        the synthetic MLP'."""
        if self.source == "host":
            return "selfcheck" + (f" on {self.workload}" if self.workload else "")
        if self.source == "sweep" and self.workload:
            return f"this sweep on {self.workload}"
        if self.source == "earlier":
            return self.where.split(",")[0]
        return {"repeats": "their repeats", "sweep": "this sweep", "none": "not measured"}.get(self.source, self.source)

    def figure_words(self) -> str:
        """'0.1% (75.09-75.18 samples/s, 3 processes of single device x1, this sweep)': the figure with the processes
        behind it, as the report's noise lines and the sweep's last line give it. A sweep run to measure the noise
        (DeepLabV3 fp32 and bf16 in 3 processes each on one H200) never stated it: only 'unstable' and a pooled median."""
        if not self.measured:
            return "not measured"
        shaky = (f", {'all' if self.unstable == self.processes else f'{self.unstable} of'} {self.processes} with "
                 f"steps spread over {UNSTABLE_IQR_FRACTION:.0%} of their median each" if self.unstable else "")
        on = f" on {self.workload}" if self.source in ("host", "sweep") and self.workload else ""
        span = f"{sps_words(self.low)}-{sps_words(self.high)} samples/s, " if not math.isnan(self.low) else ""
        return (f"{percent(self.fraction)} ({span}{self.processes} processes of {self.configuration}{on}{shaky}, "
                f"{self.where or self.source_words()})")

    def words(self) -> str:
        """'0.8%, this sweep's spread between the 3 processes of ...' or 'not measured (...)'."""
        return f"{percent(self.fraction)}, {self.detail}" if self.measured else f"not measured ({self.detail})"


def device_word(device: str) -> str:
    """'GPU' on CUDA, else the device type in capitals ('CPU'): what the noise's words call the device."""
    return "GPU" if device == "cuda" else device.upper()


def sps_words(v: float) -> str:
    """A process's throughput as the noise line gives it: '75.09', '140.3', '89,484'."""
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}" if v >= 100 else f"{v:.2f}"


def percent(fraction: float) -> str:
    """'0.8%' under 10% (a GPU's spread is a fraction of a percent), '25%' above."""
    return f"{fraction:.1%}" if fraction < 0.1 else f"{fraction:.0%}"


NOT_MEASURED = Noise(float("nan"), "none", "no configuration ran in several processes on this device in this sweep, and "
                                           "selfcheck has stored no figure for this host and device")


def not_carried(precision: str, measured: dict) -> Noise:
    """The noise at `precision` where none was measured at it but at other precisions (`measured`: precision -> Noise):
    not measured, saying the other precisions' figures do not carry over and why; NOT_MEASURED where none was."""
    measured = {p: n for p, n in measured.items() if p != precision and n.measured}
    if not measured:
        return NOT_MEASURED
    others = " and ".join(f"{p}'s {percent(n.fraction)} ({n.source_words()})"
                          for p, n in sorted(measured.items()))
    return Noise(float("nan"), "none", f"no {precision} configuration ran in several processes on this device in this "
                                       f"sweep, and selfcheck has stored no {precision} figure for this host and device; "
                                       f"{others} {'does' if len(measured) == 1 else 'do'} not carry over, since "
                                       "processes of one precision can differ far more than another's")


def pair_noise(a_sps: Sequence[float], b_sps: Sequence[float], fallback: Noise = NOT_MEASURED) -> Noise:
    """The noise two configurations are told apart by: the larger spread between their processes where both ran
    several (`repeat_spread`), else `fallback` (the sweep's or the host's at their precision, or NOT_MEASURED:
    bench.analysis.results)."""
    spreads = [repeat_spread(a_sps), repeat_spread(b_sps)]
    if any(math.isnan(v) for v in spreads):
        return fallback
    return Noise(max(spreads), "repeats", f"the spread between their {min(len(a_sps), len(b_sps))} processes each")


def noise_bound(a_sps: Sequence[float], b_sps: Sequence[float], fallback: Noise = NOT_MEASURED) -> float:
    """The relative throughput difference (fraction) within which two configurations cannot be told apart
    (`pair_noise`'s figure); nan where it is not measured."""
    return pair_noise(a_sps, b_sps, fallback).fraction


def sweep_noise(repeated: Sequence[tuple], device: str, workload: str = "") -> Optional[Noise]:
    """This sweep's process-to-process noise on one device (at one precision and of one workload: the caller passes
    those configurations alone): the largest spread over the configurations it ran in several processes there.
    repeated: [(label, [samples/s per process], how many of them were unstable (optional))]; None where none ran in
    several. workload: its words ('the synthetic MLP') where the figure is to name it (it stands in for another
    workload's, or a sweep of several workloads states it): a label names no workload."""
    spread = [(repeat_spread(r[1]), r[0], r[1], r[2] if len(r) > 2 else 0) for r in repeated if len(r[1]) >= 2]
    spread = [s for s in spread if not math.isnan(s[0])]
    if not spread:
        return None
    worst = max(spread, key=lambda s: s[0])
    others = f", the largest of the {len(spread)} configurations it repeated" if len(spread) > 1 else ""
    where = device_word(device)
    on = f" on {workload}" if workload else ""
    return Noise(worst[0], "sweep", f"this sweep's spread between the {len(worst[2])} processes of {worst[1]}{on} on "
                                    f"this {where}{others}", workload, low=min(worst[2]), high=max(worst[2]),
                 processes=len(worst[2]), configuration=worst[1], unstable=worst[3], where="this sweep")


WORKLOAD_WORDS = {"synthetic": "the synthetic MLP"}


def host_noise(entry: Optional[dict]) -> Optional[Noise]:
    """The per-host figure selfcheck stored (bench.store.hostnoise: raw per-process throughputs and where they came
    from) as a Noise; None without an entry of two processes or more."""
    if not entry:
        return None
    spread = repeat_spread(entry.get("process_sps") or [])
    if math.isnan(spread):
        return None
    where = f"{entry['store']} sweep {entry.get('sweep_id')}" if entry.get("store") else "selfcheck's store"
    workload = WORKLOAD_WORDS.get(entry.get("workload"), entry.get("workload") or "one workload")  # hostnoise fills it
    sps, date = [float(v) for v in entry["process_sps"]], str(entry.get("measured_at") or "?")[:10]
    return Noise(spread, "host", f"selfcheck's spread between {len(sps)} processes of "
                                 f"{entry.get('configuration') or 'one configuration'} on {workload}, on host "
                                 f"{entry.get('hostname')}, {entry.get('device_name') or entry.get('device_type')}, "
                                 f"{date} ({where})", workload, low=min(sps), high=max(sps), processes=len(sps),
                 configuration=str(entry.get("configuration") or "one configuration").split(" (")[0],
                 unstable=sum(bool(p.get("unstable")) for p in entry.get("processes") or [] if isinstance(p, dict)),
                 where=f"selfcheck's host file: {workload}, {date}")


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


def unsteady(c) -> bool:
    """c (a configuration: its process_sps, its steps' summary, its label) ran one process whose steps spread more than UNSTABLE_IQR_FRACTION of their median: the noise measured on other
    (steady) processes does not speak for it; on one H100, a bf16 DataParallel x1 process stepping unsteadily read 69%
    faster than its identical twin against selfcheck's 1%."""
    return len(c.process_sps) <= 1 and bool(c.summary.unstable)


def unsteady_words(cs: list) -> str:
    """'DDP x1 [bf16] ran one process whose steps spread 28% of their median (IQR; unstable above 10%)' for those of
    `cs` that are `unsteady` ('A and B ran one process each ... 28% and 17% ...'); '' where none is."""
    shaky = [c for c in cs if unsteady(c)]
    if not shaky:
        return ""
    spreads = " and ".join(f"{c.summary.iqr_ms / c.summary.median_ms:.0%}" for c in shaky)
    return (f"{' and '.join(c.label for c in shaky)} ran one process{' each' if len(shaky) > 1 else ''} whose steps "
            f"spread {spreads} of their median (IQR; unstable above {UNSTABLE_IQR_FRACTION:.0%})")


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
