"""The optimizer every strategy trains with, and the settings stored with each result (details_json 'optimizer')."""
from __future__ import annotations

import torch
from torch import nn

LR = 0.01
MOMENTUM = 0.9


def optimizer_settings(cuda: bool, precision: str = "fp32") -> dict:
    """The one SGD implementation every strategy uses, stored with the result (details_json 'optimizer').

    foreach on CUDA for every strategy: FSDP2's sharded parameters (DTensors) cannot use fused SGD, so
    fused for the others would compare two implementations, and under fp16 only FSDP's scaler would read
    found-inf on the host each step. With one implementation, that read happens for every strategy alike.
    On CPU, the per-parameter loop (torch's default there) for every strategy."""
    out = {"name": "SGD", "lr": LR, "momentum": MOMENTUM, "implementation": "foreach" if cuda else "for-loop"}
    if precision == "fp16":
        out["grad_scaler"] = "GradScaler reads found-inf on the host once per step (non-fused optimizer), every strategy alike"
    return out


def make_optimizer(model: nn.Module, cuda: bool = False) -> torch.optim.Optimizer:
    # The same implementation whatever the parameters are (plain tensors or FSDP's DTensors): see optimizer_settings.
    return torch.optim.SGD(list(model.parameters()), lr=LR, momentum=MOMENTUM, foreach=cuda)
