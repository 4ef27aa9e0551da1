"""Capture of the environment that produced a measurement: software versions, GPUs, CPU, host, commit."""
from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess


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


def capture() -> dict:
    import torch
    import torchvision
    cuda = torch.cuda.is_available()
    env = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda": torch.version.cuda or "",
        "cudnn": str(torch.backends.cudnn.version() or "") if cuda else "",
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda and hasattr(torch.cuda, "nccl") else "",
        "gpu_names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "gpu_driver": "",
        "cpu_model": cpu_model(),
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads_default": torch.get_num_threads(),
        "git_commit": git_commit(),
        "gloo_available": torch.distributed.is_gloo_available(),
        "nccl_available": torch.distributed.is_nccl_available(),
    }
    if cuda and shutil.which("nvidia-smi"):
        drivers = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
        env["gpu_driver"] = drivers[0] if drivers else ""
        env["gpu_topology"] = _run(["nvidia-smi", "topo", "-m"])
    return env
