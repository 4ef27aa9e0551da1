"""A stored sweep read back for the forecast: its configurations (bench.analysis.results), the forecast's inputs derived
from their raw rows (bench.forecast.inputs), its settings and its machine measurements. The forecast itself reads no
store; this is where the analysis hands it a sweep.

    f = load(conn, sweep_id)     # Forecastable: f.sweep, f.raw, f.sets, f.runs
    unstable_words(config)       # 'DDP x1 [bf16], unstable: one process (...), its steps spread 43% ...', '' when steady

The forecast is told which configurations the analysis calls unstable (results.Config.unstable, the recommendation's
flag): where its compute or its straggler/jitter term is read from one, it says so beside the figures it moves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench import stats
from bench.analysis import results
from bench.forecast import check as fk
from bench.forecast import inputs as fi
from bench.forecast import settings as fs
from bench.store import forecasts


@dataclass
class Forecastable:
    """A stored sweep as the forecast reads it."""
    sid: int
    sweep: object                    # bench.analysis.results.Sweep
    raw: dict                        # config key -> forecast_inputs.Raw
    sets: list                       # [forecast_sweep.Setting]
    runs: fk.Runs                    # its machine measurements


NOT_TRAINING = "which did not train"   # forecast.outlook says every figure then comes from a run that did not train


def unstable_words(c) -> str:
    """Why the analysis calls configuration c unstable, with its spread: its processes' throughputs apart by more than
    stats.UNSTABLE_REPEAT_SPREAD, or its steps' interquartile range above stats.UNSTABLE_IQR_FRACTION of their median
    (one process: nothing then measures the spread between processes); where its last loss was not finite, that it did
    not train (results.diverged: its steps are no training's); '' for a steady one."""
    if results.diverged(c):
        return f"{c.label}, {NOT_TRAINING} ({stats.loss_words(c.loss_not_finite, verdict=False)})"
    if not c.unstable:
        return ""
    s, n = c.summary, len(c.process_sps)
    why = []
    if n > 1 and c.repeat_spread > stats.UNSTABLE_REPEAT_SPREAD:
        why.append(f"its {n} processes' throughputs spread {c.repeat_spread:.0%}")
    if s.unstable:
        why.append(("one process (--repeats 3 measures the spread between processes), " if n <= 1 else "")
                   + f"its steps spread {s.iqr_ms / s.median_ms:.0%} of their median (interquartile range; p10-p90 "
                   f"{s.p10_ms:.1f}-{s.p90_ms:.1f} ms)")
    return f"{c.label}, unstable: {' and '.join(why)}"


def load(conn, sweep_id: Optional[int]) -> Forecastable:
    """The sweep (the latest for None) with its forecast inputs, read from an open store."""
    sid = results.pick_sweep(conn, sweep_id)
    sweep = results.load(conn, sid)
    raw = {k: r for k, r in ((k, fi.derive(rows)) for k, rows in forecasts.read_raw(conn, sid).items()) if r is not None}
    device_type = next((c.device_type for cs in sweep.bench.values() for c in cs), "cpu")
    # a rehearsal's collectives (ranks sharing one GPU over gloo) say nothing of a network: never a forecast's input
    comm = [c for c in sweep.comm if c[0] not in sweep.rehearsal_counts]
    inter = [i for i in forecasts.read_interference(conn, sid) if i[0] not in sweep.rehearsal_counts]
    runs = fk.Runs(comm=comm, inter=inter, device_type=device_type)
    unstable = {c.key: unstable_words(c) for cs in sweep.bench.values() for c in cs}
    return Forecastable(sid, sweep, raw, fs.settings(sweep, raw, unstable), runs)
