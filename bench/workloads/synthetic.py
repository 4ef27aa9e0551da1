"""The synthetic workload: an MLP whose parameters (width, depth) and compute (batch, layer repeats) are
set by flags. On CUDA it defaults to 8 x 4096-wide layers at batch 512 (about 0.4 TFLOP a step:
compute-bound on one GPU, 537 MB of gradients to all-reduce), on CPU to 4 x 1024 at batch 64."""
from __future__ import annotations

import torch
from torch import nn

from bench.workloads.workload import Workload, cycle, synthetic_pool

NUM_CLASSES = 10
DEFAULTS = {"cuda": {"width": 4096, "depth": 8, "batch": 512}, "cpu": {"width": 1024, "depth": 4, "batch": 64}}


class Layer(nn.Linear):
    """One hidden layer, applied `repeats` times with its ReLU: the FSDP unit and the activation-checkpointing unit
    (a checkpoint around the Linear alone would keep what the ReLU saves)."""

    def __init__(self, width: int, repeats: int = 1):
        super().__init__(width, width)
        self.repeats = repeats

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.repeats):  # weight reuse: more compute, same parameter count
            x = torch.relu(super().forward(x))
        return x


class MLP(nn.Module):
    def __init__(self, width: int, depth: int, repeats: int = 1):
        super().__init__()
        self.layers = nn.ModuleList(Layer(width, repeats) for _ in range(depth))
        self.head = nn.Linear(width, NUM_CLASSES)
        self.repeats = repeats

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def flops_per_sample(width: int, depth: int, repeats: int = 1) -> float:
    """Training FLOPs per sample of the MLP, exactly what its step multiplies: 2 (forward) + 4 (backward: the input's
    gradient and the weight's) per multiply-accumulate, except the first layer's first use, whose input (the batch)
    needs no gradient: 2 + 2 there. FlopCounterMode counts the same (bench.workloads.flops; tests/test_flops.py)."""
    macs = depth * repeats * width * width + width * NUM_CLASSES
    return 6.0 * macs - 2.0 * width * width


def batch_maker(width: int):
    """make_batch(generator, batch) -> (inputs, class targets) of the MLP."""
    return lambda g, b: (torch.randn(b, width, generator=g), torch.randint(0, NUM_CLASSES, (b,), generator=g))


def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out, y)


def workload(spec, rank: int, device: torch.device) -> Workload:
    model = MLP(spec.synthetic_width, spec.synthetic_depth, spec.synthetic_repeats)
    pool, artefact = synthetic_pool(spec, rank, device, batch_maker(spec.synthetic_width))
    flops = flops_per_sample(spec.synthetic_width, spec.synthetic_depth, spec.synthetic_repeats)
    return Workload(model=model, loss_fn=loss, batches=cycle(pool),
                    on_device=True, artefact_bytes=artefact,
                    details={"flops_per_sample": flops, "flops_per_step": flops * spec.global_batch,
                             "unit_forward_flops_per_sample": 2.0 * spec.synthetic_repeats * spec.synthetic_width ** 2,
                             "width": spec.synthetic_width, "depth": spec.synthetic_depth, "layer_repeats": spec.synthetic_repeats})
