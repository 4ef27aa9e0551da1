"""The forecast's range: every measured input redrawn from its own repeated measurements, the forecast run on all the
draws at once (numpy over them), the range their 5th to 95th percentile. The central value is the forecast on the
inputs as measured, each a robust estimate (the median of processes, rounds, steps): one slow round or process moves
it by a fraction of the machine's spread, not by all of it.

    dinp, dm = draw(inp, machine, draws=DRAWS, seed=SEED)   # Inputs and Machine whose figures are arrays over
                                                            # draws + 1 (row 0: the central); settings.point takes them
    low, high = interval(values)                            # of such an array (row 0 left out)
    words(inp, machine)                                     # what the range rests on and what it leaves out

What a draw takes, input by input (each a spread from repeated measurement, each stored):
  compute          the spread between its run's processes (their median steps; `inputs.Spread`): the log of a draw's
                   factor is Student-t with P - 1 degrees of freedom, scale sd * sqrt(1/P) (P processes, sd the sample
                   standard deviation of their logs): the central's own uncertainty. With one process its window's
                   blocks stand in, said so.
  a fresh run      a measurement at the forecast count is itself one sweep's processes: their luck, the same t with scale
                   sd * sqrt(1/P), multiplies the whole step (the prediction interval of a new mean of P). With one
                   process it is not measured: left out, said so (the range is then too narrow).
  buckets          DDP's ready times: the per-bucket medians of the (repeat, rank, step) observations resampled
  straggler/jitter the tail (bench.forecast.inputs.tail_excess_ms) of half the steps drawn without replacement, each
                   kept twice (`half_samples`). Resampled with replacement, one slow step of 20 (an H200's first
                   measured step, 5.3 ms among 3.32s) came in three copies or more in 7.5% of the draws, enough for the
                   fitted tail: DDP x16's range read 34%-77% efficiency around a central of 77%. Steps far beyond the
                   tail fitted to the others (`set_apart`), no more of them than that fit passes over, are kept once in
                   every draw as measured and only the rest half-sampled: the central's fit reads the median of its top
                   5 steps of 20 and passes over 2; half-sampled, 2 such steps (another H200's 4.60 ms, its first
                   measured, and 3.57 among 3.31-3.33) came in a quarter of the draws, each twice, 4 of those 5, and
                   DDP x16 read 76% (66%-77%). The words name the steps set apart. A half-sample's tail varies more
                   than the whole set's: the range errs wide
  interference     each size's rounds resampled (bench.forecast.interference.redraw); the co-run's rounds likewise
  network          a measured level's fit: lognormal, its prediction error for one call (rms x sqrt(1 + 1/rows))
  memory           the peak per process, as compute (the central's uncertainty and a fresh run's)
  DataParallel     each measured count's processes, as compute
What is assumed (a preset or typed level, interference not measured) has no spread: it is outside the range and the
forecast says so (bench.forecast.check says how far such an assumption erred where the sweep measured a count).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from bench.forecast import inputs as fi
from bench.forecast import interference as itf
from bench.forecast import network as nw
from bench.forecast import step as fc

FAR = 0.01                       # a step the fitted tail gives under this chance among all n steps is set apart ...
FLOOR = 0.001                    # ... that tail's scale at least this fraction of the median (steps timed alike)
DRAWS = 400                      # draws per forecast (with the central: 401 rows)
SEED = 0                         # the draws are the same every run: a rerun prints the same range
LOW, HIGH = 0.05, 0.95           # the range: a 90% interval of the draws


def interval(values) -> tuple:
    """(low, high) of an array over draws + 1 (row 0, the central, left out), always holding the central; (nan, nan)
    for a number (nothing drawn)."""
    v = np.asarray(values, dtype=float)
    if v.ndim == 0 or v.shape[0] < 3:
        return (math.nan, math.nan)
    rest = v[1:][np.isfinite(v[1:])]
    if not rest.size:
        return (math.nan, math.nan)
    lo, hi = np.quantile(rest, [LOW, HIGH])
    return (float(min(lo, v[0])), float(max(hi, v[0])))


def _t(rng: np.random.Generator, df: int, draws: int) -> np.ndarray:
    return rng.standard_t(df, draws) if df >= 1 else np.zeros(draws)


def factors(sp: fi.Spread, rng: np.random.Generator, draws: int) -> tuple:
    """(the central's factor, a fresh run's factor), each an array over draws + 1 with row 0 equal to 1: Student-t
    in log space from the spread's values (module docstring). A fresh run's is 1 unless the values are processes."""
    ones = np.ones(draws + 1)
    vals = [v for v in sp.values if v and v > 0]
    if len(vals) < 2:
        return ones, ones
    logs = np.log(vals)
    sd, df = float(np.std(logs, ddof=1)), len(vals) - 1
    central = np.concatenate([[1.0], np.exp(_t(rng, df, draws) * sd * math.sqrt(1 / len(vals)))])
    if sp.per != "process":
        return central, ones
    fresh = np.concatenate([[1.0], np.exp(_t(rng, df, draws) * sd * math.sqrt(1 / len(vals)))])
    return central, fresh


def half_samples(x: np.ndarray, rng: np.random.Generator, draws: int) -> np.ndarray:
    """(draws, n) rows, each half of x's n values drawn without replacement and every one kept twice (the (m+1)-th once
    where n is odd): a tail read off a row sees each measured step at most twice, so one outlier stays one of the steps
    above the upper quartile, as in the central, never three or four of them (module docstring)."""
    n = x.size
    m = n // 2
    order = np.argsort(rng.random((draws, n)), axis=1)     # a random permutation per draw
    picks = x[order[:, :m]]
    return np.concatenate([picks, picks, x[order[:, m:m + n - 2 * m]]], axis=1)


def _top(n: int) -> int:
    """How many of n steps the central's fitted tail reads its scale from (inputs.tail_excess_ms: the top quarter)."""
    return max(2, int(round(n * (1 - fi.TAIL_FROM))))


def set_apart(steps) -> np.ndarray:
    """A mask over the steps: those far beyond the exponential tail fitted to the steps above their upper quartile (the
    central's fit, its scale at least the interquartile range's and FLOOR of the median), where the fit gives any of the
    n steps under FAR of a chance to reach them; none where more lie there than the fit's median of its top steps passes
    over (then they are a tail, and drawn as one). Such steps leave the central as it is; half-sampled, each kept twice,
    they would set the range (module docstring)."""
    x = np.asarray(steps, dtype=float)
    n = x.size
    if n < fi.MIN_TAIL_STEPS:
        return np.zeros(n, dtype=bool)
    q1, mid, u = np.quantile(x, [0.25, 0.5, fi.TAIL_FROM])
    top = np.sort(x)[n - _top(n):]
    scale = max(float(np.median(top - u)) / math.log(2), (u - q1) / math.log(3), FLOOR * mid)
    far = x > u + scale * math.log((1 - fi.TAIL_FROM) * n / FAR)
    return far if far.sum() <= (_top(n) - 1) // 2 else np.zeros(n, dtype=bool)


def tail_draws(steps, rng: np.random.Generator, draws: int) -> np.ndarray:
    """(draws, n): the steps not set apart half-sampled, those set apart kept once in every row, as measured."""
    far = set_apart(steps)
    kept = np.broadcast_to(steps[far], (draws, int(far.sum())))
    return np.concatenate([half_samples(steps[~far], rng, draws), kept], axis=1)


def tail_words(inp) -> str:
    """What the straggler/jitter range is drawn from, naming the steps set apart."""
    steps = np.asarray(inp.step_ms, dtype=float)
    n = steps.size
    if n < fi.MIN_TAIL_STEPS:
        return "straggler/jitter: none (too few steps)"
    far = np.flatnonzero(set_apart(steps))
    if not far.size:
        return f"straggler/jitter: half-samples of its {n} steps"
    first = "the first measured" if len(inp.step_firsts) <= 1 else "a process's first measured"
    named = [f"{fi.figure(steps[i])} ms" + (f" ({first})" if i in inp.step_firsts else "")
             for i in sorted(far, key=lambda i: -steps[i])]
    k = far.size
    one = k == 1
    return (f"straggler/jitter: half-samples of {n - k} of its {n} steps; the other {'one' if one else k}, "
            f"{' and '.join(named)}, far beyond the tail fitted to the steps, kept once in every draw as in the central "
            f"value, whose fitted tail passes over {'it' if one else 'them'} (a half-sample holds each step twice or "
            f"not at all: {2 * k} of the {_top(n)} steps that tail is read from)")


def _ready(inp, rng: np.random.Generator, draws: int) -> list:
    """The buckets with ready fractions over draws + 1: each bucket's median of resampled observations."""
    obs = np.asarray(inp.ready_obs, dtype=float)
    if obs.ndim != 2 or obs.shape[0] < 2 or obs.shape[1] != len(inp.buckets):
        return list(inp.buckets)
    picks = obs[rng.integers(0, obs.shape[0], size=(draws, obs.shape[0]))]
    med = np.median(picks, axis=1)                                   # (draws, K)
    dev = med - np.median(obs, axis=0)
    return [fc.Bucket(b.size_bytes, np.concatenate([[b.ready_fraction], np.clip(b.ready_fraction + dev[:, k], 0.0, 1.0)]))
            for k, b in enumerate(inp.buckets)]


def draw(inp, machine, draws: int = DRAWS, seed: int = SEED) -> tuple:
    """(Inputs, Machine) whose measured figures are arrays over draws + 1, row 0 the central (module docstring)."""
    rng = np.random.default_rng(seed)
    central_x, fresh_x = factors(inp.compute_spread, rng, draws)
    c = inp.compute
    compute = fc.Compute(c.data_ms * central_x, c.forward_ms * central_x, c.backward_ms * central_x,
                         c.optimizer_ms * central_x)
    steps = np.asarray(inp.step_ms, dtype=float)
    if steps.size >= 2:
        steps = np.concatenate([steps[None], tail_draws(steps, rng, draws)])
    m = replace(machine, net=nw.redraw(machine.net, rng, draws), inter=itf.redraw(machine.inter, rng, draws))
    dp = {}
    for n, ms in inp.dp_points.items():
        a, b = factors(inp.dp_spreads.get(n, fi.Spread()), rng, draws)
        dp[n] = ms * a * b
    mem_a, mem_b = factors(inp.peak_spread, rng, draws)
    drawn = replace(inp, compute=compute, step_ms=steps, buckets=_ready(inp, rng, draws), dp_points=dp,
                    process_x=fresh_x, memory_x=mem_a * mem_b,
                    co_run_base=m.inter.co_run_x(*inp.co_run_at))
    return drawn, m


def words(inp, machine) -> str:
    """What the range rests on, input by input, and what it leaves out."""
    if inp.dp_points:
        said = "; ".join(f"x{n}: {inp.dp_spreads[n].words()}" for n in sorted(inp.dp_spreads))
        return f"range ({LOW:.0%}-{HIGH:.0%} of {DRAWS} draws): DataParallel's measured steps, {said}"
    sp = inp.compute_spread
    parts = [f"compute: {sp.words()}"]
    if sp.per == "process" and sp.n >= 2:
        parts.append("a fresh run's own processes: the same spread")
    else:
        parts.append("a fresh run's spread between processes: not measured, left out (the range is too narrow by it)")
    obs = len(inp.ready_obs)
    if inp.ready_obs and obs >= 2:
        parts.append(f"bucket ready times: {obs} observations (repeats x ranks x steps) resampled")
    parts.append(tail_words(inp))
    parts += [w for w in (itf.spread_words(machine.inter), nw.spread_words(machine.net)) if w]
    if inp.memory is not None:
        parts.append(memory_words(inp.memory, inp.peak_spread))
    if not machine.inter.measured:
        parts.append("interference: assumed, no spread (outside the range)")
    parts.append("efficiency: against the single device's median, its own spread left out")
    return f"range ({LOW:.0%}-{HIGH:.0%} of {DRAWS} draws, seed {SEED}): " + "; ".join(parts)


def memory_words(base, pk: fi.Spread) -> str:
    """What the memory range rests on. On CPU the spread drawn is the rise of peak RSS over the process's RSS before its
    model, and that pre-model RSS is added as measured (bench.forecast.inputs._memory): the figures listed are the rise,
    never to be read as the peak the memory section gives (1037 MiB listed there beside a peak of 1436 MiB)."""
    cpu = base.device_type == "cpu" and base.runtime_mib
    what = "the largest rank's peak RSS above its RSS before the model" if cpu else "the largest rank's peak"
    added = (f", its RSS before the model ({fi.figure(base.runtime_mib)} MiB, the median of processes) added as "
             "measured" if cpu else "")
    return (f"memory: {what}, {pk.words('MiB')}" if pk.n >= 2 else "memory: one process's peak" + (
        " RSS above its RSS before the model" if cpu else "") + ", no range (--repeats 3 gives it one)") + added
