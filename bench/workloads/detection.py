"""Torchvision detection models behind the suite's one-tensor step: `loss_fn(model(x), y)`.

In train mode a detection model takes a list of images plus one target dict per image and returns
a dict of losses. `PackedDetection` turns that into what every strategy can split: each row of `x`
is one sample, its image (3 x side x side, values in [0, 1]) flattened, followed by its
BOXES_PER_IMAGE boxes as (x1, y1, x2, y2, label). The wrapper unpacks the rows, builds the targets
(box-shaped masks for Mask R-CNN, 17 keypoints along the box diagonal for Keypoint R-CNN), and
returns the summed losses once per sample, so DataParallel gathers along dim 0 and `loss_fn`'s
mean is the replicas' average. Works the same under single, dp and ddp.

The R-CNN, RetinaNet and FCOS transforms are set to the chosen side (min_size = max_size = side),
so images are not resized again; SSD and SSDlite resize every image to their fixed 300/320 px and
accept only that size. The RPN and ROI samplers draw from the global RNG, so runs are not bitwise
comparable across strategies (leave detection out of the equivalence check).
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
import torchvision
from torch import nn

from bench.config import ConfigError
from bench.workloads.modelspec import ModelSpec, check_spec, has_batchnorm

BOXES_PER_IMAGE = 2
KEYPOINTS = 17                     # Keypoint R-CNN's COCO person keypoints
NATURAL_SIZE = 800                 # R-CNN, RetinaNet, FCOS resize the short side to 800 by default
FIXED_SIZE = {"ssd300_vgg16": 300, "ssdlite320_mobilenet_v3_large": 320}   # resized to this whatever comes in
DEFAULT_SIZE = {"fasterrcnn_mobilenet_v3_large_320_fpn": 320, **FIXED_SIZE}
DEFAULT_CLASSES = {"keypointrcnn_resnet50_fpn": 2}                          # background + person; others COCO's 91
DRY_RUN_SIZE = 32                  # up-front check: the side changes the resize, not the plumbing (32: the padding unit)


def names() -> list[str]:
    return torchvision.models.list_models(module=torchvision.models.detection)


def natural_size(name: str) -> int:
    return DEFAULT_SIZE.get(name, NATURAL_SIZE)


def check_size(name: str, image_size: int) -> None:
    if name in FIXED_SIZE and image_size != FIXED_SIZE[name]:
        raise ConfigError(f"--image-size {image_size}: {name} resizes every image to {FIXED_SIZE[name]} px, "
                          f"so it accepts only {FIXED_SIZE[name]}")
    if image_size < 1:
        raise ConfigError(f"--image-size {image_size}: {name} needs at least 1 px")


class PackedDetection(nn.Module):
    """A detection model fed one tensor whose rows pack an image and its boxes; returns one loss per row."""

    def __init__(self, model: nn.Module, side: int):
        super().__init__()
        self.model, self.side = model, side

    def _target(self, packed: torch.Tensor) -> dict:
        boxes, labels = packed[:, :4], packed[:, 4].long()
        target = {"boxes": boxes, "labels": labels}
        if isinstance(self.model, torchvision.models.detection.MaskRCNN):
            ys = torch.arange(self.side, device=packed.device)[None, :, None]
            xs = torch.arange(self.side, device=packed.device)[None, None, :]
            b = boxes[:, :, None, None]
            target["masks"] = ((xs >= b[:, 0]) & (xs < b[:, 2]) & (ys >= b[:, 1]) & (ys < b[:, 3])).to(torch.uint8)
        if isinstance(self.model, torchvision.models.detection.KeypointRCNN):
            along = torch.linspace(0, 1, KEYPOINTS, device=packed.device)[None, :, None]
            xy = boxes[:, None, :2] + along * (boxes[:, None, 2:] - boxes[:, None, :2])
            target["keypoints"] = torch.cat([xy, torch.ones_like(xy[..., :1])], dim=-1)  # all visible
        return target

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, pixels = x.shape[0], 3 * self.side * self.side
        images = x[:, :pixels].reshape(n, 3, self.side, self.side)
        packed = x[:, pixels:].reshape(n, BOXES_PER_IMAGE, 5)
        losses = self.model(list(images), [self._target(p) for p in packed])
        return sum(losses.values()).expand(n)


def packed_loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return output.mean()  # the model computed the losses; targets travelled inside the inputs


def make_batch(side: int, num_classes: int, g: torch.Generator, batch: int) -> tuple:
    images = torch.rand(batch, 3, side, side, generator=g)
    corner = torch.rand(batch, BOXES_PER_IMAGE, 2, generator=g) * side / 2
    extent = (0.25 + 0.5 * torch.rand(batch, BOXES_PER_IMAGE, 2, generator=g)) * side / 2
    labels = torch.randint(1, num_classes, (batch, BOXES_PER_IMAGE, 1), generator=g).float()  # 0 is background
    boxes = torch.cat([corner, corner + extent, labels], dim=-1)
    return torch.cat([images.flatten(1), boxes.flatten(1)], dim=1), boxes


def _details(name: str, side: int, classes: int) -> dict:
    return {"task": "detection", "source": "torchvision", "model": name, "weights": "random init",
            "image_size": side, "natural_image_size": natural_size(name), "num_classes": classes,
            "boxes_per_image": BOXES_PER_IMAGE, "input_shape": [3 * side * side + 5 * BOXES_PER_IMAGE],
            "input_layout": "image (3 x side x side) flattened, then boxes (x1, y1, x2, y2, label)",
            "torchvision": torchvision.__version__}


def build(name: str, image_size: Optional[int] = None, num_classes: Optional[int] = None) -> ModelSpec:
    """A detection model with random weights (nothing downloaded), wrapped to take packed rows."""
    side = natural_size(name) if image_size is None else image_size
    check_size(name, side)
    if num_classes is not None and num_classes < 2:
        raise ConfigError(f"{name}: {num_classes} class(es); detection needs at least 2 (class 0 is background)")
    kwargs = {"weights": None, "weights_backbone": None}
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if name not in FIXED_SIZE:
        kwargs.update(min_size=side, max_size=side)
    model = torchvision.models.get_model(name, **kwargs)
    classes = num_classes or DEFAULT_CLASSES.get(name, 91)
    return ModelSpec(model=PackedDetection(model, side), make_batch=functools.partial(make_batch, side, classes),
                     loss_fn=packed_loss, task="detection", image_size=side, details=_details(name, side, classes),
                     min_batch_per_replica=2 if has_batchnorm(model) else 1)


def validate(name: str, image_size: Optional[int] = None, num_classes: Optional[int] = None) -> dict:
    """The size check, then one CPU training step at DRY_RUN_SIZE (proposal sampling and NMS are
    data-dependent, so the meta device cannot run them). Returns details for the chosen size."""
    side = natural_size(name) if image_size is None else image_size
    check_size(name, side)
    spec = build(name, FIXED_SIZE.get(name, DRY_RUN_SIZE), num_classes)
    checked = check_spec(spec, f"--workloads {name}")
    return {**checked, **_details(name, side, spec.details["num_classes"]), "dry_run_image_size": spec.image_size,
            "min_batch_per_replica": spec.min_batch_per_replica}
