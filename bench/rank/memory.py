"""Memory of a run, per device, as PyTorch's allocator and as nvidia-smi see it; and each process's RSS.

Per GPU the worker records, after the measured window:
    peak_allocated_mib   the caching allocator's peak of live tensors (torch.cuda.max_memory_allocated)
    peak_reserved_mib    the allocator's peak of memory held from the driver (max_memory_reserved)
    device_used_mib      the whole device as nvidia-smi's Memory-Usage shows it: CUDA context, NCCL
                         buffers and the allocator's cache included (other processes on the GPU too)
    process_used_mib     this process's row of nvidia-smi's process table, where NVML can say
    artefact_mib         memory held only because the benchmark pre-generates its batches; the report
                         shows allocated and reserved figures net of it
The allocator does not return cached memory between steps, so the device level read after the
window is at least its peak during it. On CPU the figure is the process's peak RSS.
"""
from __future__ import annotations

import resource
import sys

import torch


def reset_peaks(devices: list, api=torch.cuda) -> None:
    """Steady state from here on: the allocator's cache emptied first (reset_peak_memory_stats alone sets the
    peaks to what the warm-up left reserved: cuDNN's autotuning workspaces), then the peaks reset. A host
    synchronisation: call it outside measured steps. api: torch.cuda, or a stand-in in tests."""
    cuda = [d for d in devices if d.type == "cuda"]
    for d in cuda:
        api.synchronize(d)
    if cuda:
        api.empty_cache()  # every device's cache
    for d in cuda:
        api.reset_peak_memory_stats(d)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform != "darwin" else 2**20)


def device_level(index: int) -> dict:
    """{'device_used_mib', 'process_used_mib', 'method'} of one GPU (torch numbering)."""
    try:
        from bench.machine import gpuinfo
        return gpuinfo.device_memory_mib(index)
    except Exception:  # no NVML here: torch's view of the driver's free memory
        free, total = torch.cuda.mem_get_info(index)
        return {"device_used_mib": (total - free) / 2**20, "process_used_mib": None, "method": "torch.cuda.mem_get_info"}


def peak_memory(devices: list, rank: int, artefact_bytes: int = 0) -> list:
    """One row per device this process used (all GPUs of a DataParallel process). artefact_bytes sit on devices[0]."""
    rss = rss_mib()
    rows = []
    for i, d in enumerate(devices):
        if d.type != "cuda":
            continue
        level = device_level(d.index)
        rows.append({"rank": rank, "device": str(d), "device_name": torch.cuda.get_device_name(d),
                     "peak_allocated_mib": torch.cuda.max_memory_allocated(d) / 2**20,
                     "peak_reserved_mib": torch.cuda.max_memory_reserved(d) / 2**20,
                     "device_used_mib": level.get("device_used_mib"), "process_used_mib": level.get("process_used_mib"),
                     "artefact_mib": artefact_bytes / 2**20 if i == 0 else 0.0, "method": level.get("method"),
                     "peak_rss_mib": rss})
    if not rows:
        rows.append({"rank": rank, "device": "cpu", "device_name": "cpu", "peak_allocated_mib": None,
                     "peak_reserved_mib": None, "device_used_mib": None, "process_used_mib": None,
                     "artefact_mib": 0.0, "method": "getrusage", "peak_rss_mib": rss})
    return rows
