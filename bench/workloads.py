"""Workloads: functions that return a model, a batch source and a loss.

    synthetic   an MLP whose parameters (width, depth) and compute (batch, layer repeats) are set
                by flags, so a run can sit anywhere between communication- and compute-bound
    deeplabv3   torchvision's DeepLabV3-ResNet101, 21 classes, random init (or a local weights
                file; nothing is downloaded), on synthetic images and masks or on Pascal VOC 2012

Synthetic batches are built from "replica chunks": chunk c of step i is drawn from a generator
seeded with (seed, c, i). A DDP rank feeds chunk `rank`; DataParallel (and the single-process
reference of the equivalence check) feeds chunks 0..N-1 concatenated. So every rank sees its own
data, and N replicas see exactly the samples that one process with the global batch sees.
Adding a workload means adding one builder here and one entry in WORKLOADS.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from bench.config import RunSpec
from bench.strategies import Ctx

NUM_CLASSES_SYNTHETIC = 10
NUM_CLASSES_VOC = 21
IGNORE_INDEX = 255          # VOC's border label, ignored by the loss
SYNTHETIC_POOL = 4          # distinct synthetic batches, generated up front and cycled


@dataclass
class Workload:
    model: nn.Module                                   # on CPU, not yet wrapped by a strategy
    loss_fn: Callable[[object, torch.Tensor], torch.Tensor]
    batches: Callable[[int], Iterator]                 # epoch -> iterator of (inputs, targets)
    samples_per_epoch: Optional[int] = None            # real data only
    on_device: bool = False                            # batches are already on the compute device
    details: Optional[dict] = None
    epoch_indices: Optional[Callable[[int], list]] = None  # real data: sample indices this rank consumes in an epoch
    n_images: int = 0                                  # real data: images in the split


class MLP(nn.Module):
    def __init__(self, width: int, depth: int, repeats: int = 1):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, NUM_CLASSES_SYNTHETIC)
        self.repeats = repeats

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            for _ in range(self.repeats):  # weight reuse: more compute, same parameter count
                x = torch.relu(layer(x))
        return self.head(x)


def chunks_fed(spec: RunSpec, ctx: Ctx) -> list:
    """Which replica chunks this process feeds each step."""
    if spec.strategy == "ddp":
        return [ctx.rank]
    if spec.strategy == "dp":
        return list(range(spec.device_count))
    return list(range(spec.emulate_ranks))


def _synthetic_pool(spec: RunSpec, ctx: Ctx, make: Callable[[torch.Generator, int], tuple]) -> list:
    pool = []
    for i in range(SYNTHETIC_POOL):
        parts = []
        for c in chunks_fed(spec, ctx):
            g = torch.Generator().manual_seed(spec.seed * 1_000_003 + c * 1009 + i)
            parts.append(make(g, spec.per_device_batch))
        x = torch.cat([p[0] for p in parts]).to(ctx.device)
        y = torch.cat([p[1] for p in parts]).to(ctx.device)
        pool.append((x, y))
    return pool


def _cycle(pool: list) -> Callable[[int], Iterator]:
    return lambda epoch: itertools.cycle(pool)


def _logits(output):
    return output["out"] if isinstance(output, dict) else output


def synthetic(spec: RunSpec, ctx: Ctx) -> Workload:
    model = MLP(spec.synthetic_width, spec.synthetic_depth, spec.synthetic_repeats)
    make = lambda g, b: (torch.randn(b, spec.synthetic_width, generator=g),
                         torch.randint(0, NUM_CLASSES_SYNTHETIC, (b,), generator=g))
    pool = _synthetic_pool(spec, ctx, make)
    return Workload(model=model, loss_fn=lambda out, y: nn.functional.cross_entropy(out, y),
                    batches=_cycle(pool), on_device=True)


def build_deeplabv3(weights: str = "") -> tuple:
    from torchvision.models.segmentation import deeplabv3_resnet101
    model = deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=NUM_CLASSES_VOC, aux_loss=False)
    details = {"weights": weights or "random init"}
    if weights:
        state = torch.load(weights, map_location="cpu", weights_only=True)
        state = state.get("model", state) if isinstance(state, dict) else state
        missing, unexpected = model.load_state_dict(state, strict=False)
        details.update(missing_keys=len(missing), unexpected_keys=len(unexpected))
    return model, details


def deeplabv3(spec: RunSpec, ctx: Ctx) -> Workload:
    model, details = build_deeplabv3(spec.weights)
    loss_fn = lambda out, y: nn.functional.cross_entropy(_logits(out), y, ignore_index=IGNORE_INDEX)
    if spec.data == "voc":
        from bench import voc
        dataset = voc.VOCTrain(spec.voc_root, image_set="train", image_size=spec.image_size)
        distributed = spec.strategy == "ddp"
        batch = spec.per_device_batch if distributed else spec.global_batch
        loader, sampler = voc.make_loader(dataset, batch, rank=ctx.rank, world_size=ctx.world_size,
                                          distributed=distributed, num_workers=spec.num_workers,
                                          pin_memory=spec.pin_memory, persistent_workers=spec.persistent_workers,
                                          seed=spec.seed)

        def batches(epoch: int) -> Iterator:
            voc.set_epoch(sampler if sampler is not None else loader, epoch)
            return iter(loader)
        return Workload(model=model, loss_fn=loss_fn, batches=batches, details=details, n_images=len(dataset),
                        samples_per_epoch=len(dataset) // spec.global_batch * spec.global_batch,
                        epoch_indices=lambda epoch: voc.epoch_indices(loader, epoch))
    s = spec.image_size
    make = lambda g, b: (torch.randn(b, 3, s, s, generator=g),
                         torch.randint(0, NUM_CLASSES_VOC, (b, s, s), generator=g))
    return Workload(model=model, loss_fn=loss_fn, batches=_cycle(_synthetic_pool(spec, ctx, make)),
                    on_device=True, details=details)


WORKLOADS: dict[str, Callable[[RunSpec, Ctx], Workload]] = {
    "synthetic": synthetic,
    "deeplabv3": deeplabv3,
}


def gradient_bytes(spec: RunSpec) -> int:
    """fp32 gradient size of a workload's model, counted on the meta device (no memory, no compute)."""
    with torch.device("meta"):
        model = MLP(spec.synthetic_width, spec.synthetic_depth) if spec.workload == "synthetic" else build_deeplabv3()[0]
    return sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
