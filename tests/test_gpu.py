"""What only a GPU can show; skipped without one (run: ./run_tests.sh --run-gpu -m gpu on a GPU machine)."""
from __future__ import annotations

import sqlite3

import pytest

from conftest import run_bench

pytestmark = pytest.mark.gpu


@pytest.mark.timeout(1800)
def test_selfcheck_passes_on_this_machines_gpus(tmp_path):
    # one sweep per checked configuration: estimated 7-8 minutes on 8 GPUs, so twice that as the limit
    p = run_bench(["selfcheck", "--store", str(tmp_path / "s.sqlite")], timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS" in p.stdout and "FAIL" not in p.stdout


@pytest.mark.timeout(900)
def test_bf16_and_fp16_autocast_run_and_are_recorded_beside_fp32(tmp_path):
    path = str(tmp_path / "s.sqlite")
    # one process each, no traces: this checks the precisions run and are recorded, not their noise or bound (two GPU
    # leases cut this test at its default 3 processes per precision's probe and a traced window each)
    p = run_bench(["--device", "cuda", "--gpus", "1", "--workloads", "synthetic", "--strategies", "single,ddp",
                   "--precision", "fp32,tf32,bf16,fp16", "--steps", "20", "--warmup", "5", "--noise-repeats", "1",
                   "--no-profile", "--no-report", "--store", path], timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = sqlite3.connect(path).execute("SELECT precision, status, samples_per_s, timing_method FROM results "
                                         "WHERE mode = 'bench'").fetchall()
    assert {r[0] for r in rows if r[1] == "ok"} >= {"fp32", "fp16"}
    assert all(r[3] == "cuda_window_events" for r in rows if r[1] == "ok")


@pytest.mark.timeout(900)
def test_memory_figures_are_ordered_allocated_reserved_device_level(tmp_path):
    path = str(tmp_path / "s.sqlite")
    p = run_bench(["--device", "cuda", "--gpus", "1", "--workloads", "synthetic", "--strategies", "single",
                   "--steps", "10", "--warmup", "3", "--noise-repeats", "1", "--no-profile", "--no-report", "--store", path],
                  timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    for alloc, reserved, level in sqlite3.connect(path).execute(
            "SELECT peak_allocated_mib, peak_reserved_mib, device_used_mib FROM memory WHERE device LIKE 'cuda%'"):
        assert 0 < alloc <= reserved <= level
