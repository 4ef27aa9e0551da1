"""The FLOPs of one training step of a workload, counted by torch.utils.flop_counter.FlopCounterMode around one
forward and backward: what model FLOPs utilisation is computed from (bench.analysis.utilisation).

    c = count_step(model, x, y, loss_fn)       # FlopCount: forward and total FLOPs of the batch, per op, what it missed
    per_sample = count_workload(wl, spec)       # a built workload, per sample, its analytic figure beside (the rank's)

Counted once per configuration by its first rank, before the strategy wraps the model (bench.rank.worker), on the meta
device: the model runs with meta copies of its parameters and buffers through torch.func.functional_call, so it costs
no memory and no compute, and nothing of the model (BatchNorm statistics, gradients, the random state) changes.
Where the meta device cannot run the model (detection's data-dependent proposals) a CPU copy of it runs a small
batch. The count is per sample and exact for any batch: matmuls and convolutions scale with it.

The counter has formulas for matmuls, convolutions and attention kernels; an op that does such work without one is
listed in `uncounted` (on CPU, causal `scaled_dot_product_attention` runs a flash kernel the counter does not know
and counts 0: pytorch #134804), and the analysis then takes the workload's analytic figure, or calls the count a
lower bound. On meta, attention runs as the matmuls it does, which are counted (the whole T x T product, causal or
not: the convention of the 12·L·H·Q·T term). `recompute` (a function that wraps the model in activation
checkpointing) counts the step again as the hardware runs it, the recomputed forward included: MFU counts the
first, hardware FLOPs utilisation the second.

Convolution backward is counted by `conv_backward_flops`, not torch's formula: torch's grad-weight term (before pytorch
PR #183405) ignores `groups`, so depthwise and grouped convolutions counted up to `groups` times their weight gradient
(mobilenet_v3_large 11.8 GFLOP a sample at 224 px, not 1.3; resnet50, ungrouped, was right).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count, flop_registry

# Ops whose names say they multiply matrices (or run a recurrent or attention kernel); one without a counter formula
# means the count missed real work.
HEAVY = re.compile(r"mm|conv|attention|matmul|einsum|gemm|rnn|lstm|gru")
CPU_BATCH = 2       # the batch of a count that must run on the CPU (per sample it is the same)


@dataclass(frozen=True)
class FlopCount:
    total: int                      # forward + backward FLOPs of the batch
    forward: int
    batch: int
    device: str                     # 'meta' or 'cpu'
    by_op: dict = field(default_factory=dict)        # op -> FLOPs, the counter's own breakdown
    uncounted: tuple = ()           # ops that do matmul-like work the counter has no formula for
    recomputed: Optional[int] = None  # with `recompute`: the hardware's total (model + recomputed forward)

    def per_sample(self) -> dict:
        """What the store keeps (bench.store: flops_per_sample, hw_flops_per_sample, flops_json)."""
        out = {"flops_per_sample": self.total / self.batch, "forward_per_sample": self.forward / self.batch,
               "method": "torch.utils.flop_counter.FlopCounterMode, one forward and backward", "device": self.device,
               "batch": self.batch, "by_op": dict(self.by_op), "uncounted": list(self.uncounted)}
        if self.recomputed is not None:
            out["hw_flops_per_sample"] = self.recomputed / self.batch
        return out


def conv_backward_flops(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                        _output_padding, _groups, output_mask, out_shape=None, **kwargs) -> int:
    """aten.convolution_backward's FLOPs (FlopCounterMode's signature, shapes for tensors): the input's and the weight's
    gradients each do the forward's multiply-accumulates, one per (input, weight) pair the forward multiplied. The
    forward's count reads Cin/groups off the weight's shape (Cout x Cin/groups, or Cin x Cout/groups transposed), so
    this is right for any groups, whether or not the installed torch's own formula divides the weight term."""
    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed=transposed)
    return forward * (bool(output_mask[0]) + bool(output_mask[1]))


# What FlopCounterMode counts with in place of its own formulas (see conv_backward_flops).
FORMULAS = {torch.ops.aten.convolution_backward: conv_backward_flops}


class _Seen(TorchDispatchMode):
    """Records every op that reaches dispatch (what the counter saw, formula or not)."""

    def __init__(self):
        super().__init__()
        self.ops: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func.overloadpacket)
        return func(*args, **(kwargs or {}))


class _Step(nn.Module):
    """One forward and backward as a module's forward, so that functional_call swaps in meta tensors for all of it:
    the backward too, and the forward that activation checkpointing recomputes inside it."""

    def __init__(self, model: nn.Module, loss_fn: Callable, counter: FlopCounterMode):
        super().__init__()
        self.model, self.loss_fn, self.counter = model, loss_fn, counter

    def forward(self, x, y) -> int:
        loss = self.loss_fn(self.model(x), y)
        forward = self.counter.get_total_flops()
        loss.backward()
        return forward


def _once(model: nn.Module, x, y, loss_fn) -> tuple:
    """(total, forward, by_op, uncounted) of one forward and backward under the counter. Meta inputs: with meta copies
    of the parameters and buffers (grads land on the copies; the model's own tensors are never touched)."""
    with FlopCounterMode(display=False, custom_mapping=FORMULAS) as counter, _Seen() as seen:
        step = _Step(model, loss_fn, counter)
        if x.device.type == "meta":  # a model built on meta too: its own parameters must not keep (meta) grads
            state = {n: torch.empty_like(p, device="meta").requires_grad_(p.requires_grad)
                     for n, p in step.named_parameters()}
            state.update({n: torch.empty_like(b, device="meta") for n, b in step.named_buffers()})
            fwd = torch.func.functional_call(step, state, (x, y))
        else:
            fwd = step(x, y)
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items() if n}
    missed = sorted(str(op) for op in seen.ops if op not in flop_registry and HEAVY.search(str(op).split(".")[-1]))
    return int(counter.get_total_flops()), int(fwd), by_op, tuple(missed)


def count_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable,
               recompute: Optional[Callable[[nn.Module], nn.Module]] = None) -> FlopCount:
    """Forward and backward FLOPs of `model` on the batch (x, y), on x's device, in the mode the model is in: meta
    inputs run with meta copies of the parameters and buffers (nothing of `model` changes); CPU inputs run the model
    itself, so hand it a copy. recompute: returns a module that runs `model` under activation checkpointing, leaving
    `model` as it is; the step is then counted again under it: the hardware's FLOPs, recomputation included."""
    total, fwd, by_op, missed = _once(model, x, y, loss_fn)
    hardware = None
    if recompute is not None:
        try:
            hardware = _once(recompute(model), x, y, loss_fn)[0]
        except Exception:  # noqa: BLE001 - the hardware's figure is extra: the model's count stands without it
            hardware = None
    if x.device.type != "meta":
        model.zero_grad(set_to_none=True)
    return FlopCount(total, fwd, int(x.shape[0]), x.device.type, by_op, missed, hardware)


# ---------------------------------------------------------------- a configuration's workload

def example_batch(wl, spec, n: int) -> tuple:
    """n samples of the workload's inputs and targets, as the step feeds them: the workload's own `example` maker where
    it has one (real data: drawing from its loader would start workers), else the first pooled batch (on its device)."""
    if wl.example is not None:
        return wl.example(torch.Generator().manual_seed(spec.seed), n)
    if not wl.on_device:
        raise ValueError("a workload fed by a loader needs an `example` batch maker to be counted "
                         "(bench.workloads.workload)")
    x, y = next(iter(wl.batches(0)))
    return x[:n], y[:n]


def count_workload(wl, spec, recompute: Optional[Callable[[nn.Module], nn.Module]] = None) -> dict:
    """The training FLOPs per sample of a built workload (its model before any strategy wraps it), counted at the
    configuration's micro-batch on meta; where meta cannot run the model, on the CPU on a copy of it at CPU_BATCH.
    The workload's analytic figure (details['flops_per_sample']) rides along to be checked against. Nothing of
    `wl` changes, the global random state included. Returns FlopCount.per_sample() (+ analytic_per_sample), or
    {'error': ...} when the model cannot be counted (the run goes on)."""
    micro = spec.micro_batch or spec.per_device_batch
    analytic = wl.details.get("flops_per_sample") if isinstance(wl.details, dict) else None
    out: dict = {"analytic_per_sample": float(analytic)} if isinstance(analytic, (int, float)) else {}
    with torch.random.fork_rng(devices=[]):
        try:
            x, y = example_batch(wl, spec, micro)
            try:
                got = count_step(wl.model, x.to("meta"), y.to("meta"), wl.loss_fn, recompute)
            except Exception:  # noqa: BLE001 - what meta cannot run (detection's data-dependent proposals)
                n = min(micro, CPU_BATCH)
                got = count_step(copy.deepcopy(wl.model).cpu(), x[:n].cpu(), y[:n].cpu(), wl.loss_fn,
                                 recompute)
        except Exception as e:  # noqa: BLE001 - a model the counter cannot run is not a failed run
            return {**out, "error": f"{type(e).__name__}: {e}"[:500]}
    return {**out, **got.per_sample()}
