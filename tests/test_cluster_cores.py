"""A one-node configuration's ranks against the sweep's own node's usable cores, before the sweep and in its report:
a bare `srun --pty bash` step (the way out of a login node) holds one CPU, and 8 ranks then share it while the
multi-node steps get each node's CPUs (the 1 -> 2 node step would read superlinear). Fake Machines and SLURM variables."""
from __future__ import annotations

import dataclasses

import pytest

from bench.config import ConfigError, SweepConfig
from bench.sweep import describe, slurm
from bench.sweep.plan import Machine, plan
from bench.sweep.resolve import resolve

GPU8_ONE_CORE = Machine(cuda_devices=8, cpu_cores=1, gpu_names=("H100",) * 8, gpu_capabilities=((9, 0),) * 8,
                        gpu_memory_bytes=(80 * 2**30,) * 8, shm_free_bytes=2**34)
STEP = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_JOB_CPUS_PER_NODE": "96(x2)"}


@pytest.fixture
def no_slurm(monkeypatch):
    import os
    for name in [v for v in os.environ if v.startswith(("SLURM_", "SRUN_"))]:
        monkeypatch.delenv(name)


def _warnings(machine: Machine, env: dict, **flags) -> list:
    cfg = resolve(dataclasses.replace(SweepConfig(), workloads=("synthetic",), strategies=("single", "ddp"), **flags),
                  machine)
    return describe.short_of_cores([s for s in plan(cfg, machine) if not hasattr(s, "reason")], machine, env)


def test_a_cuda_sweep_whose_node_has_fewer_cores_than_its_ranks_says_so_before_it_runs(no_slurm):
    lines = _warnings(GPU8_ONE_CORE, STEP, gpus=(1, 8))
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("WARNING: this node has 1 usable CPU core(s)"), line
    assert "ddp x8" in line and "up to 8 rank(s) that need 8 (8 x (1 torch thread + 0 loader worker(s)))" in line
    # the way out names the shell step with the node's CPUs in the allocation
    assert "this shell is SLURM step 7.0" in line and "srun --nodes=1 --ntasks=1 --cpus-per-task=96 --pty bash" in line
    # and through plan_warnings, the lines the sweep prints before it starts (resumes too)
    cfg = resolve(dataclasses.replace(SweepConfig(), workloads=("synthetic",), strategies=("ddp",), gpus=(1, 8)),
                  GPU8_ONE_CORE)
    assert any("8 rank(s)" in w and "1 usable CPU" in w for w in describe.plan_warnings(plan(cfg, GPU8_ONE_CORE), cfg,
                                                                                          GPU8_ONE_CORE))


def test_outside_slurm_the_way_out_is_the_containers_cpus_and_a_node_with_enough_cores_is_not_warned_of(no_slurm):
    line = _warnings(dataclasses.replace(GPU8_ONE_CORE, cpu_cores=4), {}, gpus=(1, 8))[0]
    assert "this node has 4 usable CPU core(s)" in line and "docker run --cpus=8" in line and "--cpuset-cpus" in line
    assert _warnings(dataclasses.replace(GPU8_ONE_CORE, cpu_cores=8), {}, gpus=(1, 8)) == []
    assert _warnings(dataclasses.replace(GPU8_ONE_CORE, cpu_cores=4), {}, gpus=(1, 4)) == []
    # a batch script (no step) whose allocation holds too few CPUs a node: allocate more
    batch = slurm.cores_way_out(8, {"SLURM_JOB_ID": "7", "SLURM_JOB_CPUS_PER_NODE": "4"})
    assert batch.startswith("the allocation holds 4 CPU(s) on this node: allocate at least 8 CPUs a node"), batch


def test_a_step_whose_allocation_holds_too_few_cpus_is_told_to_allocate_more():
    said = slurm.cores_way_out(8, {**STEP, "SLURM_JOB_CPUS_PER_NODE": "4(x2)"})
    assert "the allocation holds 4 CPU(s) a node, so allocate at least 8 CPUs a node" in said, said
    assert "srun --nodes=1 --ntasks=1 --cpus-per-task=8 --pty bash" in said


def test_the_login_node_refusal_names_the_shell_step_with_the_nodes_cpus(monkeypatch):
    login = Machine(cuda_devices=0, cpu_cores=8, slurm_nodes=2, slurm_gpus="SLURM_GPUS_PER_NODE=8")
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "96(x2)")
    with pytest.raises(ConfigError) as e:
        resolve(SweepConfig(workloads=("synthetic",)), login)
    assert "(srun --nodes=1 --ntasks=1 --cpus-per-task=96 --pty bash, then ./run_bench.sh)" in str(e.value), str(e.value)
    for name in ("SLURM_JOB_CPUS_PER_NODE", "SLURM_CPUS_ON_NODE", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_PER_GPU"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as e:
        resolve(SweepConfig(workloads=("synthetic",)), login)
    assert "srun --nodes=1 --ntasks=1 --cpus-per-task=N --pty bash (N: the CPUs the allocation holds on a node" in str(e.value)


def _store_with(tmp_path, cores: int, count: int, strategy: str = "ddp", data: str = "synthetic", workers: int = 0):
    from bench.analysis import results
    from bench.shared.spec import RunSpec
    from bench.store import store
    from bench.sweep import record
    from report_fixtures import steps
    conn = store.connect(str(tmp_path / "s.sqlite"))
    env = store.insert_environment(conn, {"hostname": "gpu1", "cpu_cores": cores})
    sid = store.begin_sweep(conn, "cmd", "{}", env)
    spec = RunSpec(workload="synthetic", strategy=strategy, device_type="cuda", device_count=count, per_device_batch=8,
                   global_batch=8 * count, image_size=0, steps=2, warmup=0, threads=1, seed=0, scaling="weak", data=data,
                   num_workers=workers)
    record.record_result(conn, sid, env, spec, "ok", payload={"steps": steps(count, [10.0, 11.0, 10.5])})
    sweep = results.load(conn, sid)
    conn.close()
    return sweep


def test_the_report_warns_where_the_sweeps_own_node_had_fewer_cores_than_a_one_node_configurations_ranks(tmp_path):
    from bench.analysis.nodes import starved_nodes
    sweep = _store_with(tmp_path, cores=1, count=8)
    assert sweep.bench, "the stand-in result must load as a measured configuration"
    warned = starved_nodes(sweep)
    assert len(warned) == 1, warned
    assert warned[0].startswith("the sweep's own node (gpu1) had 1 CPU core(s) for one-node configurations"), warned[0]
    assert "ddp x8 (up to 8 rank(s) that need 8: 8 x (1 torch thread + 0 loader worker(s)))" in warned[0]
    assert "srun --cpus-per-task=N" in warned[0] and "docker run --cpus=N" in warned[0]


@pytest.mark.parametrize("cores, count, data, workers, warned", [
    (8, 8, "synthetic", 0, False),   # a core a rank
    (16, 8, "voc", 2, True),         # 8 ranks x (1 + 2 loader workers) = 24
    (24, 8, "voc", 2, False),
])
def test_the_reports_one_node_rule_counts_a_core_a_rank_and_one_a_loader_worker(tmp_path, cores, count, data, workers,
                                                                                 warned):
    from bench.analysis.nodes import starved_here
    assert bool(starved_here(_store_with(tmp_path, cores, count, data=data, workers=workers))) is warned


def test_a_multi_node_node_with_the_cores_of_the_sweeps_own_node_is_not_starved_by_loader_workers(tmp_path):
    # 8 VOC ranks on a 224-core node get 28 threads each (224 // 8) and 2 loader workers: ranks x (threads + workers)
    # is 240, more than any such node holds. A second node of 224 cores had what the one-node configurations had, so
    # no warning; one of 100 is starved against them and is named with the own node's figure.
    from bench.analysis import results
    from bench.analysis.nodes import starved_nodes
    from bench.shared.spec import RunSpec
    from bench.store import store
    from bench.sweep import record
    conn = store.connect(str(tmp_path / "s.sqlite"))
    env = store.insert_environment(conn, {"hostname": "n1", "cpu_cores": 224})
    sid = store.begin_sweep(conn, "cmd", "{}", env)
    for second in (224, 100):
        spec = RunSpec(workload="deeplabv3", strategy="ddp", device_type="cuda", device_count=16, per_device_batch=8,
                       global_batch=128, image_size=64, steps=2, warmup=0, threads=28, seed=second, scaling="weak",
                       nodes=2, launcher="slurm", data="voc", num_workers=2)
        record.record_result(conn, sid, env, spec, "ok", payload={"nodes": [
            {"node_rank": 0, "hostname": "n1", "cpu_cores": 224}, {"node_rank": 1, "hostname": "n2", "cpu_cores": second}]})
    sweep = results.load(conn, sid)
    conn.close()
    warned = starved_nodes(sweep)
    assert len(warned) == 1, warned
    assert "node 1 (n2) had 100 CPU core(s) for 8 rank(s) that had 224 on the sweep's own node" in warned[0], warned[0]
    assert "would be 240" in warned[0]


def test_a_node_under_the_least_its_ranks_need_is_not_said_to_have_had_more_on_the_own_node(tmp_path):
    # own node 16 cores; 8 VOC ranks of 2 threads and 2 workers need 32, at the least 24 (more than 16): the sentence
    # read "that had 24 on the sweep's own node" beside its own "(... own node ... had 16)"
    from bench.analysis import results
    from bench.analysis.nodes import starved_nodes
    from bench.shared.spec import RunSpec
    from bench.store import store
    from bench.sweep import record
    conn = store.connect(str(tmp_path / "s.sqlite"))
    env = store.insert_environment(conn, {"hostname": "n1", "cpu_cores": 16})
    sid = store.begin_sweep(conn, "cmd", "{}", env)
    spec = RunSpec(workload="deeplabv3", strategy="ddp", device_type="cuda", device_count=16, per_device_batch=8,
                   global_batch=128, image_size=64, steps=2, warmup=0, threads=2, seed=0, scaling="weak",
                   nodes=2, launcher="slurm", data="voc", num_workers=2)
    record.record_result(conn, sid, env, spec, "ok", payload={"nodes": [
        {"node_rank": 0, "hostname": "n1", "cpu_cores": 16}, {"node_rank": 1, "hostname": "n2", "cpu_cores": 12}]})
    sweep = results.load(conn, sid)
    conn.close()
    warned = [w for w in starved_nodes(sweep) if "node 1 (n2)" in w]
    assert len(warned) == 1 and "that need at least 24 (a core each and one per loader worker)" in warned[0], warned
    assert "that had 24" not in warned[0]
