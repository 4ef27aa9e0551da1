"""What `selfcheck` asks of the machine itself, beside the sweep it runs (bench.commands.selfcheck):

    other_gpu_processes(nvml, own_pids, devices)   before the sweep: nothing else computes on the visible GPUs
                                          (NVML's list, each GPU found by its PCI bus id)
    own_devices(details)                  after it: each rank of a run on a GPU of its own (PCI bus ids)
    clock_agreement(api, work_s)          after it: CUDA events timed against the host's clock around a
                                          known amount of device work (a spin of work_s at the SM clock)
    allreduce_busbw(...)                  the all-reduce's peak bus bandwidth against what the recorded links
                                          should give (bench.machine.linkspeed), a shortfall named with its link

Each returns (passed, detail); passed is None where there is nothing to check (stated, not a failure). The device APIs are arguments, so the CPU tests pass stand-ins (a fake
NVML, a fake event API); `CudaClockAPI` is the real one.
"""
from __future__ import annotations

import time

from bench.machine import linkspeed

CLOCK_AGREEMENT = 0.10   # events may fall short of the host's span by launch and sync overhead, no more


def _visible(nvml, devices) -> tuple:
    """([(label, NVML handle)] of the GPUs to look at, [labels of visible GPUs NVML does not know]). devices: torch's
    properties of the GPUs this process sees, found in NVML by PCI bus id (else UUID): NVML numbers every GPU of the
    machine, CUDA only those CUDA_VISIBLE_DEVICES leaves, in its own order (with CUDA_VISIBLE_DEVICES=3,1 torch's GPU 0 is
    NVML's 3). None: every GPU NVML lists, in its numbering."""
    from bench.machine.gpuinfo import call, nvml_handle
    if devices is None:
        return [(f"GPU {i}", call(nvml, "nvmlDeviceGetHandleByIndex", i)) for i in range(call(nvml, "nvmlDeviceGetCount") or 0)], []
    found, lost = [], []
    for i, props in enumerate(devices):
        handle = nvml_handle(nvml, props)
        if handle is None:
            lost.append(f"GPU {i}")
            continue
        index = call(nvml, "nvmlDeviceGetIndex", handle)
        found.append((f"GPU {i}" + (f" (NVML {index})" if index is not None and index != i else ""), handle))
    return found, lost


def other_gpu_processes(nvml, own_pids: tuple = (), devices=None) -> tuple:
    """(passed, detail): every process NVML lists on the GPUs this process sees (`devices`: torch's properties of them;
    see _visible), compute and graphics, other than own_pids. A process on a GPU CUDA_VISIBLE_DEVICES hides shares
    nothing with the measurements (a shared node's other jobs), and is not counted."""
    from bench.machine.gpuinfo import call, text
    if nvml is None:
        return False, "NVML unavailable (pip install nvidia-ml-py): cannot tell whether other processes use the GPUs"
    gpus, lost = _visible(nvml, devices)
    if lost:
        return False, (f"{', '.join(lost)} (torch's numbering) not found in NVML by PCI bus id or UUID: cannot tell "
                       "whether other processes use them")
    found = []
    for i, handle in gpus:
        seen = set()
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in call(nvml, fn, handle) or []:
                pid = getattr(p, "pid", None)
                if pid in own_pids or pid in seen:
                    continue
                seen.add(pid)
                used = getattr(p, "usedGpuMemory", None)
                name = text(call(nvml, "nvmlSystemGetProcessName", pid)) or "?"
                found.append(f"{i}: pid {pid} ({name}, {used / 2**20:.0f} MiB)" if isinstance(used, int)
                             else f"{i}: pid {pid} ({name})")
    return (not found), ("; ".join(found) + ": their work would share the GPUs with every measurement") if found \
        else f"no other process on the {len(gpus)} GPU(s) this sweep uses"


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


# NCCL's settings that change which transport or algorithm an all-reduce takes (NCCL's environment-variable docs)
TRANSPORT_SETTINGS = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_P2P_DIRECT_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE",
                      "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_TOPO_FILE",
                      "NCCL_CUMEM_ENABLE", "NCCL_IB_DISABLE", "NCCL_NET")


def transport_settings(env: dict) -> str:
    """The recorded NCCL settings that change the transport, in words."""
    found = {k: v for k, v in ((env or {}).get("nccl_env") or {}).items() if k in TRANSPORT_SETTINGS}
    return ("NCCL settings that change the transport: " + ", ".join(f"{k}={v}" for k, v in found.items())) if found \
        else "no NCCL setting that changes the transport was set"


def torch_indices(rank_devices: list, gpus: list) -> list | None:
    """The torch device of each rank (in rank order) from the PCI bus ids the ranks recorded; None if any is unknown."""
    index = {g.get("pci_bus_id"): g.get("index") for g in gpus or [] if g.get("pci_bus_id")}
    found = [index.get(r.get("device")) for r in sorted(rank_devices or [], key=lambda r: r["rank"])]
    return found if found and None not in found else None


def allreduce_busbw(device_type: str, count: int, nodes: int, rows: list, env: dict, ranks: list | None = None) -> tuple:
    """(passed, detail): the peak bus bandwidth of one all-reduce run (its comm rows; all-reduce over every rank only)
    against the slowest link of the ring through `ranks` (torch devices; default 0..count-1) in the recorded topology."""
    if count < 2:
        return None, "1 device: no link to all-reduce over (busbw is 0 by definition), nothing measured"
    rows = [r for r in rows if r.get("op", "all_reduce") == "all_reduce" and (r.get("scope") or "world") == "world"]
    best = max((r.get("busbw_gbps") or 0.0 for r in rows), default=0.0)
    if best <= 0:
        return False, f"peak busbw {best:.2f} GB/s: the microbenchmark measured no bandwidth"
    measured = f"peak busbw {best:.2f} GB/s"
    if device_type != "cuda":
        return True, f"{measured}; CPU/gloo: no link to compare"
    if nodes > 1:
        return True, f"{measured}; across {nodes} nodes the network is not in the recorded topology: nothing compared"
    topo, env = (env or {}).get("topology") or {}, env or {}
    if topo.get("numbering") != "torch" or not topo.get("matrix"):
        return True, f"{measured}; no topology in torch numbering was recorded (NVML unavailable): nothing compared"
    lk = linkspeed.ring_bottleneck(topo["matrix"], ranks or list(range(count)), env.get("gpus"), env.get("cpu_model") or "")
    if lk.floor_gbps is None:
        return True, f"{measured}; {lk.describe()}: {lk.medium}: nothing compared"
    expected = f"{lk.describe()} ({lk.medium}): expected >= {lk.floor_gbps:.1f} GB/s busbw ({lk.share:.0%} of {lk.line_gbps:.1f})"
    if best >= lk.floor_gbps:
        return True, f"{expected}, measured {best:.1f}"
    why = ("the all-reduce ran as if over PCIe or host memory: check NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, "
           "`nvidia-smi nvlink --status` and the topology (`nvidia-smi topo -m`)") if lk.nvlink else \
        ("below what this PCIe path carries: check that each GPU's link trains to its generation and width under load "
         "(`nvidia-smi -q -d PCIE`), P2P through the PCIe switches (ACS, IOMMU), NCCL_P2P_DISABLE, NCCL_P2P_LEVEL")
    return False, f"{expected}, measured {best:.1f} GB/s: {why}; {transport_settings(env)}"
