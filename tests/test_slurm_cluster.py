"""The local SLURM test cluster (scripts/slurm_cluster.sh) is a real one: srun spreads tasks over two
slurmd nodes and sbatch runs batch jobs. Skipped where no cluster can be brought up (see slurm_cluster.py)."""
from __future__ import annotations

from slurm_cluster import slurm_cluster  # noqa: F401  (the session fixture)


def test_srun_runs_one_task_on_each_of_two_nodes(slurm_cluster):  # noqa: F811
    r = slurm_cluster.run(["srun", "-N2", "-n2", "--ntasks-per-node=1", "bash", "-c",
                           'echo "$SLURMD_NODENAME $SLURM_NODEID $SLURM_PROCID $SLURM_STEP_ID"'], timeout=60)
    assert r.returncode == 0, r.stderr
    rows = sorted((line.split() for line in r.stdout.splitlines()), key=lambda row: row[1])
    assert len(rows) == 2, r.stdout
    assert rows[0][0] != rows[1][0], f"both tasks on one node: {r.stdout}"
    assert {row[0] for row in rows} <= set(slurm_cluster.nodes)
    assert [row[1] for row in rows] == ["0", "1"]  # SLURM_NODEID
    assert sorted(row[2] for row in rows) == ["0", "1"]  # SLURM_PROCID
    assert all(row[3] == "0" for row in rows)  # one step, the job's first


def test_sbatch_wait_writes_output_in_submit_dir(slurm_cluster, tmp_path):  # noqa: F811
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n"
                      "#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --time=00:02:00\n"
                      'echo "batch on $SLURMD_NODENAME step=${SLURM_STEP_ID:-none}"\n'
                      'srun bash -c \'echo "task $SLURM_PROCID on $SLURMD_NODENAME"\'\n')
    r = slurm_cluster.run(["sbatch", "--wait", "--parsable", script], cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]
    out = (tmp_path / f"slurm-{job_id}.out").read_text()  # default output: the submit directory
    first, second = slurm_cluster.nodes[:2]
    lines = out.splitlines()
    assert f"batch on {first} step=none" in lines, out  # the batch script: first node, outside any step
    assert sorted(ln for ln in lines if ln.startswith("task ")) == [f"task 0 on {first}", f"task 1 on {second}"], out
