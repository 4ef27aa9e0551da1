"""The GPU's busy share counts the traced steps' own kernels, not those of the step before the first traced one
(bench.analysis.kernelsteps). The window began at the host's start of the first traced step; a GPU-bound step's GPU
runs behind its host, so the previous step's kernels still ran inside it: three steps of 100 ms of kernels on a GPU
20 ms behind read 320 ms, 106.7 ms a step, and the committed H100 DeepLabV3 single x1 fp32 111.0 ms of kernels a traced
step in 108.0 ms steps ('GPU busy 103%: over 100%, a measurement error'). Chrome-trace fixtures laid out as Kineto
writes them on CUDA (tests/test_kineto_traces.py); a stored busy share read by the old window says so."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bench.analysis import traces
from bench.report.busy import busy
from test_kineto_traces import _ev, _gpu_step, _kernel, _step

MS = 1000.0   # the trace's unit is the microsecond
LAG = 20 * MS


def _gpu_behind(copies: bool = True, launches: bool = False, leftover_at: float = 0.0, devices: tuple = (0,)) -> list:
    """Three host steps of 100 ms at 0, 100 and 200 ms; on each device 100 ms of kernels per step, 20 ms behind its host
    (two GEMMs of 50 ms), and one 20 ms kernel left over from step 0 (the step before the traced ones) at leftover_at.
    copies: Kineto's gpu_user_annotation copy of each step on the GPU; launches: every kernel's cudaLaunchKernel on the
    host with its correlation id (the leftover's at -10 ms, in step 0)."""
    events, corr = [], iter(range(1, 10_000))

    def kernel(name, ts, dur, launched_at, device):
        c = next(corr)
        if launches:
            events.append(_ev("cudaLaunchKernel", launched_at, 5, "cuda_runtime", correlation=c))
        return _kernel(name, ts, dur, device=device, **({"correlation": c} if launches else {}))

    for d in devices:
        events.append(kernel("sm90_xmma_gemm_leftover", leftover_at, LAG + (0.0 - leftover_at), -10 * MS, d))
    for k in range(3):
        host = k * 100 * MS
        events.append(_step(k + 1, host, 100 * MS))
        for d in devices:
            first = host + LAG
            events += [kernel("sm90_xmma_gemm", first, 50 * MS, host + 1 * MS, d),
                       kernel("sm90_xmma_gemm", first + 50 * MS, 50 * MS, host + 2 * MS, d)]
            if copies:
                events.append(dict(_gpu_step(k + 1, first, first + 100 * MS, 7), pid=d))
    return events


@pytest.mark.parametrize("copies, launches, leftover_at, rule", [
    (True, False, 0.0, "gpu_steps"),      # the finding's fixture: Kineto's GPU copies of the steps
    (True, True, 0.0, "gpu_steps"),       # the copies and the launches
    (False, True, 0.0, "launches"),       # no copies: each kernel matched to its launch by correlation id
    (False, False, -5 * MS, "host_start"),  # neither: a kernel that began before the first step is an earlier step's
])
def test_kernels_of_the_step_before_the_traced_ones_are_not_counted(copies, launches, leftover_at, rule):
    f = traces.figures({"traceEvents": _gpu_behind(copies, launches, leftover_at)})
    assert f.steps == 3 and f.work_ms / f.steps == pytest.approx(100.0)   # it read 106.67: the leftover's 20 ms counted
    assert f.devices["0"]["work_ms"] == pytest.approx(300.0)               # it read 320
    assert f.window == f.devices["0"]["window"] == rule                    # stored with the figures: how they were read
    if rule != "host_start":   # the window begins where step 1's GPU work does, 20 ms after its host annotation
        assert f.span_ms == pytest.approx(300.0, abs=0.01) and f.idle_ms == pytest.approx(0.0, abs=0.01)


def test_each_gpu_of_a_process_that_drives_several_counts_its_own_steps_kernels_only():
    # DataParallel: one process, two GPUs, each running the previous step's last kernel into the first traced one
    for copies, launches in ((True, False), (False, True)):
        f = traces.figures({"traceEvents": _gpu_behind(copies, launches, devices=(0, 1))})
        assert {d: v["work_ms"] for d, v in f.devices.items()} == {"0": pytest.approx(300.0), "1": pytest.approx(300.0)}


def test_a_copy_of_the_previous_step_on_another_stream_is_left_out_whole_not_clipped():
    events = _gpu_behind() + [_ev("Memcpy HtoD (Pinned -> Device)", 10 * MS, 20 * MS, "gpu_memcpy", pid=0, tid=9,
                                  device=0, stream=9)]   # from 10 to 30 ms: begun before step 1's GPU work (20 ms)
    f = traces.figures({"traceEvents": events})
    assert f.work_ms == pytest.approx(300.0) and f.copy_ms == pytest.approx(0.0)


def test_a_trace_whose_kernels_are_all_an_earlier_steps_is_still_read_from_kernels():
    events = [e for e in _gpu_behind(copies=False, launches=True) if "leftover" in e["name"] or e["cat"] != "kernel"]
    f = traces.figures({"traceEvents": events})   # never 'host_ops', whose note says the profiler recorded no kernels
    assert f.method == "device_kernels" and f.work_ms == 0.0 and f.steps == 3


def test_a_host_bound_steps_window_still_holds_the_gpus_idle_time_between_steps():
    # 30 ms of kernels a step, 5 ms after its launch: the GPU waits for the host between steps, and that is idle
    events = []
    for k in range(3):
        host = k * 100 * MS
        events += [_step(k + 1, host, 100 * MS), _kernel("sm90_xmma_gemm", host + 5 * MS, 30 * MS),
                   _gpu_step(k + 1, host + 5 * MS, host + 35 * MS, 7)]
    f = traces.figures({"traceEvents": events})
    assert f.work_ms == pytest.approx(90.0) and f.span_ms == pytest.approx(295.0, abs=0.01)
    assert f.idle_ms == pytest.approx(205.0, abs=0.01)


def _row(work_ms: float, traced_ms: float, window) -> dict:
    """A stored traces row of 3 traced steps whose window ran 5.1 ms a step past the traced steps (the GPU behind)."""
    per = {"0": {"work_ms": 3 * work_ms, "comm_ms": 0.0, "exposed_comm_ms": 0.0, "idle_ms": 0.0,
                 **({"window": window} if window else {})}}
    return {"rank": 0, "span_ms": 3 * (traced_ms + 5.1), "steps": 3, "method": "device_kernels", "work_ms": 3 * work_ms,
            "exposed_comm_ms": 0.0, "devices_json": json.dumps(per), "traced_step_ms": traced_ms}


def _config(row: dict, median_ms: float) -> SimpleNamespace:
    return SimpleNamespace(summary=SimpleNamespace(median_ms=median_ms, iqr_ms=0.5), traces=[row], label="single x1",
                           device_count=1)


def test_a_stored_share_over_100_percent_from_the_old_window_is_said_to_be_its_error_not_a_verdicts_ground():
    # the committed H100 DeepLabV3 single x1 fp32: 111.0 ms of kernels a traced step, 108.0 ms measured, 108.4 traced
    old = busy(_config(_row(111.0, 108.4, None), 108.0))
    assert old.over and old.old_window
    text = old.error()
    assert "This store's traces were read with the old window" in text, text
    assert "up to 5.1 ms a step" in text and "at least 105.9 ms of kernels a step, 98%" in text, text
    assert "no verdict rests on it" in text and "rests on that error" not in text, text
    new = busy(_config(_row(111.0, 108.4, "gpu_steps"), 108.0))   # read by this version: the old window is no cause
    assert new.over and not new.old_window and "old window" not in new.error()
    assert "A compute-bound verdict read on it rests on that error" in new.error()


def test_derive_stores_how_the_steps_kernels_were_told_apart(tmp_path):
    from test_kineto_traces import _write
    rows = traces.derive([{"rank": 0, "device_type": "cuda", "path": _write(tmp_path, "r0", _gpu_behind())}])
    per = json.loads(rows[0]["devices_json"])
    assert per["0"]["window"] == "gpu_steps" and rows[0]["work_ms"] == pytest.approx(300.0)
    assert not busy(_config(dict(rows[0], traced_step_ms=100.0), 100.0)).old_window


def test_one_traced_step_on_a_gpu_further_behind_than_a_step_is_read_not_an_index_error():
    # --profile-steps 1 without Kineto's GPU copies: the step's kernels, matched to its launches, start 150 ms into a
    # 100 ms host step; its interval (GPU start to host end) is empty and nothing else was left, so window() read
    # out[-1] of an empty list (IndexError, which derive() does not catch: the result was lost).
    events = [_step(1, 0.0, 100 * MS),
              _ev("cudaLaunchKernel", 1 * MS, 5, "cuda_runtime", correlation=1),
              _ev("cudaLaunchKernel", 2 * MS, 5, "cuda_runtime", correlation=2),
              _kernel("sm90_xmma_gemm", 150 * MS, 50 * MS, device=0, correlation=1),
              _kernel("sm90_xmma_gemm", 200 * MS, 50 * MS, device=0, correlation=2)]
    f = traces.figures({"traceEvents": events})
    assert f.steps == 1 and f.work_ms == pytest.approx(100.0) and f.window == "launches"
