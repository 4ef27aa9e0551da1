"""What `selfcheck` asks of the machine itself, beside the sweep it runs (bench.commands.selfcheck):

    other_gpu_processes(nvml, own_pids)   before the sweep: nothing else computes on the GPUs (NVML's list)
    own_devices(details)                  after it: each rank of a run on a GPU of its own (PCI bus ids)
    clock_agreement(api, work_s)          after it: CUDA events timed against the host's clock around a
                                          known amount of device work (a spin of work_s at the SM clock)

Each returns (passed, detail). The device APIs are arguments, so the CPU tests pass stand-ins (a fake
NVML, a fake event API); `CudaClockAPI` is the real one.
"""
from __future__ import annotations

import time

CLOCK_AGREEMENT = 0.10   # events may fall short of the host's span by launch and sync overhead, no more


def other_gpu_processes(nvml, own_pids: tuple = ()) -> tuple:
    """(passed, detail): every process NVML lists on any GPU (compute and graphics), other than own_pids."""
    from bench.machine.gpuinfo import call, text
    if nvml is None:
        return False, "NVML unavailable (pip install nvidia-ml-py): cannot tell whether other processes use the GPUs"
    found = []
    for i in range(call(nvml, "nvmlDeviceGetCount") or 0):
        handle = call(nvml, "nvmlDeviceGetHandleByIndex", i)
        seen = set()
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in call(nvml, fn, handle) or []:
                pid = getattr(p, "pid", None)
                if pid in own_pids or pid in seen:
                    continue
                seen.add(pid)
                used = getattr(p, "usedGpuMemory", None)
                name = text(call(nvml, "nvmlSystemGetProcessName", pid)) or "?"
                found.append(f"GPU {i}: pid {pid} ({name}, {used / 2**20:.0f} MiB)" if isinstance(used, int)
                             else f"GPU {i}: pid {pid} ({name})")
    return (not found), ("; ".join(found) + ": their work would share the GPUs with every measurement") if found \
        else "no other process on the GPUs"


def own_devices(config_key: str, rank_devices: list) -> tuple:
    """(passed, detail): the ranks of one run (rows {'rank', 'host', 'device'}) each on a different GPU."""
    where = {}
    for r in rank_devices:
        where.setdefault((r.get("host"), r.get("device")), []).append(r["rank"])
    shared = {k: v for k, v in where.items() if len(v) > 1 or k[1] is None}
    if shared:
        return False, "; ".join(f"ranks {v} on {h}:{d or 'an unidentified GPU'}" for (h, d), v in shared.items())
    return True, f"{len(rank_devices)} rank(s), {len(where)} distinct GPU(s)"


def clock_agreement(api, work_s: float = 0.2) -> tuple:
    """(passed, detail): one span of device work, timed by CUDA events and by the host's monotonic clock
    from a synchronised start to a synchronised end. The events must cover at least 90% of the host's span
    (the rest is launch and synchronisation) and never exceed it, and show the work's own length."""
    api.synchronize()
    start, end = api.event(), api.event()
    t0 = time.perf_counter()
    start.record()
    api.spin(work_s)
    end.record()
    api.synchronize()
    host_s = time.perf_counter() - t0
    event_s = start.elapsed_time(end) / 1e3
    ok = (1 - CLOCK_AGREEMENT) * host_s <= event_s <= host_s * 1.001 and event_s >= 0.5 * work_s
    return ok, f"events {event_s * 1e3:.1f} ms, host clock {host_s * 1e3:.1f} ms around {work_s * 1e3:.0f} ms of device work"


class CudaClockAPI:
    """The real device API of clock_agreement on one GPU (creates a CUDA context: call it after the sweep)."""

    def __init__(self, index: int):
        import torch
        self.torch, self.index = torch, index
        torch.cuda.set_device(index)
        self.hz = torch.cuda.get_device_properties(index).clock_rate * 1e3  # kHz in the properties

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.index)

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def spin(self, seconds: float) -> None:
        self.torch.cuda._sleep(int(seconds * self.hz))  # a kernel that spins this many SM clock cycles
