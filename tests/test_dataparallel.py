"""DataParallel's paths that only run at 2+ GPUs, held on the CPU through stand-ins for what needs CUDA: its replicas'
autocast (AutocastDataParallel.parallel_apply, on torch 2.3's autocast API as on today's) and the memory format of
its replicas (torch's own replicate(), its copy across devices a CPU stand-in that flattens as NCCL's does)."""
from __future__ import annotations

import importlib
import threading

import pytest
import torch
from torch import nn

from bench.rank import strategies

DATA_PARALLEL = importlib.import_module("torch.nn.parallel.data_parallel")   # the module (its function shadows the name)
IS_ON, DTYPE = torch.is_autocast_enabled, torch.get_autocast_dtype   # the stand-ins' own view, whatever a test patches


def parallel_apply_as_torch_does(modules, inputs, kwargs_tup=None, devices=None):
    """torch's parallel_apply on the CPU: each replica in a thread of its own, which re-enters autocast knowing only
    whether it was on (torch.nn.parallel.parallel_apply: `torch.amp.autocast(device_type, enabled=...)`), so a new
    thread's autocast takes the device's default dtype."""
    enabled, results = IS_ON("cpu"), {}

    def work(i, module, x):
        with torch.autocast("cpu", enabled=enabled):
            results[i] = module(x)
    threads = [threading.Thread(target=work, args=(i, m, x)) for i, (m, x) in enumerate(zip(modules, inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in range(len(modules))]


class Seen(nn.Module):
    """Records the autocast dtype it runs under (None: off)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append(DTYPE("cpu") if IS_ON("cpu") else None)
        return x * 2


class Torch23:
    """torch 2.3's autocast API (the floor pyproject.toml declares) over this torch, as the suite's module sees it:
    is_autocast_enabled() takes no device type (it answers for CUDA), there is no get_autocast_dtype, each device has
    functions of its own. Everything else is this torch's."""

    def __getattr__(self, name):
        if name == "get_autocast_dtype":
            raise AttributeError("module 'torch' has no attribute 'get_autocast_dtype'")
        return getattr(torch, name)

    @staticmethod
    def is_autocast_enabled(*args):
        if args:
            raise TypeError("is_autocast_enabled() takes 0 positional arguments but 1 was given")
        return IS_ON("cuda")

    @staticmethod
    def is_autocast_cpu_enabled():
        return IS_ON("cpu")

    @staticmethod
    def get_autocast_cpu_dtype():
        return DTYPE("cpu")


@pytest.mark.parametrize("api", ["torch 2.4+", "torch 2.3"])
def test_dataparallel_replicas_run_under_the_callers_autocast_dtype_on_torch_2_3_as_on_later(api, monkeypatch):
    monkeypatch.setattr(DATA_PARALLEL, "parallel_apply", parallel_apply_as_torch_does)
    dp = strategies.AutocastDataParallel(nn.Identity())   # no GPU: no devices; parallel_apply is what is held here
    dp.autocast_device = "cpu"
    replicas, inputs = [Seen(), Seen()], [torch.ones(2), torch.ones(2)]
    with torch.autocast("cpu", dtype=torch.float16):   # not the CPU's default (bf16), as bf16 is not CUDA's (fp16)
        if api == "torch 2.3":
            monkeypatch.setattr(strategies, "torch", Torch23())
        assert strategies.autocast_dtype("cpu") == torch.float16
        out = dp.parallel_apply(replicas, inputs, [{}, {}])
    assert [r.seen for r in replicas] == [[torch.float16], [torch.float16]]   # torch's threads alone: bf16
    assert all(torch.equal(o, torch.full((2,), 2.0)) for o in out)
    off = [Seen(), Seen()]
    dp.parallel_apply(off, inputs, [{}, {}])
    assert [r.seen for r in off] == [[None], [None]] and strategies.autocast_dtype("cpu") is None


def test_without_the_wrapper_torchs_replica_threads_lose_the_dtype():
    # the stand-in is faithful: what AutocastDataParallel corrects happens with it
    replicas = [Seen(), Seen()]
    with torch.autocast("cpu", dtype=torch.float16):
        parallel_apply_as_torch_does(replicas, [torch.ones(1), torch.ones(1)])
    assert [r.seen for r in replicas] == [[torch.bfloat16], [torch.bfloat16]]


def broadcast_flattened(devices, *tensors):
    """comm.broadcast_coalesced on the CPU, as NCCL's does it: the source device keeps the tensors themselves, every
    other device gets them flattened into one buffer and unflattened (contiguous, NCHW). Differentiable, as Broadcast is."""
    out = list(tensors)
    for _ in devices[1:]:
        out += torch._utils._unflatten_dense_tensors(torch._utils._flatten_dense_tensors(tensors), tensors)
    return tuple(out)


def broadcast_coalesced(tensors, devices, buffer_size=None):
    """comm.broadcast_coalesced (the buffers' path, detached): the same, one list per device."""
    flat = broadcast_flattened(devices, *[t.detach() for t in tensors])
    return [list(flat[i:i + len(tensors)]) for i in range(0, len(flat), len(tensors))]


def conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3)).to(
        memory_format=torch.channels_last)


def weights(replica) -> list:
    return [getattr(m, "weight") for m in replica.modules() if isinstance(m, nn.Conv2d)]


def test_every_dataparallel_replica_keeps_the_channels_last_weights_of_the_source(monkeypatch):
    from torch.nn.parallel._functions import Broadcast
    from torch.nn.parallel import comm
    monkeypatch.setattr(Broadcast, "apply", staticmethod(broadcast_flattened))
    monkeypatch.setattr(comm, "broadcast_coalesced", broadcast_coalesced)
    model = conv_net()
    plain = nn.DataParallel.replicate(None, model, [0, 1, 2])   # torch's replicate with the stand-in: the bias is there
    assert [w.is_contiguous(memory_format=torch.channels_last) for r in plain for w in weights(r)] == [True] * 2 + [False] * 4
    replicas = strategies.AutocastDataParallel(nn.Identity()).replicate(model, [0, 1, 2])
    assert all(w.is_contiguous(memory_format=torch.channels_last) for r in replicas for w in weights(r))
    assert all(torch.equal(a, b) for a, b in zip(weights(replicas[2]), weights(model)))
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    replicas[1](x).sum().backward()   # the gradient flows back through the copy and the broadcast to the source
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    assert all(torch.allclose(g, p.grad) for g, p in zip(got, model.parameters()))
