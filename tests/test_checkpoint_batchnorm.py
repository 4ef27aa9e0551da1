"""Activation checkpointing of blocks that hold BatchNorm (DeepLabV3's ResNet bottlenecks): the recomputation in backward
must not update the running statistics a second time (bench.rank.activations), alone and under FSDP2 (one gloo rank)."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from bench.rank import activations
from bench.rank.context import Ctx
from bench.rank.strategies import unwrap
from bench.rank.worker import prepare
from bench.shared.spec import RunSpec


class ConvBN(nn.Module):
    def __init__(self, c: int = 4):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))) + x


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), ConvBN(), ConvBN(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))


def one_step(m: nn.Module) -> dict:
    """One training step; the buffers after it (named as without checkpointing) and the updated parameters."""
    x = torch.randn(4, 3, 10, 10, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(x).square().mean().backward()
    opt.step()
    inner = unwrap(m)  # torch.compile's wrapper
    out = {activations.public_name(n): b.clone() for n, b in inner.named_buffers()}
    out.update({activations.public_name(n): (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
                for n, p in inner.named_parameters()})
    return out


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert torch.allclose(got[k].float(), want[k].float(), atol=1e-6), (k, got[k], want[k])


def test_checkpointing_updates_batchnorm_statistics_once_a_step():
    reference = one_step(model())
    assert reference["1.bn.num_batches_tracked"] == 1
    m = model()
    assert activations.apply(m, "full")["checkpointed_units"] == 2
    assert_same(one_step(m), reference)  # running mean, variance and the batch count: one update, as without it


def test_checkpointing_under_fsdp_updates_batchnorm_statistics_once_a_step(tmp_path):
    reference = one_step(model())
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        spec = RunSpec(workload="synthetic", strategy="fsdp", device_type="cpu", device_count=1, per_device_batch=4,
                       global_batch=4, image_size=0, steps=1, warmup=0, threads=1, seed=0, scaling="weak",
                       activation_checkpointing="full")
        got = one_step(prepare(model(), spec, Ctx(torch.device("cpu"), 1)))
    finally:
        dist.destroy_process_group()
    assert_same(got, reference)


@pytest.mark.timeout(120)
def test_a_compiled_checkpointed_model_updates_batchnorm_statistics_once_a_step(monkeypatch):
    # under --compile no context_fn is passed (a compiled checkpoint takes TorchDispatchModes only); AOTAutograd
    # applies the forward's buffer updates once however much it recomputes
    reference = one_step(model())
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m: real(m, backend="aot_eager"))  # no C compiler needed
    spec = RunSpec(workload="synthetic", strategy="single", device_type="cpu", device_count=1, per_device_batch=4,
                   global_batch=4, image_size=0, steps=1, warmup=0, threads=1, seed=0, scaling="weak",
                   activation_checkpointing="full", compile=True)
    m = prepare(model(), spec, Ctx(torch.device("cpu"), 1))
    assert_same(one_step(m), reference)
