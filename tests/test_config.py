"""Bad input is refused with exit status 2 and a message naming the value, before any process starts or the
store is touched; defaults are an absence, filled per device, printed and stored."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3

import pytest

from bench.sweep.describe import describe_resolved

from bench import cli
from bench.config import ConfigError, SweepConfig, check_values, from_args
from bench.options import run_parser
from bench.sweep import plan
from bench.sweep.plan import Machine
from bench.sweep.resolve import resolve

CPU2 = Machine(cuda_devices=0, cpu_cores=2)
GPU8 = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("H100",) * 8, gpu_capabilities=((9, 0),) * 8)
GPU4 = Machine(cuda_devices=4, cpu_cores=32, gpu_names=("A100",) * 4, gpu_capabilities=((8, 0),) * 4)
V100x8 = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("V100",) * 8, gpu_capabilities=((7, 0),) * 8)


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if anything would be launched; pretend the machine is CPU2."""
    def refuse(*a, **k):
        raise AssertionError("the sweep started despite bad input")
    from bench.sweep import launch, run as sweep_run
    monkeypatch.setattr(sweep_run, "run_sweep", refuse)
    monkeypatch.setattr(launch, "run_config", refuse)
    monkeypatch.setattr(plan, "detect_machine", lambda: CPU2)


@pytest.mark.no_process
@pytest.mark.parametrize("args, expected", [
    (["--gpus", "a"], "'a'"),
    (["--gpus", "0"], "--gpus: 0 is not allowed"),
    (["--gpus", "2,2"], "lists a value twice"),
    (["--gpus", "1,4,8", "--device", "cuda"], "0 CUDA GPUs"),
    (["--gpus", "1,4"], "2 CPU core(s)"),
    (["--strategies", "single,zero3"], "unknown name 'zero3'"),
    (["--device", "tpu"], "'tpu'"),
    (["--workloads", "deeplabv3", "--per-device-batch", "1"], "at least 2 per replica"),
    (["--scaling", "strong", "--global-batch", "3"], "cannot be split evenly over 2 devices"),
    (["--steps", "1"], "--steps: 1 is not allowed; expected a whole number >= 2"),
    (["--steps", "0"], "--steps: 0 is not allowed"),
    (["--warmup", "-1"], "--warmup: -1 is not allowed; expected a whole number >= 0"),
    (["--warmup", "-2"], "--warmup: -2 is not allowed"),
    (["--timeout", "0"], "--timeout: 0 is not allowed"),
    (["--timeout", "-5"], "--timeout: -5 is not allowed"),
    (["--pg-timeout", "0"], "--pg-timeout: 0 is not allowed"),
    (["--image-size", "0"], "--image-size: 0 is not allowed"),
    (["--per-device-batch", "0"], "--per-device-batch: 0 is not allowed"),
    (["--global-batch", "0"], "--global-batch: 0 is not allowed"),
    (["--epochs", "0"], "--epochs: 0 is not allowed"),
    (["--repeats", "0"], "--repeats: 0 is not allowed"),
    (["--threads-per-process", "0"], "--threads-per-process: 0 is not allowed"),
    (["--num-workers", "-1"], "--num-workers: -1 is not allowed"),
    (["--synthetic-width", "0"], "--synthetic-width: 0 is not allowed"),
    (["--bucket-cap-mb", "0"], "--bucket-cap-mb: 0 is not allowed"),
    (["--seed", "-1"], "--seed: -1 is not allowed"),
    (["--scaling", "diagonal"], "'diagonal'"),
    (["--precision", "fp8"], "unknown name 'fp8'"),
    (["--comm-hook", "powersgd"], "powersgd:RANK"),
    (["--comm-hook", "powersgd:0"], "PowerSGD rank '0'"),
    (["--compile", "maybe"], "'maybe' in 'maybe' is not true or false"),
    (["--data", "voc", "--workloads", "deeplabv3"], "needs --voc-root"),
    (["--data", "voc", "--workloads", "deeplabv3", "--voc-root", "/nonexistent/voc"], "/nonexistent/voc"),
    (["--weights", "/nonexistent/w.pt"], "/nonexistent/w.pt"),
    (["--epochs", "2"], "--data voc"),
    (["--timeout", "soon"], "'soon'"),
    (["--sync-bn"], "CUDA only"),
    (["--compile", "--warmup", "0"], "--warmup 0 with --compile"),
    (["--nodes", "2", "--gpus-per-node", "1"], "not run inside a SLURM allocation"),
])
def test_bad_input_exits_2_naming_the_value_before_anything_runs(args, expected, tmp_path, capsys, no_run):
    store = tmp_path / "bench.sqlite"
    assert cli.main(args + ["--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err, err
    assert not store.exists(), "the store was touched"


@pytest.fixture
def readonly_dir(tmp_path):
    """A folder nothing can be written into: a read-only bind mount (root), else a mode 555 folder."""
    import os
    import subprocess
    src, mnt = tmp_path / "ro-src", tmp_path / "ro"
    src.mkdir()
    mnt.mkdir()
    (src / "bench.sqlite").write_bytes(b"")
    if os.geteuid() == 0:
        ok = subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True).returncode == 0 and \
            subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], capture_output=True).returncode == 0
        if not ok:
            subprocess.run(["umount", str(mnt)], capture_output=True)
            pytest.skip("cannot make a read-only mount here (root, but mount is not permitted)")
        yield mnt
        subprocess.run(["umount", str(mnt)], capture_output=True)
    else:
        (mnt / "bench.sqlite").write_bytes(b"")
        mnt.chmod(0o555)
        yield mnt
        mnt.chmod(0o755)


@pytest.mark.parametrize("make, expected", [
    (lambda tmp, ro: tmp, "is a folder"),
    (lambda tmp, ro: tmp / "notes.txt", "is not a SQLite database"),
    (lambda tmp, ro: "/proc/bench.sqlite", "cannot create files in '/proc'"),
    (lambda tmp, ro: "/sys/kernel/bench.sqlite", "cannot create files in '/sys/kernel'"),
    (lambda tmp, ro: "/proc/version", "is not a SQLite database"),
    (lambda tmp, ro: ro / "new" / "bench.sqlite", "cannot create files"),
    (lambda tmp, ro: ro / "bench.sqlite", "not writable"),
])
def test_a_store_path_that_cannot_be_created_opened_or_written_is_refused(make, expected, tmp_path, readonly_dir, capsys, no_run):
    import os
    (tmp_path / "notes.txt").write_text("my notes, not a database\n")
    path = str(make(tmp_path, readonly_dir))
    before = hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.isfile(path) else None
    assert cli.main(FAST_ARGS + ["--store", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --store") and expected in err, err
    if before:
        assert hashlib.sha256(open(path, "rb").read()).hexdigest() == before


FAST_ARGS = ["--workloads", "synthetic", "--steps", "2"]


def test_an_existing_store_is_left_byte_identical_when_input_is_refused(tmp_path, capsys, no_run):
    from bench.store import store
    path = str(tmp_path / "bench.sqlite")
    store.connect(path).close()
    before = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert cli.main(["--steps", "0", "--store", path]) == 2
    assert cli.main(["--gpus", "9", "--store", path]) == 2
    assert hashlib.sha256(open(path, "rb").read()).hexdigest() == before


@pytest.mark.no_process
def test_weights_that_are_not_a_state_dict_of_the_model_are_refused_up_front(tmp_path, capsys, no_run):
    import torch
    not_torch = tmp_path / "w.txt"
    not_torch.write_text("hello")
    other = tmp_path / "other.pt"
    torch.save({"fc.weight": torch.zeros(3, 3)}, other)
    wrong_shape = tmp_path / "shape.pt"
    torch.save({"classifier.4.weight": torch.zeros(5, 256, 1, 1)}, wrong_shape)
    for path, expected in ((not_torch, "does not load as a PyTorch state dict"), (other, "matches none of deeplabv3's"),
                           (wrong_shape, "wrong shape for deeplabv3")):
        assert cli.main(["--workloads", "deeplabv3", "--weights", str(path), "--store", str(tmp_path / "s.sqlite")]) == 2
        err = capsys.readouterr().err
        assert expected in err and str(path) in err, err


def test_cli_refuses_cuda_without_gpu_in_a_real_process(tmp_path):
    from conftest import run_bench
    store = tmp_path / "s.sqlite"
    p = run_bench(["--gpus", "1,4,8", "--device", "cuda", "--store", str(store)], timeout=120)
    assert p.returncode == 2 and "this machine has 0 CUDA GPUs" in p.stderr, p.stderr
    assert not store.exists()


def test_more_gpus_than_the_machine_has_names_how_many_it_has():
    with pytest.raises(ConfigError, match="8 GPUs asked for, but this machine has 4 CUDA GPU"):
        resolve(SweepConfig(gpus=(1, 8)), GPU4)


def test_values_given_are_checked_before_the_machine_is_asked():
    with pytest.raises(ConfigError, match="--steps: 0 is not allowed"):
        check_values(SweepConfig(steps=0))
    check_values(SweepConfig())  # every default (None: not given) passes


@pytest.mark.no_process
def test_default_counts_follow_the_machine():
    assert resolve(SweepConfig(), GPU8).gpus == (1, 4, 8)
    assert resolve(SweepConfig(), GPU4).gpus == (1, 4)
    assert resolve(SweepConfig(), Machine(cuda_devices=2, cpu_cores=8)).gpus == (1, 2)
    cpu = resolve(SweepConfig(), CPU2)
    assert (cpu.device, cpu.gpus, cpu.threads_per_process) == ("cpu", (1, 2), 1)
    assert cpu.image_size is None  # per workload: deeplabv3 64 on CPU
    specs = [s for s in plan.plan(cpu, CPU2) if isinstance(s, plan.RunSpec) and s.workload == "deeplabv3"]
    assert {s.image_size for s in specs} == {64}


def test_the_synthetic_model_on_cuda_is_sized_to_be_compute_bound_and_says_its_flops():
    gpu = resolve(SweepConfig(workloads=("synthetic",)), GPU8)
    assert (gpu.synthetic_width, gpu.synthetic_depth) == (4096, 8)
    (single,) = [s for s in plan.plan(gpu, GPU8) if isinstance(s, plan.RunSpec) and s.strategy == "single" and s.repeat == 0]
    assert single.per_device_batch == 512
    from bench.workloads.synthetic import flops_per_sample as synthetic_flops_per_sample
    flops = synthetic_flops_per_sample(4096, 8) * 512
    assert flops > 3e11  # > 0.3 TFLOP a step: milliseconds of tensor-core work, far above launch latency
    cpu = resolve(SweepConfig(workloads=("synthetic",)), CPU2)
    assert (cpu.synthetic_width, cpu.synthetic_depth) == (1024, 4)


def test_weak_scaling_grows_the_global_batch_strong_keeps_it_and_accumulates_where_a_replica_holds_more():
    weak = [s for s in plan.plan(resolve(SweepConfig(workloads=("synthetic",), per_device_batch=8), GPU8), GPU8)
            if isinstance(s, plan.RunSpec) and s.mode == "bench"]
    assert {(s.strategy, s.device_count, s.per_device_batch, s.global_batch) for s in weak} >= {
        ("single", 1, 8, 8), ("ddp", 4, 8, 32), ("dp", 8, 8, 64)}
    strong = [s for s in plan.plan(resolve(SweepConfig(workloads=("synthetic",), per_device_batch=8, scaling="strong"), GPU8), GPU8)
              if isinstance(s, plan.RunSpec) and s.mode == "bench"]
    assert {s.global_batch for s in strong} == {64}
    assert {(s.device_count, s.per_device_batch, s.accum_steps) for s in strong if s.strategy == "ddp"} == {
        (1, 64, 8), (4, 16, 2), (8, 8, 1)}


@pytest.mark.no_process
def test_strong_scaling_default_fits_deeplabv3_on_one_gpu_by_accumulating():
    cfg = resolve(SweepConfig(workloads=("deeplabv3",), scaling="strong"), GPU8)
    specs = [s for s in plan.plan(cfg, GPU8) if isinstance(s, plan.RunSpec)]
    single = next(s for s in specs if s.strategy == "single")
    assert single.global_batch == 64 and single.micro_batch == 8 and single.accum_steps == 8
    assert any("accumulates gradients" in line for line in describe_resolved(cfg, frozenset()))


def test_dp_above_one_device_on_cpu_is_planned_as_skipped_with_reason():
    items = plan.plan(resolve(SweepConfig(workloads=("synthetic",), strategies=("single", "dp", "ddp")), CPU2), CPU2)
    skips = [i for i in items if isinstance(i, plan.Skip)]
    assert [(s.spec.strategy, s.spec.device_count) for s in skips] == [("dp", 2)]
    assert "GPUs only" in skips[0].reason
    runs = [(i.strategy, i.device_count) for i in items if isinstance(i, plan.RunSpec) and i.mode == "bench" and i.repeat == 0]
    assert runs == [("single", 1), ("dp", 1), ("ddp", 1), ("ddp", 2)]


def test_the_cpu_default_leaves_dataparallel_out_and_says_why_while_cuda_keeps_it():
    # On CPU nn.DataParallel has no device to replicate to: its forward calls the module, a second `single`.
    cpu = resolve(SweepConfig(workloads=("synthetic",)), CPU2)
    assert cpu.strategies == ("single", "ddp")
    assert any(line.startswith("DataParallel: left out on CPU") for line in describe_resolved(cpu, frozenset()))
    assert any("--strategies single,ddp" in line for line in describe_resolved(cpu, frozenset()))
    asked = resolve(SweepConfig(workloads=("synthetic",), strategies=("single", "dp")), CPU2)
    assert asked.strategies == ("single", "dp")
    assert not any("left out" in line for line in describe_resolved(asked, frozenset({"strategies"})))
    assert resolve(SweepConfig(workloads=("synthetic",)), GPU4).strategies == ("single", "dp", "ddp")
    # the flags that need a strategy are checked against what every device's default has, before the device is known
    assert from_args(run_parser().parse_args(["--find-unused-parameters", "true"])).strategies is None
    with pytest.raises(ConfigError, match="--zero-bucket-view: takes effect with --strategies zero only"):
        from_args(run_parser().parse_args(["--zero-bucket-view", "true"]))


def test_precisions_a_device_cannot_do_are_skipped_with_the_reason():
    cpu = plan.plan(resolve(SweepConfig(workloads=("synthetic",), strategies=("single",), precision=("fp32", "bf16", "fp16", "tf32")), CPU2), CPU2)
    got = {i.spec.precision if isinstance(i, plan.Skip) else i.precision: i.reason if isinstance(i, plan.Skip) else "runs" for i in cpu}
    assert got["fp32"] == got["bf16"] == "runs"
    assert "GPU precision" in got["fp16"] and "TF32" in got["tf32"]
    v100 = plan.plan(resolve(SweepConfig(workloads=("synthetic",), strategies=("single",), precision=("bf16", "fp16")), V100x8), V100x8)
    assert [i.reason for i in v100 if isinstance(i, plan.Skip)] == ["bf16 needs compute capability 8.0 (Ampere) or later; this GPU has 7.0"]


def test_ddp_settings_multiply_only_ddp_configurations_and_reach_the_key():
    cfg = resolve(SweepConfig(workloads=("synthetic",), strategies=("single", "ddp"), gpus=(2,), bucket_cap_mb=(25.0, 100.0),
                              comm_hook=("none", "bf16"), repeats=1), CPU2)
    runs = [i for i in plan.plan(cfg, CPU2) if isinstance(i, plan.RunSpec) and i.mode == "bench"]
    assert sum(r.strategy == "single" for r in runs) == 1
    ddp = [r for r in runs if r.strategy == "ddp"]
    assert len(ddp) == 4 and len({r.key for r in ddp}) == 4
    assert {r.option("bucket_cap_mb") for r in ddp} == {25.0, 100.0}
    assert any("comm_hook=bf16" in r.key for r in ddp)


def test_resolved_defaults_are_printed_and_stored_with_the_sweep(tmp_path):
    from conftest import FAST, run_bench
    path = str(tmp_path / "s.sqlite")
    p = run_bench(FAST[:-1] + ["--strategies", "single", "--no-report", "--store", path])  # --steps/--warmup given
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(l for l in p.stdout.splitlines() if l.startswith("defaults for this device"))
    assert "--pg-timeout 120" in line and "--steps" not in line and "--threads-per-process 1" in line
    stored = json.loads(sqlite3.connect(path).execute("SELECT config_json FROM sweeps").fetchone()[0])
    assert stored["pg_timeout"] == 120 and stored["steps"] == 3 and stored["threads_per_process"] == 1


def test_config_round_trips_through_json_for_resume():
    cfg = resolve(SweepConfig(workloads=("synthetic",), repeats=2), CPU2)
    assert SweepConfig.from_json(cfg.to_json()) == cfg


@pytest.mark.no_process
def test_collective_timeout_defaults_below_the_wall_clock_limit():
    assert resolve(SweepConfig(), CPU2).pg_timeout == 120 and resolve(SweepConfig(), GPU8).pg_timeout == 300
    assert resolve(SweepConfig(timeout=60), CPU2).pg_timeout == 30
    assert resolve(SweepConfig(timeout=60, pg_timeout=90), CPU2).pg_timeout == 90  # what the user asked for


def test_the_cpu_suite_hides_gpus_from_every_process_it_starts(request):
    # On a machine with GPUs, --device auto would pick CUDA and CPU-count tests would fail (or start a real
    # 1,4,8 GPU sweep): conftest hides the GPUs unless --run-gpu, and run_bench() passes --device cpu.
    import os
    import subprocess
    import sys
    if request.config.getoption("--run-gpu"):
        pytest.skip("--run-gpu keeps the GPUs visible")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    seen = subprocess.run([sys.executable, "-c", "import os, torch; print(repr(os.environ.get('CUDA_VISIBLE_DEVICES')), "
                           "torch.cuda.device_count())"], capture_output=True, text=True, timeout=120).stdout.split()
    assert seen == ["''", "0"]
    from conftest import run_bench
    import conftest
    calls = []
    real = conftest.subprocess.run
    conftest.subprocess.run = lambda cmd, **kw: calls.append(cmd)
    try:
        run_bench(["--steps", "3"])
        run_bench(["--device", "cuda"])
    finally:
        conftest.subprocess.run = real
    assert calls[0][-2:] == ["--device", "cpu"] and calls[1].count("--device") == 1


def test_progress_of_a_long_configuration_is_shown_at_a_sensible_rate(monkeypatch):
    from bench.shared import heartbeat
    from bench.sweep import run as sweep_run
    lines = []
    now = [1000.0]
    monkeypatch.setattr(sweep_run.time, "monotonic", lambda: now[0])
    show = sweep_run._progress(lines.append, "[3/9] deeplabv3 ddp cuda x8")
    watch = heartbeat.Watch("/nonexistent", 1, started=990.0)
    watch.states = {0: heartbeat.RankState({"step": 119, "phase": "backward", "total": 400, "seq": 1}, 0, 0)}
    show(watch)
    assert lines == []  # not before PROGRESS_EVERY_S
    now[0] += sweep_run.PROGRESS_EVERY_S
    show(watch)
    show(watch)
    assert lines == ["[3/9] deeplabv3 ddp cuda x8: ... step 120/400 (40 s)"]


def test_three_processes_per_configuration_on_cpu_one_on_cuda_unless_repeats_is_given():
    # On CPU one process cannot carry a compare verdict (issue 18: one DDP x2 process in seven ran 1.5x slow); three can.
    from bench.sweep.plan import Machine, plan
    from bench.sweep.resolve import DEFAULT_REPEATS, resolve
    cpu = Machine(cuda_devices=0, cpu_cores=2)
    gpu = Machine(cuda_devices=1, cpu_cores=2, gpu_names=("NVIDIA H100",), gpu_capabilities=((9, 0),), arch_list=("sm_90",))
    base = dict(workloads=("synthetic",), strategies=("ddp",), gpus=(1,), comm_bench=False)
    for machine, given, want in ((cpu, None, DEFAULT_REPEATS["cpu"]), (gpu, None, DEFAULT_REPEATS["cuda"]), (cpu, 2, 2)):
        cfg = resolve(SweepConfig(**base, repeats=given, noise_repeats=1), machine)
        assert cfg.repeats == want and sorted(s.repeat for s in plan(cfg, machine)) == list(range(want)), (machine, given)
    assert DEFAULT_REPEATS == {"cpu": 3, "cuda": 1}


def test_on_cuda_the_cheapest_configuration_runs_in_three_processes_to_measure_the_noise_there():
    # A single process is held against the spread of fresh processes measured on its own device, never a CPU's 25%.
    from bench.sweep.plan import Machine, plan
    from bench.sweep.resolve import resolve
    gpu = Machine(cuda_devices=2, cpu_cores=8, gpu_names=("NVIDIA H100",) * 2, gpu_capabilities=((9, 0),) * 2,
                  arch_list=("sm_90",))
    cfg = resolve(SweepConfig(workloads=("deeplabv3", "synthetic"), strategies=("single", "ddp"), precision=("fp32", "bf16"),
                              comm_bench=False), gpu)
    assert (cfg.repeats, cfg.noise_repeats, cfg.profile) == (1, 3, True)   # and the bound's traces on by default
    runs: dict = {}
    for s in plan(cfg, gpu):
        runs.setdefault((s.workload, s.strategy, s.device_count, s.precision), []).append(s.repeat)
    # synthetic single x1 at EVERY precision: one precision's spread does not speak for another's (one H200's DeepLabV3
    # single x1: fp32 processes 0.5% apart, two bf16 ones 38%); a bf16 comparison is held against bf16's processes
    assert runs.pop(("synthetic", "single", 1, "bf16")) == [0, 1, 2]
    assert runs.pop(("synthetic", "single", 1, "fp32")) == [0, 1, 2]
    # and of EVERY workload: DeepLabV3's verdicts rest on DeepLabV3's processes, not the MLP's 3 ms steps
    assert runs.pop(("deeplabv3", "single", 1, "bf16")) == [0, 1, 2]
    assert runs.pop(("deeplabv3", "single", 1, "fp32")) == [0, 1, 2]
    assert all(r == [0] for r in runs.values()), runs
    assert ("process noise: single of deeplabv3 [fp32] and [bf16], synthetic [fp32] and [bf16] each run in 3 processes, "
            "the spread every single-process comparison of that model at that precision") in " ".join(describe_resolved(cfg, set()))
    one = resolve(SweepConfig(workloads=("synthetic",), strategies=("single",), precision=("fp32",), comm_bench=False), gpu)
    assert "process noise: single of synthetic [fp32] runs in 3 processes, the spread every single-process comparison on" \
        in " ".join(describe_resolved(one, set()))
    cpu = resolve(SweepConfig(workloads=("synthetic",), strategies=("single",), repeats=1, comm_bench=False),
                  Machine(cuda_devices=0, cpu_cores=2))
    assert (cpu.noise_repeats, cpu.profile) == (1, False)   # on CPU --repeats (3 by default) repeats every configuration
    assert [s.repeat for s in plan(cpu, Machine(cuda_devices=0, cpu_cores=2))] == [0]


def test_repeats_run_in_rounds_so_a_slow_minute_hits_one_process_of_several_configurations():
    cpu = plan.Machine(cuda_devices=0, cpu_cores=2)
    cfg = resolve(SweepConfig(workloads=("synthetic",), strategies=("single", "dp", "ddp"), gpus=(1, 2), comm_bench=False,
                              repeats=3), cpu)
    specs = [i.spec if isinstance(i, plan.Skip) else i for i in plan.plan(cfg, cpu)]
    order = [(s.strategy, s.device_count, s.repeat) for s in specs]
    rounds = [r for _, _, r in order]
    assert rounds == sorted(rounds) and rounds.count(0) == 5 and rounds.count(1) == rounds.count(2) == 4  # dp x2: skipped once
    assert order[:5] == [("single", 1, 0), ("dp", 1, 0), ("dp", 2, 0), ("ddp", 1, 0), ("ddp", 2, 0)]


def test_the_machine_is_measured_once_per_repeat_each_comm_run_after_its_round_of_configurations():
    # What all rounds of one comm run share moved the interference's slowdown by a third between runs: the forecast's
    # range draws on runs in fresh processes, spread over the sweep as the training's processes are.
    cpu = plan.Machine(cuda_devices=0, cpu_cores=2)
    cfg = resolve(SweepConfig(workloads=("synthetic",), strategies=("single", "ddp"), gpus=(1,), comm_counts=(2,),
                              check_equivalence=True), cpu)
    specs = [i.spec if isinstance(i, plan.Skip) else i for i in plan.plan(cfg, cpu)]
    order = [(s.mode, s.strategy, s.repeat) for s in specs]
    assert order == [("bench", "single", 0), ("bench", "ddp", 0), ("comm", "comm", 0),
                     ("bench", "single", 1), ("bench", "ddp", 1), ("comm", "comm", 1),
                     ("bench", "single", 2), ("bench", "ddp", 2), ("comm", "comm", 2), ("equivalence", "ddp", 0)]
    assert len({s.key for s in specs if s.mode == "comm"}) == 1          # one configuration, three processes of it
    one = resolve(SweepConfig(workloads=("synthetic",), strategies=("ddp",), gpus=(1,), comm_counts=(2,), repeats=1), cpu)
    assert [s.mode for s in plan.plan(one, cpu)] == ["bench", "comm"]
    two = resolve(SweepConfig(workloads=("synthetic", "transformer"), strategies=("ddp",), gpus=(1,), comm_counts=(2,),
                              repeats=1), cpu)
    (comm,) = [s for s in plan.plan(two, cpu) if s.mode == "comm"]
    # one co-run per workload's bytes on CPU (bench.rank.interference), the largest the microbenchmark's top size
    assert len(comm.comm_state_bytes) == 2 and max(comm.comm_state_bytes) == comm.comm_max_bytes
    assert plan.RunSpec.from_json(comm.to_json()).comm_state_bytes == comm.comm_state_bytes


def test_zero_takes_ddps_settings_hsdp_a_shard_size_and_the_optimizer_is_an_axis_keyed_only_past_sgd():
    cfg = resolve(SweepConfig(workloads=("synthetic",), strategies=("ddp", "zero", "hsdp"), gpus=(1, 2), repeats=1,
                              optimizer=("sgd", "adamw"), zero_bucket_view=(False, True), bucket_cap_mb=(25.0,)), CPU2)
    runs = [i for i in plan.plan(cfg, CPU2) if isinstance(i, plan.RunSpec) and i.mode == "bench"]
    ddp = [r for r in runs if r.strategy == "ddp" and r.optimizer == "sgd" and r.device_count == 2]
    # sgd keeps the keys older stores and compare know; adamw is added to the key
    assert [r.key for r in ddp] == ["bench/synthetic/ddp/cpux2/b64/g128/i0/synthetic/fp32/bucket_cap_mb=25.0"]
    assert all(r.key.endswith("/adamw") == (r.optimizer == "adamw") for r in runs)
    zero = {dict(r.options).get("parameters_as_bucket_view", False) for r in runs if r.strategy == "zero"}
    assert zero == {False, True} and all(r.option("bucket_cap_mb") == 25.0 for r in runs if r.strategy == "zero")
    # one node of 2 processes: the shard group is the count (x1: 1, x2: 2), so replicate 1: FSDP, and said so
    assert {(r.device_count, r.option("shard_size")) for r in runs if r.strategy == "hsdp"} == {(1, 1), (2, 2)}
    lines = describe_resolved(cfg, set())
    # what one shard group still runs beyond FSDP's sharding (an all-reduce over a replicate group of one), not "FSDP"
    assert "hsdp mesh: x1 replicate 1 x shard 1 (one shard group: FSDP's sharding on HSDP's 2-D mesh, which still " \
           "all-reduces every gradient shard over a replicate group of one rank; not FSDP" in "\n".join(lines)
    assert "this is FSDP" not in "\n".join(lines)
    gate = plan.plan(dataclasses.replace(cfg, check_equivalence=True), CPU2)
    assert {r.strategy for r in gate if isinstance(r, plan.RunSpec) and r.mode == "equivalence"} == {"ddp", "zero", "hsdp"}
    comm = [r for r in gate if isinstance(r, plan.RunSpec) and r.mode == "comm"]
    assert comm and comm[0].comm_ops == ("all_reduce", "all_gather", "reduce_scatter")  # HSDP runs FSDP's collectives


def test_hsdp_shards_within_a_node_and_replicates_across_nodes_and_the_budget_defaults_to_the_gpus_memory():
    nodes = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("H100",) * 8, gpu_capabilities=((9, 0),) * 8,
                    slurm_nodes=2, gpu_memory_bytes=(80 * 2**30,) * 8)
    cfg = resolve(SweepConfig(workloads=("synthetic",), strategies=("hsdp",), nodes=(1, 2), gpus_per_node=8), nodes)
    assert cfg.memory_budget_gib == 80.0
    runs = [i for i in plan.plan(cfg, nodes) if isinstance(i, plan.RunSpec) and i.mode == "bench"]
    assert {(r.device_count, r.nodes, r.option("shard_size"), r.launcher) for r in runs} == {(8, 1, 8, "local"), (16, 2, 8, "slurm")}
    four = resolve(SweepConfig(workloads=("synthetic",), strategies=("hsdp",), nodes=(2,), gpus_per_node=8, hsdp_shard_size=(4, 16)), nodes)
    assert {r.option("shard_size") for r in plan.plan(four, nodes) if isinstance(r, plan.RunSpec) and r.mode == "bench"} == {4, 16}
    assert resolve(SweepConfig(workloads=("synthetic",)), CPU2).memory_budget_gib is None  # on CPU: none unless given


@pytest.mark.parametrize("args, expected", [
    (["--optimizer", "adam8bit"], "--optimizer: unknown name 'adam8bit'; expected a comma-separated subset of sgd,adamw"),
    (["--strategies", "hsdp", "--gpus", "2", "--hsdp-shard-size", "3"],
     "--hsdp-shard-size 3: 2 device(s) do not split into HSDP shard groups of 3"),
    (["--strategies", "hsdp", "--gpus", "1,2", "--hsdp-shard-size", "2"], "1 device(s) do not split"),
    (["--memory-budget-gib", "0"], "--memory-budget-gib: 0 is not allowed"),
    (["--memory-budget-gib", "nan"], "--memory-budget-gib: 'nan' is not a finite number"),
    (["--hsdp-shard-size", "2"], "--hsdp-shard-size: takes effect with --strategies hsdp only"),
    (["--zero-bucket-view", "true"], "--zero-bucket-view: takes effect with --strategies zero only"),
    (["--optimizer", "sgd,sgd"], "names an entry twice"),
])
def test_bad_optimizer_shard_size_and_budget_exit_2_before_anything_runs(args, expected, tmp_path, capsys, no_run):
    assert cli.main([*args, "--device", "cpu", "--store", str(tmp_path / "s.sqlite")]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "s.sqlite").exists()


def test_a_container_dev_shm_too_small_for_nccls_segments_is_refused_before_any_rank_starts(monkeypatch):
    # Docker's default 64 MiB: NCCL's segments (7.0 MiB per connection to another rank of the node) need 84 MiB at x4
    # and 392 MiB at x8 for DDP, while DataParallel's one process needs none
    monkeypatch.delenv("NCCL_SHM_DISABLE", raising=False)
    docker = dataclasses.replace(GPU8, shm_free_bytes=64 * 2**20)
    cfg = SweepConfig(gpus=(1, 4, 8), workloads=("synthetic",), strategies=("dp", "ddp"), interference=False)
    with pytest.raises(ConfigError) as e:
        resolve(cfg, docker)
    msg = str(e.value)
    assert msg.startswith("/dev/shm has 64 MiB free, but ddp on 8 GPU(s) would need about 392 MiB there") or \
        msg.startswith("/dev/shm has 64 MiB free, but the collectives on 8 GPU(s) would need about 392 MiB there"), msg
    assert "(8 rank(s), each connected to 7 other rank(s) in the default group: 392 MiB" in msg and "torchtitan#853" in msg
    assert "--shm-size=1g" in msg and "--ipc=host" in msg and "NCCL_SHM_DISABLE=1" in msg and "(--gpus 1)" in msg
    resolve(dataclasses.replace(cfg, strategies=("dp",)), docker)                     # no NCCL group: nothing needed
    resolve(dataclasses.replace(cfg, gpus=(1, 2)), docker)                            # x2: 2 x 1 x 7.0 = 14 MiB
    resolve(cfg, dataclasses.replace(GPU8, shm_free_bytes=2**30))                     # --shm-size=1g
    resolve(dataclasses.replace(cfg, device="cpu", gpus=(1, 2)), dataclasses.replace(CPU2, shm_free_bytes=2**20))  # gloo
    monkeypatch.setenv("NCCL_SHM_DISABLE", "1")
    resolve(cfg, docker)
    # HSDP and the comm run's interference stage connect further groups, counted too
    from bench.sweep import shm
    monkeypatch.delenv("NCCL_SHM_DISABLE")
    items = plan.plan(resolve(dataclasses.replace(cfg, strategies=("hsdp",), interference=True),
                              dataclasses.replace(GPU8, shm_free_bytes=2**30)), GPU8)
    need = {(s.strategy, s.device_count): shm.nccl_bytes(s) // shm.NCCL_SEGMENT_BYTES for s in items if isinstance(s, plan.RunSpec)}
    assert need[("hsdp", 8)] == 8 * (7 + 7) and need[("comm", 8)] == 8 * (7 + 7) and need[("hsdp", 1)] == 0


# ---------------------------------------------------------------- helper-Y1: the error that names what was typed

@pytest.mark.parametrize("argv, expected", [
    (["--workloads", "Transformer", "--transformer-preset", "tiny"],
     "--workloads: unknown model 'Transformer'; did you mean transformer?"),
    (["--find-unused-parameters", "true,true"], "--find-unused-parameters: true,true names an entry twice; expected each entry once"),
    (["--compile", "yes,on"], "--compile: yes,on names an entry twice (yes and on are both true); expected each entry once"),
    (["--activation-checkpointing", "none,none"], "--activation-checkpointing: none,none names an entry twice; expected each entry once"),
    (["--activation-checkpointing", "selective:2,selective"],
     "--activation-checkpointing: selective:2,selective names an entry twice (selective is selective:2); expected"),
    (["--activation-checkpointing", "selective:1,full"],
     "--activation-checkpointing: selective:1,full names an entry twice (selective:1 is full); expected each entry once"),
    (["--activation-checkpointing", "full,selective:1"], "--activation-checkpointing: full,selective:1 names an entry twice (selective:1 is full)"),
    (["--activation-checkpointing", "selective:"],
     "--activation-checkpointing: 'selective:' has nothing after the colon; expected selective:K with K a whole number >= 1"),
    (["--activation-checkpointing", "full:"], "--activation-checkpointing: 'full:' is not one of none, full, selective"),
    (["--transformer-preset", "", "--workloads", "transformer"],
     "--transformer-preset: '' is empty; expected a value, or the flag left out for its default"),
    (["--workloads", "mymodels:transformer", "--seq-len", "64"],   # the user's model, not a misspelt transformer
     "--seq-len: sets the transformer workload, which --workloads does not name"),
    (["--workloads", "transfomer", "--seq-len", "64"], "--workloads: unknown model 'transfomer'; did you mean transformer?"),
    (["--transformer-preset", ""], "--transformer-preset: '' is empty"),
    (["--resume", ""], "--resume: '' is empty; expected a value"),   # an unset $RUN would have started a new sweep
    (["--weights", " "], "--weights: ' ' is empty; expected a value"),
    (["--bucket-cap-mb", "25,25"], "--bucket-cap-mb: 25,25 lists a value twice"),  # as typed, not 25.0,25.0
])
def test_a_bad_name_an_alias_or_an_empty_value_is_refused_in_the_words_typed(argv, expected):
    with pytest.raises(ConfigError) as e:
        from_args(run_parser().parse_args(argv))
    assert str(e.value).startswith(expected), str(e.value)
    assert "selective is selective:2" not in str(e.value) or "selective:2,selective" in argv
    assert "True" not in str(e.value)
