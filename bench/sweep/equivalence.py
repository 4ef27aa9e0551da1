"""The correctness gate: a strategy over N devices must end k optimizer steps with the parameters and the optimizer
state one process reaches taking the global batch (the same samples, in the same replica split).

    ref, cand = specs(spec)                 # one process emulating N replicas; the strategy itself
    outcome = run(spec, limits)            # both in fresh processes, parameters and optimizer state compared
Inside each worker, bench.rank.equivalence trains the k steps and rank 0 saves both, gathered whole.

Tolerance follows the precision (bench.rank.precision.TOLERANCE): float32 compares to rounding, autocast
rounds every matmul input and a different batch split rounds differently.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil

import torch

from bench.rank import precision
from bench.rank.equivalence import STATE_PREFIX
from bench.shared.spec import DDP_BASED, PER_DEVICE, RunSpec
from bench.sweep.diagnose import Outcome
from bench.sweep.plan import EQUIVALENCE_STEPS


def compare_params(ref_path: str, cand_path: str, precision_name: str = "fp32") -> dict:
    """The candidate's parameters and optimizer state against the reference's. Parameters: torch.allclose at the
    precision's tolerance. Each optimizer state tensor (bench.rank.equivalence.STATE_PREFIX) at the same tolerance
    relative to its own largest element: AdamW's exp_avg_sq is ~1e-7, where an absolute tolerance would pass anything."""
    rtol, atol = precision.tolerance(precision_name)
    ref, cand = torch.load(ref_path, weights_only=True), torch.load(cand_path, weights_only=True)
    max_abs, worst, passed = 0.0, "", True
    state = {"state_tensors": 0, "state_max_rel_diff": 0.0, "state_worst_tensor": "", "state_passed": True}
    for name, a in ref.items():
        b = cand.get(name) if name.startswith(STATE_PREFIX) else cand[name]
        if not a.is_floating_point():
            continue
        if name.startswith(STATE_PREFIX):
            state["state_tensors"] += 1
            if b is None or b.shape != a.shape:
                rel, ok = math.inf, False
            else:
                scale = (a.float().abs().max().item() if a.numel() else 0.0) or 1.0
                rel = (a.float() - b.float()).abs().max().item() / scale if a.numel() else 0.0
                ok = torch.allclose(a.float(), b.float(), rtol=rtol, atol=atol * scale)
            if rel >= state["state_max_rel_diff"]:
                state["state_max_rel_diff"], state["state_worst_tensor"] = rel, name
            state["state_passed"] = state["state_passed"] and ok
            continue
        d = (a.float() - b.float()).abs().max().item() if a.numel() else 0.0
        if d > max_abs:
            max_abs, worst = d, name
        passed = passed and torch.allclose(a.float(), b.float(), rtol=rtol, atol=atol)
    return {"max_abs_diff": max_abs, "worst_tensor": worst, "rtol": rtol, "atol": atol,
            "passed": bool(passed and state["state_passed"]), "params_passed": bool(passed), **state,
            "precision": precision_name, "tolerance": f"torch.allclose(rtol={rtol:g}, atol={atol:g}) for {precision_name}"}


def specs(spec: RunSpec) -> tuple:
    """(reference, candidate): one process with the global batch vs the strategy over its devices, k steps."""
    cand = dataclasses.replace(spec, mode="equivalence", steps=EQUIVALENCE_STEPS, warmup=0, epochs=0, repeat=0)
    chunks = spec.device_count if spec.strategy in ("dp",) + PER_DEVICE else 1
    ref = dataclasses.replace(cand, strategy="single", device_count=1, emulate_ranks=chunks, options=(), nodes=1,
                              launcher="local", num_workers=spec.num_workers,
                              sync_bn=cand.sync_bn and cand.strategy in DDP_BASED)
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
    if not verdict["params_passed"]:
        cand.status = "failed"
        cand.reason = (f"parameters differ after {EQUIVALENCE_STEPS} steps: max |diff| {verdict['max_abs_diff']:.3g} "
                       f"in {verdict['worst_tensor']} exceeds {verdict['tolerance']}")
    elif not verdict["passed"]:
        cand.status = "failed"
        cand.reason = (f"optimizer state differs after {EQUIVALENCE_STEPS} steps: max |diff| {verdict['state_max_rel_diff']:.3g} "
                       f"of its largest element in {verdict['state_worst_tensor'].removeprefix(STATE_PREFIX)} exceeds "
                       f"{verdict['tolerance']} (relative to each tensor's largest element)")
    return cand
