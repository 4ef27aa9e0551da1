"""The nodes of multi-node runs: each node's measured cores against what the ranks it ran need.

    warnings = starved_nodes(sweep)      # one sentence per node that had fewer cores than its ranks need

Each node's local rank 0 records the node's environment (bench.machine.env.capture): `cpu_cores` is the CPUs that
process could run on, as its srun step confined it. The ranks on a node need at least

    ranks on the node x (torch threads per process + loader workers per process)

cores: the budget the sweep gave every configuration (threads_per_process is the sweep's node's cores shared by
its ranks). With fewer, ranks share cores, and a 1 -> 2 node step measures the launcher's confinement as much as
the network. bench.sweep.slurm gives each srun step's one task per node the node's CPUs in the allocation (srun
inherits no --cpus-per-task since Slurm 22.05); fewer remain where the allocation itself holds fewer, or where no
SLURM variable said how many it holds.
"""
from __future__ import annotations

import json


def starved_nodes(sweep) -> list:
    """Sentences naming each node of a multi-node result whose recorded cores are fewer than its ranks need."""
    out = []
    here = next((e.get("cpu_cores") for e in sweep.envs if e.get("cpu_cores")), None)
    for r, nodes in sweep.nodes:
        spec = json.loads(r.get("spec_json") or "{}")
        ranks = int(r["device_count"]) // max(1, int(r.get("nodes") or 1))
        threads = max(1, int(r.get("threads_per_process") or spec.get("threads") or 1))
        workers = int(spec.get("num_workers") or 0) if spec.get("data") == "voc" and r["mode"] != "comm" else 0
        need = ranks * (threads + workers)
        for n in nodes:
            cores = n.get("cpu_cores")
            if cores and int(cores) < need:
                out.append(f"{r['config_key']}: node {n['node_rank']} ({n.get('hostname') or '?'}) had {cores} CPU core(s) "
                           f"for {ranks} rank(s) that need {need} ({ranks} x ({threads} torch thread(s) + {workers} loader "
                           f"worker(s))): its ranks shared cores, so this figure measures the launcher's confinement as "
                           f"much as the network" + (f" (the sweep's own node, where the one-node configurations ran, "
                                                     f"had {here})" if here else "")
                           + ". Allocate more CPUs per node (--cpus-per-task with --ntasks-per-node, --cpus-per-gpu, or "
                           "--exclusive): each srun step is given its node's CPUs in the allocation")
    return out
