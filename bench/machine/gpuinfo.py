"""NVML access shared by environment capture and device-memory sampling: which GPU is torch device i.

Apart from env.py because two callers need it: `env.capture()` (once per sweep, to identify the
hardware) and the worker (after each measured window, `device_memory_mib`). Both need NVML loaded
once per process and torch device i mapped to NVML's handle for the same physical GPU.

The map goes through the PCI bus id (the UUID when torch is too old to expose PCI ids), never
through the index: NVML numbers every GPU of the machine in PCI order, torch numbers only what
CUDA_VISIBLE_DEVICES leaves visible, in CUDA_DEVICE_ORDER (fastest first by default). With
CUDA_VISIBLE_DEVICES=3,1, torch device 0 is NVML device 3.

Every NVML call goes through `call`: a function the binding lacks, an old driver, a GPU that does
not support the query or no permission all give None, never an exception. The metadata is
best effort; the measurement it describes must not fail because of it.
"""
from __future__ import annotations

import functools
import os
import re

import torch

# NVML's C enum values (stable ABI), so a binding without the Python constants still works.
CLOCK_SM, CLOCK_MEM = 1, 2  # nvmlClockType_t
ENABLED = 1  # nvmlEnableState_t


@functools.lru_cache(maxsize=1)
def load_nvml():
    """The initialised `pynvml` module (PyPI: nvidia-ml-py), or None without it or without a driver.

    Initialised once per process and never shut down (the process exit does it): nvmlInit can take
    a second on a node without persistence mode, too long to pay after every measured window.
    """
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:  # ImportError, NVMLError (no library, no driver), OSError
        return None


def call(nvml, name: str, *args, **kwargs):
    """`nvml.<name>(*args)`, or None when NVML is absent, an argument (a handle) is None, the
    binding lacks the function or NVML answers an error."""
    fn = getattr(nvml, name, None) if nvml is not None else None
    if fn is None or any(a is None for a in args):
        return None
    try:
        return fn(*args, **kwargs)
    except Exception:
        return None


def text(value) -> str | None:
    """NVML strings arrive as str or bytes depending on the binding's version."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value.strip("\x00 ") if isinstance(value, str) and value.strip("\x00 ") else None


_PCI = re.compile(r"^(?:([0-9a-f]+):)?([0-9a-f]+):([0-9a-f]+)\.([0-9a-f]+)$", re.IGNORECASE)


def normalise_pci_bus_id(bus_id) -> str | None:
    """NVML's form 'DDDDDDDD:BB:DD.F' (upper-case hex) from '0000:3b:00.0', b'00000000:3B:00.0',
    '3b:00.0'...; None when it is not a PCI address."""
    m = _PCI.match(text(bus_id) or "")
    if not m:
        return None
    domain, bus, device, function = (int(g or "0", 16) for g in m.groups())
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}"


def torch_pci_bus_id(props) -> str | None:
    """The PCI bus id of a torch device from its properties (integers in torch >= 2.5), NVML's form."""
    ids = [getattr(props, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if not all(isinstance(i, int) for i in ids):
        return None
    return f"{ids[0]:08X}:{ids[1]:02X}:{ids[2]:02X}.0"


def torch_uuid(props) -> str | None:
    """'GPU-<uuid>' as nvidia-smi and CUDA_VISIBLE_DEVICES write it (torch's str() has no prefix)."""
    raw = str(getattr(props, "uuid", "") or "").strip().lower()
    raw = raw[4:] if raw.startswith("gpu-") else raw
    return f"GPU-{raw}" if raw else None


def torch_devices() -> list:
    """Properties of every device torch sees, in torch's numbering; [] without CUDA."""
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]


def nvml_handle(nvml, props):
    """NVML's handle for the GPU torch describes by `props`: by PCI bus id, else by UUID, else None."""
    handle = call(nvml, "nvmlDeviceGetHandleByPciBusId", torch_pci_bus_id(props))
    if handle is None:
        handle = call(nvml, "nvmlDeviceGetHandleByUUID", torch_uuid(props))
    return handle


def describe_gpu(index: int, props, nvml, handle) -> dict:
    """What identifies torch device `index`. Fields NVML cannot give are None."""
    def get(name, *args):
        return call(nvml, name, handle, *args)

    app_clock = get("nvmlDeviceGetApplicationsClock", CLOCK_SM)
    current_clock = get("nvmlDeviceGetClockInfo", CLOCK_SM) if app_clock is None else None
    power_mw = get("nvmlDeviceGetEnforcedPowerLimit")
    persistence = get("nvmlDeviceGetPersistenceMode")
    ecc = get("nvmlDeviceGetEccMode")  # [current, pending]
    return {
        "index": index,
        "nvml_index": get("nvmlDeviceGetIndex"),
        "name": props.name,
        "uuid": torch_uuid(props) or text(get("nvmlDeviceGetUUID")),
        "pci_bus_id": torch_pci_bus_id(props)
        or normalise_pci_bus_id(getattr(get("nvmlDeviceGetPciInfo"), "busId", None)),
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_total_mib": props.total_memory / 2**20,  # as CUDA sees it, below nvidia-smi's total
        "sm_clock_max_mhz": get("nvmlDeviceGetMaxClockInfo", CLOCK_SM),
        "mem_clock_max_mhz": get("nvmlDeviceGetMaxClockInfo", CLOCK_MEM),
        # The applications clock is the target set for compute; the current clock of an idle GPU
        # at capture time says little, so it is only the fallback, and labelled.
        "sm_clock_mhz": app_clock if app_clock is not None else current_clock,
        "sm_clock_kind": "applications" if app_clock is not None else "current" if current_clock is not None else None,
        "power_limit_w": power_mw / 1000 if isinstance(power_mw, (int, float)) else None,
        "persistence_mode": persistence == ENABLED if persistence is not None else None,
        "ecc": ecc[0] == ENABLED if isinstance(ecc, (list, tuple)) and ecc else None,
        # The PCIe link: the most this GPU and its slot can train to (what a transfer may reach), and what it ran
        # at when captured (an idle GPU lowers its link to save power; under load it returns to the maximum).
        "pcie_gen_max": get("nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_width_max": get("nvmlDeviceGetMaxPcieLinkWidth"),
        "pcie_gen_current": get("nvmlDeviceGetCurrPcieLinkGeneration"),
        "pcie_width_current": get("nvmlDeviceGetCurrPcieLinkWidth"),
    }


def driver_version(nvml) -> str | None:
    return text(call(nvml, "nvmlSystemGetDriverVersion"))


def device_memory_mib(torch_index: int) -> dict:
    """Memory of torch device `torch_index` now, as nvidia-smi would show it (call it after a
    measured window: the caching allocator still holds what the window reserved).

    device_used_mib: the whole device, nvidia-smi's Memory-Usage column: every process, CUDA
    contexts and NCCL buffers included (NVML v2 memory info, which nvidia-smi uses; else v1, which
    also counts driver-reserved memory; else torch.cuda.mem_get_info total - free, the same as v1,
    and it creates a CUDA context on the device if this process has none).
    process_used_mib: this process's row of nvidia-smi's process table (matched by os.getpid());
    None when NVML cannot say, e.g. in a container whose pids differ from the host's.
    method: which source gave device_used_mib ('nvml_v2', 'nvml_v1', 'torch.cuda.mem_get_info'),
    None without CUDA.
    """
    out = {"device_used_mib": None, "process_used_mib": None, "method": None}
    if not torch.cuda.is_available():
        return out
    nvml = load_nvml()
    handle = nvml_handle(nvml, torch.cuda.get_device_properties(torch_index))
    v2 = getattr(nvml, "nvmlMemory_v2", None)
    mem = call(nvml, "nvmlDeviceGetMemoryInfo", handle, version=v2) if v2 is not None else None
    if mem is not None:
        out.update(device_used_mib=mem.used / 2**20, method="nvml_v2")
    elif (mem := call(nvml, "nvmlDeviceGetMemoryInfo", handle)) is not None:
        out.update(device_used_mib=mem.used / 2**20, method="nvml_v1")
    else:
        free, total = torch.cuda.mem_get_info(torch_index)
        out.update(device_used_mib=(total - free) / 2**20, method="torch.cuda.mem_get_info")
    procs = call(nvml, "nvmlDeviceGetComputeRunningProcesses", handle) or []
    mine = [getattr(p, "usedGpuMemory", None) for p in procs if getattr(p, "pid", None) == os.getpid()]
    if mine and all(isinstance(b, int) for b in mine):  # None: NVML cannot say (e.g. WDDM)
        out["process_used_mib"] = sum(mine) / 2**20
    return out
