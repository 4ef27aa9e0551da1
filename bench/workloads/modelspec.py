"""What a model workload is, and the dry run that checks one before a sweep starts.

A `ModelSpec` is a model (random init, on CPU, not yet wrapped by a strategy) plus what the suite
needs to train it: `make_batch(generator, batch) -> (inputs, targets)` and `loss_fn(output, targets)`.
Torchvision models (bench/workloads/models.py) and the user's own (bench/workloads/usermodel.py) both become one.
`check_spec(spec, name)` runs one training step on a small batch and raises `ConfigError` naming
the workload and what broke; it returns the parameter count and shapes for the store, and the parameters that got
no gradient (DDP then needs --find-unused-parameters true).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import nn

from bench.config import ConfigError

DRY_RUN_SEED = 0


@dataclass
class ModelSpec:
    model: nn.Module                                   # random init, on CPU, not yet wrapped
    make_batch: Callable[[torch.Generator, int], tuple]  # (generator, batch) -> (inputs, targets), CPU, dim 0 = samples
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]  # (model output, targets) -> scalar loss
    task: str = "user"                                 # classification | segmentation | detection | user
    image_size: Optional[int] = None                   # input side in pixels actually used; None: not an image model
    min_batch_per_replica: int = 1                     # 2 where BatchNorm trains (it needs 2 values per channel)
    details: dict = field(default_factory=dict)        # what the store records about the model


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _batch(spec: ModelSpec, name: str, batch: int, seed: int = DRY_RUN_SEED) -> tuple:
    where = f"{name}: make_batch(generator, {batch})"
    try:
        out = spec.make_batch(torch.Generator().manual_seed(seed), batch)
    except Exception as e:
        raise ConfigError(f"{where} raised {type(e).__name__}: {e}") from e
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        raise ConfigError(f"{where} returned {_describe(out)}; expected an (inputs, targets) pair of tensors")
    for what, t in zip(("inputs", "targets"), out):
        if t.dim() == 0 or t.shape[0] != batch:
            raise ConfigError(f"{where} returned {what} of shape {tuple(t.shape)}; expected dim 0 = {batch} samples "
                              "(DataParallel splits batches along dim 0)")
        if t.device.type != "cpu":
            raise ConfigError(f"{where} returned {what} on {t.device}; expected CPU tensors (the suite moves them)")
    return tuple(out)


def check_spec(spec: ModelSpec, name: str, device: str = "cpu") -> dict:
    """One training step on a small batch; raise ConfigError on a broken contract, else return details.

    device 'meta' checks shapes only (no memory, no compute): how large torchvision models are
    checked up front. The step moves BatchNorm statistics: build a fresh spec for the run itself.
    """
    model = spec.model
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{name}: model is {_describe(model)}; expected a torch.nn.Module")
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    if n_params == 0:
        raise ConfigError(f"{name}: the model has no trainable parameters; there is nothing to train or synchronise")
    if not isinstance(spec.min_batch_per_replica, int) or spec.min_batch_per_replica < 1:
        raise ConfigError(f"{name}: min_batch_per_replica is {spec.min_batch_per_replica!r}; expected a whole number >= 1")
    batch = max(2, spec.min_batch_per_replica)
    x, y = _batch(spec, name, batch)
    x2, y2 = _batch(spec, name, batch)
    if not (torch.equal(x, x2) and torch.equal(y, y2)):
        raise ConfigError(f"{name}: make_batch gave different batches for two generators seeded alike; "
                          "expected it to draw all randomness from its generator argument")
    _batch(spec, name, batch + 1)  # the batch argument is honoured, not a constant
    model.train()
    model.zero_grad(set_to_none=True)
    try:
        output = model(x.to(device))
    except Exception as e:
        raise ConfigError(f"{name}: forward on inputs of shape {tuple(x.shape)} raised {type(e).__name__}: {e}") from e
    try:
        loss = spec.loss_fn(output, y.to(device))
    except Exception as e:
        raise ConfigError(f"{name}: loss_fn(output, targets) raised {type(e).__name__}: {e}") from e
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ConfigError(f"{name}: loss_fn returned {_describe(loss)}; expected a scalar (one-element) tensor")
    if not loss.requires_grad:
        raise ConfigError(f"{name}: the loss does not depend on any parameter (requires_grad is False)")
    if device != "meta" and not torch.isfinite(loss).all():
        raise ConfigError(f"{name}: the loss is {loss.item()} on a random batch; expected a finite number")
    try:
        loss.backward()
    except Exception as e:
        raise ConfigError(f"{name}: backward raised {type(e).__name__}: {e}") from e
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    if len(unused) == len(params):
        raise ConfigError(f"{name}: no parameter received a gradient")
    # Parameters with no gradient (an unused head): DDP waits for every parameter's gradient and fails on its second
    # step unless find_unused_parameters is on; planning names them with the flag (bench.sweep.settings.unused_refusal).
    model.zero_grad(set_to_none=True)
    return {"unused_parameters": unused, "parameters": n_params, "input_shape": list(x.shape[1:]), "target_shape": list(y.shape[1:]),
            "input_dtype": str(x.dtype).removeprefix("torch."), "target_dtype": str(y.dtype).removeprefix("torch."),
            "dry_run_batch": batch, "dry_run_loss": None if device == "meta" else round(loss.item(), 6)}
