"""The plan's guess scales with the work it knows before anything runs (a 1.4b transformer step on a 2-core CPU was
guessed at 0.2 s and took about 11 minutes), says so prominently when a CPU plan runs for hours, and warns when a
transformer's fp32 training state cannot fit the host's RAM. (trial B, finding 1)."""
from __future__ import annotations

import dataclasses

from bench import options
from bench.shared.spec import RunSpec
from bench.sweep import describe, plan, run
from bench.sweep.plan import Machine

RAM = 23 * 2**30          # trial B's machine
CPU2 = Machine(cuda_devices=0, cpu_cores=2, host_memory_bytes=RAM)
H100 = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("NVIDIA H100 80GB HBM3",) * 8, gpu_capabilities=((9, 0),) * 8,
               gpu_memory_bytes=(80 * 2**30,) * 8, host_memory_bytes=1000 * 2**30)


def planned(argv: list, tmp_path, machine=CPU2) -> tuple:
    cfg, _, machine = options.prepare(argv + ["--store", str(tmp_path / "b.sqlite")], machine=machine)
    return plan.plan(cfg, machine), cfg, machine


def bench_runs(items: list) -> list:
    return [i for i in items if isinstance(i, RunSpec) and i.mode == "bench"]


def test_the_14b_sweep_file_on_a_2_core_cpu_is_guessed_at_days_with_a_warning_naming_its_step(tmp_path):
    items, cfg, machine = planned(["--config", "sweeps/transformer.toml", "--gpus", "1,2"], tmp_path)
    assert describe.estimate_s([i for i in items if isinstance(i, RunSpec)], cfg, machine) > 24 * 3600  # was 2.3 min
    warning = describe.plan_warnings(items, cfg, machine)[0]
    assert warning.startswith("WARNING: this plan is guessed at about ") and " h on this CPU" in warning, warning
    assert "transformer 1.4b (24 x 2048) at seq-len 2048, batch 2 on CPU" in warning, warning
    assert "at an assumed 30 GFLOP/s a torch thread (1 a process)" in warning and "min a step" in warning, warning
    assert "meant for GPUs" in warning and "--transformer-preset tiny" in warning


def test_a_transformer_step_scales_with_its_flops_and_the_tiny_preset_keeps_the_flat_guess(tmp_path):
    def step_s(*argv):
        return describe.step_guess(bench_runs(planned(["--workloads", "transformer", "--strategies", "single",
                                                       *argv], tmp_path)[0])[0], CPU2)
    s2048, how = step_s("--transformer-preset", "1.4b")
    s4096, _ = step_s("--transformer-preset", "1.4b", "--seq-len", "4096")
    assert 2.0 < s4096 / s2048 < 2.5  # twice the tokens, and attention's T x T grows faster
    assert 15 * 60 < s2048 < 30 * 60, s2048  # 9.0 GFLOP a token x 4,096 tokens at 30 GFLOP/s: ~20 min
    assert "18.4 TFLOP a sample" in how
    assert step_s() == (describe.FLAT_STEP_S["cpu"][""], describe.step_guess(
        bench_runs(planned(["--workloads", "transformer", "--strategies", "single"], tmp_path)[0])[0], CPU2)[1])
    assert step_s()[0] == 0.2  # tiny: its 30 MFLOP a step is under the floor of what any step costs


def test_a_model_of_a_few_hundred_flops_a_sample_is_guessed_too(tmp_path):
    # the FLOP figure's words divided by a zero scale under 1 MFLOP: every sweep of a tiny MLP stopped with exit 3
    r = bench_runs(planned(["--workloads", "synthetic", "--strategies", "single", "--synthetic-width", "8",
                            "--synthetic-depth", "1"], tmp_path)[0])[0]
    step, how = describe.step_guess(r, CPU2)
    assert step == describe.FLAT_STEP_S["cpu"]["synthetic"] and " FLOP a sample" in how, how


def test_the_cpu_rate_is_shared_by_processes_that_crowd_the_cores(tmp_path):
    one = bench_runs(planned(["--workloads", "synthetic", "--strategies", "ddp", "--gpus", "1",
                              "--threads-per-process", "2", "--synthetic-width", "4096"], tmp_path)[0])[0]
    two = dataclasses.replace(one, device_count=2)
    assert describe.assumed_rate(one, CPU2)[0] == 60e9 and describe.assumed_rate(two, CPU2)[0] == 30e9


def test_on_a_known_gpu_the_rate_is_a_stated_share_of_its_dense_peak_and_an_unknown_one_keeps_the_flat_guess(tmp_path):
    items, cfg, machine = planned(["--config", "sweeps/transformer.toml", "--gpus", "1,8"], tmp_path, H100)
    r = bench_runs(items)[0]
    step, how = describe.step_guess(r, machine)
    assert "an assumed 30% of the H100 SXM5's dense bf16 peak of 989 TFLOP/s" in how, how
    assert abs(step - 18.4e12 * 8 / (0.3 * 989e12)) / step < 0.01  # batch 8 at 2,048 tokens
    unknown = dataclasses.replace(machine, gpu_names=("Some Future GPU",) * 8)
    assert describe.step_guess(r, unknown) == (describe.FLAT_STEP_S["cuda"][""], "")
    assert describe.plan_warnings(items, cfg, machine) == []  # hours on GPUs are no surprise


def test_ram_counts_gradients_and_adamw_state_once_a_process_under_ddp_and_once_in_all_under_fsdp(tmp_path):
    items, cfg, machine = planned(["--config", "sweeps/transformer.toml", "--gpus", "1,2"], tmp_path)
    by = {(r.strategy, r.device_count): describe.state_bytes(r) for r in bench_runs(items)}
    params = 1_364_297_728  # docs/transformer.md's table
    assert by[("ddp", 1)] == 16 * params and by[("ddp", 2)] == 32 * params and by[("fsdp", 2)] == 16 * params
    lines = describe.plan_warnings(items, cfg, machine)[1:]
    assert [l.split(" holds")[0][21:] for l in lines] == ["ddp x1 [adamw]", "ddp x2 [adamw]", "fsdp x1 [adamw]",
                                                         "fsdp x2 [adamw]", "hsdp x1 [adamw]", "hsdp x2 [adamw]"]
    assert [l for l in lines if "will likely" in l] == ["WARNING: transformer ddp x2 [adamw] holds at least 41.0 GiB in one host's RAM (40.7 GiB of fp32 "
                         "weights, gradients and adamw state, 0.4 GiB of activations at 1 sequence(s) per device), more "
                         "than its 23.0 GiB: it will likely run out of memory"], lines
    # ddp x1 counts 20.5 GiB of 23.0: the 1.4b single x1 that the kernel killed on this machine counted the same
    assert lines[0] == ("WARNING: transformer ddp x1 [adamw] holds at least 20.5 GiB in one host's RAM (20.3 GiB of fp32 "
                        "weights, gradients and adamw state, 0.2 GiB of activations at 1 sequence(s) per device); measured "
                        "runs peaked about 26.4 GiB for such a count (the state 1.27x, torch's 0.4 GiB a process), more "
                        "than its 23.0 GiB: it may run out of memory, and the kernel then kills it (SIGKILL)"), lines


class _Watch:
    """A heartbeat watch at step 6 of 14 whose steps after the first took 10 s each."""
    started, advanced, first_step = 100.0, 150.0, (110.0, 1)

    def steps_done(self):
        return 5

    def total(self):
        return 14


def test_progress_lines_carry_the_measured_pace_and_what_is_left(monkeypatch):
    lines = []
    monkeypatch.setattr(run, "PROGRESS_EVERY_S", -1.0)
    assert run.pace(_Watch()) == "; about 10 s a step, about 1.5 min to step 14"
    quick = _Watch()   # an H200's DeepLabV3 steps (111 ms) read 'about 0 s a step, about 0 s to step 75'
    quick.advanced, quick.first_step = 110.999, (110.0, 1)
    assert run.pace(quick) == "; about 250 ms a step, about 2 s to step 14"
    done = _Watch()   # at its last step: no 'about 0 ms to step 14'
    done.advanced, done.first_step, done.steps_done = 110.999, (110.0, 1), lambda: 14
    assert run.pace(done) == "; about 77 ms a step"
    unseen = _Watch()
    unseen.first_step = None
    assert run.pace(unseen) == ""
    show = run._progress(lines.append, "[1/3] x")
    show(_Watch())
    assert lines and lines[0].startswith("[1/3] x: ... step 6/14 (") and "a step, about" in lines[0], lines
