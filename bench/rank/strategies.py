"""Strategies: functions from a model to a wrapped model, one per way of using the devices.

    apply_single(model, ctx)  one device
    apply_dp(model, ctx)      nn.DataParallel over the first ctx.count visible GPUs (on CPU the
                              wrapper has no devices and calls the module directly: its overhead)
    apply_ddp(model, ctx)     DistributedDataParallel, NCCL on GPUs and gloo on CPU, one process per
                              device, with the settings in ctx.options (bucket_cap_mb,
                              gradient_as_bucket_view, static_graph, find_unused_parameters, sync_buffers, comm_hook)
    apply_zero(model, ctx)    DDP as above, its optimizer sharded over the ranks by ZeroRedundancyOptimizer (ZeRO-1:
                              bench.rank.optimizer builds it; ctx.options: parameters_as_bucket_view)
    apply_fsdp(model, ctx)    FSDP2 `fully_shard` per block, then the root (bench.rank.fsdp); ctx.options: reshard,
                              mixed_precision, offload (cpu: CPUOffloadPolicy, CUDA only)
    apply_hsdp(model, ctx)    FSDP2 on a 2-D mesh (replicate, shard): sharded within groups of ctx.options
                              shard_size ranks, replicated across them (replicate 1: FSDP's sharding,
                              still HSDP's all-reduce over a group of one: bench.shared.spec.ONE_SHARD_GROUP)

Adding a strategy means adding one function here and one entry in STRATEGIES.
"""
from __future__ import annotations

import inspect
from typing import Callable, Optional

import torch
from torch import nn

from bench.rank.context import Ctx


def apply_single(model: nn.Module, ctx: Ctx) -> nn.Module:
    return model.to(ctx.device)


# torch 2.3 (pyproject's floor) asks autocast's state per device with functions of their own; torch 2.4 added the
# device-type argument (pytorch#124359) and deprecates those.
_LEGACY_AUTOCAST = {"cuda": ("is_autocast_enabled", "get_autocast_gpu_dtype"),
                    "cpu": ("is_autocast_cpu_enabled", "get_autocast_cpu_dtype")}


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype of the caller's autocast on `device_type`, None when it is off, on torch 2.3 as on 2.4 and later."""
    try:
        on = torch.is_autocast_enabled(device_type)
        return torch.get_autocast_dtype(device_type) if on else None
    except (TypeError, AttributeError):  # torch < 2.4: no device-type argument, no get_autocast_dtype
        enabled, dtype = (getattr(torch, name) for name in _LEGACY_AUTOCAST[device_type])
        return dtype() if enabled() else None


class _InAutocast:
    """A replica called inside the caller's autocast: torch's parallel_apply passes its replica threads
    only whether autocast is on, not its dtype, so bf16 would silently run as fp16 on GPUs 1..N-1."""

    def __init__(self, module: nn.Module, dtype: torch.dtype, device_type: str = "cuda"):
        self.module, self.dtype, self.device_type = module, dtype, device_type

    def __call__(self, *args, **kwargs):
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.module(*args, **kwargs)


def keep_memory_format(module: nn.Module, replicas: list) -> list:
    """The replicas of `module`, each 4-D parameter in the memory format the source's has. replicate() copies the
    parameters to devices 1..N-1 flattened into one buffer and unflattened (comm.broadcast_coalesced), so there they
    are contiguous NCHW whatever the source's format (pytorch#37484): channels_last DataParallel would convolve with
    channels_last weights on GPU 0 only, and convert layouts on the others every step. A replica's weight is made
    channels_last again by a copy inside autograd (its gradient flows back through it to the broadcast), on devices
    1..N-1 only, every step: a cost DataParallel's channels_last step now carries, as it must to convolve alike."""
    for src, *copies in zip(module.modules(), *(r.modules() for r in replicas)):
        for name, p in src._parameters.items():
            if p is None or p.dim() != 4 or p.is_contiguous() or not p.is_contiguous(memory_format=torch.channels_last):
                continue
            for replica in copies:
                t = getattr(replica, name)
                if not t.is_contiguous(memory_format=torch.channels_last):
                    t = t.contiguous(memory_format=torch.channels_last)
                    setattr(replica, name, t)
                    replica._former_parameters[name] = t  # what DDP-style readers of a replica see (torch's replicate)
    return replicas


class AutocastDataParallel(nn.DataParallel):
    """nn.DataParallel whose replicas run under the caller's autocast dtype and keep the parameters' memory format."""
    autocast_device = "cuda"   # whose autocast the replicas' threads inherit (tests: "cpu", with a stand-in apply)

    def replicate(self, module, device_ids):
        return keep_memory_format(module, super().replicate(module, device_ids))

    def parallel_apply(self, replicas, inputs, kwargs):
        dtype = autocast_dtype(self.autocast_device)
        if dtype is None:
            return super().parallel_apply(replicas, inputs, kwargs)
        return super().parallel_apply([_InAutocast(r, dtype, self.autocast_device) for r in replicas], inputs, kwargs)


def apply_dp(model: nn.Module, ctx: Ctx) -> nn.Module:
    model = model.to(ctx.device)
    if ctx.cuda:
        # Inputs go to GPU 0, DataParallel scatters them, replicates the module every step and
        # gathers outputs back on GPU 0: the source of its memory skew.
        return AutocastDataParallel(model, device_ids=list(range(ctx.count)), output_device=0)
    return nn.DataParallel(model)  # no GPU: device_ids == [], forward is a pass-through


def _buffer_sync_kwarg() -> str:
    """torch >= 2.13 names per-forward buffer synchronisation forward_sync_buffers (broadcast_buffers before)."""
    params = inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters
    return "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"


def ddp_kwargs(options: dict) -> dict:
    """DistributedDataParallel keyword arguments for the settings asked for (DDP's defaults otherwise)."""
    kw = {"gradient_as_bucket_view": bool(options.get("gradient_as_bucket_view", False)),
          "static_graph": bool(options.get("static_graph", False)),
          "find_unused_parameters": bool(options.get("find_unused_parameters", False)),
          _buffer_sync_kwarg(): bool(options.get("sync_buffers", True))}
    if options.get("bucket_cap_mb") is not None:
        kw["bucket_cap_mb"] = float(options["bucket_cap_mb"])
    return kw


def powerSGD_hook_in_bucket_order(state, bucket):  # no annotations: DDP checks them against its own types
    """PowerSGD, each bucket finished before the next starts. The hook issues a bucket's later all-reduces from
    callbacks of its first; gloo runs those on its own threads, so with several buckets the ranks can issue
    them in different orders and deadlock (every run of a 16 MiB MLP in 5 MiB buckets hung here on the first
    compressed step). Waiting keeps DDP's bucket order on every rank, at the cost of overlap: on CPU/gloo,
    PowerSGD's figures are without it (stored with the settings)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    fut = powerSGD_hook.powerSGD_hook(state, bucket)
    fut.wait()
    return fut


def register_comm_hook(model: nn.parallel.DistributedDataParallel, hook: str, warmup: int) -> dict:
    """fp16 / bf16 compression or PowerSGD (rank R, compressing from the first measured step). Returns its settings."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from bench.config import comm_hook_parts
    name, rank = comm_hook_parts(hook)
    if name == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif name == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif name == "powersgd":
        # PowerSGD runs plain all-reduce before this step and allocates its low-rank factors (with a host copy)
        # on it: let that happen in the warm-up. DDP allows 2 at the least (so with --warmup < 3 it is measured).
        start = max(2, warmup - 1)
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=start)
        gloo = torch.distributed.get_backend() == "gloo"
        model.register_comm_hook(state, powerSGD_hook_in_bucket_order if gloo else powerSGD_hook.powerSGD_hook)
        return {"comm_hook": hook, "matrix_approximation_rank": rank, "start_powerSGD_iter": start,
                **({"gloo": "each bucket's PowerSGD waited for inside its hook: no overlap"} if gloo else {})}
    return {"comm_hook": hook}


def apply_ddp(model: nn.Module, ctx: Ctx) -> nn.Module:
    if ctx.sync_bn and ctx.cuda:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(ctx.device)
    # DDP broadcasts rank 0's parameters and buffers at construction: identical initial weights.
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[ctx.device.index] if ctx.cuda else None,
                                              **ddp_kwargs(ctx.options))
    ddp.bench_comm_hook = register_comm_hook(ddp, ctx.options.get("comm_hook", "none"), ctx.warmup)
    return ddp


def apply_zero(model: nn.Module, ctx: Ctx) -> nn.Module:
    ddp = apply_ddp(model, ctx)
    # The optimizer made for this model (bench.rank.optimizer.make_optimizer) is ZeroRedundancyOptimizer with these.
    # overlap_with_ddp is not offered: torch refuses it on gloo ("may meet hangs"), and on NCCL it skips the
    # parameter update of the first 2-3 steps, which the equivalence gate would have to excuse (docs/strategies.md).
    ddp.bench_zero = {"parameters_as_bucket_view": bool(ctx.options.get("parameters_as_bucket_view", False))}
    return ddp


def apply_fsdp(model: nn.Module, ctx: Ctx, mesh_shape: tuple | None = None) -> nn.Module:
    from bench.rank import fsdp
    bf16 = ctx.options.get("mixed_precision", "none") == "bf16"  # bf16 parameters, fp32 gradient reduction
    reshard = bool(ctx.options.get("reshard", True))
    offload = ctx.options.get("offload", "none") == "cpu"  # planning runs it on CUDA only
    model = fsdp.apply_fsdp(model, ctx, reshard_after_forward=reshard, mesh_shape=mesh_shape,
                            param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32 if bf16 else None,
                            offload_to_cpu=offload)
    model.bench_settings = {"blocks_reshard_after_forward": reshard, "mixed_precision": "bf16" if bf16 else "none",
                            "root_reshard_after_forward": False,  # FSDP2's own rule for the root
                            **({"offload": "cpu: CPUOffloadPolicy (shards, gradients and the optimizer step on the host)"}
                               if offload else {})}
    return model


def apply_hsdp(model: nn.Module, ctx: Ctx) -> nn.Module:
    from bench.rank import fsdp
    shard = int(ctx.options.get("shard_size", ctx.world_size))
    replicate = fsdp.replicas_of(ctx.world_size, shard)
    model = apply_fsdp(model, ctx, mesh_shape=(replicate, shard))
    model.bench_settings.update(fsdp.mesh_words(replicate, shard))
    return model


STRATEGIES: dict[str, Callable[[nn.Module, Ctx], nn.Module]] = {
    "single": apply_single,
    "dp": apply_dp,
    "ddp": apply_ddp,
    "zero": apply_zero,
    "fsdp": apply_fsdp,
    "hsdp": apply_hsdp,
}


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside torch.compile, DataParallel and DDP wrappers."""
    model = getattr(model, "_orig_mod", model)
    return model.module if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)) else model


def is_ddp(model: nn.Module) -> bool:
    return isinstance(getattr(model, "_orig_mod", model), nn.parallel.DistributedDataParallel)


def ddp_settings(model: nn.Module) -> dict:
    """DDP's own view of its settings, read back from the wrapped model (what the knobs really did); FSDP's as applied."""
    ddp = getattr(model, "_orig_mod", model)
    if not isinstance(ddp, nn.parallel.DistributedDataParallel):
        return dict(getattr(ddp, "bench_settings", {}))  # FSDP's and HSDP's, as apply_fsdp/apply_hsdp set them
    zero = getattr(ddp, "bench_zero", None)
    return {"bucket_cap_mb": ddp.bucket_bytes_cap / 2**20, "gradient_as_bucket_view": ddp.gradient_as_bucket_view,
            "static_graph": bool(ddp.static_graph), "sync_buffers": bool(ddp.broadcast_buffers),
            "find_unused_parameters": bool(ddp.find_unused_parameters),
            "buffers": len(ddp.modules_buffers), **getattr(ddp, "bench_comm_hook", {}),
            **({"optimizer_sharded": "ZeroRedundancyOptimizer", **zero, "overlap_with_ddp": False} if zero is not None else {})}
