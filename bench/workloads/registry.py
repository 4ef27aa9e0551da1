"""Workloads: functions that return a model, a batch source and a loss.

    synthetic   an MLP whose parameters (width, depth) and compute (batch, layer repeats) are set by
                flags; on CUDA it defaults to 8 x 4096-wide layers at batch 512 (about 0.4 TFLOP a
                step: compute-bound on one GPU, 537 MB of gradients to all-reduce), on CPU 4 x 1024 at 64
    deeplabv3   torchvision's DeepLabV3-ResNet101, 21 classes (the reference experiment), random init
                or a local weights file, on synthetic images and masks or on Pascal VOC 2012
    <name>      any torchvision classification or segmentation model (bench.models), random init
    mod:fn      the user's own model through the contract of bench.models

Synthetic batches are built from "replica chunks": chunk c of pool entry i comes from a generator
seeded with (seed, c, i). A DDP rank feeds chunk `rank`; DataParallel (and the one-process reference
of the equivalence gate) feeds chunks 0..N-1 concatenated, so N replicas see exactly the samples
one process with the global batch sees. The pool lives on the compute device (no copy in the timed
step); the batches beyond the one a real loader would hold are a benchmark artefact, reported so
memory figures can leave them out. Adding a workload means one builder here and one entry in WORKLOADS.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from bench.config import ConfigError

NUM_CLASSES_SYNTHETIC = 10
NUM_CLASSES_VOC = 21
IGNORE_INDEX = 255          # VOC's border label, ignored by the loss
SYNTHETIC_POOL = 4          # distinct synthetic batches, generated up front and cycled
SYNTHETIC_DEFAULTS = {"cuda": {"width": 4096, "depth": 8, "batch": 512}, "cpu": {"width": 1024, "depth": 4, "batch": 64}}
DEEPLAB_DEFAULTS = {"cuda": {"batch": 8, "image": 256}, "cpu": {"batch": 2, "image": 64}}
MODEL_DEFAULTS = {"cuda": {"batch": 32}, "cpu": {"batch": 2, "image": 64}}


@dataclass
class Workload:
    model: nn.Module                                   # on CPU, not yet wrapped by a strategy
    loss_fn: Callable[[object, torch.Tensor], torch.Tensor]
    batches: Callable[[int], Iterator]                 # epoch -> iterator of (inputs, targets) for this process
    on_device: bool = False                            # batches are already on the compute device
    details: dict = field(default_factory=dict)
    epoch_indices: Optional[Callable[[int], list]] = None  # real data: sample indices this process consumes in an epoch
    n_images: int = 0                                  # real data: images in the split
    steps_per_epoch: int = 0                           # real data: full steps in an epoch
    artefact_bytes: int = 0                            # device memory held only because the batches are pre-generated


@dataclass(frozen=True)
class WorkloadInfo:
    """What planning needs to know of a workload without building it."""
    image: bool                 # takes 4-D image batches (channels_last and --image-size apply)
    input_rank: int
    default_batch: int
    default_image_size: int
    min_replica_batch: int      # BatchNorm in training mode needs 2 samples per replica
    images: int = 0             # real data: images in the split


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


def synthetic_flops_per_sample(width: int, depth: int, repeats: int = 1) -> float:
    """Training FLOPs per sample of the MLP: 2 (forward) + 4 (backward) per multiply-accumulate."""
    return 6.0 * (depth * repeats * width * width + width * NUM_CLASSES_SYNTHETIC)


# ---------------------------------------------------------------- names and planning

def _models():
    from bench import models
    return models


def canonical(name: str) -> str:
    """The stored form of a --workloads entry (a user file becomes an absolute path); ConfigError if unknown."""
    return name if name in WORKLOADS else _models().resolve_workload_name(name)


def default_image_size(name: str, device: str) -> Optional[int]:
    """A registry or user model's side when --image-size is not given: the natural size on CUDA; on CPU
    64 px where the model takes it (else its smallest), so a CPU sweep stays minutes long."""
    if device == "cuda":
        return None
    models = _models()
    if name not in models.registry_names():
        return None
    from bench import detection
    if name in detection.FIXED_SIZE:
        return detection.FIXED_SIZE[name]
    minimum, multiple = models.size_rule(name) if name not in detection.names() else (1, 1)
    side = max(MODEL_DEFAULTS["cpu"]["image"], minimum)
    return -(-side // multiple) * multiple


def info(name: str, cfg) -> WorkloadInfo:
    dev = cfg.device
    if name == "synthetic":
        return WorkloadInfo(False, 2, SYNTHETIC_DEFAULTS[dev]["batch"], 0, 1)
    if name == "deeplabv3":
        images = 0
        if cfg.data == "voc" and not cfg.download:
            from bench import voc
            images = len(voc.split_files(cfg.voc_root)[0])
        return WorkloadInfo(True, 4, DEEPLAB_DEFAULTS[dev]["batch"], DEEPLAB_DEFAULTS[dev]["image"], 2, images)
    d = _models().validate_workload(name, cfg.image_size or default_image_size(name, dev))  # one dry step: the contract
    rank = 1 + len(d.get("input_shape") or [0])
    return WorkloadInfo(rank == 4, rank, MODEL_DEFAULTS[dev]["batch"], int(d.get("image_size") or 0),
                        int(d.get("min_batch_per_replica", 1)))


def check_weights(path: str, names: list) -> list:
    """The weights file must load as a state dict that matches each model workload; ConfigError otherwise.
    Returns one line per workload saying how many tensors load (missing and unexpected keys counted)."""
    import os
    if not os.path.isfile(path):
        raise ConfigError(f"--weights: {path!r} is not a file")
    if not names:
        raise ConfigError(f"--weights {path!r}: no model workload to load it into (synthetic takes no weights)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ConfigError(f"--weights: {path!r} does not load as a PyTorch state dict: {type(e).__name__}: {e}") from None
    state = state.get("model", state) if isinstance(state, dict) else state
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"--weights: {path!r} holds a {type(state).__name__}, not a state dict of tensors")
    notes = []
    for name in names:
        with torch.device("meta"):
            model = build_deeplabv3()[0] if name == "deeplabv3" else _models().build_workload(name).model
        own = model.state_dict()
        known = [k for k in state if k in own]
        if not known:
            raise ConfigError(f"--weights: {path!r} matches none of {name}'s {len(own)} tensors "
                              f"(e.g. expected {next(iter(own))!r}, the file has {next(iter(state), 'nothing')!r})")
        shape = [k for k in known if tuple(own[k].shape) != tuple(state[k].shape)]
        if shape:
            raise ConfigError(f"--weights: {path!r} has {len(shape)} tensor(s) of the wrong shape for {name}, "
                              f"e.g. {shape[0]!r}: {tuple(state[shape[0]].shape)} in the file, {tuple(own[shape[0]].shape)} in the model")
        missing, unexpected = len(own) - len(known), len(state) - len(known)
        notes.append(f"--weights {path}: {len(known)} of {name}'s {len(own)} tensors loaded"
                     + (f", {missing} missing (random init)" if missing else "") + (f", {unexpected} unexpected (ignored)" if unexpected else ""))
    return notes


# ---------------------------------------------------------------- batches

def chunks_fed(spec, rank: int) -> list:
    """Which replica chunks this process feeds each step."""
    if spec.strategy in ("ddp", "fsdp"):
        return [rank]
    if spec.strategy in ("dp", "loader"):  # the loader-alone run loads the whole global batch
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


def _cycle(pool: list) -> Callable[[int], Iterator]:
    return lambda epoch: itertools.cycle(pool)


def _logits(output):
    return output["out"] if isinstance(output, dict) else output


# ---------------------------------------------------------------- builders

def synthetic(spec, rank: int, device: torch.device) -> Workload:
    model = MLP(spec.synthetic_width, spec.synthetic_depth, spec.synthetic_repeats)
    make = lambda g, b: (torch.randn(b, spec.synthetic_width, generator=g),
                         torch.randint(0, NUM_CLASSES_SYNTHETIC, (b,), generator=g))
    pool, artefact = synthetic_pool(spec, rank, device, make)
    flops = synthetic_flops_per_sample(spec.synthetic_width, spec.synthetic_depth, spec.synthetic_repeats)
    return Workload(model=model, loss_fn=lambda out, y: nn.functional.cross_entropy(out, y), batches=_cycle(pool),
                    on_device=True, artefact_bytes=artefact,
                    details={"flops_per_sample": flops, "flops_per_step": flops * spec.global_batch,
                             "width": spec.synthetic_width, "depth": spec.synthetic_depth, "layer_repeats": spec.synthetic_repeats})


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


def _segmentation_loss(out, y):
    return nn.functional.cross_entropy(_logits(out), y, ignore_index=IGNORE_INDEX)


def deeplabv3(spec, rank: int, device: torch.device) -> Workload:
    model, details = build_deeplabv3(spec.weights)
    if spec.data == "voc":
        from bench import voc
        return voc.workload(spec, rank, model, _segmentation_loss, details)
    s = spec.image_size
    make = lambda g, b: (torch.randn(b, 3, s, s, generator=g), torch.randint(0, NUM_CLASSES_VOC, (b, s, s), generator=g))
    pool, artefact = synthetic_pool(spec, rank, device, make)
    return Workload(model=model, loss_fn=_segmentation_loss, batches=_cycle(pool), on_device=True, details=details,
                    artefact_bytes=artefact)


def model_workload(spec, rank: int, device: torch.device) -> Workload:
    """A torchvision model by name, or the user's own, on synthetic batches of its natural shape."""
    built = _models().build_workload(spec.workload, spec.image_size or None)
    if spec.weights:
        state = torch.load(spec.weights, map_location="cpu", weights_only=True)
        built.model.load_state_dict(state.get("model", state), strict=False)
    pool, artefact = synthetic_pool(spec, rank, device, built.make_batch)
    return Workload(model=built.model, loss_fn=built.loss_fn, batches=_cycle(pool), on_device=True,
                    details=dict(built.details), artefact_bytes=artefact)


WORKLOADS: dict = {
    "synthetic": synthetic,
    "deeplabv3": deeplabv3,
}


def builder(name: str) -> Callable:
    return WORKLOADS.get(name, model_workload)


def gradient_bytes(spec) -> int:
    """fp32 gradient size of a workload's model, counted on the meta device (no memory, no compute)."""
    with torch.device("meta"):
        if spec.workload == "synthetic":
            model = MLP(spec.synthetic_width, spec.synthetic_depth)
        elif spec.workload == "deeplabv3":
            model = build_deeplabv3()[0]
        else:
            model = _models().build_registry(spec.workload, spec.image_size or None, meta=True).model \
                if spec.workload in _models().registry_names() else _models().build_workload(spec.workload, spec.image_size or None).model
    return sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
