"""The whole run's memory (compilation, the warm-up, cuDNN's autotuning: read before the peaks are reset after the
warm-up) in the forecast's memory per device, from stored memory rows (bench.forecast.inputs)."""
from __future__ import annotations

import pytest

from bench.forecast import inputs as fi
from bench.forecast import memory as mm

STATE = {"params_mib": 100.0, "grads_mib": 100.0, "optimizer_mib": 100.0, "buckets_mib": 100.0}


def row(**kw) -> dict:
    base = {"result_id": 1, "rank": 0, "device": "cuda:0", "peak_allocated_mib": 1000.0, "artefact_mib": 0.0,
            "process_used_mib": 1900.0, "device_used_mib": 1950.0, **STATE}
    return {**base, **kw}


def device_mib(rows: list, count: int = 8) -> float:
    state, peaks, method, runtime = fi._memory(rows)
    base = mm.base_of("ddp", 1, {}, state, peaks[0], method, [], "cuda", 64.0, runtime)
    return mm.per_device(base, "ddp", count, {}).device_mib


def test_the_forecasts_device_level_is_not_below_the_whole_runs_peak():
    # after the window nvidia-smi saw the process at 1900 MiB (the device at 1950: 50 MiB another process's); the
    # warm-up's compilation had taken the device to 2600
    rows = [row(run_peak_allocated_mib=1800.0, run_peak_reserved_mib=2300.0, run_device_used_mib=2600.0)]
    assert device_mib(rows) == pytest.approx(2550.0)          # the whole run's level, less the other process's 50


def test_the_steady_level_stands_where_the_whole_run_went_no_higher_or_was_not_stored():
    assert device_mib([row()]) == pytest.approx(1900.0)       # an older store: no whole-run figures
    assert device_mib([row(run_peak_reserved_mib=1200.0, run_device_used_mib=1950.0)]) == pytest.approx(1900.0)
    # no process level (no NVML's process table): the whole run's device level still counts
    assert device_mib([row(process_used_mib=None, run_device_used_mib=2100.0)]) == pytest.approx(2100.0)


def test_cudnns_benchmark_workspaces_in_the_whole_runs_reserved_peak_are_no_need_to_forecast():
    # DeepLabV3 fp32 on one H100: the warm-up's cuDNN benchmark reserved 21440 MiB (workspaces that take what is free
    # and do without where nothing is), the device level stayed at 6419: the forecast holds the level, not the workspaces
    rows = [row(peak_allocated_mib=4586.0, process_used_mib=6410.0, device_used_mib=6419.0, run_peak_allocated_mib=21235.0,
                run_peak_reserved_mib=21440.0, run_device_used_mib=6419.0)]
    assert device_mib(rows) == pytest.approx(6410.0)
