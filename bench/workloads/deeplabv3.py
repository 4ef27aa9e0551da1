"""The reference experiment's model: torchvision's DeepLabV3-ResNet101, 21 classes, random init or a local weights
file, on synthetic images and masks or on Pascal VOC 2012 (bench.workloads.voc).

--deeplabv3-aux: `false` (default) builds it without its auxiliary classifier; `true` with it, its loss added at
weight 0.5 (torchvision's segmentation reference: train.py's criterion); `unused` with it, run in every forward but
left out of the loss, as a training script that reads only output["out"] of the Torch Hub model (the reference
experiment's) does: its parameters get no gradient, and DDP then needs find_unused_parameters.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from bench.workloads.workload import Workload, cycle, synthetic_pool

NUM_CLASSES = 21            # Pascal VOC: 20 classes and the background
IGNORE_INDEX = 255          # VOC's border label, ignored by the loss
DEFAULTS = {"cuda": {"batch": 8, "image": 256}, "cpu": {"batch": 2, "image": 64}}
AUX_WEIGHT = 0.5            # torchvision's segmentation reference weighs the auxiliary loss so
AUX_PREFIX = "aux_classifier."


def build_model(weights: str = "", aux: str = "false") -> tuple:
    """(model, details): the network (with its auxiliary classifier unless aux is 'false'), with the weights file's
    matching tensors loaded when one is given."""
    from torchvision.models.segmentation import deeplabv3_resnet101
    model = deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=NUM_CLASSES, aux_loss=aux != "false")
    details = {"weights": weights or "random init", "aux_classifier": {"false": "none", "true": f"in the loss at {AUX_WEIGHT}",
                                                                       "unused": "run, not in the loss"}[aux]}
    if weights:
        state = torch.load(weights, map_location="cpu", weights_only=True)
        state = state.get("model", state) if isinstance(state, dict) else state
        missing, unexpected = model.load_state_dict(state, strict=False)
        details.update(missing_keys=len(missing), unexpected_keys=len(unexpected))
    return model, details


def segmentation_loss(out, y):
    logits = out["out"] if isinstance(out, dict) else out
    # VOC's masks arrive as uint8 (bench.workloads.voc): widened here, on the device, after the copy
    return nn.functional.cross_entropy(logits, y.long(), ignore_index=IGNORE_INDEX)


def loss_with_aux(out, y):
    """The main loss plus the auxiliary classifier's at AUX_WEIGHT (torchvision's segmentation reference)."""
    return segmentation_loss(out, y) + AUX_WEIGHT * segmentation_loss(out["aux"], y)


@functools.lru_cache(maxsize=None)
def _on_meta(aux: str) -> nn.Module:
    """The network with this --deeplabv3-aux built once on the meta device (no memory): building it, even there, takes a
    few tenths of a second, and planning asks of it for every sweep with DeepLabV3."""
    with torch.device("meta"):
        return build_model(aux=aux)[0]


def trainable_parameters(aux: str) -> int:
    """How many parameters the network with this --deeplabv3-aux trains (its fp32 gradient, a quarter of its bytes)."""
    return sum(p.numel() for p in _on_meta(aux).parameters() if p.requires_grad)


def unused_parameters(aux: str) -> tuple:
    """The parameters that get no gradient with this --deeplabv3-aux: the auxiliary classifier's when it is unused."""
    if aux != "unused":
        return ()
    return tuple(n for n, _ in _on_meta(aux).named_parameters() if n.startswith(AUX_PREFIX))


def batch_maker(side: int):
    """make_batch(generator, batch) -> (synthetic images, per-pixel class masks) at side x side."""
    return lambda g, b: (torch.randn(b, 3, side, side, generator=g),
                         torch.randint(0, NUM_CLASSES, (b, side, side), generator=g))


def workload(spec, rank: int, device: torch.device) -> Workload:
    aux = getattr(spec, "deeplabv3_aux", "false")
    model, details = build_model(spec.weights, aux)
    loss = loss_with_aux if aux == "true" else segmentation_loss
    if spec.data == "voc":
        from bench.workloads import voc
        wl = voc.workload(spec, rank, model, loss, details)
        wl.example = batch_maker(spec.image_size)  # the FLOP count's batch: VOC's crops have these shapes
        return wl
    pool, artefact = synthetic_pool(spec, rank, device, batch_maker(spec.image_size))
    return Workload(model=model, loss_fn=loss, batches=cycle(pool), on_device=True, details=details,
                    artefact_bytes=artefact)
