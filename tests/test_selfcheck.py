"""The GPU self-check: with no GPU it says so and checks nothing; its checks run for real on the CPU path."""
from __future__ import annotations

import pytest

from conftest import run_bench


def test_without_a_gpu_selfcheck_says_so_and_exits_0_having_checked_nothing(tmp_path):
    p = run_bench(["selfcheck", "--store", str(tmp_path / "s.sqlite")], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no CUDA GPU visible" in p.stdout and "nothing was checked" in p.stdout
    assert not (tmp_path / "s.sqlite").exists() and "PASS" not in p.stdout


@pytest.mark.timeout(600)
def test_selfcheck_on_the_cpu_path_runs_every_check_and_they_pass(tmp_path):
    p = run_bench(["selfcheck", "--device", "cpu", "--store", str(tmp_path / "s.sqlite")], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    results = [l.split() for l in p.stdout.splitlines() if l.startswith("  PASS") or l.startswith("  FAIL")]
    checks = " ".join(p.stdout.splitlines())
    assert results and all(r[0] == "PASS" for r in results), p.stdout
    for name in ("every configuration ran", "timing agrees: bench/synthetic/ddp/cpux2", "memory recorded",
                 "equivalence: ddp x2", "all-reduce on 2"):
        assert name in checks, name


def test_the_timing_check_fails_when_window_and_steps_disagree(tmp_path):
    # The check is not a formality: a store whose window is twice its steps fails it.
    from bench.commands import selfcheck
    from bench.store import store
    from bench.sweep.plan import RunSpec
    s = RunSpec(workload="synthetic", strategy="single", device_type="cpu", device_count=1, per_device_batch=10,
                global_batch=10, image_size=0, steps=4, warmup=0, threads=1, seed=0, scaling="weak")
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    store.record_result(conn, sid, None, s, "ok", payload={
        "steps": [{"kind": "measure", "rank": 0, "step": i, "step_ms": 10.0} for i in range(4)],
        "windows": [{"kind": "measure", "rank": 0, "wall_s": 0.080, "samples": 40, "steps": 4}],
        "memory": [{"rank": 0, "device": "cpu", "peak_rss_mib": 100.0}], "timing_method": "cpu_clock"})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    timing = [c for c in selfcheck.checks(path) if c[0].startswith("timing agrees")]
    assert timing and timing[0][1] is False and "50.0% apart" in timing[0][2], timing
