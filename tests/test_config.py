"""Bad input is refused with exit status 2 and a message naming the value, before any process starts
or the store is touched; defaults follow the machine."""
from __future__ import annotations

import pytest

from bench import cli, config
from bench.config import ConfigError, Machine, SweepConfig, resolve

CPU2 = Machine(cuda_devices=0, cpu_cores=2)
GPU8 = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("H100",) * 8)
GPU4 = Machine(cuda_devices=4, cpu_cores=32, gpu_names=("A100",) * 4)


@pytest.mark.parametrize("args, expected", [
    (["--gpus", "a"], "'a'"),
    (["--gpus", "0"], "0 is not a device count"),
    (["--gpus", "2,2"], "lists a count twice"),
    (["--gpus", "1,4,8", "--device", "cuda"], "0 CUDA GPUs"),
    (["--gpus", "1,4"], "2 CPU core(s)"),
    (["--strategies", "single,fsdp"], "unknown name 'fsdp'"),
    (["--workloads", "resnet"], "unknown name 'resnet'"),
    (["--device", "tpu"], "'tpu'"),
    (["--workloads", "deeplabv3", "--per-device-batch", "1"], "at least 2 per replica"),
    (["--scaling", "strong", "--global-batch", "3"], "cannot be split evenly over 2 devices"),
    (["--steps", "1"], "at least 2 measured steps"),
    (["--scaling", "diagonal"], "'diagonal'"),
    (["--data", "voc", "--workloads", "deeplabv3"], "needs --voc-root"),
    (["--data", "voc", "--workloads", "deeplabv3", "--voc-root", "/nonexistent/voc"], "/nonexistent/voc"),
    (["--weights", "/nonexistent/w.pt"], "/nonexistent/w.pt"),
    (["--epochs", "2"], "--data voc"),
    (["--timeout", "soon"], "'soon'"),
    (["--sync-bn"], "CUDA only"),
])
def test_bad_input_exits_2_naming_the_value_before_anything_runs(args, expected, tmp_path, capsys, monkeypatch):
    def no_sweep(*a, **k):
        raise AssertionError("the sweep started despite bad input")
    from bench import sweep
    monkeypatch.setattr(sweep, "run_sweep", no_sweep)
    monkeypatch.setattr(sweep, "run_config", no_sweep)
    monkeypatch.setattr(config, "detect_machine", lambda: CPU2)
    store = tmp_path / "bench.sqlite"
    assert cli.main(args + ["--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err, err
    assert not store.exists(), "the store was touched"


def test_cli_refuses_cuda_without_gpu_in_a_real_process(tmp_path):
    from conftest import run_bench
    store = tmp_path / "s.sqlite"
    p = run_bench(["--gpus", "1,4,8", "--device", "cuda", "--store", str(store)], timeout=120)
    assert p.returncode == 2 and "this machine has 0 CUDA GPUs" in p.stderr, p.stderr
    assert not store.exists()


def test_more_gpus_than_the_machine_has_names_how_many_it_has():
    with pytest.raises(ConfigError, match="8 GPUs asked for, but this machine has 4 CUDA GPU"):
        resolve(SweepConfig(gpus=(1, 8)), GPU4)


def test_default_counts_follow_the_machine():
    assert resolve(SweepConfig(), GPU8).gpus == (1, 4, 8)
    assert resolve(SweepConfig(), GPU4).gpus == (1, 4)
    assert resolve(SweepConfig(), Machine(cuda_devices=2, cpu_cores=8)).gpus == (1, 2)
    cpu = resolve(SweepConfig(), CPU2)
    assert (cpu.device, cpu.gpus, cpu.threads_per_process) == ("cpu", (1, 2), 1)
    assert cpu.image_size == 64 and resolve(SweepConfig(), GPU8).image_size == 256


def test_weak_scaling_grows_the_global_batch_strong_keeps_it():
    weak = [s for s in config.plan(resolve(SweepConfig(workloads=("synthetic",), per_device_batch=8), GPU8))
            if isinstance(s, config.RunSpec)]
    assert {(s.strategy, s.device_count, s.per_device_batch, s.global_batch) for s in weak} >= {
        ("single", 1, 8, 8), ("ddp", 4, 8, 32), ("dp", 8, 8, 64)}
    strong = [s for s in config.plan(resolve(SweepConfig(workloads=("synthetic",), per_device_batch=8, scaling="strong"), GPU8))
              if isinstance(s, config.RunSpec)]
    assert {s.global_batch for s in strong} == {64}
    assert {(s.device_count, s.per_device_batch) for s in strong if s.strategy == "ddp"} == {(1, 64), (4, 16), (8, 8)}


def test_dp_above_one_device_on_cpu_is_planned_as_skipped_with_reason():
    items = config.plan(resolve(SweepConfig(workloads=("synthetic",)), CPU2))
    skips = [i for i in items if isinstance(i, config.Skip)]
    assert [(s.spec.strategy, s.spec.device_count) for s in skips] == [("dp", 2)]
    assert "GPUs only" in skips[0].reason
    runs = [(i.strategy, i.device_count) for i in items if isinstance(i, config.RunSpec)]
    assert runs == [("single", 1), ("dp", 1), ("ddp", 1), ("ddp", 2)]


def test_config_round_trips_through_json_for_resume():
    cfg = resolve(SweepConfig(workloads=("synthetic",), repeats=2), CPU2)
    assert SweepConfig.from_json(cfg.to_json()) == cfg


def test_collective_timeout_defaults_below_the_wall_clock_limit():
    assert resolve(SweepConfig(), CPU2).pg_timeout == 120 and resolve(SweepConfig(), GPU8).pg_timeout == 300
    assert resolve(SweepConfig(timeout=60), CPU2).pg_timeout == 30
    assert resolve(SweepConfig(timeout=60, pg_timeout=90), CPU2).pg_timeout == 90  # what the user asked for
