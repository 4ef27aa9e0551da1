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
window is at least its peak during it. Those are the steady state's figures: the peaks are reset after the warm-up
(`reset_peaks`). What the whole run reached before that reset (warm-up, torch.compile, cuDNN's autotuning
workspaces), is read just before it (`run_peaks`) and kept beside them: run_peak_allocated_mib,
run_peak_reserved_mib, run_device_used_mib (NVML before the cache is emptied: the warm-up's cache still held). On CPU the figure is the process's peak RSS, beside the RSS the process
had before its model was built (baseline_rss_mib: the interpreter, torch, the process group).

Beside the peaks, the training state this rank holds, counted from its tensors (`state_mib`): parameters and
their gradients (this rank's shards under FSDP2 and HSDP), the optimizer's state tensors (this rank's share under
ZeRO), and DDP's flat gradient buckets. These are exact on every device; the memory forecast
(bench.forecast.memory) builds on them and the peaks.
"""
from __future__ import annotations

import resource
import sys
from typing import Optional

import torch
from torch import nn


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


def run_peaks(devices: list, api=torch.cuda, level=None) -> dict:
    """{device: {run_peak_allocated_mib, run_peak_reserved_mib, run_device_used_mib}} of the run so far, read before
    `reset_peaks` (warm-up, compilation and cuDNN's autotuning included). api, level: torch.cuda and `device_level`,
    or stand-ins in tests."""
    level = level or device_level
    return {str(d): {"run_peak_allocated_mib": api.max_memory_allocated(d) / 2**20,
                     "run_peak_reserved_mib": api.max_memory_reserved(d) / 2**20,
                     "run_device_used_mib": level(d.index).get("device_used_mib")} for d in devices if d.type == "cuda"}


def with_run_peaks(row: dict, before: Optional[dict]) -> dict:
    """A device's row with the whole run's peaks: the larger of what `run_peaks` read before the reset and the steady
    peaks after it (fixed-step and --epochs runs both read it); without a reading for the device the steady peaks stand
    in for the whole run's."""
    steady = {f"run_{k}": row.get(k) for k in ("peak_allocated_mib", "peak_reserved_mib", "device_used_mib")}
    if not before:
        return {**row, **steady}
    return {**row, **{k: max(v for v in (before.get(k), steady[k]) if v is not None)
                      if (before.get(k), steady[k]) != (None, None) else None for k in steady}}


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


def peak_memory(devices: list, rank: int, artefact_bytes: int = 0, run: Optional[dict] = None) -> list:
    """One row per device this process used (all GPUs of a DataParallel process). artefact_bytes sit on devices[0].
    run: `run_peaks` read before the peaks were reset; None where they were not (the steady peaks are the run's)."""
    rss = rss_mib()
    rows = []
    for i, d in enumerate(devices):
        if d.type != "cuda":
            continue
        level = device_level(d.index)
        row = {"rank": rank, "device": str(d), "device_name": torch.cuda.get_device_name(d),
               "peak_allocated_mib": torch.cuda.max_memory_allocated(d) / 2**20,
               "peak_reserved_mib": torch.cuda.max_memory_reserved(d) / 2**20,
               "device_used_mib": level.get("device_used_mib"), "process_used_mib": level.get("process_used_mib"),
               "artefact_mib": artefact_bytes / 2**20 if i == 0 else 0.0, "method": level.get("method"),
               "peak_rss_mib": rss}
        rows.append(with_run_peaks(row, (run or {}).get(str(d))))
    if not rows:
        rows.append({"rank": rank, "device": "cpu", "device_name": "cpu", "peak_allocated_mib": None,
                     "peak_reserved_mib": None, "device_used_mib": None, "process_used_mib": None,
                     "artefact_mib": 0.0, "method": "getrusage", "peak_rss_mib": rss})
    return rows


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (FSDP2, HSDP); a plain tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t


def _bytes(t: torch.Tensor) -> int:
    t = _local(t)
    return t.numel() * t.element_size()


def _optimizer_tensors(opt) -> list:
    """The state tensors of an optimizer, through wrappers that keep a local one (ZeroRedundancyOptimizer.optim)."""
    inner = getattr(opt, "optim", None)
    states = [opt.state] + ([inner.state] if inner is not None and inner is not opt else [])
    seen, out = set(), []
    for state in states:
        for per_param in state.values():
            for v in per_param.values() if isinstance(per_param, dict) else ():
                if torch.is_tensor(v) and id(v) not in seen and v.numel() > 1:  # a step count is a scalar
                    seen.add(id(v))
                    out.append(v)
    return out


def ddp_bucket_bytes(model: nn.Module) -> int:
    """DDP's flat gradient buckets (0 for any other wrapper, or where DDP's private reducer API is missing)."""
    ddp = getattr(model, "_orig_mod", model)
    if not isinstance(ddp, nn.parallel.DistributedDataParallel):
        return 0
    try:
        return sum(b.buffer().numel() * b.buffer().element_size() for b in ddp.reducer._get_zeros_like_grad_buckets())
    except Exception:  # private API
        return 0


def state_mib(model: nn.Module, opt) -> dict:
    """{params_mib, grads_mib, optimizer_mib, buckets_mib}: the training state this rank holds between backward
    and the optimizer step. Gradients count once per trainable parameter at the parameter's (local) size, unless
    DDP keeps them as views of its buckets (gradient_as_bucket_view): then the buckets hold them."""
    params = [p for p in model.parameters()]
    trainable = [p for p in params if p.requires_grad]
    buckets = ddp_bucket_bytes(model)
    ddp = getattr(model, "_orig_mod", model)
    as_view = bool(getattr(ddp, "gradient_as_bucket_view", False)) and buckets > 0
    return {"params_mib": sum(_bytes(p) for p in params) / 2**20,
            "grads_mib": 0.0 if as_view else sum(_bytes(p) for p in trainable) / 2**20,
            "optimizer_mib": sum(_bytes(t) for t in _optimizer_tensors(opt)) / 2**20,
            "buckets_mib": buckets / 2**20}
