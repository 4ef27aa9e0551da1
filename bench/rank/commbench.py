"""All-reduce microbenchmark over the configuration's backend and device count.

Run inside an initialised process group (the worker's 'comm' mode). For each message size up to the
model's gradient size, plus DDP's own bucket sizes, it times `dist.all_reduce` and reports nccl-tests'
quantities:
    algbw = S / t            busbw = algbw * 2(n-1)/n   (GB/s, 1 GB = 1e9 bytes)
busbw is what the interconnect must carry per rank in a ring all-reduce and does not depend on n,
so a DDP step's exposed communication can be set against it. Across several nodes it runs twice:
over every rank (scope 'world': the inter-node links) and within each node (scope 'node').
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist


def bus_bandwidth_gbps(size_bytes: int, time_ms: float, world_size: int) -> tuple:
    """(algbw, busbw) in GB/s for one all-reduce of size_bytes taking time_ms on world_size ranks."""
    algbw = size_bytes / (time_ms / 1000.0) / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def message_sizes(max_bytes: int, min_bytes: int = 4096, extra: tuple = ()) -> list:
    """Powers of 4 from min_bytes below max_bytes, max_bytes itself (the model's gradients) and the extra sizes."""
    sizes, s = set(), min_bytes
    while s < max_bytes:
        sizes.add(s)
        s *= 4
    sizes.add(max_bytes)
    sizes |= {int(e) for e in extra if 0 < e <= max(max_bytes, min_bytes)}
    return sorted(sizes)


def _time_allreduce(x: torch.Tensor, device: torch.device, group, warmup: int, budget_s: float, max_iters: int) -> tuple:
    for _ in range(warmup):
        dist.all_reduce(x, group=group)
    _sync(device)
    # One timed probe sets the iteration count; the group's first rank chooses it so every rank does the same.
    t0 = time.perf_counter()
    dist.all_reduce(x, group=group)
    _sync(device)
    probe_s = time.perf_counter() - t0
    iters = torch.tensor([max(1, min(max_iters, int(budget_s / max(probe_s, 1e-6))))], dtype=torch.int64, device=device)
    dist.broadcast(iters, dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    n = int(iters.item())
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(x, group=group)
    _sync(device)
    t = torch.tensor([(time.perf_counter() - t0) * 1000.0 / n], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)  # the collective is as slow as its slowest rank
    return float(t.item()), n


def allreduce_sweep(device: torch.device, max_bytes: int, extra_sizes: tuple = (), local_world: int = 0,
                    warmup: int = 2, budget_s: float = 0.5, max_iters: int = 50) -> list:
    """Mean time per all-reduce per size, the slowest rank counting; one row per (scope, size) with
    algbw/busbw in GB/s."""
    world = dist.get_world_size()
    scopes = [("world", None, world)]
    if 1 < local_world < world:
        node_group, _ = dist.new_subgroups(group_size=local_world)
        scopes.append(("node", node_group, local_world))
    rows = []
    for scope, group, n_ranks in scopes:
        for size in message_sizes(max_bytes, extra=extra_sizes):
            x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
            t_ms, n = _time_allreduce(x, device, group, warmup, budget_s, max_iters)
            algbw, busbw = bus_bandwidth_gbps(x.numel() * 4, t_ms, n_ranks)
            rows.append({"scope": scope, "ranks": n_ranks, "size_bytes": x.numel() * 4, "time_ms": t_ms,
                         "algbw_gbps": algbw, "busbw_gbps": busbw, "iters": n})
    return rows


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
