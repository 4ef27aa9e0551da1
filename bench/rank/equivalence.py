"""The correctness gate inside a worker: k plain optimizer steps, then rank 0 saves the parameters and the optimizer's
state, each in full, for the sweep to compare (bench.sweep.equivalence runs the reference and the candidate and
compares them). The state matters for AdamW: its update is nearly blind to the gradients' scale (m / sqrt(v)), so
a strategy that summed instead of averaged them would end with the right parameters but not the right state."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from bench.rank.activations import public_name
from bench.rank.strategies import unwrap
from bench.shared.spec import RunSpec


def train(spec: RunSpec, t, batches) -> dict:
    """In the worker: k plain optimizer steps (t: a bench.rank.loop.Trainer); rank 0 saves the final parameters.

    The reference is one process taking the global batch. BatchNorm: DDP without SyncBatchNorm,
    DataParallel and FSDP normalise each replica's batch on its own, so the reference feeds its
    replicas' pieces one at a time and averages their gradients (t.split_replicas): the same
    arithmetic in one process. With --sync-bn (DDP on CUDA) the reference takes the batch whole.
    Dropout draws different masks for different splits, so it is off on both sides. Parameters are
    compared, not buffers (running statistics are updated per replica by design)."""
    for m in t.model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.eval()
    got = t.window(batches, spec.steps, "equivalence")
    losses = torch.tensor(got["losses"], dtype=torch.float64, device=t.device)  # NCCL reduces device tensors only
    if t.distributed:  # the loss over the global batch, as the reference reports it
        dist.all_reduce(losses)
        losses /= dist.get_world_size()
    losses = losses.cpu()
    params = full_parameters(t.model)
    params.update(full_optimizer_state(t.model, t.opt, t.rank))
    if t.rank == 0:
        torch.save(params, os.path.join(spec.out_dir, "params.pt"))
    return {"losses": losses.tolist(), "dropout": "off",
            "batchnorm": "statistics over the global batch (SyncBatchNorm)" if spec.sync_bn and t.device.type == "cuda" else
                         "statistics per replica batch" + (f" (reference: {t.replicas} micro-batches)" if t.split_replicas else "")}


def full_parameters(model: nn.Module) -> dict:
    """Every parameter in full on the CPU, named as in the user's module (FSDP's shards gathered)."""
    out = {}
    for name, p in unwrap(model).named_parameters():
        name = public_name(name)  # activation checkpointing's wrappers: the reference runs without them
        p = p.detach()
        out[name] = gathered(p).cpu()  # FSDP2's DTensor shards: a collective, every rank takes part
    return out


_HOST_MESHES: dict = {}   # id(a DTensor's device mesh) -> a CPU mesh of the same layout (the gathers over gloo)


def gathered(t: torch.Tensor) -> torch.Tensor:
    """A DTensor in full (a collective: every rank calls it, in the same order), else t itself.

    Over gloo the gather runs on host copies of the shards through a CPU mesh of the same layout: gloo's all-gather of
    CUDA tensors crashed both ranks of FSDP's gate with SIGSEGV on one H100 (two ranks sharing it, bench.shared.rehearsal;
    gloo's coalesced all-gather has no CUDA path, pytorch#152645), where its all-reduce and FSDP's own gathers ran. On
    the CPU the same route is taken, so the CPU suite runs it.

    Over NCCL the gather runs on the mesh's device: under FSDP's CPU offload (--fsdp-offload cpu) the shards live in
    host memory, which NCCL cannot gather, so they are copied onto the mesh's device (its current one) first."""
    if not hasattr(t, "full_tensor"):
        return t
    mesh = t.device_mesh
    if dist.get_backend() != "gloo":
        local = t.to_local()
        if local.device.type != mesh.device_type:
            t = type(t).from_local(local.detach().to(mesh.device_type), mesh, t.placements, run_check=False,
                                   shape=t.shape, stride=t.stride())
        return t.full_tensor()
    if id(mesh) not in _HOST_MESHES:  # built once per mesh; building one is itself a collective
        from torch.distributed.device_mesh import init_device_mesh
        _HOST_MESHES[id(mesh)] = init_device_mesh("cpu", tuple(mesh.shape), mesh_dim_names=mesh.mesh_dim_names)
    host = type(t).from_local(t.to_local().detach().cpu(), _HOST_MESHES[id(mesh)], t.placements, run_check=False,
                              shape=t.shape, stride=t.stride())
    return host.full_tensor()


STATE_PREFIX = "optimizer state: "


def full_optimizer_state(model: nn.Module, opt, rank: int = 0) -> dict:
    """{'optimizer state: <parameter name>.<key>': the whole tensor on the CPU} for every state tensor of every
    parameter (momentum_buffer; exp_avg, exp_avg_sq), step counts left out. FSDP2/HSDP keep it as DTensor shards
    (gathered: a collective), ZeroRedundancyOptimizer keeps each parameter's state on the rank that owns it
    (consolidated to rank 0: a collective). Every rank calls this; only rank 0's result is whole under ZeRO."""
    named = [(public_name(n), p) for n, p in unwrap(model).named_parameters()]
    if hasattr(opt, "consolidate_state_dict"):  # ZeroRedundancyOptimizer
        opt.consolidate_state_dict(to=0)
        if rank != 0:
            return {}
        ordered = [p for group in opt.param_groups for p in group["params"]]  # its state_dict's indices
        per_param = {id(ordered[i]): st for i, st in opt.state_dict()["state"].items()}
    else:
        per_param = {id(p): st for p, st in opt.state.items()}
    out = {}
    for name, p in named:  # the same order on every rank: the gathers below are collectives
        for key, v in sorted(per_param.get(id(p), {}).items()):
            if torch.is_tensor(v) and v.dim() > 0:
                out[f"{STATE_PREFIX}{name}.{key}"] = gathered(v).detach().cpu()
    return out
