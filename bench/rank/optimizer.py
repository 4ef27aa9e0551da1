"""The optimizer every strategy trains with, and the settings stored with each result (details_json 'optimizer').

    opt = make_optimizer(model, cuda, "adamw")     # after the strategy wrapped the model

Two choices, an axis of the sweep (`--optimizer sgd,adamw`, stored per result): SGD with momentum (one state
tensor per parameter, 4 bytes a parameter in fp32) and AdamW with torch's defaults (exp_avg and exp_avg_sq, 8 bytes
a parameter). One implementation per choice for every strategy. Under `zero` (bench.rank.strategies.apply_zero)
the same optimizer runs inside torch's ZeroRedundancyOptimizer: each rank keeps the state of its share of the
parameters and, inside step(), updates that share and broadcasts it to the other ranks.
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

LR = 0.01
MOMENTUM = 0.9
NAMES = {"sgd": "SGD", "adamw": "AdamW"}


def _choice(name: str, cuda: bool) -> tuple:
    """(torch optimizer class, keyword arguments). Looked up when called (tests stand in for torch.optim.SGD).

    foreach on CUDA for every strategy: FSDP2's sharded parameters (DTensors) cannot use the fused kernels, so
    fused for the others would compare two implementations, and under fp16 only FSDP's scaler would read
    found-inf on the host each step. On CPU, the per-parameter loop (torch's default there) for every strategy."""
    if name == "sgd":
        return torch.optim.SGD, {"lr": LR, "momentum": MOMENTUM, "foreach": cuda}
    if name == "adamw":
        return torch.optim.AdamW, {"foreach": cuda}  # lr, betas, eps and weight_decay: torch's defaults
    raise ValueError(f"unknown optimizer {name!r}; expected one of {', '.join(NAMES)}")


def zero_options(model: nn.Module):
    """ZeroRedundancyOptimizer's keyword arguments where the strategy shards the optimizer (apply_zero), else None."""
    return getattr(getattr(model, "_orig_mod", model), "bench_zero", None)


def make_optimizer(model: nn.Module, cuda: bool = False, name: str = "sgd") -> torch.optim.Optimizer:
    """The sweep's optimizer over the wrapped model's parameters (plain tensors, FSDP's DTensors), sharded over
    the ranks with ZeroRedundancyOptimizer where the strategy asks for it."""
    cls, kw = _choice(name, cuda)
    zero = zero_options(model)
    if zero is not None:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(list(model.parameters()), optimizer_class=cls, **zero, **kw)
    return cls(list(model.parameters()), **kw)


def optimizer_settings(cuda: bool, precision: str = "fp32", name: str = "sgd", zero=None) -> dict:
    """What trained, stored with the result (details_json 'optimizer'): the class and every hyper-parameter as
    torch fills it in, the implementation, and ZeroRedundancyOptimizer's settings under zero."""
    cls, kw = _choice(name, cuda)
    signature = inspect.signature(cls.__init__).parameters  # torch's defaults, as this torch has them
    hyper = {k: p.default for k, p in signature.items() if k in ("lr", "betas", "eps", "weight_decay")}
    hyper.update((k, v) for k, v in kw.items() if k != "foreach")
    out = {"name": NAMES[name], **{k: (list(v) if isinstance(v, tuple) else v) for k, v in hyper.items()},
           "implementation": "foreach" if cuda else "for-loop"}
    if zero is not None:
        out["sharded"] = {"wrapper": "ZeroRedundancyOptimizer", **zero,
                          "broadcast": "each rank broadcasts its updated parameters inside step(), in the measured step"}
    if precision == "fp16":
        out["grad_scaler"] = "GradScaler reads found-inf on the host once per step (non-fused optimizer), every strategy alike"
    return out
