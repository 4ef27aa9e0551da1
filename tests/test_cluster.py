"""What a first SLURM cluster meets, held offline: a login node inside a GPU allocation, srun's CPUs per task, the
shared folder's locks across nodes. Stand-ins: SLURM's environment variables, a fake `srun` on PATH that runs its
command once per "node" on this machine (recording its arguments), fake node answers. The real two-node cluster's
tests are tests/test_slurm.py."""
from __future__ import annotations

import dataclasses

import pytest

from bench.config import ConfigError, SweepConfig
from bench.sweep import slurm
from bench.sweep.plan import Machine
from bench.sweep.resolve import resolve

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


def fake_srun(folder, script: str) -> str:
    """A `srun` on PATH: bash SCRIPT with srun's arguments; returns the folder to put first on PATH."""
    folder.mkdir(exist_ok=True)
    path = folder / "srun"
    path.write_text("#!/bin/bash\n" + script)
    path.chmod(0o755)
    return str(folder)


def srun_in_allocation(tmp_path, monkeypatch, script: str, env: dict) -> None:
    """`fake_srun(script)` first on PATH, inside an allocation whose SLURM_/SRUN_ variables are exactly `env`."""
    import os
    monkeypatch.setenv("PATH", fake_srun(tmp_path / "bin", script) + os.pathsep + os.environ["PATH"])
    for name in [v for v in os.environ if v.startswith(("SLURM_", "SRUN_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_each_multi_node_step_gets_its_nodes_cpus_which_srun_no_longer_inherits(tmp_path, monkeypatch):
    from bench.shared.spec import RunSpec
    from bench.sweep.launch import Limits, run_config
    calls = tmp_path / "srun-args"
    srun_in_allocation(tmp_path, monkeypatch, f'printf "%s\\n" "$@" > {calls}\nexit 1\n',
                       {"SLURM_JOB_CPUS_PER_NODE": "96(x2)",   # salloc -N2 --ntasks-per-node=8 --cpus-per-task=12
                        "SLURM_CPUS_PER_TASK": "12"})
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "8")
    spec = RunSpec(workload="synthetic", strategy="ddp", device_type="cpu", device_count=2, per_device_batch=4,
                   global_batch=8, image_size=0, steps=2, warmup=0, threads=1, seed=0, scaling="weak", nodes=2,
                   launcher="slurm", pg_timeout_s=30.0)
    out = run_config(spec, Limits(fixed_s=60.0), shared_dir=str(tmp_path / "runs"))
    args = calls.read_text().split()
    assert out.status == "failed" and args[:4] == ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=96"]


# The allocation's shape, as salloc/sbatch set SLURM's variables for it, and the --cpus-per-task each step's one task
# per node (torchrun, all of the node's ranks) needs: the node's CPUs in the allocation, never one rank's figure.
NODE_CPUS = [
    ({"SLURM_JOB_CPUS_PER_NODE": "96(x2)", "SLURM_CPUS_PER_TASK": "12", "SLURM_NTASKS_PER_NODE": "8",
      "SLURM_TASKS_PER_NODE": "8(x2)", "SRUN_CPUS_PER_TASK": "12"}, 96),      # --ntasks-per-node=8 --cpus-per-task=12
    ({"SLURM_CPUS_PER_TASK": "12", "SLURM_NTASKS_PER_NODE": "8"}, 96),       # the same, no per-node count
    ({"SLURM_CPUS_PER_TASK": "12", "SLURM_TASKS_PER_NODE": "8(x2)"}, 96),    # tasks per node from the layout
    ({"SLURM_CPUS_PER_TASK": "32"}, 32),                                    # one task per node
    ({"SLURM_JOB_CPUS_PER_NODE": "96(x2)", "SLURM_CPUS_PER_GPU": "12", "SLURM_GPUS_PER_NODE": "h100:8"}, 96),
    ({"SLURM_CPUS_PER_GPU": "12", "SLURM_GPUS_PER_NODE": "h100:8"}, 96),     # --gpus-per-node=h100:8 --cpus-per-gpu=12
    ({"SLURM_CPUS_PER_GPU": "12", "SLURM_GPUS_ON_NODE": "4"}, 48),
    ({"SLURM_JOB_CPUS_PER_NODE": "128(x4)", "SLURM_TASKS_PER_NODE": "1(x4)"}, 128),   # --exclusive: whole nodes
    ({"SLURM_CPUS_ON_NODE": "64"}, 64),                                     # the batch step's node only
    ({"SLURM_JOB_CPUS_PER_NODE": "96(x2),48", "SLURM_CPUS_ON_NODE": "96"}, 48),   # unequal nodes: the smallest
    ({"SLURM_JOB_CPUS_PER_NODE": "72,36(x3)"}, 36),
]


@pytest.mark.parametrize("env, cpus", NODE_CPUS)
def test_a_multi_node_step_asks_srun_for_the_nodes_cpus_in_every_allocation_shape(env, cpus):
    assert slurm.cpus_per_task({"SLURM_JOB_ID": "42", **env}) == [f"--cpus-per-task={cpus}"]


@pytest.mark.parametrize("env", [{}, {"SRUN_CPUS_PER_TASK": "8"}, {"SLURM_JOB_CPUS_PER_NODE": "garbled"},
                                 {"SLURM_CPUS_PER_GPU": "12"}])   # no GPUs said: nothing to multiply
def test_a_multi_node_step_passes_no_cpus_where_no_variable_says_the_nodes(env):
    assert slurm.cpus_per_task({"SLURM_JOB_ID": "42", **env}) == []


def test_slurms_per_node_counts_are_read_in_their_compressed_form():
    assert slurm.per_node_counts("96(x2),48") == [96, 96, 48]
    assert slurm.per_node_counts("8") == [8]
    assert slurm.per_node_counts("") == [] and slurm.per_node_counts("96(x2") == []


def test_an_allocation_made_with_cpus_per_gpu_runs_the_step_without_it_beside_cpus_per_task(tmp_path, monkeypatch):
    # srun reads SLURM_CPUS_PER_GPU as its own --cpus-per-gpu, which it refuses beside --cpus-per-task on one line
    import subprocess
    from bench.shared.spec import RunSpec
    calls = tmp_path / "srun-args"
    srun_in_allocation(tmp_path, monkeypatch, f'echo "${{SLURM_CPUS_PER_GPU-unset}} $*" > {calls}\n',
                       {"SLURM_JOB_ID": "42", "SLURM_CPUS_PER_GPU": "12", "SLURM_GPUS_PER_NODE": "8",
                        "SLURM_JOB_CPUS_PER_NODE": "96(x2)"})   # salloc -N2 --gpus-per-node=8 --cpus-per-gpu=12
    spec = RunSpec(workload="synthetic", strategy="ddp", device_type="cuda", device_count=16, per_device_batch=4,
                   global_batch=64, image_size=0, steps=2, warmup=0, threads=1, seed=0, scaling="weak", nodes=2,
                   launcher="slurm", out_dir=str(tmp_path))
    subprocess.run(slurm.command(spec, "spec.json", [], "bench.rank.worker", "bench.sweep.torchrun"), check=True)
    seen = calls.read_text().split()
    assert seen[0] == "unset" and "--cpus-per-task=96" in seen
    assert slurm.inherited_unsets({"SLURM_CPUS_PER_TASK": "12"}) == []


def test_a_step_sheds_the_allocations_per_task_gpus_and_overlaps_the_shell_step_it_runs_in(tmp_path, monkeypatch):
    # sbatch -N2 --ntasks-per-node=8 --gpus-per-task=1, the sweep run from `srun --pty bash` (step 0): srun read the
    # per-task GPUs as its own (the one task per node, torchrun with 8 ranks, got ONE GPU: local ranks 1-7 'invalid
    # device ordinal'), and without --overlap the step waited behind the shell's step ('Requested nodes are busy').
    import subprocess
    from bench.shared.spec import RunSpec
    calls = tmp_path / "srun-args"
    srun_in_allocation(tmp_path, monkeypatch,
                       f'echo "${{SLURM_GPUS_PER_TASK-unset}} ${{SLURM_GPU_BIND-unset}} ${{SLURM_TRES_PER_TASK-unset}} $*" > {calls}\n',
                       {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_GPUS_PER_TASK": "1",
                        "SLURM_GPU_BIND": "per_task:1", "SLURM_TRES_PER_TASK": "cpu=12,gres/gpu=1",
                        "SLURM_JOB_CPUS_PER_NODE": "96(x2)"})
    spec = RunSpec(workload="synthetic", strategy="ddp", device_type="cuda", device_count=16, per_device_batch=4,
                   global_batch=64, image_size=0, steps=2, warmup=0, threads=1, seed=0, scaling="weak", nodes=2,
                   launcher="slurm", out_dir=str(tmp_path))
    subprocess.run(slurm.command(spec, "spec.json", [], "bench.rank.worker", "bench.sweep.torchrun"), check=True)
    seen = calls.read_text().split()
    assert seen[:3] == ["unset", "unset", "unset"] and "--overlap" in seen and "--cpus-per-task=96" in seen, seen
    assert slurm.overlap({"SLURM_STEP_ID": "batch"}) == [] and slurm.overlap({}) == []   # a batch script: no shell step


def test_a_rank_without_a_gpu_of_its_own_says_why_not_invalid_device_ordinal():
    from bench.rank import worker
    assert worker.own_gpu(3, 8) == 3
    with pytest.raises(RuntimeError, match=r"local rank 3 has no GPU of its own: this process sees 1 GPU\(s\).*"
                                           r"--gpus-per-task"):
        worker.own_gpu(3, 1)


def test_the_shared_folder_check_blames_the_store_only_where_a_node_could_not_open_it(tmp_path, monkeypatch):
    # srun itself failed (the step could not start, this Python absent on node 2): no node said 'missing', so the
    # message is srun's failure, not 'put --store on a shared filesystem'
    import os
    bin_dir = fake_srun(tmp_path / "bin", 'echo "srun: error: n2: task 1: execve(): /venv/bin/python: No such file" >&2\n'
                                          "exit 1\n")
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ["PATH"])
    with pytest.raises(ConfigError) as e:
        slurm.check_shared_folder(str(tmp_path / "results"), 2)
    msg = str(e.value)
    assert msg.startswith("could not run a step on all 2 nodes") and "execve(): /venv/bin/python: No such file" in msg
    assert "put --store on a shared filesystem" not in msg


def test_the_report_warns_where_a_nodes_cores_were_fewer_than_its_ranks_need(tmp_path):
    from bench.analysis import results
    from bench.report import report
    from bench.shared.spec import RunSpec
    from bench.store import store
    from bench.sweep import record
    conn = store.connect(str(tmp_path / "s.sqlite"))
    env = store.insert_environment(conn, {"hostname": "n1", "cpu_cores": 32})
    sid = store.begin_sweep(conn, "cmd", "{}", env)
    spec = RunSpec(workload="synthetic", strategy="ddp", device_type="cuda", device_count=16, per_device_batch=8,
                   global_batch=128, image_size=0, steps=2, warmup=0, threads=4, seed=0, scaling="weak", nodes=2,
                   launcher="slurm")
    # node 0's task kept its 32 cores, node 1's srun task got 1 (no --cpus-per-task): 8 ranks x 4 threads need 32
    record.record_result(conn, sid, env, spec, "ok", payload={"nodes": [
        {"node_rank": 0, "hostname": "n1", "cpu_cores": 32}, {"node_rank": 1, "hostname": "n2", "cpu_cores": 1}]})
    sweep = results.load(conn, sid)
    conn.close()
    warned = [b[1] for b in report.blocks(sweep, {}) if b[0] == "p" and b[1].startswith("Warning:")]
    assert len(warned) == 1, warned
    assert "node 1 (n2) had 1 CPU core(s) for 8 rank(s) that need 32 (8 x (4 torch thread(s) + 0 loader worker(s)))" in warned[0]
    assert "had 32)" in warned[0] and "--cpus-per-task" in warned[0]


NODES_SRUN = r"""nodes=1; cmd=()
for a in "$@"; do
  if [ ${#cmd[@]} -eq 0 ] && [[ "$a" == --* ]]; then [[ "$a" == --nodes=* ]] && nodes=${a#--nodes=}; continue; fi
  cmd+=("$a")
done
last=$((${#cmd[@]} - 1)); token="${cmd[$last]}"
for i in $(seq 1 "$nodes"); do
  path="$token"
  if [ "$i" -gt 1 ]; then NODE_PATH; fi
  SLURMD_NODENAME=n$i "${cmd[@]:0:$last}" "$path"
done
"""


@pytest.mark.parametrize("node2, expected", [
    (":", None),                                                       # one shared filesystem, locks shared: passes
    ('cp "$token" "$token.n$i"; path="$token.n$i"', "are not shared across nodes: node(s) n2 took the lock this node holds"),
    ('path="$token.nowhere"', "is not visible from all 2 nodes of the allocation (node(s) n2 cannot open it)"),
])
def test_the_shared_folder_check_needs_every_node_to_see_it_and_share_its_locks(node2, expected, tmp_path, monkeypatch):
    # node 2's view through a fake srun: the same file (the lock the sweep holds is seen), a copy of it (a lock local
    # to each node: Lustre's localflock, where torch's FileStore rendezvous corrupts silently), or nothing
    import os
    bin_dir = fake_srun(tmp_path / "bin", NODES_SRUN.replace("NODE_PATH", node2))
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ["PATH"])
    folder = str(tmp_path / "results")
    if expected is None:
        slurm.check_shared_folder(folder, 2)
    else:
        with pytest.raises(ConfigError) as e:
            slurm.check_shared_folder(folder, 2)
        assert expected in str(e.value), str(e.value)
        if "locks" in expected:
            assert "flock(2)" in str(e.value) and "-o localflock locks within one node only" in str(e.value)
    assert not [n for n in os.listdir(folder) if n.startswith(".bench-shared-") and not n.endswith(".n2")]  # token gone


def test_a_folder_without_file_locks_is_refused_naming_the_mount_option(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")   # Lustre mounted without -o flock
    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.raises(ConfigError) as e:
        slurm.check_shared_folder(str(tmp_path / "results"), 2)
    msg = str(e.value)
    assert "gives no file locks here (Function not implemented)" in msg and "Lustre: -o flock" in msg
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/sda1 / ext4 rw 0 0\n10.0.0.1@tcp:/fs /lustre lustre rw,localflock 0 0\n")
    assert slurm.mount_of("/lustre/home/me/results", str(mounts)) == "lustre at /lustre (options rw,localflock)"
    assert slurm.mount_of("/home/me", str(mounts)) == "ext4 at / (options rw)"
