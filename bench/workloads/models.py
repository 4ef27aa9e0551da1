"""Any torchvision classification, segmentation or detection model by name, and --workloads names.

    build_registry("resnet50", image_size=None)  -> ModelSpec: random weights (never a download),
                                                   synthetic images of the model's natural size, its loss
    validate_workload("vit_b_16", 384)           -> details; checks the name, the size and one training
                                                   step up front, on the meta device (no memory, no compute)
    resolve_workload_name("resnet5")             -> ConfigError: did you mean resnet50, ...?

Natural size: the crop size of torchvision's published weights for that model (224 for most
classifiers, 299 inception_v3, 518 vit_h_14, 600 efficientnet_b7), 520 for segmentation. ViT and
MaxViT fix their size at construction, so the size is passed to the builder. Segmentation models
use torchvision's defaults: 21 classes (Pascal VOC), no auxiliary head. `deeplabv3_resnet101` is the
same network as the suite's `deeplabv3` workload, which stays the reference experiment's model
(its 256 px, VOC data, --weights); the registry name runs it on synthetic data like any other.
Detection models are wrapped to take one tensor (bench/workloads/detection.py). Video, optical-flow and
quantized models are refused, each with its reason.
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import re
from typing import Optional

import torch
import torchvision
from torch import nn
from torch.nn import functional as F

from bench.config import ConfigError
from bench.workloads import detection, usermodel
from bench.workloads.modelspec import ModelSpec, check_spec, has_batchnorm

SUITE_WORKLOADS = ("synthetic", "deeplabv3", "transformer")  # built by bench/workloads/registry.py, not here
IGNORE_INDEX = 255                                  # segmentation border label, as in VOC
AUX_WEIGHT = 0.4                                    # GoogLeNet/Inception auxiliary classifiers in train mode
SEG_AUX_WEIGHT = 0.5                                # segmentation auxiliary head, as torchvision's references
SEGMENTATION_SIZE = 520                             # torchvision's segmentation weights are evaluated at 520
TASK_MODULES = {"classification": torchvision.models, "segmentation": torchvision.models.segmentation,
                "detection": torchvision.models.detection}
REFUSED = {
    torchvision.models.video: "video models take clips (batch, 3, frames, height, width); only image models are "
    "supported so far",
    torchvision.models.optical_flow: "optical-flow models take image pairs and return a list of flow fields; "
    "only single-image models are supported",
    torchvision.models.quantization: "quantized models are int8 inference models with no backward pass; "
    "benchmark the float model instead",
}
# Smallest input side that trains (batch 2, train mode), found by probing every model on the meta device.
MIN_SIZE = {"alexnet": 63, "convnext": 32, "densenet": 29, "googlenet": 15, "squeezenet1_0": 21,
            "squeezenet1_1": 17, "swin": 8, "vgg": 32,
            "inception_v3": 299}  # its auxiliary classifier (train mode) needs 299; without it 75 would do


@functools.lru_cache(maxsize=None)
def _task_names() -> dict:
    return {n: task for task, module in TASK_MODULES.items() for n in torchvision.models.list_models(module=module)}


def registry_names() -> list[str]:
    """Torchvision model names this suite builds: every classification, segmentation and detection model."""
    return sorted(_task_names())


def _refusal(name: str) -> Optional[str]:
    for module, reason in REFUSED.items():
        if name in torchvision.models.list_models(module=module):
            return reason
    return None


def natural_size(name: str) -> int:
    """The input side torchvision's published weights for this model use."""
    if _task_names()[name] == "detection":
        return detection.natural_size(name)
    if _task_names()[name] == "segmentation":
        return SEGMENTATION_SIZE
    transforms = torchvision.models.get_model_weights(name).DEFAULT.transforms()  # metadata only, nothing fetched
    return int(transforms.crop_size[0])


def _patch(name: str) -> Optional[int]:
    m = re.fullmatch(r"vit_\w_(\d+)", name)
    return int(m.group(1)) if m else None


def size_rule(name: str) -> tuple[int, int]:
    """(minimum side, required multiple) of the input side for a registry model."""
    if _patch(name):
        return _patch(name), _patch(name)  # the side must hold a whole number of patches
    if name.startswith("maxvit"):
        return 224, 224  # every stage's grid must divide into 7x7 partitions: side / 32 a multiple of 7
    minimum = next((v for k, v in MIN_SIZE.items() if name.startswith(k)), 1)
    return minimum, 1


def check_size(name: str, image_size: int) -> None:
    minimum, multiple = size_rule(name)
    if image_size < minimum or image_size % multiple:
        accepts = f"a multiple of {multiple} from {minimum}" if multiple > 1 else f"at least {minimum}"
        raise ConfigError(f"--image-size {image_size}: {name} cannot take {image_size} px; it accepts {accepts} "
                          f"(natural size {natural_size(name)})")


@contextlib.contextmanager
def _parameters_on_meta():
    """Build with parameters and buffers on the meta device, while the builder's own arithmetic
    stays on CPU (regnet computes its widths with tensors, which `with torch.device('meta')` breaks)."""
    register_parameter, register_buffer = nn.Module.register_parameter, nn.Module.register_buffer

    def on_meta_parameter(module, name, param):
        if param is not None:
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register_parameter(module, name, param)

    def on_meta_buffer(module, name, tensor, persistent=True):
        register_buffer(module, name, None if tensor is None else tensor.to("meta"), persistent)

    nn.Module.register_parameter, nn.Module.register_buffer = on_meta_parameter, on_meta_buffer
    try:
        yield
    finally:
        nn.Module.register_parameter, nn.Module.register_buffer = register_parameter, register_buffer


def _classification_loss(output, targets: torch.Tensor) -> torch.Tensor:
    if isinstance(output, tuple):  # GoogLeNet, Inception v3 in train mode: (logits, auxiliary logits...)
        logits, *aux = output
        return F.cross_entropy(logits, targets) + AUX_WEIGHT * sum(F.cross_entropy(a, targets) for a in aux if a is not None)
    return F.cross_entropy(output, targets)


def _segmentation_loss(output: dict, targets: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(output["out"], targets, ignore_index=IGNORE_INDEX)
    if output.get("aux") is not None:
        loss = loss + SEG_AUX_WEIGHT * F.cross_entropy(output["aux"], targets, ignore_index=IGNORE_INDEX)
    return loss


def _make_batch(size: int, num_classes: int, per_pixel: bool, g: torch.Generator, batch: int) -> tuple:
    target_shape = (batch, size, size) if per_pixel else (batch,)
    return torch.randn(batch, 3, size, size, generator=g), torch.randint(0, num_classes, target_shape, generator=g)


def build_registry(name: str, image_size: Optional[int] = None, num_classes: Optional[int] = None,
                   meta: bool = False) -> ModelSpec:
    """A torchvision model with random weights (nothing downloaded) and synthetic data of its natural size.

    image_size None: the natural size. meta=True puts the parameters on the meta device (no memory,
    no compute; detection models cannot train a step there, their proposal sampling is data-dependent)."""
    name = resolve_workload_name(name)
    if name not in _task_names():
        raise ConfigError(f"--workloads: {name!r} is not a torchvision registry model")
    task = _task_names()[name]
    if num_classes is not None and num_classes < 1:
        raise ConfigError(f"{name}: {num_classes} classes; expected a whole number >= 1")
    if task == "detection":
        with _parameters_on_meta() if meta else contextlib.nullcontext():
            return detection.build(name, image_size, num_classes)
    size = natural_size(name) if image_size is None else image_size
    check_size(name, size)
    kwargs = {"weights": None}
    if task == "segmentation":
        kwargs["weights_backbone"] = None
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if _patch(name):
        kwargs["image_size"] = size
    if name.startswith("maxvit"):
        kwargs["input_size"] = (size, size)
    if name in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = True  # today's default, stated so torchvision does not warn
    with _parameters_on_meta() if meta else contextlib.nullcontext():
        model = torchvision.models.get_model(name, **kwargs)
    classes = num_classes or (21 if task == "segmentation" else 1000)  # torchvision's defaults
    loss_fn = _segmentation_loss if task == "segmentation" else _classification_loss
    details = {"task": task, "source": "torchvision", "model": name, "weights": "random init",
               "image_size": size, "natural_image_size": natural_size(name), "num_classes": classes,
               "input_shape": [3, size, size], "torchvision": torchvision.__version__}
    return ModelSpec(model=model, task=task, image_size=size, loss_fn=loss_fn, details=details,
                     make_batch=functools.partial(_make_batch, size, classes, task == "segmentation"),
                     min_batch_per_replica=2 if has_batchnorm(model) else 1)


def resolve_workload_name(name: str) -> str:
    """The canonical form of a --workloads entry; ConfigError for an unknown or unsupported one."""
    name = name.strip()
    if name in SUITE_WORKLOADS or name in _task_names():
        return name
    if usermodel.is_user_text(name):
        return usermodel.normalize(name)
    usermodel.refuse_bare_path(name)  # `examples/my_model.py` without :build is no torchvision name
    reason = _refusal(name)
    if reason:
        float_model = name.removeprefix("quantized_")
        instead = f" ({float_model!r})" if float_model in _task_names() and float_model != name else ""
        raise ConfigError(f"--workloads: {name!r} is not supported: {reason}{instead}")
    known = list(SUITE_WORKLOADS) + registry_names()
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"--workloads: unknown model {name!r}{hint} (any torchvision classification/segmentation/detection "
                      "model, 'synthetic', 'deeplabv3', 'transformer', or MODULE:FUNCTION / path.py:FUNCTION for your own)")


def build_workload(name: str, image_size: Optional[int] = None, num_classes: Optional[int] = None) -> ModelSpec:
    """The ModelSpec for a registry name or a user text (not for the suite's synthetic and deeplabv3)."""
    name = resolve_workload_name(name)
    if usermodel.is_user_text(name):
        return usermodel.build_user(name, image_size)
    return build_registry(name, image_size, num_classes)


def validate_workload(name: str, image_size: Optional[int] = None, num_classes: Optional[int] = None) -> dict:
    """Everything checkable before a sweep: the name, the size, and one dry training step
    (classification and segmentation on the meta device; detection and user models on CPU, batch 2,
    detection at a small side). Returns details for the store."""
    name = resolve_workload_name(name)
    if name in SUITE_WORKLOADS:
        return {"workload": name}
    if usermodel.is_user_text(name):
        spec = usermodel.build_user(name, image_size)
        checked = check_spec(spec, f"--workloads {name}")
    elif _task_names()[name] == "detection":
        return detection.validate(name, image_size, num_classes)
    else:
        spec = build_registry(name, image_size, num_classes, meta=True)
        checked = check_spec(spec, f"--workloads {name}", device="meta")
    return {**spec.details, **checked, "min_batch_per_replica": spec.min_batch_per_replica}
