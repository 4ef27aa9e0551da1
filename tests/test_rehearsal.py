"""The rehearsal of several ranks on one GPU (bench.shared.rehearsal, BENCH_REHEARSE_ON_ONE_GPU): planned on a
pretend one-GPU machine, labelled in every name, DataParallel skipped with its reason. Its CUDA half (two ranks driving
cuda:0 over gloo) runs on a GPU machine (scripts/gpu_session.sh one-call); tests/test_gpu_example.py holds what it
stored, and that its collectives never feed a forecast."""
from __future__ import annotations

import pytest

from bench.config import ConfigError, SweepConfig
from bench.shared import rehearsal
from bench.shared.spec import RunSpec, Skip
from bench.sweep.plan import Machine, plan
from bench.sweep.resolve import resolve

ONE_GPU = Machine(cuda_devices=1, cpu_cores=16, gpu_names=("NVIDIA H100 80GB HBM3",), gpu_capabilities=((9, 0),),
                  arch_list=("sm_90",), gpu_memory_bytes=(80 * 2**30,))
ASK = dict(device="cuda", workloads=("synthetic",), strategies=("dp", "ddp", "zero", "fsdp"), gpus=(1, 2),
           check_equivalence=True, noise_repeats=1)


def test_without_the_variable_two_ranks_on_one_gpu_are_refused_before_anything_runs(monkeypatch):
    monkeypatch.delenv(rehearsal.ENV, raising=False)
    with pytest.raises(ConfigError, match="2 GPUs asked for, but this machine has 1"):
        resolve(SweepConfig(**ASK), ONE_GPU)


def test_the_rehearsal_plans_two_gloo_ranks_per_strategy_on_one_gpu_each_labelled_so(monkeypatch):
    monkeypatch.setenv(rehearsal.ENV, "1")
    cfg = resolve(SweepConfig(**ASK), ONE_GPU)
    items = plan(cfg, ONE_GPU)
    at2 = [x for x in items if isinstance(x, RunSpec) and x.device_count == 2]
    by_mode = {(s.mode, s.strategy) for s in at2}
    assert {("bench", "ddp"), ("bench", "zero"), ("bench", "fsdp"), ("equivalence", "ddp"), ("equivalence", "fsdp"),
            ("comm", "comm")} <= by_mode
    for s in at2:  # every configuration of two ranks says that they share the one GPU
        assert dict(s.options)[rehearsal.OPTION] == "2 ranks on 1 GPU, gloo", s
    at1 = [x for x in items if isinstance(x, RunSpec) and x.device_count == 1]
    assert at1 and all(rehearsal.OPTION not in dict(s.options) for s in at1)  # one rank per GPU: NCCL, as ever
    dp2 = [x for x in items if isinstance(x, Skip) and x.spec.strategy == "dp" and x.spec.device_count == 2]
    assert len(dp2) == 1 and "DataParallel" in dp2[0].reason and rehearsal.ENV in dp2[0].reason


def test_the_label_of_a_rehearsed_configuration_names_the_sharing():
    from bench.analysis.results import label, variant
    options = dict([rehearsal.option(2, 1)])
    assert label("ddp", 2, variant("fp32", False, False, options)) == "DDP x2 [fp32, rehearsal=2 ranks on 1 GPU, gloo]"


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("", False), ("0", False), ("false", False)])
def test_the_variable_turns_the_rehearsal_on(value, on):
    assert rehearsal.active({rehearsal.ENV: value}) is on
    assert rehearsal.active({}) is False


def test_ranks_take_the_gpus_round_robin_and_a_machine_without_one_is_refused():
    assert [rehearsal.device_index(r, 1) for r in range(4)] == [0, 0, 0, 0]
    assert [rehearsal.device_index(r, 2) for r in range(4)] == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="at least one GPU"):
        rehearsal.device_index(0, 0)


def test_a_cpu_sweep_is_untouched_by_the_variable(monkeypatch):
    monkeypatch.setenv(rehearsal.ENV, "1")
    cpu = Machine(cuda_devices=0, cpu_cores=2)
    cfg = resolve(SweepConfig(**{**ASK, "device": "cpu"}), cpu)
    assert all(rehearsal.OPTION not in dict((x.spec if isinstance(x, Skip) else x).options) for x in plan(cfg, cpu))


def test_the_setting_is_added_only_above_the_gpus_on_cuda_and_when_asked(monkeypatch):
    monkeypatch.setenv(rehearsal.ENV, "1")
    assert rehearsal.options("cuda", 2, 1) == (("rehearsal", "2 ranks on 1 GPU, gloo"),)
    assert rehearsal.options("cuda", 8, 2) == (("rehearsal", "8 ranks on 2 GPUs, gloo"),)
    assert rehearsal.options("cuda", 1, 1) == () and rehearsal.options("cpu", 2, 0) == () and rehearsal.options("cuda", 2, 0) == ()
    monkeypatch.delenv(rehearsal.ENV)
    assert rehearsal.options("cuda", 2, 1) == ()
