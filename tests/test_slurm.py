"""Multi-node sweeps on a real two-node SLURM cluster (scripts/slurm_cluster.sh, on this machine): srun over
the nodes a configuration needs, torchrun's c10d rendezvous through the shared folder, results in the one
store whatever node rank 0 lands on, faults named with their node, nothing left on any node, the batch
script end to end, and the refusals. Skipped, with the reason, where no cluster can be brought up."""
from __future__ import annotations

import glob
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from bench.shared import procs
from slurm_cluster import slurm_cluster  # noqa: F401  (the session fixture)

REPO = Path(__file__).resolve().parents[1]
TINY = ["--device", "cpu", "--repeats", "1", "--workloads", "synthetic", "--synthetic-width", "64", "--synthetic-depth", "2",
        "--per-device-batch", "4", "--steps", "3", "--warmup", "1", "--gpus-per-node", "1", "--no-interference", "--no-report"]


def bench(cluster, alloc: list, args: list, tmp: Path, env: dict | None = None, timeout: float = 400):
    """`salloc ALLOC python -m bench ARGS` from the repository, as a user in an allocation would run it."""
    return cluster.run(["salloc", *alloc, sys.executable, "-m", "bench", *args], cwd=REPO, timeout=timeout,
                       env={"TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1", **(env or {})})


def rows(path: str, sql: str) -> list:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def leftovers(store_dir: Path) -> list:
    """Processes of this store's runs, on any node (the nodes are this machine), and SLURM steps still there."""
    return procs.worker_pids(str(store_dir / ".bench-runs"))


def no_steps(cluster, but: str = "") -> bool:
    """No SLURM step is left on the cluster, the batch job's apart (BUT, its job id: it runs beside this file's
    tests)."""
    steps = cluster.run(["squeue", "--steps", "--noheader", "--format", "%i"], timeout=30).stdout.split()
    return [st for st in steps if not (but and st.startswith(f"{but}."))] == []


@dataclass
class BatchJob:
    proc: Optional[subprocess.Popen]   # `sbatch --wait`: ends with the job, its exit status the job's (None: not run)
    job: str                           # the job id sbatch printed when it submitted it
    submit: Path                       # the folder it was submitted from: its output file and results land there


BATCH_TEST = "test_the_batch_script_runs_a_whole_sweep_through_srun_and_torchrun_into_the_submit_folder"


@pytest.fixture(scope="module", autouse=True)
def batch_job(slurm_cluster, tmp_path_factory, request):  # noqa: F811
    """The batch script's job (the last test reads it), submitted when this file's first test starts, so that its
    sweep runs beside the other tests instead of after them: about 40 s, most of it SLURM's polls and the sweep's own
    processes, which the others' waits on their faults leave room for. The cluster's nodes advertise the machine's
    cores each, and every job here asks one CPU a node, so the tests' own allocations are granted beside it."""
    tmp = tmp_path_factory.mktemp("batch")
    submit = tmp / "submit"
    submit.mkdir()
    if not any(item.name == BATCH_TEST for item in request.session.items):   # deselected (-k): nothing to submit
        yield BatchJob(None, "", submit)
        return
    # One job does what a user's would: every strategy on one and two nodes (HSDP across them: replicate 2 x shard 1),
    # the collectives on two, the report.
    proc = subprocess.Popen(["sbatch", "--wait", "--parsable", "--gpus-per-node=0", "--cpus-per-task=1",
                             str(REPO / "slurm" / "bench.sbatch"), *TINY[:-1], "--strategies", "single,dp,ddp,hsdp"],
                            cwd=submit, env={**slurm_cluster.env, "BENCH_REPO": str(REPO), "TMPDIR": str(tmp)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = proc.stdout.readline().strip().split(";")[0]  # --parsable: the id, printed on submission
    try:
        yield BatchJob(proc, job, submit)
    finally:
        if proc.poll() is None:
            if job:
                slurm_cluster.run(["scancel", job], timeout=30)
            proc.kill()
            proc.wait()


@pytest.mark.timeout(600)
def test_a_rank_killed_on_one_node_is_named_with_its_node_and_nothing_is_left_anywhere(slurm_cluster, tmp_path, batch_job):  # noqa: F811
    store = tmp_path / "results" / "bench.sqlite"
    t0 = time.monotonic()
    p = bench(slurm_cluster, ["-N2", "--cpus-per-task=1"], TINY + ["--nodes", "2", "--strategies", "ddp", "--no-comm-bench",
                                                                    "--pg-timeout", "30", "--store", str(store)],
              tmp_path, env={"BENCH_FAULT": "sigkill@1:2"})
    assert p.returncode == 1, p.stdout + p.stderr
    (r,) = rows(str(store), "SELECT * FROM results")
    assert r["status"] == "failed" and r["failed_rank"] == 1, r["reason"]
    assert re.search(r"rank 1 .*(killed by signal 9|SIGKILL)|rank 1: killed by signal 9", r["reason"]) or \
        "rank 1" in r["reason"], r["reason"]
    assert time.monotonic() - t0 < 200
    assert leftovers(tmp_path / "results") == [] and no_steps(slurm_cluster, but=batch_job.job)


@pytest.mark.timeout(600)
def test_a_stalled_rank_on_one_node_is_named_with_the_node_and_nothing_listens_beyond_loopback(slurm_cluster, tmp_path,
                                                                                                 batch_job):  # noqa: F811
    store = tmp_path / "results" / "bench.sqlite"
    proc = subprocess.Popen(["salloc", "-N2", "--cpus-per-task=1", sys.executable, "-m", "bench", *TINY, "--nodes", "2",
                             "--strategies", "ddp", "--no-comm-bench", "--pg-timeout", "6", "--store", str(store)],
                            cwd=REPO, env={**slurm_cluster.env, "TMPDIR": str(tmp_path), "BENCH_FAULT": "hang@1:2"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        runs = tmp_path / "results" / ".bench-runs"
        deadline = time.monotonic() + 120
        pids = []
        while time.monotonic() < deadline and len(pids) < 4:  # two torchrun agents and two workers
            time.sleep(0.5)
            pids = [p for p in procs.worker_pids(str(runs)) if b"srun" not in Path(f"/proc/{p}/cmdline").read_bytes()]
        time.sleep(3)
        listening = listeners(procs.worker_pids(str(runs)))
        assert listening, "no listening socket found: the check would prove nothing"
        assert all(a.startswith("127.") or a == "::1" for a in listening), listening
        out, _ = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    (r,) = rows(str(store), "SELECT * FROM results")
    assert r["status"] == "failed" and r["failed_rank"] == 1 and r["reason"].startswith("stalled: rank 1"), r["reason"]
    assert re.search(r" on n[12]", r["reason"]), r["reason"]  # the node, from its heartbeat
    assert leftovers(tmp_path / "results") == [] and no_steps(slurm_cluster, but=batch_job.job)


def listeners(pids: list) -> list:
    """Local addresses the processes listen on (TCP, IPv4 and IPv6), from /proc."""
    inodes = set()
    for pid in pids:
        for fd in glob.glob(f"/proc/{pid}/fd/*"):
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    out = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                    out.append(_address(parts[1].split(":")[0], v6))
    return out


def _address(hexaddr: str, v6: bool) -> str:
    import ipaddress
    raw = bytes.fromhex(hexaddr)
    if not v6:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    a = ipaddress.IPv6Address(words)
    return str(a.ipv4_mapped) if a.ipv4_mapped else str(a)


@pytest.mark.timeout(300)
def test_a_sweep_started_as_several_slurm_tasks_refuses(slurm_cluster, tmp_path):  # noqa: F811
    p = slurm_cluster.run(["srun", "-N2", "-n2", sys.executable, "-m", "bench", *TINY, "--store", str(tmp_path / "s.sqlite")],
                          cwd=REPO, timeout=200, env={"TMPDIR": str(tmp_path)})
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.count("started as task") == 2 and "without srun" in p.stderr
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.timeout(300)
def test_an_allocation_too_small_for_the_node_count_is_exit_2_before_anything_runs(slurm_cluster, tmp_path):  # noqa: F811
    p = bench(slurm_cluster, ["-N1"], TINY + ["--nodes", "1,2", "--store", str(tmp_path / "s.sqlite")], tmp_path, timeout=200)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "2 nodes needed" in p.stderr and "this SLURM allocation has 1 node(s)" in p.stderr
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.timeout(600)
def test_the_batch_script_runs_a_whole_sweep_through_srun_and_torchrun_into_the_submit_folder(slurm_cluster, batch_job):  # noqa: F811
    # Last in this file: it reads the job `batch_job` submitted at the file's first test.
    _, err = batch_job.proc.communicate(timeout=500)
    submit, job = batch_job.submit, batch_job.job
    out = (submit / f"ddp-bench-{job}.out").read_text() if job else ""
    assert batch_job.proc.returncode == 0, err + out
    store = str(submit / "results" / "bench.sqlite")
    got = {(r["mode"], r["strategy"], r["device_count"]): r for r in rows(store, "SELECT * FROM results")}
    ddp2 = got[("bench", "ddp", 2)]
    assert ddp2["status"] == "ok" and ddp2["nodes"] == 2 and ddp2["launcher"] == "slurm", out
    assert got[("bench", "ddp", 1)]["launcher"] == "local" and got[("bench", "ddp", 1)]["status"] == "ok"
    assert got[("bench", "single", 1)]["status"] == "ok"
    dp2 = got[("bench", "dp", 2)]
    assert dp2["status"] == "skipped" and "one process on one node" in dp2["reason"]
    nodes = rows(store, f"SELECT * FROM nodes WHERE result_id = {ddp2['result_id']} ORDER BY node_rank")
    assert [n["node_rank"] for n in nodes] == [0, 1] and {n["hostname"] for n in nodes} == set(slurm_cluster.nodes)
    assert all(json.loads(n["env_json"])["torch"] for n in nodes)  # each node's environment
    windows = rows(store, f"SELECT * FROM windows WHERE result_id = {ddp2['result_id']} AND kind = 'measure'")
    assert sorted(w["rank"] for w in windows) == [0, 1]  # both ranks' rows reached the store
    hsdp2, hsdp1 = got[("bench", "hsdp", 2)], got[("bench", "hsdp", 1)]
    assert hsdp2["status"] == "ok" and hsdp2["nodes"] == 2 and hsdp2["launcher"] == "slurm", out
    mesh = json.loads(hsdp2["details_json"])["strategy_settings"]
    assert mesh["mesh"] == "replicate 2 x shard 1" and "note" not in mesh  # a shard group per node, replicated across
    one_group = json.loads(hsdp1["details_json"])["strategy_settings"]["note"]  # one node: FSDP's sharding, HSDP's mesh
    assert one_group.startswith("replicate 1: one shard group") and "not FSDP" in one_group
    state = rows(store, f"SELECT * FROM memory WHERE result_id = {hsdp2['result_id']} ORDER BY rank")
    whole = rows(store, f"SELECT params_mib FROM memory WHERE result_id = {ddp2['result_id']}")[0]["params_mib"]
    assert [m["params_mib"] for m in state] == [pytest.approx(whole)] * 2  # shard 1: each node holds it all
    comm = got[("comm", "comm", 2)]
    assert comm["status"] == "ok" and comm["nodes"] == 2
    sweep = rows(store, "SELECT * FROM sweeps")[0]
    assert sweep["status"] == "completed" and "--nodes 1,2" in sweep["command_line"]
    assert (submit / "results" / "report.html").is_file() and (submit / "results" / "report.md").is_file()
    assert glob.glob(str(submit / "plots" / "synthetic_*.png"))
    assert leftovers(submit / "results") == [] and no_steps(slurm_cluster)
