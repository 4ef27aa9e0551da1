"""`--resume` runs a fresh sweep's cheap pre-flight checks on the stored configuration and this machine, which may not
be the one the sweep started on: /dev/shm (a fresh container's 64 MiB), the login-node refusal (a new allocation's
salloc shell) and the shared folder's visibility and locks (a store on another mount). Exit 2, before anything runs.
Fake Machines, stores written through the store's own calls, a fake `srun` on PATH."""
from __future__ import annotations

import dataclasses
import os

import pytest

from bench import cli, options
from bench.config import ConfigError, SweepConfig
from bench.store import store
from bench.sweep import plan, record
from bench.sweep.plan import Machine
from bench.sweep.resolve import resolve

GPU8 = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("H100",) * 8, gpu_capabilities=((9, 0),) * 8,
               gpu_memory_bytes=(80 * 2**30,) * 8, shm_free_bytes=2**34)
DOCKER = dataclasses.replace(GPU8, shm_free_bytes=64 * 2**20)   # Docker's default /dev/shm


@pytest.fixture(autouse=True)
def no_slurm(monkeypatch):
    for name in [v for v in os.environ if v.startswith(("SLURM_", "SRUN_"))]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("NCCL_SHM_DISABLE", raising=False)


def _interrupted(path: str, cfg: SweepConfig, machine: Machine, done_counts=()) -> int:
    """A sweep of `cfg` (resolved on `machine`) in the store at `path`, interrupted with the configurations at
    `done_counts` finished."""
    cfg = resolve(cfg, machine)
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "./run_bench.sh x", cfg.to_json(), None)
    for item in plan.plan(cfg, machine):
        spec = item.spec if hasattr(item, "spec") else item
        if spec.device_count in done_counts:
            record.record_result(conn, sid, None, spec, "skipped", "stand-in for a finished configuration")
    store.end_sweep(conn, sid, "interrupted")
    conn.close()
    return sid


def _resume(path: str, machine: Machine):
    return options.prepare(["--resume", "last", "--store", path], machine=machine)


DDP8 = SweepConfig(workloads=("synthetic",), strategies=("single", "ddp"), gpus=(1, 8), interference=False)


def test_a_resume_in_a_container_whose_dev_shm_cannot_hold_nccls_segments_is_refused(tmp_path):
    path = str(tmp_path / "s.sqlite")
    sid = _interrupted(path, DDP8, GPU8)
    before = open(path, "rb").read()
    with pytest.raises(ConfigError) as e:
        _resume(path, DOCKER)
    msg = str(e.value)
    assert msg.startswith(f"--resume last: sweep {sid}, run with its stored settings here: /dev/shm has 64 MiB free, "
                          "but "), msg
    assert "--shm-size=1g" in msg and "NCCL_SHM_DISABLE=1" in msg
    assert open(path, "rb").read() == before   # nothing written
    _resume(path, GPU8)                          # enough /dev/shm: resumes


def test_a_resume_whose_large_counts_are_done_is_not_held_to_them(tmp_path):
    path = str(tmp_path / "s.sqlite")
    _interrupted(path, DDP8, GPU8, done_counts=(8,))
    _resume(path, DOCKER)   # only x1 left: no NCCL peers on the node


def test_a_resume_exits_2_before_anything_runs(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "s.sqlite")
    _interrupted(path, DDP8, GPU8)
    monkeypatch.setattr(plan, "detect_machine", lambda: DOCKER)
    monkeypatch.setattr("bench.sweep.launch.run_config", lambda *a, **k: pytest.fail("a configuration ran"))
    assert cli.main(["--resume", "last", "--store", path]) == 2
    assert "/dev/shm has 64 MiB free" in capsys.readouterr().err


def test_a_resume_in_a_salloc_shell_on_a_login_node_is_refused(tmp_path, monkeypatch):
    path = str(tmp_path / "s.sqlite")
    sid = _interrupted(path, DDP8, GPU8)
    monkeypatch.setenv("SLURM_JOB_ID", "3")
    login = dataclasses.replace(GPU8, slurm_nodes=2, slurm_gpus="SLURM_GPUS_PER_NODE=8", slurm_on_node=False)
    with pytest.raises(ConfigError) as e:
        _resume(path, login)
    assert str(e.value).startswith(f"--resume last: sweep {sid}, run with its stored settings here: --device cuda: this "
                                   "sweep runs inside a SLURM allocation (2 node(s), SLURM_GPUS_PER_NODE=8) but not on "
                                   "one of its nodes"), str(e.value)


def test_a_resume_of_a_multi_node_sweep_checks_that_every_node_sees_the_stores_folder(tmp_path, monkeypatch):
    from test_cluster import NODES_SRUN, fake_srun
    path = str(tmp_path / "s.sqlite")
    cluster = dataclasses.replace(GPU8, slurm_nodes=2)
    _interrupted(path, SweepConfig(workloads=("synthetic",), strategies=("ddp",), nodes=(1, 2), gpus_per_node=8,
                                   interference=False), cluster)
    bin_dir = fake_srun(tmp_path / "bin", NODES_SRUN.replace("NODE_PATH", 'path="$token.nowhere"'))
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("SLURM_JOB_ID", "3")
    with pytest.raises(ConfigError) as e:
        _resume(path, cluster)
    assert "is not visible from all 2 nodes of the allocation (node(s) n2 cannot open it)" in str(e.value), str(e.value)


def test_a_sweep_that_died_still_reading_running_is_checked_too(tmp_path):
    # A SIGKILLed (or out-of-memory) sweep's row still reads 'running' until bench.sweep.run marks it died, after the
    # pre-flight checks: it was resumed with none, the crashed sweep the checks are for.
    import subprocess
    import sys
    path = str(tmp_path / "s.sqlite")
    sid = _interrupted(path, DDP8, GPU8)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    conn = store.connect(path)
    with conn:
        conn.execute("UPDATE sweeps SET status = 'running', pid = ? WHERE sweep_id = ?", (dead.pid, sid))
    conn.close()
    with pytest.raises(ConfigError) as e:
        _resume(path, DOCKER)
    assert "/dev/shm has 64 MiB free" in str(e.value)
