"""The correctness gate inside a worker: k plain optimizer steps, then rank 0 saves the parameters for the
sweep to compare (bench.sweep.equivalence runs the reference and the candidate and compares them)."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

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
    if t.rank == 0:
        torch.save(params, os.path.join(spec.out_dir, "params.pt"))
    return {"losses": losses.tolist(), "dropout": "off",
            "batchnorm": "statistics over the global batch (SyncBatchNorm)" if spec.sync_bn and t.device.type == "cuda" else
                         "statistics per replica batch" + (f" (reference: {t.replicas} micro-batches)" if t.split_replicas else "")}


def full_parameters(model: nn.Module) -> dict:
    """Every parameter in full on the CPU, named as in the user's module (FSDP's shards gathered)."""
    out = {}
    for name, p in unwrap(model).named_parameters():
        p = p.detach()
        if hasattr(p, "full_tensor"):  # a DTensor shard of FSDP2: a collective, every rank takes part
            p = p.full_tensor()
        out[name] = p.cpu()
    return out
