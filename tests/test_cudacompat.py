"""A GPU the installed torch cannot drive is refused before anything runs, with the install that works, and a
GPU sweep never silently becomes a CPU sweep. Tested through stand-ins: arch lists, capabilities, NVML, torch."""
from __future__ import annotations

import types

import pytest

from bench import cli
from bench.config import ConfigError, SweepConfig
from bench.machine import cudacompat, gpuinfo
from bench.sweep import plan
from bench.sweep.plan import Machine
from bench.sweep.resolve import resolve

CUDA13 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")  # torch 2.15's default wheel, as installed here
CUDA126 = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")


@pytest.mark.parametrize("cap, arch, ok", [
    ((7, 0), CUDA13, False),            # V100 on the CUDA 13 wheel: "no kernel image is available"
    ((7, 0), CUDA126, True),
    ((7, 5), CUDA13, True),             # T4
    ((8, 9), ("sm_80", "sm_86"), True),  # a cubin runs on later minors of its major (L4 on sm_86)
    ((9, 0), ("sm_80", "sm_86"), False),  # ... never across majors
    ((9, 0), ("sm_80", "compute_80"), True),  # PTX is compiled by the driver for any later GPU
    ((9, 0), ("sm_90a",), True),        # arch-specific: that capability only
    ((10, 0), ("sm_90a",), False),
])
def test_a_gpu_has_a_kernel_by_nvidias_compatibility_rules(cap, arch, ok):
    assert cudacompat.has_kernel(cap, arch) is ok


def test_v100s_on_a_cuda_13_wheel_are_refused_naming_gpu_capability_wheel_and_the_install_that_works():
    v100 = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("Tesla V100-SXM2-16GB",) * 8,
                   gpu_capabilities=((7, 0),) * 8, arch_list=CUDA13)
    with pytest.raises(ConfigError) as e:
        resolve(SweepConfig(gpus=(1, 4, 8)), v100)
    said = str(e.value)
    assert "GPU 0 (Tesla V100-SXM2-16GB) has compute capability 7.0" in said
    assert "built for sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 only" in said
    assert "--index-url https://download.pytorch.org/whl/cu126" in said
    resolve(SweepConfig(gpus=(1, 4, 8)), Machine(8, 64, ("V100",) * 8, ((7, 0),) * 8, arch_list=CUDA126))  # the fix works
    resolve(SweepConfig(gpus=(1, 4, 8)), Machine(8, 64, ("H100",) * 8, ((9, 0),) * 8, arch_list=CUDA13))


@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_gpus_torch_cannot_use_are_refused_not_swept_on_the_cpu(device):
    broken = Machine(cuda_devices=0, cpu_cores=16, gpus_unusable="the installed torch 2.15.0+cpu is a CPU-only build")
    with pytest.raises(ConfigError) as e:
        resolve(SweepConfig(device=device, gpus=(1, 4, 8) if device == "cuda" else None), broken)
    assert f"--device {device}: this machine's driver shows NVIDIA GPU(s), but the installed torch 2.15.0+cpu" in str(e.value)
    assert "--device cpu" in str(e.value)
    assert resolve(SweepConfig(device="cpu"), broken).device == "cpu"  # asked for on purpose: fine


def _nvml(count: int):
    return types.SimpleNamespace(nvmlDeviceGetCount=lambda: count)


def _torch(cuda, available, warning=None):
    def is_available():
        if warning:
            import warnings
            warnings.warn(warning)
        return available
    return types.SimpleNamespace(__version__="2.15.0", version=types.SimpleNamespace(cuda=cuda),
                                 cuda=types.SimpleNamespace(is_available=is_available, device_count=lambda: 8 * available))


def test_why_torch_cannot_use_the_gpus_the_driver_shows(monkeypatch):
    monkeypatch.setattr(gpuinfo, "load_nvml", lambda: _nvml(8))
    env = {}
    assert "CPU-only build" in cudacompat.why_torch_cannot_use_gpus(_torch(None, False), env)
    old_driver = "The NVIDIA driver on your system is too old (found version 12020)."
    said = cudacompat.why_torch_cannot_use_gpus(_torch("13.2", False, old_driver), env)
    assert said == f"torch 2.15.0 (built for CUDA 13.2) cannot use them: {old_driver}"
    assert cudacompat.why_torch_cannot_use_gpus(_torch("13.2", True), env) is None
    # GPUs hidden on purpose (CUDA_VISIBLE_DEVICES) or no driver at all: nothing to complain about
    assert cudacompat.why_torch_cannot_use_gpus(_torch(None, False), {"CUDA_VISIBLE_DEVICES": ""}) is None
    assert cudacompat.visible_gpus({"CUDA_VISIBLE_DEVICES": "3,1"}) == 2
    assert cudacompat.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}) == 1
    monkeypatch.setattr(gpuinfo, "load_nvml", lambda: None)
    assert cudacompat.why_torch_cannot_use_gpus(_torch(None, False), env) is None


def test_the_command_exits_2_before_anything_runs_and_selfcheck_fails_on_unusable_gpus(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    broken = Machine(cuda_devices=0, cpu_cores=2, gpus_unusable="the installed torch 2.15.0+cpu is a CPU-only build")
    monkeypatch.setattr(plan, "detect_machine", lambda: broken)
    from bench.sweep import launch
    monkeypatch.setattr(launch, "run_config", lambda *a, **k: pytest.fail("a configuration ran"))
    assert cli.main(["--gpus", "1,2"]) == 2
    assert "CPU-only build" in capsys.readouterr().err
    assert cli.main(["selfcheck"]) == 1
    assert "selfcheck: FAIL: the driver shows NVIDIA GPU(s), but the installed torch 2.15.0+cpu" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
