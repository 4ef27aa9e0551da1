"""What a first SLURM cluster meets, held offline: a login node inside a GPU allocation, srun's CPUs per task, the
shared folder's locks across nodes. Stand-ins: SLURM's environment variables, a fake `srun` on PATH that runs its
command once per "node" on this machine (recording its arguments), fake node answers. The real two-node cluster's
tests are tests/test_slurm.py."""
from __future__ import annotations

import dataclasses

import pytest

from bench.config import ConfigError, SweepConfig
from bench.sweep import slurm
from bench.sweep.plan import Machine, resolve

LOGIN = Machine(cuda_devices=0, cpu_cores=8, slurm_nodes=2)


@pytest.mark.parametrize("env, found", [
    ({"SLURM_GPUS_PER_NODE": "8"}, "SLURM_GPUS_PER_NODE=8"),
    ({"SLURM_GPUS_PER_NODE": "a100:4"}, "SLURM_GPUS_PER_NODE=a100:4"),
    ({"SLURM_JOB_GPUS": "0,1,2,3"}, "SLURM_JOB_GPUS=0,1,2,3"),
    ({"SLURM_JOB_GPUS": "0"}, "SLURM_JOB_GPUS=0"),                        # GPU id 0, not a count
    ({"SLURM_TRES_PER_NODE": "cpu=8,gres/gpu:h100:8"}, "SLURM_TRES_PER_NODE=cpu=8,gres/gpu:h100:8"),
    ({"SLURM_GPUS_PER_NODE": "0"}, None),                                  # salloc --gpus-per-node=0
    ({"SLURM_TRES_PER_NODE": "gres/gpu:0"}, None),
    ({}, None),
])
def test_a_gpu_allocation_is_read_from_slurms_variables(env, found):
    assert slurm.allocation_gpus({"SLURM_JOB_ID": "42", **env}) == found
    assert slurm.allocation_gpus(env) is None   # outside an allocation


def test_device_auto_on_a_login_node_of_a_gpu_allocation_refuses_instead_of_planning_a_cpu_sweep():
    login = dataclasses.replace(LOGIN, slurm_gpus="SLURM_GPUS_PER_NODE=8")
    with pytest.raises(ConfigError) as e:
        resolve(SweepConfig(workloads=("synthetic",)), login)
    msg = str(e.value)
    assert msg.startswith("--device auto: this sweep runs inside a SLURM allocation with GPUs (SLURM_GPUS_PER_NODE=8), "
                          "but no GPU is visible here on ")
    assert "sbatch slurm/bench.sbatch" in msg and "--device cpu" in msg
    assert resolve(SweepConfig(workloads=("synthetic",), device="cpu", gpus=(1,)), login).device == "cpu"  # on purpose
    assert resolve(SweepConfig(workloads=("synthetic",), gpus=(1,)), LOGIN).device == "cpu"   # a CPU allocation
