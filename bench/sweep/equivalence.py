"""The correctness gate: a strategy over N devices must end k optimizer steps with the parameters one
process reaches taking the global batch (the same samples, in the same replica split).

    ref, cand = specs(spec)                 # one process emulating N replicas; the strategy itself
    outcome = run(spec, limits)            # both in fresh processes, parameters compared
Inside each worker, bench.rank.equivalence trains the k steps and rank 0 saves the parameters.

Tolerance follows the precision (bench.rank.precision.TOLERANCE): float32 compares to rounding, autocast
rounds every matmul input and a different batch split rounds differently.
"""
from __future__ import annotations

import dataclasses
import os
import shutil

import torch

from bench.rank import precision
from bench.shared.spec import RunSpec
from bench.sweep.diagnose import Outcome
from bench.sweep.plan import EQUIVALENCE_STEPS


def compare_params(ref_path: str, cand_path: str, precision_name: str = "fp32") -> dict:
    rtol, atol = precision.tolerance(precision_name)
    ref, cand = torch.load(ref_path, weights_only=True), torch.load(cand_path, weights_only=True)
    max_abs, worst, passed = 0.0, "", True
    for name, a in ref.items():
        b = cand[name]
        if not a.is_floating_point():
            continue
        d = (a.float() - b.float()).abs().max().item() if a.numel() else 0.0
        if d > max_abs:
            max_abs, worst = d, name
        passed = passed and torch.allclose(a.float(), b.float(), rtol=rtol, atol=atol)
    return {"max_abs_diff": max_abs, "worst_tensor": worst, "rtol": rtol, "atol": atol, "passed": bool(passed),
            "precision": precision_name, "tolerance": f"torch.allclose(rtol={rtol:g}, atol={atol:g}) for {precision_name}"}


def specs(spec: RunSpec) -> tuple:
    """(reference, candidate): one process with the global batch vs the strategy over its devices, k steps."""
    cand = dataclasses.replace(spec, mode="equivalence", steps=EQUIVALENCE_STEPS, warmup=0, epochs=0, repeat=0)
    chunks = spec.device_count if spec.strategy in ("dp", "ddp", "fsdp") else 1
    ref = dataclasses.replace(cand, strategy="single", device_count=1, emulate_ranks=chunks, options=(), nodes=1,
                              launcher="local", num_workers=spec.num_workers,
                              sync_bn=cand.sync_bn and cand.strategy == "ddp")
    return ref, cand


def run(spec: RunSpec, limits, shared_dir=None) -> Outcome:
    from bench.sweep.launch import run_config
    ref_spec, cand_spec = specs(spec)
    ref, cand = run_config(ref_spec, limits, keep=True), None  # their params.pt are compared, then both removed
    try:
        if ref.status != "ok":
            ref.reason = f"reference (single process, global batch) failed: {ref.reason}"
            return ref
        cand = run_config(cand_spec, limits, shared_dir, keep=True)
        if cand.status != "ok":
            return cand
        verdict = compare_params(os.path.join(ref.out_dir, "params.pt"), os.path.join(cand.out_dir, "params.pt"), spec.precision)
    finally:
        for done in (ref, cand):
            if done is not None:
                shutil.rmtree(done.out_dir, ignore_errors=True)
    verdict.update(optimizer_steps=EQUIVALENCE_STEPS, reference_losses=ref.payload.get("losses"),
                   candidate_losses=cand.payload.get("losses"), batchnorm=ref.payload.get("batchnorm"))
    cand.payload = verdict
    if not verdict["passed"]:
        cand.status = "failed"
        cand.reason = (f"parameters differ after {EQUIVALENCE_STEPS} steps: max |diff| {verdict['max_abs_diff']:.3g} "
                       f"in {verdict['worst_tensor']} exceeds {verdict['tolerance']}")
    return cand
