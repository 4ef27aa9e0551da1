"""Numeric precision of a configuration: backend flags, autocast, gradient scaler, equivalence tolerance.

    fp32   float32 everywhere, TF32 off (the reference experiment's arithmetic on V100s)
    tf32   float32 storage, TF32 tensor-core matmuls and convolutions (Ampere and later)
    bf16   torch.autocast to bfloat16; parameters, gradients and their all-reduce stay float32
    fp16   torch.autocast to float16 with a gradient scaler (its step reads a found-inf flag: on CUDA
           the SGD optimizer is fused so that read stays on the device)

`settings(precision, device_type, mode)` sets the global flags deliberately for a run and returns
them as recorded per result: TF32 for matmul and cuDNN, float32 matmul precision, cuDNN benchmark
(on for benchmarks: input shapes never change; off, with deterministic kernels, for the equivalence gate).
"""
from __future__ import annotations

import contextlib

import torch

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Equivalence gate: float32 arithmetic compares to rounding; autocast rounds every matmul input, and a
# different batch split rounds differently, so the parameters are compared with a looser bound.
TOLERANCE = {"fp32": (1e-4, 1e-5), "tf32": (2e-3, 2e-4), "bf16": (2e-2, 2e-3), "fp16": (1e-2, 1e-3)}


def settings(precision: str, device_type: str, mode: str = "bench") -> dict:
    """Set torch's global numeric flags for this run; returns what was set (stored with the result)."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    benchmark = mode in ("bench", "fit") and device_type == "cuda"  # a fit trial allocates as the measured run will
    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.deterministic = mode == "equivalence"
    return {"precision": precision, "autocast_dtype": str(AUTOCAST[precision]).replace("torch.", "") if precision in AUTOCAST else None,
            "tf32_matmul": tf32, "tf32_cudnn": tf32, "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_benchmark": benchmark, "cudnn_deterministic": mode == "equivalence",
            "grad_scaler": precision == "fp16"}


def autocast(precision: str, device_type: str):
    """The forward's autocast context (a null context for fp32/tf32)."""
    if precision in AUTOCAST:
        return torch.autocast(device_type=device_type, dtype=AUTOCAST[precision])
    return contextlib.nullcontext()


def grad_scaler(precision: str, device_type: str):
    """A GradScaler for fp16, else None."""
    if precision == "fp16":
        return torch.amp.GradScaler(device_type)
    return None


def tolerance(precision: str) -> tuple:
    """(rtol, atol) of the equivalence gate's parameter comparison for this precision."""
    return TOLERANCE[precision]
