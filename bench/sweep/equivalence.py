"""The correctness gate: a strategy over N devices must end k optimizer steps with the parameters and the optimizer
state one process reaches taking the global batch (the same samples, in the same replica split).

    ref, cand = specs(spec)                 # one process emulating N replicas; the strategy itself
    outcome = run(spec, limits)            # both in fresh processes, parameters and optimizer state compared
Inside each worker, bench.rank.equivalence trains the k steps and rank 0 saves both, gathered whole.

Tolerance follows the precision the candidate computes in (bench.rank.precision.TOLERANCE; `gate_precision`):
float32 compares to rounding, autocast rounds every matmul input and a different batch split rounds differently;
FSDP's bf16 mixed-precision policy rounds like bf16 autocast whatever --precision says.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
from collections import Counter
from typing import Optional

import torch

from bench.rank import precision
from bench.rank.equivalence import STATE_PREFIX
from bench.shared.spec import DDP_BASED, FSDP_BASED, PER_DEVICE, RunSpec
from bench.sweep.diagnose import Outcome
from bench.sweep.plan import EQUIVALENCE_STEPS


def gate_precision(spec: RunSpec) -> tuple:
    """(precision whose tolerance the gate holds the candidate to, why): what the candidate computes in. --precision,
    unless FSDP's mixed-precision policy (--fsdp-mixed-precision bf16) gathers bf16 parameters, so that every matmul
    input is rounded to bf16 as under bf16 autocast: the looser of the two tolerances then (at --precision fp32 the
    candidate cannot match one fp32 process to fp32's rounding, whatever the count)."""
    if bf16_parameters(spec) and precision.tolerance("bf16")[0] > precision.tolerance(spec.precision)[0]:
        return "bf16", f"FSDP's bf16 mixed-precision policy at --precision {spec.precision}"
    return spec.precision, ""


def bf16_parameters(spec: RunSpec) -> bool:
    """FSDP's bf16 policy: parameters gathered in bf16, forward and backward wholly in bf16, gradients reduced in fp32."""
    return spec.strategy in FSDP_BASED and spec.option("mixed_precision", "none") == "bf16"


def compare_params(ref_path: str, cand_path: str, precision_name: str = "fp32", why: str = "") -> dict:
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
            "precision": precision_name,
            "tolerance": f"torch.allclose(rtol={rtol:g}, atol={atol:g}) for {precision_name}" + (f" ({why})" if why else "")}


def specs(spec: RunSpec) -> tuple:
    """(reference, candidate): one process with the global batch vs the strategy over its devices, k steps."""
    cand = dataclasses.replace(spec, mode="equivalence", steps=EQUIVALENCE_STEPS, warmup=0, epochs=0, repeat=0)
    chunks = spec.device_count if spec.strategy in ("dp",) + PER_DEVICE else 1
    # The reference recomputes nothing: a candidate under activation checkpointing must reach its parameters too.
    ref = dataclasses.replace(cand, strategy="single", device_count=1, emulate_ranks=chunks, options=(), nodes=1,
                              launcher="local", num_workers=spec.num_workers, activation_checkpointing="none",
                              sync_bn=cand.sync_bn and cand.strategy in DDP_BASED)
    if bf16_parameters(spec):
        # FSDP's bf16 policy computes forward and backward wholly in bf16 (not autocast's choice of ops): one fp32 process
        # is not what it computes (on the CPU MLP, 4 x 128 wide, bf16 gradients were 31% of a tensor's largest element
        # off fp32's: ReLUs flip). The one process computes through the same policy: FSDP2 on one rank, its replicas'
        # pieces one at a time, gradients reduced in fp32.
        ref = dataclasses.replace(ref, strategy="fsdp", options=(("mixed_precision", "bf16"),))
    return ref, cand


def _reference_key(ref: RunSpec) -> str:
    # Loader workers change how fast the reference loads, never what: every strategy walks the same seeded samples.
    return dataclasses.replace(ref, num_workers=0, out_dir="").to_json()


class References:
    """A sweep's single-process references, each run once. A reference depends on the workload, count, precision,
    optimizer and batch split, never on the strategy checked against it: DataParallel, DDP, ZeRO, FSDP and HSDP at
    one count share one (k strategies: k + 1 runs instead of 2k). Its folder (params.pt) goes once the last check
    that needs it is done (`release`), or at `close`.

        refs = References(items)    # the plan: how many checks need each reference
        outcome = run(spec, limits, shared, refs)
    """

    def __init__(self, items: list):
        self.left = Counter(_reference_key(specs(s)[0]) for s in items
                            if isinstance(s, RunSpec) and s.mode == "equivalence")
        self.done: dict = {}

    def outcome(self, ref: RunSpec, limits) -> Outcome:
        from bench.sweep.launch import run_config
        key = _reference_key(ref)
        if key not in self.done:
            self.done[key] = run_config(ref, limits, keep=True)
        return self.done[key]

    def release(self, ref: RunSpec) -> None:
        key = _reference_key(ref)
        self.left[key] -= 1
        if self.left[key] <= 0 and key in self.done:
            shutil.rmtree(self.done.pop(key).out_dir, ignore_errors=True)

    def close(self) -> None:
        for outcome in self.done.values():
            shutil.rmtree(outcome.out_dir, ignore_errors=True)
        self.done.clear()


def run(spec: RunSpec, limits, shared_dir=None, refs: Optional[References] = None) -> Outcome:
    """The gate for one configuration: its reference (from `refs`, run once per sweep; else run here), the candidate,
    both files compared. Folders removed as soon as nothing else needs them."""
    from bench.sweep.launch import run_config
    refs = refs if refs is not None else References([])
    ref_spec, cand_spec = specs(spec)
    cand = None
    try:
        ref = refs.outcome(ref_spec, limits)
        if ref.status != "ok":
            return dataclasses.replace(ref, reason=f"reference (single process, global batch) failed: {ref.reason}")
        cand = run_config(cand_spec, limits, shared_dir, keep=True)
        if cand.status != "ok":
            return cand
        verdict = compare_params(os.path.join(ref.out_dir, "params.pt"), os.path.join(cand.out_dir, "params.pt"),
                                 *gate_precision(spec))
    finally:
        if cand is not None:
            shutil.rmtree(cand.out_dir, ignore_errors=True)
        refs.release(ref_spec)
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
