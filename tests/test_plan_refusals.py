"""Inputs the planner used to accept and then run with no effect (or not at all): refused at planning, exit 2 (a
ConfigError from options.prepare), before any process starts. Every test here plans on a fake Machine; none runs a sweep."""
from __future__ import annotations

import pytest

from bench import options
from bench.config import ConfigError
from bench.shared.spec import RunSpec, Skip
from bench.sweep import plan
from bench.workloads import registry, transformer

GiB = 2**30
CPU = plan.Machine(cuda_devices=0, cpu_cores=2, host_memory_bytes=16 * GiB)


def h100s(n: int) -> plan.Machine:
    return plan.Machine(cuda_devices=n, cpu_cores=16, gpu_names=("NVIDIA H100",) * n, gpu_capabilities=((9, 0),) * n,
                        arch_list=("sm_90",), gpu_memory_bytes=(80 * GiB,) * n, host_memory_bytes=256 * GiB)


def _prepare(args: list, tmp_path, machine: plan.Machine = CPU, device: str = "cpu"):
    return options.prepare([*args, "--device", device, "--store", str(tmp_path / "s.sqlite")], machine=machine)


def _refused(args: list, tmp_path, machine: plan.Machine = CPU, device: str = "cpu") -> str:
    with pytest.raises(ConfigError) as e:
        _prepare(args, tmp_path, machine, device)
    return str(e.value)


# ---------------------------------------------------------------- 1. the transformer's size is counted, not built

def test_planning_a_huge_transformer_counts_its_gradient_from_the_shape_without_building_it(tmp_path, monkeypatch):
    def no_build(*a, **k):
        raise AssertionError("planning built the transformer (100000 blocks on meta took minutes)")
    monkeypatch.setattr(transformer, "Transformer", no_build)
    no_memory = plan.Machine(cuda_devices=0, cpu_cores=2)   # memory unknown: the size bound is not checked
    cfg, _, machine = _prepare(["--workloads", "transformer", "--transformer-layers", "100000", "--transformer-width",
                                "1000000", "--strategies", "ddp", "--gpus", "2"], tmp_path, no_memory)
    comm = [s for s in plan.plan(cfg, machine) if isinstance(s, RunSpec) and s.mode == "comm"]
    shape = transformer.shape_of("tiny", 100000, 1000000)
    assert comm and comm[0].comm_max_bytes == 4 * transformer.parameters(shape)


def test_the_counted_gradient_is_what_the_built_model_holds(monkeypatch):
    spec = RunSpec(workload="transformer", strategy="ddp", device_type="cpu", device_count=2, per_device_batch=2,
                   global_batch=4, image_size=0, steps=1, warmup=0, threads=1, seed=0, scaling="weak",
                   **transformer.spec_fields(transformer.shape_of("134m", layers=2)))
    import torch
    with torch.device("meta"):
        built = transformer.Transformer(transformer.spec_shape(spec))
    assert registry.gradient_bytes(spec) == 4 * sum(p.numel() for p in built.parameters())


# ---------------------------------------------------------------- 2. a transformer no device could hold

def test_weights_beyond_every_gpu_of_the_largest_configuration_are_refused_naming_count_bytes_and_memory(tmp_path):
    said = _refused(["--workloads", "transformer", "--transformer-width", "1048576", "--transformer-layers", "2",
                     "--transformer-heads", "16", "--gpus", "1,8"], tmp_path, h100s(8), "cuda")
    params = transformer.parameters(transformer.shape_of("134m", 2, 1048576))
    assert f"transformer of {params:,} parameters: its fp32 weights alone are 96.2 TiB" in said, said
    assert "8 x 80.0 GiB = 640.0 GiB of GPU memory" in said and "largest configuration (dp x8)" in said, said
    assert "--transformer-width" in said and "more devices (--gpus, --nodes)" in said, said


def test_activations_beyond_the_hosts_ram_are_refused_as_an_at_least_bound(tmp_path):
    # no batch given: the bound is taken at 1 sequence, where `fit` starts its search, not at the device's default
    said = _refused(["--workloads", "transformer", "--seq-len", "100000000"], tmp_path)
    assert "at 1 sequence(s) per device needs at least 23.8 GiB on one device" in said, said
    assert "(1 x --seq-len 100000000 x width 64 x 2 layers x 2 bytes)" in said and "this host's 16.0 GiB of RAM" in said, said
    assert "lower --seq-len or --per-device-batch" in said, said
    said = _refused(["--workloads", "transformer", "--seq-len", "50000000", "--per-device-batch", "2"], tmp_path)
    assert "(2 x --seq-len 50000000 x width 64 x 2 layers x 2 bytes)" in said, said  # the batch given
    _prepare(["--workloads", "transformer", "--seq-len", "50000000"], tmp_path)  # 11.9 GiB at 1 sequence: may run


def test_the_bound_is_a_lower_bound_a_model_fsdp_can_shard_over_the_gpus_is_not_refused(tmp_path):
    # 1.07e11 parameters' weights (400 GiB): more than one 80 GiB GPU, less than eight, and FSDP x8 holds 50 GiB each
    args = ["--workloads", "transformer", "--transformer-preset", "6.7b", "--transformer-width", "16384",
            "--transformer-heads", "128", "--transformer-layers", "32", "--per-device-batch", "1", "--gpus", "8"]
    cfg, _, _ = _prepare([*args, "--strategies", "fsdp"], tmp_path, h100s(8), "cuda")
    assert cfg.transformer_width == 16384
    said = _refused([*args, "--strategies", "ddp"], tmp_path, h100s(8), "cuda")  # every rank holds all the weights
    assert "needs at least" in said and "the largest GPU's 80.0 GiB of GPU memory" in said, said


def test_the_bound_arithmetic_is_the_fp32_weights_and_one_saved_16_bit_tensor_per_block():
    s = transformer.shape_of("tiny", layers=3, seq_len=10)
    assert transformer.memory_floor(s, 5) == (4 * transformer.parameters(s), 2 * 5 * 10 * 64 * 3)


# ---------------------------------------------------------------- 3. selective:K past the last unit

@pytest.mark.parametrize("args, says", [
    (["--workloads", "transformer", "--activation-checkpointing", "selective:3"],
     "--activation-checkpointing selective:3: checkpoints units 3, 6, ... but transformer has 2 blocks (--transformer-layers)"),
    (["--workloads", "synthetic", "--synthetic-depth", "4", "--activation-checkpointing", "none,selective:5"],
     "selective:5: checkpoints units 5, 10, ... but synthetic has 4 layers (--synthetic-depth)"),
    (["--workloads", "deeplabv3", "--activation-checkpointing", "selective:34", "--no-comm-bench"],
     "but deeplabv3 has 33 ResNet-101 bottleneck blocks in its backbone"),
])
def test_selective_checkpointing_past_the_last_unit_is_refused_naming_k_the_workload_and_its_units(args, says, tmp_path):
    assert says in _refused(args, tmp_path)


def test_selective_checkpointing_of_the_last_unit_still_plans(tmp_path):
    cfg, _, _ = _prepare(["--workloads", "transformer,synthetic", "--activation-checkpointing", "selective:2"], tmp_path)
    assert cfg.activation_checkpointing == ("selective:2",)


def test_selective_past_one_workloads_units_skips_its_configurations_and_runs_the_others(tmp_path):
    # tiny has 2 blocks, the MLP 4 layers: selective:3 means something for the MLP alone
    cfg, _, machine = _prepare(["--workloads", "transformer,synthetic", "--activation-checkpointing", "none,selective:3",
                                "--strategies", "single", "--repeats", "1"], tmp_path)
    items = plan.plan(cfg, machine)
    skipped = {(x.spec.workload, x.spec.activation_checkpointing): x.reason for x in items if isinstance(x, Skip)}
    ran = {(x.workload, x.activation_checkpointing) for x in items if isinstance(x, RunSpec) and x.mode == "bench"}
    assert set(skipped) == {("transformer", "selective:3")}, skipped
    assert "but transformer has 2 blocks (--transformer-layers), so none would be checkpointed" in skipped[("transformer", "selective:3")]
    assert ran == {("transformer", "none"), ("synthetic", "none"), ("synthetic", "selective:3")}, ran


# ---------------------------------------------------------------- 4. a sweep of nothing but skips

@pytest.mark.parametrize("args, reasons", [
    (["--workloads", "transformer", "--channels-last"], ["channels_last applies to 4-D image inputs; transformer takes 2-D"]),
    (["--strategies", "fsdp", "--fsdp-offload", "cpu"], ["CPUOffloadPolicy"]),
    (["--strategies", "fsdp", "--fsdp-offload", "cpu", "--memory-budget-gib", "4"], ["CPUOffloadPolicy"]),  # fit's
    (["--workloads", "synthetic", "--strategies", "single", "--precision", "fp16,tf32"], ["GPU precision", "TF32"]),
])
def test_a_sweep_whose_every_configuration_is_skipped_is_refused_with_each_reason_on_its_line(args, reasons, tmp_path):
    said = _refused(args, tmp_path)
    assert "benchmark configuration(s) would be skipped, so it would measure nothing" in said, said
    lines = [line for line in said.splitlines() if line.startswith("  - ")]
    assert len(lines) == len(reasons) and all(r in line for r, line in zip(reasons, lines)), said
    assert "so that at least one configuration runs here" in said


def test_where_one_configuration_runs_the_others_are_still_recorded_as_skipped(tmp_path):
    cfg, _, machine = _prepare(["--workloads", "transformer", "--channels-last", "false,true"], tmp_path)
    items = [i for i in plan.plan(cfg, machine) if (i.spec if isinstance(i, Skip) else i).mode == "bench"]
    assert any(isinstance(i, RunSpec) for i in items)
    assert {i.reason for i in items if isinstance(i, Skip)} == {"channels_last applies to 4-D image inputs; transformer takes 2-D inputs"}


# ---------------------------------------------------------------- 5. --image-size with no image workload

def test_image_size_with_no_image_workload_is_refused_naming_the_flag_and_where_it_applies(tmp_path):
    said = _refused(["--workloads", "transformer,synthetic", "--image-size", "224"], tmp_path)
    assert said.startswith("--image-size 224: sets the image side of image workloads (deeplabv3 and torchvision"), said
    assert "none of --workloads transformer,synthetic takes images" in said and "leave --image-size out" in said, said


def test_image_size_with_an_image_workload_among_others_is_taken(tmp_path):
    cfg, _, machine = _prepare(["--workloads", "synthetic,deeplabv3", "--image-size", "32", "--no-comm-bench"], tmp_path)
    sizes = {s.workload: s.image_size for s in plan.plan(cfg, machine) if isinstance(s, RunSpec)}
    assert sizes == {"synthetic": 0, "deeplabv3": 32}


def test_loader_workers_for_data_no_loader_reads_are_refused_not_ignored(tmp_path):
    # --num-workers 2 with synthetic data was accepted and silently ignored (loader_workers NULL in the store)
    said = _refused(["--workloads", "synthetic", "--num-workers", "2"], tmp_path)
    assert "--num-workers 2: loader workers serve --data voc; with synthetic data" in said, said


# ---------------------------------------------------------------- 3. an equivalence reference no GPU could hold

def test_an_equivalence_check_whose_one_process_reference_cannot_fit_a_gpu_is_skipped_with_the_reason(tmp_path):
    # 6.7b under FSDP x8 fits 8 x 80 GiB, but the gate's reference, one process with the whole model, its gradients and
    # AdamW's state (16 bytes a parameter: ~100 GiB), cannot: it would run out of memory and read as FSDP failing the gate
    flags = ["--workloads", "transformer", "--transformer-preset", "6.7b", "--strategies", "fsdp", "--gpus", "8",
             "--optimizer", "adamw", "--activation-checkpointing", "full", "--per-device-batch", "1",
             "--check-equivalence"]
    cfg, _, machine = _prepare(flags, tmp_path, h100s(8), "cuda")
    items = plan.plan(cfg, machine)
    checks = [x for x in items if (x.spec if isinstance(x, Skip) else x).mode == "equivalence"]
    assert len(checks) == 1 and isinstance(checks[0], Skip), checks
    why = checks[0].reason
    assert why.startswith("equivalence not checked: the gate's reference is one process holding the whole model, at "
                          "least 100."), why
    assert "GiB of fp32 weights, gradients and adamw state" in why and "more than the largest GPU's 80.0 GiB" in why
    assert "read as fsdp x8 failing the gate" in why and "smaller --transformer-preset" in why
    assert any(isinstance(x, RunSpec) and x.mode == "bench" for x in items)   # the benchmark itself still runs
    # a preset whose reference fits keeps its check; and SGD's 12 bytes a parameter (~75 GiB) is no certain overflow
    small = plan.plan(_prepare([*flags[:3], "1.4b", *flags[4:]], tmp_path, h100s(8), "cuda")[0], machine)
    sgd = plan.plan(_prepare([*flags[:9], "sgd", *flags[10:]], tmp_path, h100s(8), "cuda")[0], machine)
    for kept in (small, sgd):
        assert [x for x in kept if isinstance(x, RunSpec) and x.mode == "equivalence"], kept
