"""What a workload is to the loop that trains it: the `Workload` record a builder returns, the
`WorkloadInfo` planning reads without building anything, and the synthetic batch pool.

Synthetic batches are built from "replica chunks": chunk c of pool entry i comes from a generator
seeded with (seed, c, i). A DDP rank feeds chunk `rank`; DataParallel (and the one-process reference
of the equivalence gate) feeds chunks 0..N-1 concatenated, so N replicas see exactly the samples
one process with the global batch sees. The pool lives on the compute device (no copy in the timed
step); the batches beyond the one a real loader would hold are a benchmark artefact, reported so
memory figures can leave them out.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from bench.shared.spec import PER_DEVICE

SYNTHETIC_POOL = 4          # distinct synthetic batches, generated up front and cycled


@dataclass
class Workload:
    model: nn.Module                                   # on CPU (or on meta: materialize), not yet wrapped by a strategy
    loss_fn: Callable[[object, torch.Tensor], torch.Tensor]
    batches: Callable[[int], Iterator]                 # epoch -> iterator of (inputs, targets) for this process
    on_device: bool = False                            # batches are already on the compute device
    details: dict = field(default_factory=dict)
    epoch_indices: Optional[Callable[[int], list]] = None  # real data: sample indices this process consumes in an epoch
    n_images: int = 0                                  # real data: images in the split
    steps_per_epoch: int = 0                           # real data: full steps in an epoch
    artefact_bytes: int = 0                            # device memory held only because the batches are pre-generated
    example: Optional[Callable[[torch.Generator, int], tuple]] = None  # real data: a batch of its shapes (FLOP count)


@dataclass(frozen=True)
class WorkloadInfo:
    """What planning needs to know of a workload without building it."""
    image: bool                 # takes 4-D image batches (channels_last and --image-size apply)
    input_rank: int
    default_batch: int
    default_image_size: int
    min_replica_batch: int      # BatchNorm in training mode needs 2 samples per replica
    images: int = 0             # real data: images in the split
    unused: tuple = ()          # parameters that get no gradient: DDP needs find_unused_parameters


def chunks_fed(spec, rank: int) -> list:
    """Which replica chunks this process feeds each step (an equivalence reference: every replica's, emulate_ranks)."""
    if spec.emulate_ranks > 1:
        return list(range(spec.emulate_ranks))
    if spec.strategy in PER_DEVICE or (spec.strategy == "loader" and spec.loaders > 1):
        return [rank]
    if spec.strategy in ("dp", "loader"):  # one loader alone loads the whole global batch
        return list(range(spec.device_count))
    return list(range(spec.emulate_ranks))


def synthetic_pool(spec, rank: int, device: torch.device, make: Callable[[torch.Generator, int], tuple]) -> tuple:
    """(pool of (x, y) on device, artefact bytes): SYNTHETIC_POOL batches of this process's chunks."""
    pool = []
    for i in range(SYNTHETIC_POOL):
        parts = []
        for c in chunks_fed(spec, rank):
            g = torch.Generator().manual_seed(spec.seed * 1_000_003 + c * 1009 + i)
            parts.append(make(g, spec.per_device_batch))
        pool.append((torch.cat([p[0] for p in parts]).to(device), torch.cat([p[1] for p in parts]).to(device)))
    one = sum(t.numel() * t.element_size() for t in pool[0])
    return pool, one * (len(pool) - 1) if device.type == "cuda" else 0


def cycle(pool: list) -> Callable[[int], Iterator]:
    """The batches of every epoch: the pool, round and round."""
    return lambda epoch: itertools.cycle(pool)
