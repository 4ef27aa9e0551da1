"""Can the installed torch use this machine's GPUs? Checked in the sweep process before anything is planned.

Two ways a first GPU run fails before its first number, each refused up front (exit 2) with the fix:
- the wheel has no kernel for the GPU: `pip install torch` now resolves to CUDA 13 builds, whose
  architectures (`torch.cuda.get_arch_list()`: sm_75 ... sm_120) drop Volta (V100, 7.0); every CUDA
  configuration would die with "no kernel image is available for execution on the device";
- torch cannot use GPUs the driver shows (a CPU wheel, a driver too old for the wheel: `is_available()`
  only warns and returns False), and `--device auto` would silently turn a GPU sweep into a CPU one.

    missing = unsupported_gpus(names, capabilities, torch.cuda.get_arch_list())   # [] when all have kernels
    reason = why_torch_cannot_use_gpus()    # None when torch sees every GPU the driver shows

A cubin built for sm_XY runs on GPUs of the same major version and minor >= Y (sm_XYa only on XY itself);
PTX (compute_XY) is compiled by the driver for any GPU of capability >= XY (NVIDIA's CUDA compatibility
guide; torch's own `_check_capability` applies the same rule, and only warns).
Pure functions of what they are given, except `visible_gpus` and `why_torch_cannot_use_gpus`, which ask NVML
(never creating a CUDA context) and torch.
"""
from __future__ import annotations

import os
import re
import warnings
from typing import Optional

VOLTA_AND_OLDER_WHEEL = "cu126"  # the newest CUDA line whose wheels still carry sm_50 ... sm_70 kernels


def _arch(entry: str) -> Optional[tuple]:
    """('sm', 80, '') from 'sm_80', ('compute', 90, '') from 'compute_90', ('sm', 90, 'a') from 'sm_90a'."""
    m = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", entry.strip())
    return (m.group(1), int(m.group(2)), m.group(3)) if m else None


def has_kernel(capability: tuple, arch_list) -> bool:
    """Whether a GPU of `capability` (major, minor) can run a torch built for `arch_list`."""
    cc = 10 * capability[0] + capability[1]
    for kind, code, suffix in filter(None, map(_arch, arch_list)):
        if kind == "compute" and code <= cc:
            return True
        if kind == "sm" and (code == cc if suffix == "a" else code // 10 == cc // 10 and code <= cc):
            return True
    return False


def install_hint(capability: tuple) -> str:
    if capability < (7, 5):
        return (f"this GPU needs a wheel built for CUDA 12.6: pip install --force-reinstall torch torchvision "
                f"--index-url https://download.pytorch.org/whl/{VOLTA_AND_OLDER_WHEEL}")
    return "this GPU is newer than the wheel: pip install --upgrade torch torchvision (a build that lists its architecture)"


def unsupported_gpus(names: tuple, capabilities: tuple, arch_list) -> list:
    """One line per GPU the installed torch has no kernel for; [] when all have one or the list is unknown."""
    arch_list = tuple(arch_list or ())
    if not arch_list:  # a build that does not say (ROCm, some source builds): torch itself checks nothing then
        return []
    out = []
    for i, (name, cap) in enumerate(zip(names, capabilities)):
        if not has_kernel(tuple(cap), arch_list):
            out.append(f"GPU {i} ({name}) has compute capability {cap[0]}.{cap[1]}, and the installed torch was built "
                       f"for {' '.join(arch_list)} only; {install_hint(tuple(cap))}")
    return out


def visible_gpus(environ=os.environ) -> int:
    """NVIDIA GPUs the driver shows (NVML) that CUDA_VISIBLE_DEVICES leaves visible; 0 without a driver.
    CUDA stops at the first entry that is not a device (so '' and '-1' hide every GPU)."""
    from bench.machine import gpuinfo
    nvml = gpuinfo.load_nvml()
    count = gpuinfo.call(nvml, "nvmlDeviceGetCount") or 0
    mask = environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return count
    listed = 0
    for entry in mask.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        listed += 1
    return min(count, listed)


def why_torch_cannot_use_gpus(torch_module=None, environ=os.environ) -> Optional[str]:
    """Why torch sees no GPU although the driver shows some (None when torch can use them, or there are none)."""
    if visible_gpus(environ) == 0:
        return None
    torch = torch_module
    if torch is None:
        import torch
    if torch.version.cuda is None:
        return (f"the installed torch {torch.__version__} is a CPU-only build; install a CUDA build: "
                f"pip install --force-reinstall torch torchvision")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ok = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if ok:
        return None
    why = " ".join(" ".join(str(w.message).split()) for w in said) if said else "torch.cuda.is_available() is False"
    return f"torch {torch.__version__} (built for CUDA {torch.version.cuda}) cannot use them: {why}"
