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

The sweep's own node, where every one-node configuration ran, is judged by the same rule at one torch thread a
process (`least_cores`): its threads per process were cut from these very cores (bench.sweep.resolve: cores //
ranks), so above one they are a share of the cores, never more than them; what its ranks cannot do without is a core
each and one per loader worker. With fewer (a bare `srun --pty bash` step holds one CPU; a container's cpuset), the
one-node figures measure the confinement, and a 1 -> 2 node step, whose srun steps get each node's CPUs, reads
faster than it is. bench.sweep.describe warns of it before the sweep, by `least_cores` too.
"""
from __future__ import annotations

import json

from bench.shared.spec import PER_DEVICE

WAY_OUT = ("give the sweep's process the node's CPUs: in a SLURM step, srun --cpus-per-task=N (srun inherits none from "
           "salloc/sbatch since Slurm 22.05); in a container, docker run --cpus=N or a --cpuset-cpus of N cores")


def least_cores(ranks: int, workers: int) -> int:
    """The cores a node's ranks need at the least: a core each for its torch thread, and one per loader worker
    (`workers` a rank) -- the multi-node rule's ranks x (threads + workers) at one thread."""
    return ranks * (1 + workers)


def starved_nodes(sweep) -> list:
    """Sentences naming the sweep's own node where its recorded cores were fewer than a one-node configuration's ranks
    need (`starved_here`), then each node of a multi-node result whose recorded cores are fewer than its ranks need."""
    out = starved_here(sweep)
    here = next((e.get("cpu_cores") for e in sweep.envs if e.get("cpu_cores")), None)
    for r, nodes in sweep.nodes:
        spec = json.loads(r.get("spec_json") or "{}")
        ranks = int(r["device_count"]) // max(1, int(r.get("nodes") or 1))
        threads = max(1, int(r.get("threads_per_process") or spec.get("threads") or 1))
        workers = int(spec.get("num_workers") or 0) if spec.get("data") == "voc" and r["mode"] != "comm" else 0
        need = ranks * (threads + workers)
        # The sweep's own node is the fair measure where it held fewer: its threads were cut from its cores without
        # counting loader workers (a 224-core node, 8 ranks of 28 threads and 2 workers "needs" 240), and a node with
        # as many cores as the one-node configurations had is not starved against them.
        fair = max(least_cores(ranks, workers), min(need, int(here))) if here else need
        for n in nodes:
            cores = n.get("cpu_cores")
            if cores and int(cores) < fair:
                each = f"{ranks} x ({threads} torch thread(s) + {workers} loader worker(s))"
                if fair == need:
                    why = f"that need {need} ({each})"
                elif fair > int(here):
                    why = f"that need at least {fair} (a core each and one per loader worker)"
                else:
                    why = f"that had {fair} on the sweep's own node ({each} would be {need})"
                out.append(f"{r['config_key']}: node {n['node_rank']} ({n.get('hostname') or '?'}) had {cores} CPU core(s) "
                           f"for {ranks} rank(s) {why}: its ranks shared cores, so this figure measures the launcher's "
                           f"confinement as much as the network" + (f" (the sweep's own node, where the one-node configurations ran, "
                                                     f"had {here})" if here else "")
                           + ". Allocate more CPUs per node (--cpus-per-task with --ntasks-per-node, --cpus-per-gpu, or "
                           "--exclusive): each srun step is given its node's CPUs in the allocation")
    return out


def starved_here(sweep) -> list:
    """One sentence per environment of the sweep (its own node; a resume elsewhere records another) whose cores were
    fewer than the ranks of a one-node configuration measured under it need (`least_cores`)."""
    out = []
    for env in sweep.envs:
        cores, keys = env.get("cpu_cores"), set(sweep.env_results.get(env.get("env_id"), ()))
        if not cores:
            continue
        short = {}   # 'ddp x8' -> (need, ranks, loader workers a rank)
        for c in (c for cs in sweep.bench.values() for c in cs if c.nodes <= 1 and c.key in keys):
            ranks = c.device_count if c.strategy in PER_DEVICE else 1
            workers = (c.loader_workers or 0) // ranks if c.data == "voc" else 0
            need = least_cores(ranks, workers)
            if int(cores) < need:
                short.setdefault(f"{c.strategy} x{c.device_count}", (need, ranks, workers))
        if not short:
            continue
        need, ranks, workers = max(short.values())
        out.append(f"the sweep's own node ({env.get('hostname') or '?'}) had {cores} CPU core(s) for one-node "
                   f"configurations whose ranks need more: {', '.join(sorted(short, key=lambda k: -short[k][0]))} (up to "
                   f"{ranks} rank(s) that need {need}: {ranks} x (1 torch thread + {workers} loader worker(s))). Their "
                   "ranks shared cores, so these figures measure that confinement as much as the strategy, and a 1 -> 2 "
                   f"node step, whose srun steps get each node's CPUs, reads faster than it is. Next time {WAY_OUT}")
    return out
