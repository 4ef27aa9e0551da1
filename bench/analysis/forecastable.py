"""A stored sweep read back for the forecast: its configurations (bench.analysis.results), the forecast's inputs derived
from their raw rows (bench.forecast.inputs), its settings and its machine measurements. The forecast itself reads no
store; this is where the analysis hands it a sweep.

    f = load(conn, sweep_id)     # Forecastable: f.sweep, f.raw, f.sets, f.runs
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

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
    return Forecastable(sid, sweep, raw, fs.settings(sweep, raw), runs)
