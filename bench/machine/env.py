"""Capture of the environment that produced a measurement: software versions, the exact GPUs and
their links, the NCCL settings, CPU, host, commit.

`capture()` is called once per sweep and stored as JSON with every result. GPU identity (UUID, PCI
bus id, clocks, power limit, PCIe link) and topology come from NVML through `bench.machine.gpuinfo` and
`bench.machine.topology`, in torch's device numbering; without a CUDA device neither NVML nor nvidia-smi
is touched, so capture stays fast on CPU machines, and it never raises for want of a GPU tool.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import socket
import subprocess

from bench.machine import gpuinfo
from bench.machine.cores import usable_cores
from bench.machine.topology import nvml_topology

NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")
# Variables of that form that NCCL does not read: NVIDIA's CUDA and NGC container images set NCCL_VERSION to the
# version of the system libnccl they ship (`ENV NCCL_VERSION 2.21.5-1`), a label; torch's wheels bring their own NCCL
# (the `nccl` field: torch.cuda.nccl.version()). Recorded apart (image_nccl_version), never shown as a setting.
NOT_SETTINGS = ("NCCL_VERSION",)


def _run(cmd: list, cwd: str | None = None) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    commit = _run(["git", "rev-parse", "HEAD"], cwd=here)
    if commit and _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here):
        commit += "-dirty"
    return commit or "unknown"


def nccl_env() -> dict:
    """Every NCCL_* and TORCH_NCCL_* environment variable that is a setting: they change what NCCL measures."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(NCCL_PREFIXES) and k not in NOT_SETTINGS}


def hardware(props: list, nvml) -> dict:
    """The GPUs torch numbers 0..n-1 (`props`: their torch device properties) described through
    `nvml` (the pynvml module, or None), with nvidia-smi as the fallback for driver and topology.

    Returns gpus (one `gpuinfo.describe_gpu` dict per device, in torch's numbering), topology (see
    bench.machine.topology; without NVML the text of `nvidia-smi topo -m`, labelled as NVML's numbering;
    None without GPUs), gpu_driver ('' when unknown) and, where nvidia-smi runs, gpu_topology (its
    raw `topo -m` text, as before).
    """
    handles = [gpuinfo.nvml_handle(nvml, p) for p in props]
    gpus = [gpuinfo.describe_gpu(i, p, nvml, h) for i, (p, h) in enumerate(zip(props, handles))]
    out = {"gpus": gpus, "topology": None, "gpu_driver": gpuinfo.driver_version(nvml) or ""}
    if props and shutil.which("nvidia-smi"):
        if not out["gpu_driver"]:
            drivers = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
            out["gpu_driver"] = drivers[0].strip() if drivers else ""
        out["gpu_topology"] = _run(["nvidia-smi", "topo", "-m"])
    if props and nvml is not None and all(h is not None for h in handles):
        out["topology"] = nvml_topology(nvml, handles, [g["pci_bus_id"] for g in gpus])
    elif out.get("gpu_topology"):
        out["topology"] = {"numbering": "nvml", "source": "nvidia-smi topo -m", "text": out["gpu_topology"]}
    return out


def torchvision_version() -> str:
    """torchvision.__version__ (with its build tag, '0.29.2+cu132') read from its version.py without importing
    torchvision, which takes ~3 s a sweep on 2 cores; the installed distribution's version as a fallback."""
    try:
        spec = importlib.util.find_spec("torchvision")
        if spec is None:
            return ""
        with open(os.path.join(spec.submodule_search_locations[0], "version.py")) as f:
            found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", f.read(), re.M)
        if found:
            return found.group(1)
    except (OSError, TypeError, IndexError, ValueError):
        pass
    try:
        return importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        return ""


def capture() -> dict:
    import torch
    cuda = torch.cuda.is_available()
    props = gpuinfo.torch_devices()
    env = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torchvision": torchvision_version(),
        "cuda": torch.version.cuda or "",
        "cudnn": str(torch.backends.cudnn.version() or "") if cuda else "",
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda and hasattr(torch.cuda, "nccl") else "",
        "gpu_names": [p.name for p in props],
        "cpu_model": cpu_model(),
        "cpu_cores": usable_cores(),
        "torch_threads_default": torch.get_num_threads(),
        "git_commit": git_commit(),
        "gloo_available": torch.distributed.is_gloo_available(),
        "nccl_available": torch.distributed.is_nccl_available(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
        "nccl_env": nccl_env(),
        "image_nccl_version": os.environ.get("NCCL_VERSION"),  # a container image's label, not torch's NCCL
    }
    # NVML is loaded only when torch sees a GPU: on a CPU machine that costs nothing.
    env.update(hardware(props, gpuinfo.load_nvml() if props else None))
    return env
