"""A configuration's own evidence over sweeps for `compare`: the spread between its processes and between its sweeps
(the drift of a shared machine), the slowdown that evidence can call, the one earlier sweep that disturbs a bound, and
Holm's correction over several comparisons. Split from bench/stats/noise.py (past 400 lines), which keeps the noise of
one sweep and the comparisons of per-process throughputs."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from bench.stats.noise import ProcessComparison, repeat_spread
from bench.stats.steps import student_t


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


def _logs(xs: Sequence[float]) -> list:
    """Log throughputs of the processes that measured one (None and non-positive values left out)."""
    return [math.log(float(x)) for x in xs if x is not None and float(x) > 0]


MIN_EVIDENCE_SWEEPS = 3         # earlier sweeps + the baseline before the spread between sweeps is used


def evidence(history: Sequence[Sequence[float]], a_sps: Sequence[float], b_sps: Sequence[float]):
    """The noise model of one configuration from its processes (samples/s): `history` holds one list per earlier
    sweep of it, a_sps the baseline's, b_sps the candidate's. A sweep's mean is mu + drift + process noise: its
    variance is sd_sweep^2 + sd_process^2 / n (a random-effects model), so the baseline-to-candidate difference
    has variance 2 sd_sweep^2 + sd_process^2 (1/n_a + 1/n_b). sd_process pools the spread inside every sweep
    with repeats (the candidate's too: a shift does not change it); sd_sweep comes from the spread of the
    known-good sweeps' means (never the candidate's). None with fewer than MIN_EVIDENCE_SWEEPS of them: then
    the drift between sweeps is unknown (compare falls back to repeats and a fixed drift bound, or cannot decide)."""
    known = [g for g in (_logs(h) for h in history) if g] + [_logs(a_sps)]
    cand = _logs(b_sps)
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


DISTURBING_SHRINK = 2.0         # one earlier sweep is named when leaving it out at least halves a bound ...
DISTURBING_POINTS = 0.05        # ... and narrows it by 5 points or more


@dataclass(frozen=True)
class Disturbing:
    """The earlier sweep that alone widens a configuration's bound: its index in the history, how far its mean stood
    from the median of the other known sweeps' (fraction of throughput: -0.3 ran 30% slower), and the bound (a
    slowdown fraction) with it and without it."""
    index: int
    deviation: float
    bound_with: float
    bound_without: float


def disturbing_sweep(history: Sequence[Sequence[float]], a_sps: Sequence[float], b_sps: Sequence[float],
                     alpha: float) -> Optional[Disturbing]:
    """One disturbed sweep in a configuration's history (another job on the machine) inflates the spread between its
    sweeps, and with it every later bound: the random-effects model cannot tell a one-off from drift. This names the
    earlier sweep whose leaving out narrows the bound at level alpha the most, where that at least halves it
    (DISTURBING_SHRINK, DISTURBING_POINTS) and evidence remains without it; else None. Only a person knows whether that
    sweep was disturbed or the machine drifts so: compare names it and leaves the choice (--leave-out)."""
    full = evidence(history, a_sps, b_sps)
    if full is None:
        return None
    with_ = full.bound(alpha)
    best = None
    for i in range(len(history)):
        ev = evidence(list(history[:i]) + list(history[i + 1:]), a_sps, b_sps)
        if ev is not None and (best is None or ev.bound(alpha) < best[1]):
            best = (i, ev.bound(alpha))
    if best is None or best[1] * DISTURBING_SHRINK > with_ or with_ - best[1] < DISTURBING_POINTS:
        return None
    known = [_logs(h) for h in list(history) + [a_sps]]   # by position: known[i] is history[i]
    if not known[best[0]]:
        return None
    others = [float(np.mean(g)) for j, g in enumerate(known) if j != best[0] and g]
    return Disturbing(best[0], math.expm1(float(np.mean(known[best[0]])) - float(np.median(others))), with_, best[1])


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
