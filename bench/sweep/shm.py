"""The shared-memory budget of data loading, checked before a sweep starts (`--data voc` with workers).

DataLoader workers hand every batch to their process through /dev/shm: each worker keeps up to
PREFETCH_FACTOR batches there, every process of a configuration on a node has its own workers. A container's
default /dev/shm (64 MiB in Docker) holds far less than DataParallel x8's 16 workers x 2 DeepLabV3 batches
(~2.7 GB): the run would die with a bus error mid-epoch. So the sweep adds up the largest configuration's need

    need_bytes = processes per node x workers per process x PREFETCH_FACTOR x bytes of one loader batch

and refuses (exit 2) with the numbers and the --num-workers that fits when /dev/shm has less free.
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


def check(specs: list, free: Optional[int], num_workers: int) -> None:
    """Raise ConfigError when a configuration's prefetched batches cannot fit in `free` bytes of /dev/shm.
    num_workers: --num-workers (a process's workers are a multiple of it: DataParallel's one process has n x)."""
    from bench.config import ConfigError
    loading = [s for s in specs if s.data == "voc" and s.num_workers > 0]
    if free is None or not loading or not num_workers:
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
