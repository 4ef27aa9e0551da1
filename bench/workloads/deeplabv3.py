"""The reference experiment's model: torchvision's DeepLabV3-ResNet101, 21 classes, no auxiliary head,
random init or a local weights file, on synthetic images and masks or on Pascal VOC 2012 (bench.workloads.voc)."""
from __future__ import annotations

import torch
from torch import nn

from bench.workloads.workload import Workload, cycle, synthetic_pool

NUM_CLASSES = 21            # Pascal VOC: 20 classes and the background
IGNORE_INDEX = 255          # VOC's border label, ignored by the loss
DEFAULTS = {"cuda": {"batch": 8, "image": 256}, "cpu": {"batch": 2, "image": 64}}


def build_model(weights: str = "") -> tuple:
    """(model, details): the network, with the weights file's matching tensors loaded when one is given."""
    from torchvision.models.segmentation import deeplabv3_resnet101
    model = deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=NUM_CLASSES, aux_loss=False)
    details = {"weights": weights or "random init"}
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


def batch_maker(side: int):
    """make_batch(generator, batch) -> (synthetic images, per-pixel class masks) at side x side."""
    return lambda g, b: (torch.randn(b, 3, side, side, generator=g),
                         torch.randint(0, NUM_CLASSES, (b, side, side), generator=g))


def workload(spec, rank: int, device: torch.device) -> Workload:
    model, details = build_model(spec.weights)
    if spec.data == "voc":
        from bench.workloads import voc
        wl = voc.workload(spec, rank, model, segmentation_loss, details)
        wl.example = batch_maker(spec.image_size)  # the FLOP count's batch: VOC's crops have these shapes
        return wl
    pool, artefact = synthetic_pool(spec, rank, device, batch_maker(spec.image_size))
    return Workload(model=model, loss_fn=segmentation_loss, batches=cycle(pool), on_device=True, details=details,
                    artefact_bytes=artefact)
