"""Workloads and strategies: per-rank data, identical samples across strategies, local weights, CUDA timing logic."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from bench import timing
from bench.config import RunSpec
from bench.strategies import STRATEGIES, Ctx, unwrap
from bench.workloads import WORKLOADS, build_deeplabv3, gradient_bytes

CPU = torch.device("cpu")


def spec(strategy, n, **kw) -> RunSpec:
    base = dict(workload="synthetic", strategy=strategy, device_type="cpu", device_count=n, per_device_batch=4,
                global_batch=4 * n, image_size=0, steps=2, warmup=0, threads=1, seed=7, scaling="weak",
                synthetic_width=32, synthetic_depth=2)
    base.update(kw)
    return RunSpec(**base)


def first_batch(s: RunSpec, rank: int = 0):
    wl = WORKLOADS[s.workload](s, Ctx(CPU, s.device_count, rank=rank, world_size=s.device_count))
    return next(iter(wl.batches(0)))


def test_ddp_ranks_get_different_data_that_together_is_dataparallels_global_batch():
    x0, y0 = first_batch(spec("ddp", 2), rank=0)
    x1, y1 = first_batch(spec("ddp", 2), rank=1)
    assert not torch.equal(x0, x1)
    xg, yg = first_batch(spec("dp", 2))
    assert torch.equal(torch.cat([x0, x1]), xg) and torch.equal(torch.cat([y0, y1]), yg)
    xs, _ = first_batch(spec("single", 1, per_device_batch=4, global_batch=8, emulate_ranks=2))
    assert torch.equal(xs, xg)


def test_synthetic_parameters_follow_width_and_depth_and_repeats_add_compute_only():
    s = spec("single", 1, synthetic_width=64, synthetic_depth=3)
    assert gradient_bytes(s) == 4 * (3 * (64 * 64 + 64) + 64 * 10 + 10)
    model = WORKLOADS["synthetic"](dataclasses.replace(s, synthetic_repeats=3), Ctx(CPU, 1)).model
    assert sum(p.numel() for p in model.parameters()) * 4 == gradient_bytes(s)


def test_dataparallel_on_cpu_is_a_pass_through_wrapper():
    model = torch.nn.Linear(4, 2)
    wrapped = STRATEGIES["dp"](model, Ctx(CPU, 1))
    x = torch.randn(3, 4)
    assert isinstance(wrapped, torch.nn.DataParallel) and wrapped.device_ids == []
    assert torch.equal(wrapped(x), model(x)) and unwrap(wrapped) is model


def test_deeplabv3_loads_a_local_weights_file_without_downloading(tmp_path):
    torch.manual_seed(1)
    model, _ = build_deeplabv3()
    path = tmp_path / "w.pt"
    torch.save(model.state_dict(), path)
    loaded, details = build_deeplabv3(str(path))
    assert details["missing_keys"] == 0 and details["unexpected_keys"] == 0
    name, p = next(iter(model.state_dict().items()))
    assert torch.equal(loaded.state_dict()[name], p)


def test_deeplabv3_synthetic_masks_have_voc_classes_and_batch_shape():
    s = spec("single", 1, workload="deeplabv3", image_size=32, per_device_batch=2, global_batch=2)
    x, y = first_batch(s)
    assert x.shape == (2, 3, 32, 32) and y.shape == (2, 32, 32) and y.dtype == torch.int64
    assert 0 <= int(y.min()) and int(y.max()) < 21


class FakeEvent:
    """Stands in for torch.cuda.Event: each record() takes the next tick of a fake GPU clock (ms)."""
    clock = 0.0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.t = None

    def record(self):
        FakeEvent.clock += 10.0
        self.t = FakeEvent.clock

    def elapsed_time(self, other):
        return other.t - self.t


def test_cuda_timing_uses_events_for_phases_and_synchronises_every_device_once_per_step(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: synced.append(d))
    devs = [torch.device("cuda", 0), torch.device("cuda", 1)]
    t = timing.PhaseTimer(devs[0], devs)
    t.start()
    for phase in timing.PHASES:
        t.mark(phase)
    assert synced == [], "a phase synchronised the device"
    row = t.stop()
    assert synced == devs
    assert all(row[f"{p}_ms"] == 10.0 for p in timing.PHASES)
