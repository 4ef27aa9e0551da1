"""The local SLURM test cluster (scripts/slurm_cluster.sh) is a real one: srun spreads tasks over two
slurmd nodes (sbatch running a whole sweep as a batch job, its output in the submit folder: tests/test_slurm.py).
Skipped where no cluster can be brought up (see slurm_cluster.py)."""
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
