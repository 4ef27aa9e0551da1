"""Your own model in the suite: ./run_bench.sh --workloads examples/my_model.py:build (docs/workloads.md, "Your own model")."""
import torch
from torch import nn


def build(image_size=None):
    side = image_size or 32
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    make_batch = lambda g, batch: (torch.randn(batch, 3, side, side, generator=g),
                                   torch.randint(0, 10, (batch,), generator=g))
    return {"model": model, "make_batch": make_batch, "loss_fn": nn.functional.cross_entropy}
