"""The sweep's first line guesses how long it will take; the guess is held to the default CPU sweep as measured."""
from __future__ import annotations

from bench import options
from bench.sweep import describe, plan
from bench.sweep.plan import Machine

CPU2 = Machine(cuda_devices=0, cpu_cores=2)
DEFAULT_CPU_SWEEP_S = 138.0  # its configurations' own start-to-end times, summed (docs/running.md, 2026-11-27)


def test_the_default_cpu_sweeps_guess_is_within_15_percent_of_its_measured_length_and_says_it_in_tenths(tmp_path):
    cfg, _, machine = options.prepare(["--store", str(tmp_path / "b.sqlite")], machine=CPU2)
    items = plan.plan(cfg, machine)
    guess_s = describe.estimate_s([i for i in items if isinstance(i, plan.RunSpec)], cfg)
    assert abs(guess_s / DEFAULT_CPU_SWEEP_S - 1) <= 0.15, guess_s  # DDP's probe, buckets and the collectives counted
    assert f"roughly {guess_s / 60:.1f} min" in describe.plan_summary(items, cfg)


def test_the_default_cpu_sweep_gets_no_warning_of_hours_or_of_ram(tmp_path):
    machine = plan.Machine(cuda_devices=0, cpu_cores=2, host_memory_bytes=23 * 2**30)
    cfg, _, machine = options.prepare(["--store", str(tmp_path / "b.sqlite")], machine=machine)
    assert describe.plan_warnings(plan.plan(cfg, machine), cfg, machine) == []
