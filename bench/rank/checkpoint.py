"""The per-epoch checkpoint (--checkpoint): the whole model's state, written by rank 0, for every strategy.

    save_full(model, path, rank)   # a collective under FSDP: every rank calls it

DDP, DataParallel and one device hold every parameter on every rank: rank 0 writes its own state dict.
FSDP2 holds a shard per rank: the shards are gathered whole (torch.distributed.checkpoint's full state
dict, offloaded to the host) and rank 0 writes them, so FSDP writes the same tensors, under the same
names, in the same bytes as DDP, and the file loads into the unwrapped model with load_state_dict.
"""
from __future__ import annotations

import torch
from torch import nn

from bench.rank.strategies import unwrap


def is_sharded(model: nn.Module) -> bool:
    return any(hasattr(p, "placements") for p in unwrap(model).parameters())  # DTensor parameters: FSDP2


def full_state_dict(model: nn.Module) -> dict:
    """The unwrapped model's whole state dict, every tensor on the host (empty on ranks > 0 under FSDP)."""
    inner = unwrap(model)
    if not is_sharded(model):
        return {k: v.detach().cpu() for k, v in inner.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    state = get_model_state_dict(inner, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().cpu() for k, v in state.items()}  # a plain dict, as above: the same file bytes


def save_full(model: nn.Module, path: str, rank: int) -> None:
    state = full_state_dict(model)  # every rank takes part in FSDP's gathers
    if rank == 0:
        torch.save(state, path)
