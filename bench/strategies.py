"""Strategies: functions from a model to a wrapped model, one per way of using the devices.

    apply_single(model, ctx)  one device
    apply_dp(model, ctx)      nn.DataParallel over the first ctx.count visible GPUs (on CPU the
                              wrapper has no devices and calls the module directly: its overhead)
    apply_ddp(model, ctx)     DistributedDataParallel, NCCL on GPUs and gloo on CPU, one process per device

Adding a strategy means adding one function here and one entry in STRATEGIES.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


@dataclass(frozen=True)
class Ctx:
    """Where this process runs: its device and its place among the processes of the configuration."""
    device: torch.device
    count: int            # devices used by the configuration
    rank: int = 0
    world_size: int = 1
    sync_bn: bool = False

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def apply_single(model: nn.Module, ctx: Ctx) -> nn.Module:
    return model.to(ctx.device)


def apply_dp(model: nn.Module, ctx: Ctx) -> nn.Module:
    model = model.to(ctx.device)
    if ctx.cuda:
        # Inputs go to GPU 0, DataParallel scatters them, replicates the module every step and
        # gathers outputs back on GPU 0: the source of its memory skew.
        return nn.DataParallel(model, device_ids=list(range(ctx.count)), output_device=0)
    return nn.DataParallel(model)  # no GPU: device_ids == [], forward is a pass-through


def apply_ddp(model: nn.Module, ctx: Ctx) -> nn.Module:
    if ctx.sync_bn and ctx.cuda:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(ctx.device)
    # DDP broadcasts rank 0's parameters and buffers at construction: identical initial weights.
    return nn.parallel.DistributedDataParallel(model, device_ids=[ctx.device.index] if ctx.cuda else None)


STRATEGIES: dict[str, Callable[[nn.Module, Ctx], nn.Module]] = {
    "single": apply_single,
    "dp": apply_dp,
    "ddp": apply_ddp,
}


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside a DataParallel/DDP wrapper."""
    return model.module if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)) else model
