"""A salloc shell on a login node that has GPUs of its own: a GPU sweep there would measure the one-node
configurations on the login node's GPUs (planned at their count a node) while the multi-node steps run on the
allocation's. Refused, exit 2, naming the host and the way onto a node. Fake Machines and SLURM variables."""
from __future__ import annotations

import dataclasses
import os
import socket

import pytest

from bench import cli
from bench.config import ConfigError, SweepConfig
from bench.sweep import plan, slurm
from bench.sweep.plan import Machine
from bench.sweep.resolve import resolve

# salloc -N2 --gpus-per-node=8, its shell on a login node with 2 A10s of its own
LOGIN_A10 = Machine(cuda_devices=2, cpu_cores=32, gpu_names=("NVIDIA A10",) * 2, gpu_capabilities=((8, 6),) * 2,
                    slurm_nodes=2, slurm_gpus="SLURM_GPUS_PER_NODE=8", gpu_memory_bytes=(24 * 2**30,) * 2,
                    shm_free_bytes=2**34, slurm_on_node=False)
CFG = dataclasses.replace(SweepConfig(), nodes=(1, 2), workloads=("synthetic",), strategies=("ddp",))


@pytest.fixture
def allocation(monkeypatch):
    for name in [v for v in os.environ if v.startswith(("SLURM_", "SRUN_"))]:
        monkeypatch.delenv(name)
    for name, value in {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_PER_NODE": "8",
                        "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_CPUS_PER_NODE": "64(x2)"}.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_a_gpu_sweep_in_a_salloc_shell_on_a_login_node_with_gpus_is_refused_naming_the_login_node(allocation, device):
    with pytest.raises(ConfigError) as e:
        resolve(dataclasses.replace(CFG, device=device), LOGIN_A10)
    msg = str(e.value)
    assert msg.startswith(f"--device {device}: this sweep runs inside a SLURM allocation (2 node(s), "
                          "SLURM_GPUS_PER_NODE=8) but not on one of its nodes: "), msg
    assert f"here is {socket.gethostname()}, a login node" in msg and "SLURMD_NODENAME" in msg
    assert "SLURM_JOB_NODELIST=gpu[01-02]" in msg and "Its own 2 GPU(s) (NVIDIA A10)" in msg
    assert "sbatch slurm/bench.sbatch" in msg and "srun --nodes=1 --ntasks=1 --cpus-per-task=64 --pty bash" in msg
    assert "--device cpu" in msg
    # on a node of the allocation (a batch script or a step: SLURMD_NODENAME) it resolves as before
    on_node = resolve(CFG, dataclasses.replace(LOGIN_A10, slurm_on_node=True))
    assert on_node.device == "cuda" and on_node.gpus == (2, 4)
    # the CPU measured on purpose
    assert resolve(dataclasses.replace(CFG, device="cpu", nodes=None, gpus=(1,)), LOGIN_A10).device == "cpu"


def test_a_login_node_without_gpus_in_a_cpu_allocation_is_refused_too(allocation):
    with pytest.raises(ConfigError) as e:
        resolve(dataclasses.replace(CFG, nodes=None, gpus=(1,)),
                dataclasses.replace(LOGIN_A10, cuda_devices=0, gpu_names=(), slurm_gpus=None))
    assert "(2 node(s)) but not on one of its nodes" in str(e.value) and "Its own" not in str(e.value)


def test_the_machine_reads_whether_this_shell_is_on_a_node_of_its_allocation(allocation, monkeypatch):
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    assert slurm.on_allocated_node(host="login1.cluster") is False
    assert slurm.on_allocated_node(host="gpu02.cluster") is True          # salloc typed on a node of its allocation
    monkeypatch.setenv("SLURMD_NODENAME", "gpu01")                        # a batch script or an srun step
    assert slurm.on_allocated_node(host="anything") is True
    assert slurm.on_allocated_node({}, host="login1") is True             # outside an allocation: nothing to judge
    assert slurm.expand_nodelist("gpu[01-03,07],login2") == ["gpu01", "gpu02", "gpu03", "gpu07", "login2"]
    assert slurm.expand_nodelist("n[1-x]") == []
    monkeypatch.delenv("SLURMD_NODENAME")
    monkeypatch.setattr(socket, "gethostname", lambda: "login1")
    assert plan.detect_machine().slurm_on_node is False


def test_the_refusal_exits_2_before_anything_runs(allocation, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(plan, "detect_machine", lambda: LOGIN_A10)
    assert cli.main(["--nodes", "1,2", "--workloads", "synthetic", "--store", str(tmp_path / "s.sqlite")]) == 2
    assert "but not on one of its nodes" in capsys.readouterr().err
    assert not (tmp_path / "s.sqlite").exists()


def test_a_cpu_allocation_seen_from_a_login_node_is_refused_without_speaking_of_gpus(allocation, monkeypatch):
    # salloc -N2 with no GPUs, its shell on a GPU-less login node: the refusal read "A GPU sweep runs on the allocation's
    # nodes" of a CPU sweep
    monkeypatch.delenv("SLURM_GPUS_PER_NODE")
    login = dataclasses.replace(LOGIN_A10, cuda_devices=0, gpu_names=(), gpu_capabilities=(), gpu_memory_bytes=(),
                                slurm_gpus=None)
    with pytest.raises(ConfigError) as e:
        resolve(CFG, login)
    msg = str(e.value)
    assert "GPU" not in msg.split("login node")[1], msg
    assert "A sweep of the allocation (its one-node configurations run where the sweep starts) runs on the " \
           "allocation's nodes" in msg and "--device cpu" in msg
