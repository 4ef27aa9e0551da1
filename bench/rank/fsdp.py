"""FSDP2 strategy: `fully_shard` per block, then on the root, over a 1-D device mesh spanning the world, or (HSDP)
a 2-D mesh of (replicate, shard): parameters, gradients and optimizer state sharded within each group of `shard`
consecutive ranks (one node's devices by default), the groups replicas of each other.

    model = apply_fsdp(model, ctx)                 # after init_process_group, before the optimizer
    opt = make_optimizer(model)                    # sees the sharded (DTensor) parameters
    with no_sync(model): loss.backward()           # accumulate without reduce-scatter
    local_bytes = sharded_parameter_bytes(model)   # this rank's share of the parameters

Each block found by `shard_blocks` becomes one communication unit (an all-gather before its forward, again
before its backward if resharded after forward, and a reduce-scatter after its backward); whatever the
blocks leave over (stem, heads) belongs to the root's unit.
Works with NCCL on GPUs and gloo on CPU (the mesh's device type picks the communication device).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
try:
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
except ImportError as e:  # FSDP2 became public in torch 2.6; the rest of the suite runs on older versions
    raise ImportError(f"the fsdp strategy needs torch>=2.6 (FSDP2's fully_shard), this is torch {torch.__version__}") from e

from bench.rank.blocks import blocks
from bench.rank.context import Ctx
from bench.workloads import materialize


def shard_blocks(model: nn.Module) -> list[nn.Module]:
    """The submodules that become FSDP units, in module order, none inside another and none the root
    (bench.rank.blocks: the transformer's blocks, ResNet blocks, ViT layers, the MLP's layers, else repeated children)."""
    return blocks(model)


def _onto_device(module: nn.Module, device: torch.device, done: set) -> None:
    """Copies the module's parameters and buffers that no FSDP unit holds yet (not DTensors, not on the meta device)
    onto `device`, and broadcasts each from rank 0 (in module order: every rank the same). DDP starts every rank from
    rank 0's weights and buffers; fully_shard keeps each rank's own copy and takes its shard from it, so broadcasting
    first gives FSDP the same starting point. Called per unit just before it is sharded, so the GPU holds one block
    unsharded at a time beside the shards, never the whole model (the whole run's memory peak is FSDP's own).
    `done`: the modules an earlier call moved (the root's call passes over the blocks' buffers, already broadcast)."""
    with torch.no_grad():
        for m in module.modules():
            if m in done:
                continue
            done.add(m)
            for p in m._parameters.values():
                if p is None or isinstance(p, DTensor) or p.is_meta:
                    continue
                if p.device != device:
                    p.data = p.data.to(device)
                dist.broadcast(p.data, src=0)
            for name, b in m._buffers.items():
                if b is None or isinstance(b, DTensor) or b.is_meta:
                    continue
                if b.device != device:
                    m._buffers[name] = b = b.to(device)
                dist.broadcast(b, src=0)


def replicas_of(world: int, shard: int) -> int:
    """HSDP's replicate degree: the world in groups of `shard` ranks (the sweep's plan refuses counts that do not split)."""
    if shard < 1 or world % shard:
        raise ValueError(f"HSDP: {world} ranks do not split into shard groups of {shard}")
    return world // shard


def mesh_words(replicate: int, shard: int) -> dict:
    """HSDP's mesh as stored with the result, saying what one shard group still runs (bench.shared.spec.ONE_SHARD_GROUP)."""
    from bench.shared.spec import ONE_SHARD_GROUP
    out = {"mesh": f"replicate {replicate} x shard {shard}", "replicate": replicate, "shard_size": shard}
    if replicate == 1:
        out["note"] = f"replicate 1: {ONE_SHARD_GROUP}"
    return out


def apply_fsdp(model: nn.Module, ctx: Ctx, reshard_after_forward: bool = True, mesh_shape: tuple | None = None,
               param_dtype: torch.dtype | None = None, reduce_dtype: torch.dtype | None = None,
               offload_to_cpu: bool = False) -> nn.Module:
    """FSDP2 over all ranks: `fully_shard` on each of `shard_blocks(model)`, then on the root.

    mesh_shape: None, a 1-D mesh of every rank (FSDP); (replicate, shard), HSDP: rank r belongs to shard group
    r // shard (consecutive ranks: one node's under torchrun), whose members each hold 1/shard of every parameter,
    gradient and optimizer state; gradients are reduce-scattered within the group and all-reduced across groups.

    reshard_after_forward: free the gathered parameters after a block's forward (all-gather them again
    in backward) rather than keep them until backward; the root follows FSDP2's own rule (not resharded,
    since its backward starts at once). param_dtype: dtype of the gathered parameters and of the compute (e.g. torch.bfloat16; the sharded fp32 copy is what the optimizer updates).
    reduce_dtype: dtype of the gradient reduce-scatter. None keeps the parameters' dtype.
    offload_to_cpu: FSDP2's CPUOffloadPolicy on every unit: the sharded parameters and their gradients live in pinned
    host memory, each unit's are copied to the GPU for its all-gather and its gradients back after the reduce-scatter,
    and the optimizer steps on the CPU (CUDA only: on CPU there is nothing to offload, planning skips it).
    Every forward must be followed by its backward (the suite's steps are): the root, left gathered after
    forward by FSDP2's rule, stays gathered after a forward with none (even under no_grad), and later steps
    then compute with its stale parameters (seen with torch 2.15: the head off by 0.09 after 4 steps).
    The process group must exist; create the optimizer afterwards (the parameters are replaced by
    sharded DTensors). Returns the same module object, now an FSDPModule.
    """
    if not dist.is_initialized():
        raise RuntimeError("apply_fsdp needs an initialised process group (torch.distributed.init_process_group)")
    mesh = (init_device_mesh(ctx.device.type, (dist.get_world_size(),)) if mesh_shape is None else
            init_device_mesh(ctx.device.type, tuple(mesh_shape), mesh_dim_names=("replicate", "shard")))
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    offload = {"offload_policy": CPUOffloadPolicy(pin_memory=ctx.cuda)} if offload_to_cpu else {}  # pinning needs CUDA
    moved: set = set()
    for block in shard_blocks(model):  # unit by unit: made real (a model built for it on meta), moved, sharded
        materialize.make_real(block, ctx.device)
        _onto_device(block, ctx.device, moved)
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp, **offload)
    # The root is not resharded after forward (its backward starts at once): FSDP2's own rule for the root, which
    # reshard_after_forward=None asks for from torch 2.8 and an explicit False gives on every version from 2.6 (None
    # is refused before 2.8; read in 2.7.1's and 2.14's sources: the root's post-forward mesh is None either way); an
    # explicit True would all-gather the root's parameters (DeepLabV3's head, ~16 M) again for backward.
    materialize.make_real(model, ctx.device)  # what the blocks left over (stem, heads, embedding): the root's unit
    _onto_device(model, ctx.device, moved)
    fully_shard(model, mesh=mesh, reshard_after_forward=False, mp_policy=mp, **offload)
    return model


@contextlib.contextmanager
def no_sync(model: nn.Module) -> Iterator[None]:
    """FSDP's counterpart of DDP's no_sync(): backward inside skips the reduce-scatter, and gradients
    accumulate, unsharded, on each rank; the next backward outside reduces what accumulated. The
    forward all-gathers still happen: only gradient communication is skipped."""
    if not isinstance(model, FSDPModule):
        raise TypeError(f"no_sync needs a module returned by apply_fsdp, got {type(model).__name__}")
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def sharded_parameter_bytes(model: nn.Module) -> int:
    """Bytes of parameters this rank holds between steps (its shards; whole tensors if unsharded)."""
    total = 0
    for p in model.parameters():
        t = p.to_local() if isinstance(p, DTensor) else p
        total += t.numel() * t.element_size()
    return total
