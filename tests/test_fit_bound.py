"""fit's answer carries its bound: on CUDA its measured runs at the batch it found are profiled as a sweep profiles by
default (a few traced steps after the window), never its trials, so the recommendation's bound cell reads the GPU's
busy share. Every committed fit report read 'not measured (fit's runs are not traced)' (examples/h200-2026-11-27-eve/
transformer-fit/report.md: DDP x1 at batch 144). --profile from the user stays refused."""
from __future__ import annotations

import gzip
import json
import os

import pytest

from bench.commands import fit as fit_cmd
from test_fit import _fake_gpu_launcher
from test_kineto_traces import _gpu_step, _kernel, _step

STEP_MS, KERNEL_MS = 10.0, 2.5   # the fake launcher's measured step; the kernels of a traced step: busy 25%


def _one_gpu_fit(tmp_path, device: str = "cuda") -> tuple:
    """(config, names given, machine) of a fit of the transformer's single device x1 on a pretend H100 (or the CPU)."""
    from bench import options
    from bench.sweep import plan
    machine = plan.Machine(cuda_devices=1, cpu_cores=16, gpu_names=("H100",), gpu_capabilities=((9, 0),),
                           arch_list=("sm_90",), gpu_memory_bytes=(80 * 2**30,))
    cfg, given, _ = options.prepare(["--device", device, "--workloads", "transformer", "--strategies", "single",
                                     "--gpus", "1", "--no-report", "--store", str(tmp_path / "fit.sqlite"),
                                     "--memory-budget-gib", "5"], machine=machine)
    return cfg, given, machine


def _spec(cfg, machine):
    import dataclasses

    from bench.sweep import plan
    one = dataclasses.replace(cfg, repeats=1, noise_repeats=1)   # as fit plans its searches: one spec each
    [spec] = [s for s in plan.bench_specs(one, machine) if not isinstance(s, plan.Skip)]
    return spec


def test_the_measured_runs_at_fits_answer_are_profiled_on_cuda_and_its_trials_never(tmp_path):
    cfg, given, machine = _one_gpu_fit(tmp_path)
    fit_cmd.refuse(cfg, given)
    spec = _spec(cfg, machine)
    measured = fit_cmd.at_batch(spec, 32, 1, traced=(cfg, 7, 1))
    assert measured.profile_steps == cfg.profile_steps == 3 and measured.profile_max_mb == cfg.profile_max_mb > 0
    assert measured.trace_prefix.startswith(str(tmp_path / "traces" / "sweep7" / "001-")), measured.trace_prefix
    assert measured.trace_prefix.endswith("-rep1") and measured.mode == "bench" and measured.per_device_batch == 32
    trial = fit_cmd.trial_spec(measured, 32)   # even from a profiled spec: a trial is never traced
    assert (trial.profile_steps, trial.trace_prefix) == (0, "")
    assert fit_cmd.trial_spec(spec, 32).profile_steps == 0
    assert fit_cmd.at_batch(spec, 32).profile_steps == 0 and fit_cmd.at_batch(spec, 32).key == measured.key  # a key
    cpu_cfg, _, cpu_machine = _one_gpu_fit(tmp_path, "cpu")   # on the CPU no device sits idle: no traces
    assert fit_cmd.at_batch(_spec(cpu_cfg, cpu_machine), 8, 0, traced=(cpu_cfg, 7, 1)).profile_steps == 0


@pytest.mark.parametrize("flag", ["--profile", "--no-profile"])
def test_profile_from_the_user_stays_refused(tmp_path, flag):
    from bench import options
    from bench.config import ConfigError
    cfg, given, _ = options.prepare(["--device", "cpu", "--workloads", "transformer", "--strategies", "single",
                                     "--memory-budget-gib", "2", "--store", str(tmp_path / "s.sqlite"), flag])
    with pytest.raises(ConfigError, match="fit: --profile: fit never profiles its trials"):
        fit_cmd.refuse(cfg, given)


def _traced(run):
    """The fake launcher, writing rank 0's trace where a profiled run's worker would (bench.rank.profile): two traced
    steps of STEP_MS on the host, KERNEL_MS of kernels each, Kineto's GPU copy of each step."""
    seen = []

    def go(spec, limits):
        seen.append(spec)
        out = run(spec, limits)
        if out.status != "ok" or not spec.profile_steps:
            return out
        path = f"{spec.trace_prefix}-rank0.pt.trace.json.gz"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        events = [e for k in range(2) for e in (
            _step(k + 1, k * STEP_MS * 1e3, STEP_MS * 1e3), _kernel("sm90_xmma_gemm", k * STEP_MS * 1e3 + 100, KERNEL_MS * 1e3),
            _gpu_step(k + 1, k * STEP_MS * 1e3 + 100, k * STEP_MS * 1e3 + 100 + KERNEL_MS * 1e3, 7))]
        with gzip.open(path, "wt") as f:
            json.dump({"traceEvents": events}, f)
        out.payload["traces"] = [{"rank": 0, "path": path, "steps": 2, "first_step": 9, "device_type": "cuda",
                                  "trace_bytes": os.path.getsize(path), "note": None, "error": None}]
        return out
    return go, seen


def test_fits_recommended_configuration_reads_its_bound_from_its_traces_not_not_measured(tmp_path):
    from bench.analysis.results import load
    from bench.report import bound, recommend
    from bench.store import store
    cfg, given, machine = _one_gpu_fit(tmp_path)
    run, _ = _fake_gpu_launcher({"single": 32}, {"single": STEP_MS})
    go, seen = _traced(run)
    assert fit_cmd.run_fit(cfg, machine, 64, "fit ...", log=lambda s: None, run_config=go) == 0
    assert {s.per_device_batch for s in seen if s.profile_steps} == {32}    # the answer's measured runs only
    assert all(s.mode == "bench" for s in seen if s.profile_steps) and any(s.mode == "fit" for s in seen)
    conn = store.connect(cfg.store, readonly=True)
    try:
        assert conn.execute("SELECT COUNT(*) FROM traces").fetchone()[0] == cfg.repeats
        sweep = load(conn, conn.execute("SELECT MAX(sweep_id) FROM sweeps").fetchone()[0])
    finally:
        conn.close()
    [c] = sweep.bench["transformer"]
    assert sweep.fit and c.traces
    kind, why = bound.bound(sweep, "transformer", c)
    assert kind == "host-bound (GPU busy 25%)", (kind, why)
    row = recommend.answer(sweep, "transformer", sweep.bench["transformer"], c.precision)[0]
    assert row[7] == "host-bound (GPU busy 25%)" and "not measured" not in row[7], row
