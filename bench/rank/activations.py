"""Activation checkpointing: a block's activations are dropped after its forward and recomputed in backward, for
less memory at the cost of a second forward of the block.

    details = apply(model, "full")           # before the strategy wraps the model (bench.rank.worker.prepare)
    name = public_name(name)                  # a parameter's name as the model without checkpointing has it

The units are the blocks FSDP shards (bench.rank.blocks): the transformer's blocks, ResNet's bottlenecks (DeepLabV3's
backbone), the synthetic MLP's layers (each with its ReLU and repeats), else a model's repeated children.
`full` checkpoints every unit; `selective:K` every K-th, counting from 1 (units K, 2K, ...: torchtitan's selective
layer checkpointing; `selective` is selective:2). What stays: each checkpointed unit's input, and everything outside
the units (embedding, head, loss).

Each unit is wrapped in torch's checkpoint_wrapper (torch.utils.checkpoint, non-reentrant) in its parent's place:
the same under every strategy. The composable `torch.distributed._composable.checkpoint` keeps the same names but
its state on the module, which DataParallel's per-step replicas share across their threads (checked on torch 2.14:
checkpoint.state(replica) is checkpoint.state(module)); the wrapper holds no state. Both train to the same
parameters as no checkpointing under FSDP2's fully_shard on torch 2.14 (tried: 2 gloo ranks, 3 steps, a transformer);
FSDP shards the block inside the wrapper. The wrapper adds `_checkpoint_wrapped_module.` to parameter names, which
`public_name` takes out where names are compared (the equivalence gate).

BatchNorm inside a checkpointed block (ResNet's bottlenecks) would update its running statistics and batch count twice a
step: its forward runs again in backward, in training mode. The recomputation puts them back as the first forward left
them (`_recomputing`, through checkpoint's context_fn; each BatchNorm's copies taken by a forward pre-hook, so
DataParallel's replicas each keep their own, in their own autograd thread). Switching track_running_stats off for the
recomputation instead would save fewer tensors than the first forward (no running statistics), which non-reentrant
checkpointing refuses (CheckpointError, torch 2.14). Under torch.compile neither is installed: AOTAutograd applies a
forward's buffer updates once however much it recomputes (checked: one update a step), and a compiled checkpoint
takes a context_fn of TorchDispatchModes only.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext

import torch
from torch import nn

from bench.rank.blocks import blocks

WRAPPED = "_checkpoint_wrapped_module."


def mode_every(mode: str) -> int:
    """How often a unit is checkpointed: 0 none, 1 every unit (full), K every K-th (selective:K)."""
    if mode == "none":
        return 0
    if mode == "full":
        return 1
    name, _, k = mode.partition(":")
    if name != "selective" or not k.isdigit() or int(k) < 1:
        raise ValueError(f"activation checkpointing {mode!r}: expected none, full or selective:K")
    return int(k)


def chosen(units: list, every: int) -> list:
    """The units checkpointed: every `every`-th, counting from 1."""
    return [u for i, u in enumerate(units, 1) if every and i % every == 0]


_RECOMPUTE = threading.local()   # .kept: [(a BatchNorm's statistic, its copy)] while this thread recomputes a block


@contextmanager
def _recomputing():
    """A checkpointed block's second forward, in backward: BatchNorm's statistics put back afterwards."""
    outer = getattr(_RECOMPUTE, "kept", None)
    _RECOMPUTE.kept = kept = []
    try:
        yield
    finally:
        with torch.no_grad():
            for live, saved in kept:
                live.copy_(saved)
        _RECOMPUTE.kept = outer


def _contexts() -> tuple:
    """checkpoint's context_fn: nothing around the first forward, `_recomputing` around the second."""
    return nullcontext(), _recomputing()


def _keep_statistics(bn: nn.Module, args) -> None:
    """A BatchNorm's forward pre-hook inside a checkpointed block: while recomputing, copies of what it will update."""
    kept = getattr(_RECOMPUTE, "kept", None)
    if kept is not None and bn.training and bn.track_running_stats:
        kept += [(t, t.clone()) for t in (bn.running_mean, bn.running_var, bn.num_batches_tracked) if t is not None]


def _wrapped(block: nn.Module, compiled: bool) -> nn.Module:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    norms = [m for m in block.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if compiled or not norms:
        return checkpoint_wrapper(block)
    for m in norms:
        m.register_forward_pre_hook(_keep_statistics)
    return checkpoint_wrapper(block, context_fn=_contexts)  # passed on to torch.utils.checkpoint


def apply(model: nn.Module, mode: str, compiled: bool = False) -> dict:
    """Checkpoint the chosen blocks of `model` in place (`mode`: none, full, selective:K). Returns what was done, for the
    result's details: the mode, how many units of how many, their kind, and that the step recomputes their forward.
    compiled: the model will run under torch.compile (BatchNorm's statistics are then updated once without help)."""
    every = mode_every(mode)
    if not every:
        return {"mode": "none"}
    units = blocks(model)
    picked = chosen(units, every)
    ids = {id(u) for u in picked}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in ids:
                setattr(parent, name, _wrapped(child, compiled))  # nn.ModuleList / nn.Sequential take their index
    kinds = sorted({type(u).__name__ for u in picked})
    return {"mode": mode, "every": every, "checkpointed_units": len(picked), "units": len(units),
            "unit": ", ".join(kinds) or "none found",
            "recomputes": f"the forward of {len(picked)} of {len(units)} {'/'.join(kinds) or 'units'} runs again in backward"
                          " (model FLOPs count it once; the hardware did it twice)"}


def checkpointed_meta_copy(model: nn.Module, mode: str) -> nn.Module:
    """A copy of `model` on the meta device (no storage copied) with `mode`'s checkpointing applied: what the FLOP
    counter runs to count the hardware's FLOPs, recomputation included (bench.workloads.flops.count_step)."""
    import copy
    memo: dict = {}
    for t in list(model.parameters()) + list(model.buffers()):
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = nn.Parameter(meta, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else meta
    twin = copy.deepcopy(model, memo)
    apply(twin, mode)
    return twin


def recompute_flops(ac: dict, details: dict) -> dict:
    """FLOPs per sample the recomputation adds, where the workload knows its units' forward FLOPs
    (details['unit_forward_flops_per_sample']: the transformer, the synthetic MLP): model FLOPs stay as they are,
    the hardware's are model + recomputed."""
    per_unit = details.get("unit_forward_flops_per_sample")
    model = details.get("flops_per_sample")
    if not ac.get("checkpointed_units") or per_unit is None or model is None:
        return {}
    extra = ac["checkpointed_units"] * per_unit
    return {"recomputed_flops_per_sample": extra, "hardware_flops_per_sample": model + extra}


def public_name(name: str) -> str:
    """A parameter's name without the checkpoint wrappers' part: as the model has it without checkpointing."""
    return name.replace(WRAPPED, "")
