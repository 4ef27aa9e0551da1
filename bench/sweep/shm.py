"""The shared-memory budget of a configuration, checked before a sweep starts: what /dev/shm must hold on one node.

Two things keep data there. DataLoader workers (`--data voc` with workers) hand every batch to their process
through /dev/shm: each worker keeps up to PREFETCH_FACTOR batches, every process of a configuration on a node has
its own workers. A container's default /dev/shm (64 MiB in Docker) holds far less than DataParallel x8's 16 workers
x 2 DeepLabV3 batches (~2.7 GB): the run would die with a bus error mid-epoch.

    loader_bytes = processes per node x workers per process x PREFETCH_FACTOR x bytes of one loader batch

And NCCL, in every configuration of several processes on a node (DDP, ZeRO, FSDP, HSDP, the collectives): each rank
creates a shared-memory segment for its connection to another rank of the node, at initialisation. Sizes reported:
9,637,888 bytes per segment (nccl#342, NCCL 2.7, 4 GPUs; nccl#1518, 2024: 64 MB fails at 4 ranks, works at 2) and
7,340,384 (torchtitan#853: NCCL 2.21.5 on 8x H100 died at init with a 16 MB /dev/shm). Counted here with the latter,
per rank, per other rank of its node, per NCCL process group the configuration connects:

    nccl_bytes = ranks per node x other ranks of the node in each group (summed) x NCCL_SEGMENT_BYTES

DDP x8 on one node: 8 x 7 x 7.0 MiB = 392 MiB, x4: 84 MiB, x2: 14 MiB: Docker's 64 MiB fails from x4 on, as reported,
while DataParallel (one process) runs, and the report would show DP scaling and no DDP. gloo on the CPU keeps nothing
there (2 ranks all-reducing and all-gathering 16 MiB left /dev/shm empty, torch 2.14), and NCCL_SHM_DISABLE=1 turns
NCCL's segments off. Only this node's /dev/shm is read (across nodes, each node's own is assumed alike).

The sweep adds up the largest configuration's need and refuses (exit 2) with the numbers and the way out (a
--num-workers that fits; --shm-size / --ipc=host; NCCL_SHM_DISABLE=1; the counts that fit) when /dev/shm has less free.
"""
from __future__ import annotations

import os
from typing import Optional

from bench.workloads.voc import PREFETCH_FACTOR
from bench.workloads.workload import chunks_fed

SHM_PATH = "/dev/shm"


def free_bytes(path: str = SHM_PATH) -> Optional[int]:
    """Free bytes of the shared-memory filesystem; None where there is none (macOS)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def batch_bytes(spec) -> int:
    """One loader batch of this process: float32 images [3,S,S] and uint8 masks [S,S] per sample."""
    samples = len(chunks_fed(spec, 0)) * spec.per_device_batch
    return samples * spec.image_size ** 2 * (3 * 4 + 1)


def need_bytes(spec, workers: Optional[int] = None) -> int:
    """/dev/shm one node holds for this configuration's prefetched batches at `workers` per process."""
    per_node = max(1, spec.processes // max(1, spec.nodes))
    return per_node * (spec.num_workers if workers is None else workers) * PREFETCH_FACTOR * batch_bytes(spec)


NCCL_SEGMENT_BYTES = 7_340_384   # one NCCL shared-memory segment per connection to a rank of the node (torchtitan#853)
NCCL_GROUPS_AS_WORLD = ("ddp", "zero", "fsdp")   # NCCL connects them in the default group only (FSDP: a 1-D mesh of it)


def nccl_peers(spec) -> list:
    """[(process group, other ranks of the node in it)] NCCL connects a rank of this configuration to; [] without
    NCCL (the CPU, one process, DataParallel's one process)."""
    if spec.device_type != "cuda" or spec.processes < 2 or (spec.strategy not in NCCL_GROUPS_AS_WORLD + ("hsdp", "comm")):
        return []
    per_node = max(1, spec.processes // max(1, spec.nodes))
    groups = [("the default group", per_node - 1)]
    if spec.strategy == "hsdp":  # the 2-D mesh's own groups: its shard groups and the replicas across them
        shard = int(spec.option("shard_size") or spec.device_count)
        groups += [("HSDP's shard group", min(shard, per_node) - 1), ("HSDP's replicate group", max(1, per_node // shard) - 1)]
    if spec.mode == "comm" and spec.nodes > 1:
        groups.append(("the within-node group", per_node - 1))
    if spec.mode == "comm" and spec.interference:
        groups.append(("the interference stage's group", per_node - 1))
    return [(g, n) for g, n in groups if n > 0]


def nccl_bytes(spec, env=None) -> int:
    """/dev/shm NCCL's segments take on one node for this configuration (0 with NCCL_SHM_DISABLE=1)."""
    if (os.environ if env is None else env).get("NCCL_SHM_DISABLE", "0") not in ("", "0"):
        return 0
    per_node = max(1, spec.processes // max(1, spec.nodes))
    return per_node * sum(n for _, n in nccl_peers(spec)) * NCCL_SEGMENT_BYTES


def _loader_bytes(spec) -> int:
    return need_bytes(spec) if spec.data == "voc" and spec.num_workers > 0 else 0


def check(specs: list, free: Optional[int], num_workers: int, env=None) -> None:
    """Raise ConfigError when a configuration's prefetched batches and NCCL's segments cannot fit in `free` bytes of
    /dev/shm. num_workers: --num-workers (a process's workers are a multiple of it: DataParallel's one process has n x).
    env: the environment the ranks inherit (NCCL_SHM_DISABLE), os.environ by default."""
    from bench.config import ConfigError
    if free is None or not specs:
        return
    over = [s for s in specs if nccl_bytes(s, env) and _loader_bytes(s) + nccl_bytes(s, env) > free]
    if over:
        raise ConfigError(_nccl_refusal(max(over, key=lambda s: _loader_bytes(s) + nccl_bytes(s, env)), specs, free, env))
    loading = [s for s in specs if s.data == "voc" and s.num_workers > 0]
    if not loading or not num_workers:
        return
    worst = max(loading, key=need_bytes)
    need = need_bytes(worst)
    if need <= free:
        return
    per_flag = worst.num_workers // num_workers  # this configuration's workers per process for --num-workers 1
    fits = [k for k in range(num_workers - 1, 0, -1) if need_bytes(worst, k * per_flag) <= free]
    per_node = max(1, worst.processes // max(1, worst.nodes))
    raise ConfigError(
        f"--num-workers {num_workers}: /dev/shm has {free / 2**20:.0f} MiB free, but {worst.strategy} on "
        f"{worst.device_count} device(s) would keep {need / 2**20:.0f} MiB of prefetched batches there ({per_node} "
        f"process(es) x {worst.num_workers} worker(s) x {PREFETCH_FACTOR} batches x {batch_bytes(worst) / 2**20:.1f} MiB): "
        + (f"use --num-workers {fits[0]}, " if fits else "use --num-workers 0 (or a smaller batch or image size), ")
        + "or give the container more shared memory (docker run --shm-size=...)")


def _nccl_refusal(worst, specs: list, free: int, env) -> str:
    per_node = max(1, worst.processes // max(1, worst.nodes))
    groups = nccl_peers(worst)
    nccl, loader = nccl_bytes(worst, env), _loader_bytes(worst)
    counts = sorted({s.device_count for s in specs})
    fits = [n for n in counts if all(_loader_bytes(s) + nccl_bytes(s, env) <= free for s in specs if s.device_count == n)]
    what = "the collectives" if worst.mode == "comm" else f"{worst.strategy}"
    where = f" on {worst.nodes} nodes" if worst.nodes > 1 else ""
    count = " + ".join(f"{n} other rank(s) in {g}" if i == 0 else f"{n} in {g}" for i, (g, n) in enumerate(groups))
    return (f"/dev/shm has {free / 2**20:.0f} MiB free, but {what} on {worst.device_count} GPU(s){where} would need "
            f"about {(nccl + loader) / 2**20:.0f} MiB there: NCCL creates a shared-memory segment of about "
            f"{NCCL_SEGMENT_BYTES / 2**20:.1f} MiB for each connection of a rank to another rank of its node "
            f"({per_node} rank(s), each connected to {count}: {nccl / 2**20:.0f} MiB; torchtitan#853, nccl#342, "
            "nccl#1518: Docker's default 64 MiB fails at 4-8 ranks)"
            + (f", and the loader's prefetched batches take {loader / 2**20:.0f} MiB" if loader else "")
            + ". Start the container with more shared memory (docker run --shm-size=1g, or --ipc=host for the host's "
            "/dev/shm), or set NCCL_SHM_DISABLE=1 (NCCL then connects the node's ranks without it, over P2P or slower "
            "paths: the measurement changes, and is stored with the NCCL settings)"
            + (f", or measure the counts that fit (--gpus {','.join(map(str, fits))})" if fits else ""))
