"""The dense peak of each GPU the suite knows, per precision, with its public source: what model FLOPs utilisation
(MFU) is measured against. Dense means no 2:4 sparsity: datasheets often print the sparse figure (twice as high), and
MFU against it reads half the truth (fms-fsdp #89).

    peak = lookup("NVIDIA H100 80GB HBM3", "bf16")          # Peak(989.0, "H100 SXM5", source) or None
    key = precision_key("fp32", {"mixed_precision": "bf16"})  # 'bf16': FSDP's bf16 parameters run the matmuls
    over = parse_override("bf16=989,fp32=67")                 # --peak-tflops; ValueError naming a bad value

A device is recognised by its exact name as torch reports it (`torch.cuda.get_device_name`), never by a part of it:
an H100 NVL or a V100S is not an H100 SXM or a V100, and an unknown device gets no peak at all, never a neighbour's
(a missing device once fell back to another's peak and showed 200% MFU: torchtitan PR #1201). `--peak-tflops` adds
a device or overrides the table. Precisions: fp32 here keeps TF32 off, so its peak is the FP32 one without tensor
cores; tf32 is the TF32 tensor peak (the FP32 one on a GPU without TF32, a V100, where it ran on those); bf16 and
fp16 (autocast) the 16-bit tensor peak.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
_H100 = "NVIDIA H100 datasheet, https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "NVIDIA H200 datasheet, https://www.nvidia.com/en-us/data-center/h200/"
_A100 = "NVIDIA A100 datasheet, https://www.nvidia.com/en-us/data-center/a100/ (40 and 80 GB, SXM4 and PCIe alike)"
_V100 = "NVIDIA V100 datasheet, https://www.nvidia.com/en-us/data-center/v100/ (no TF32, no BF16)"
_L40S = "NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/"
_L4 = "NVIDIA L4 datasheet, https://www.nvidia.com/en-us/data-center/l4/"
# How a figure was read off its datasheet, per precision: the tensor-core figures of Ampere and newer are printed with
# 2:4 sparsity (halved here); the FP32 figure without tensor cores (and a V100's, which has no sparsity) is no sparsity
# figure and is taken as listed. One note for all once called the H200's FP32 67 TFLOP/s 'half the sparse figure'.
DENSE_HALF = "dense: half the sparse figure"
AS_LISTED = "as listed: not a sparsity figure"


@dataclass(frozen=True)
class Device:
    """One row of the table: its name, the torch device names it covers (whole-name patterns), TFLOP/s per precision
    (None: the device has no such unit) and the source of the figures."""
    name: str
    pattern: str
    fp32: float
    tf32: Optional[float]
    bf16: Optional[float]
    fp16: Optional[float]
    source: str
    sparse_tensor: bool = True   # its datasheet prints the tensor-core figures with sparsity (Ampere and newer)

    def source_of(self, precision: str) -> str:
        """The source with how this precision's figure was read: tensor-core figures of a sparsity datasheet halved,
        FP32 (no tensor cores) and a V100's as listed."""
        how = DENSE_HALF if self.sparse_tensor and precision in ("tf32", "bf16", "fp16") else AS_LISTED
        return f"{self.source}; {how}"


# Figures: NVIDIA's datasheets (the sources above, one per family), dense where a sparsity datasheet prints twice.
DEVICES = (
    Device("H100 SXM5", r"NVIDIA H100 80GB HBM3|NVIDIA H100 SXM5 80GB", 67.0, 495.0, 989.0, 989.0, _H100),
    Device("H100 PCIe", r"NVIDIA H100 PCIe", 51.0, 378.0, 756.0, 756.0, _H100),
    Device("H200 SXM", r"NVIDIA H200|NVIDIA H200 141GB HBM3e", 67.0, 495.0, 989.0, 989.0, _H200),
    Device("A100", r"NVIDIA A100-SXM4-(40|80)GB|NVIDIA A100-PCIE-(40|80)GB|NVIDIA A100 80GB PCIe", 19.5, 156.0, 312.0,
           312.0, _A100),
    Device("V100 SXM2", r"Tesla V100-SXM2-(16|32)GB", 15.7, None, None, 125.0, _V100, sparse_tensor=False),
    Device("V100 PCIe", r"Tesla V100-PCIE-(16|32)GB", 14.0, None, None, 112.0, _V100, sparse_tensor=False),
    Device("L40S", r"NVIDIA L40S", 91.6, 183.0, 362.0, 362.0, _L40S),
    Device("L4", r"NVIDIA L4", 30.3, 60.0, 121.0, 121.0, _L4),
)


@dataclass(frozen=True)
class Peak:
    tflops: float
    device: str        # the table's name, or the device's own where --peak-tflops gave it
    source: str


def precision_key(precision: str, options: Optional[dict] = None) -> str:
    """Which peak a configuration's matmuls run against: its precision, except that FSDP's bf16 mixed-precision policy
    (parameters in bf16) runs them in bf16 whatever the autocast."""
    if (options or {}).get("mixed_precision") == "bf16" and precision in ("fp32", "tf32"):
        return "bf16"
    return precision


def device_entry(name: str) -> Optional[Device]:
    """The table's row for a torch device name, matched whole (after trimming); None when the device is not known."""
    name = " ".join(str(name or "").split())
    return next((d for d in DEVICES if re.fullmatch(d.pattern, name)), None)


def lookup(name: str, precision: str, override: Optional[dict] = None) -> Optional[Peak]:
    """The dense peak of device `name` at `precision` (a precision_key), or None: not in the table, the device has no
    unit for that precision, or CPU. `override` (parse_override): TFLOP/s per precision, '*' for any, typed by the
    user; it wins over the table."""
    if override:
        value = override.get(precision, override.get("*"))
        if value is not None:
            return Peak(value, name or "this device", "--peak-tflops")
    d = device_entry(name)
    if d is not None and precision == "tf32" and d.tf32 is None:  # TF32 asked of a GPU without it (V100): FP32 ran
        return Peak(d.fp32, d.name, d.source_of("fp32") + "; no TF32 unit, so --precision tf32 ran on the FP32 units: "
                    "their peak")
    value = getattr(d, precision, None) if d is not None and precision in PRECISIONS else None
    return Peak(value, d.name, d.source_of(precision)) if value else None


def parse_override(text: Optional[str]) -> dict:
    """`--peak-tflops`: 'TFLOPS' (every precision) or 'PRECISION=TFLOPS,...' (bf16=989,fp32=67), or both (a bare
    number for the precisions not named) -> {precision or '*': TFLOP/s}; {} for None. ValueError naming the value
    (bench.config turns it into its ConfigError: exit 2)."""
    if text is None:
        return {}
    out: dict = {}
    for part in str(text).split(","):
        key, _, value = part.strip().rpartition("=")
        key = key.strip().lower() or "*"
        if key != "*" and key not in PRECISIONS:
            raise ValueError(f"--peak-tflops {text!r}: {key!r} is not a precision; expected TFLOPS or PRECISION=TFLOPS "
                             f"with PRECISION one of {', '.join(PRECISIONS)} (e.g. bf16=989,fp32=67)")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"--peak-tflops {text!r}: {value.strip()!r} is not a peak; expected a finite number of "
                             "TFLOP/s above 0 (e.g. 989)")
        if key in out:
            raise ValueError(f"--peak-tflops {text!r}: {'a bare number' if key == '*' else key} is given twice")
        out[key] = number
    return out
