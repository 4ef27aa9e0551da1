"""The workloads by name: functions that return a model, a batch source and a loss, and what planning
needs to know of each before anything is built.

    synthetic   an MLP whose parameters (width, depth) and compute (batch, layer repeats) are set by
                flags; on CUDA it defaults to 8 x 4096-wide layers at batch 512 (about 0.4 TFLOP a
                step: compute-bound on one GPU, 537 MB of gradients to all-reduce), on CPU 4 x 1024 at 64
    deeplabv3   torchvision's DeepLabV3-ResNet101, 21 classes (the reference experiment), random init
                or a local weights file, on synthetic images and masks or on Pascal VOC 2012; its auxiliary
                classifier with --deeplabv3-aux
    transformer a decoder-only language model in plain PyTorch on random tokens, sized by preset or flags
    <name>      any torchvision classification or segmentation model (bench.workloads.models), random init
    mod:fn      the user's own model through the contract of bench.workloads.models

Batches and the Workload record: bench.workloads.workload. Adding a workload means one module with a
`workload(spec, rank, device)` builder and one entry in WORKLOADS.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch

from bench.config import ConfigError
from bench.workloads import deeplabv3, synthetic, transformer
from bench.workloads.workload import Workload, WorkloadInfo, cycle, synthetic_pool

MODEL_DEFAULTS = {"cuda": {"batch": 32}, "cpu": {"batch": 2, "image": 64}}


# ---------------------------------------------------------------- names and planning

def _models():
    from bench.workloads import models
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
    from bench.workloads import detection
    if name in detection.FIXED_SIZE:
        return detection.FIXED_SIZE[name]
    minimum, multiple = models.size_rule(name) if name not in detection.names() else (1, 1)
    side = max(MODEL_DEFAULTS["cpu"]["image"], minimum)
    return -(-side // multiple) * multiple


def info(name: str, cfg) -> WorkloadInfo:
    dev = cfg.device
    if name == "synthetic":
        return WorkloadInfo(False, 2, synthetic.DEFAULTS[dev]["batch"], 0, 1)
    if name == "transformer":
        return WorkloadInfo(False, 2, transformer.DEFAULTS[dev]["batch"], 0, 1)
    if name == "deeplabv3":
        images = 0
        if cfg.data == "voc" and not cfg.download:
            from bench.workloads import voc
            images = len(voc.split_files(cfg.voc_root)[0])
        return WorkloadInfo(True, 4, deeplabv3.DEFAULTS[dev]["batch"], deeplabv3.DEFAULTS[dev]["image"], 2, images)
    d = _models().validate_workload(name, cfg.image_size or default_image_size(name, dev))  # one dry step: the contract
    rank = 1 + len(d.get("input_shape") or [0])
    return WorkloadInfo(rank == 4, rank, MODEL_DEFAULTS[dev]["batch"], int(d.get("image_size") or 0),
                        int(d.get("min_batch_per_replica", 1)), unused=tuple(d.get("unused_parameters") or ()))


def checkpoint_units(name: str, cfg) -> Optional[tuple]:
    """(units, what they are) that activation checkpointing picks from in workload `name` of a resolved config
    (bench.rank.blocks), where planning can know it: the transformer's blocks and the synthetic MLP's layers from
    their flags, DeepLabV3's ResNet-101 bottlenecks counted on the meta device (about a second); None for torchvision
    and user models, whose units only their build shows."""
    if name == "transformer":
        return cfg.transformer_layers, f"{cfg.transformer_layers} blocks (--transformer-layers)"
    if name == "synthetic":
        return cfg.synthetic_depth, f"{cfg.synthetic_depth} layers (--synthetic-depth)"
    if name == "deeplabv3":
        n = _deeplabv3_units()
        return n, f"{n} ResNet-101 bottleneck blocks in its backbone"
    return None


@functools.lru_cache(maxsize=None)
def _deeplabv3_units() -> int:
    """Its backbone's bottleneck blocks (3 + 4 + 23 + 3), counted on meta: the units bench.rank.blocks finds in it."""
    from torchvision.models.resnet import Bottleneck
    with torch.device("meta"):
        return sum(isinstance(m, Bottleneck) for m in deeplabv3.build_model()[0].modules())


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
            model = deeplabv3.build_model()[0] if name == "deeplabv3" else _models().build_workload(name).model
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


def model_workload(spec, rank: int, device: torch.device) -> Workload:
    """A torchvision model by name, or the user's own, on synthetic batches of its natural shape."""
    built = _models().build_workload(spec.workload, spec.image_size or None)
    if spec.weights:
        state = torch.load(spec.weights, map_location="cpu", weights_only=True)
        built.model.load_state_dict(state.get("model", state), strict=False)
    pool, artefact = synthetic_pool(spec, rank, device, built.make_batch)
    return Workload(model=built.model, loss_fn=built.loss_fn, batches=cycle(pool), on_device=True,
                    details=dict(built.details), artefact_bytes=artefact)


WORKLOADS: dict = {
    "synthetic": synthetic.workload,
    "deeplabv3": deeplabv3.workload,
    "transformer": transformer.workload,
}


def builder(name: str) -> Callable:
    return WORKLOADS.get(name, model_workload)


def gradient_bytes(spec) -> int:
    """fp32 gradient size of a workload's model, counted on the meta device (no memory, no compute); the transformer's
    from its shape (transformer.parameters, exact): building a large one even on meta took minutes, block by block."""
    if spec.workload == "transformer":
        return 4 * transformer.parameters(transformer.spec_shape(spec))
    if spec.workload == "deeplabv3":
        return 4 * deeplabv3.trainable_parameters(getattr(spec, "deeplabv3_aux", "false"))
    with torch.device("meta"):
        if spec.workload == "synthetic":
            model = synthetic.MLP(spec.synthetic_width, spec.synthetic_depth)
        else:
            model = _models().build_registry(spec.workload, spec.image_size or None, meta=True).model \
                if spec.workload in _models().registry_names() else _models().build_workload(spec.workload, spec.image_size or None).model
    return sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
