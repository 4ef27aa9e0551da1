"""All-reduce microbenchmark over the configuration's backend and device count.

Run inside an initialised process group (the worker's 'comm' mode). For each message size up to the
model's gradient size it times `dist.all_reduce` and reports nccl-tests' quantities:
    algbw = S / t            busbw = algbw * 2(n-1)/n   (GB/s, 1 GB = 1e9 bytes)
busbw is what the interconnect must carry per rank in a ring all-reduce and does not depend on n,
so a DDP step's exposed communication can be set against it.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist


def bus_bandwidth_gbps(size_bytes: int, time_ms: float, world_size: int) -> tuple:
    """(algbw, busbw) in GB/s for one all-reduce of size_bytes taking time_ms on world_size ranks."""
    algbw = size_bytes / (time_ms / 1000.0) / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def message_sizes(max_bytes: int, min_bytes: int = 4096) -> list:
    """Powers of 4 from min_bytes below max_bytes, then max_bytes itself (the model's gradients)."""
    sizes, s = [], min_bytes
    while s < max_bytes:
        sizes.append(s)
        s *= 4
    sizes.append(max_bytes)
    return sizes


def allreduce_sweep(device: torch.device, max_bytes: int, warmup: int = 2, budget_s: float = 0.5, max_iters: int = 50) -> list:
    """Mean time per all-reduce over n iterations per size (every rank runs the same n, rank 0 chooses it),
    the slowest rank's time counting. Returns one row per size with algbw/busbw in GB/s."""
    world = dist.get_world_size()
    rows = []
    for size in message_sizes(max_bytes):
        x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(x)
        _sync(device)
        # One timed probe sets the iteration count; rank 0's choice is broadcast so every rank does the same.
        t0 = time.perf_counter()
        dist.all_reduce(x)
        _sync(device)
        probe_s = time.perf_counter() - t0
        iters = torch.tensor([max(1, min(max_iters, int(budget_s / max(probe_s, 1e-6))))], dtype=torch.int64, device=device)
        dist.broadcast(iters, 0)
        n = int(iters.item())
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(x)
        _sync(device)
        t_ms = (time.perf_counter() - t0) * 1000.0 / n
        t = torch.tensor([t_ms], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the collective is as slow as its slowest rank
        t_ms = float(t.item())
        algbw, busbw = bus_bandwidth_gbps(x.numel() * 4, t_ms, world)
        rows.append({"size_bytes": x.numel() * 4, "time_ms": t_ms, "algbw_gbps": algbw, "busbw_gbps": busbw, "iters": n})
    return rows


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
