"""Every strategy measured under the same conditions (issue 22, item 3), proved on CPU through stand-ins:
one optimizer implementation whatever the parameters are, steady-state memory peaks (the cache emptied
before they are reset, in epoch mode too), compilation outside every epoch's time, the probe's buffers
broadcast once per step under gradient accumulation, the same CPU threads per process on CUDA."""
from __future__ import annotations

import time

import torch
from torch import nn

from bench.rank import epochs, loop, memory, optimizer, timing, worker
from bench.rank.loop import Trainer
from bench.shared.spec import RunSpec
from bench.workloads.registry import builder

CPU = torch.device("cpu")


def spec(**kw) -> RunSpec:
    base = dict(workload="synthetic", strategy="single", device_type="cpu", device_count=1, per_device_batch=8,
                global_batch=8, image_size=0, steps=2, warmup=2, threads=1, seed=0, scaling="weak",
                synthetic_width=16, synthetic_depth=2)
    base.update(kw)
    return RunSpec(**base)


def trainer(s: RunSpec, model: nn.Module = None, wl=None) -> Trainer:
    torch.manual_seed(0)
    wl = wl if wl is not None else builder(s.workload)(s, 0, CPU)
    model = model if model is not None else wl.model
    return Trainer(spec=s, model=model, opt=optimizer.make_optimizer(model), wl=wl, device=CPU, clock=timing.HostClock)


# ---- one optimizer implementation ---------------------------------------------------------------

class RecordingSGD:
    made: list = []

    def __init__(self, params, **kw):
        self.state = {p: {} for p in params}
        RecordingSGD.made.append(kw)

    def __getattr__(self, name):
        return lambda *a, **k: None


class OnGpu(torch.Tensor):
    """A parameter as make_optimizer sees it on a GPU."""
    is_cuda = True


class ShardedOnGpu(OnGpu):
    """FSDP2's sharded parameter (a DTensor: it has placements) on a GPU."""
    placements = ()


class FakeParams(nn.Module):
    def __init__(self, sharded: bool):
        super().__init__()
        self.kind = ShardedOnGpu if sharded else OnGpu

    def parameters(self, recurse=True):
        return iter([torch.zeros(2).as_subclass(self.kind) for _ in range(2)])


def test_every_strategy_gets_the_same_optimizer_implementation_on_cuda(monkeypatch):
    monkeypatch.setattr(torch.optim, "SGD", RecordingSGD)
    RecordingSGD.made = []
    optimizer.make_optimizer(FakeParams(sharded=False), cuda=True)  # single, dp, ddp
    optimizer.make_optimizer(FakeParams(sharded=True), cuda=True)   # fsdp
    plain, sharded = RecordingSGD.made
    assert plain == sharded and plain.get("foreach") is True and not plain.get("fused")
    settings = optimizer.optimizer_settings(True, "fp16")
    assert settings["implementation"] == "foreach" and "every strategy" in settings["grad_scaler"]


# ---- steady-state memory ------------------------------------------------------------------------

class CountingCuda:
    """torch.cuda's memory API as reset_peaks uses it, recording the calls in order."""

    def __init__(self):
        self.calls = []

    def synchronize(self, d):
        self.calls.append(("synchronize", d.index))

    def empty_cache(self):
        self.calls.append(("empty_cache", None))

    def reset_peak_memory_stats(self, d):
        self.calls.append(("reset", d.index))


def test_the_cache_is_emptied_before_the_peaks_are_reset():
    api = CountingCuda()
    memory.reset_peaks([torch.device("cuda", 0), torch.device("cuda", 1)], api=api)
    assert api.calls == [("synchronize", 0), ("synchronize", 1), ("empty_cache", None), ("reset", 0), ("reset", 1)]
    api = CountingCuda()
    memory.reset_peaks([CPU], api=api)
    assert api.calls == []


def test_the_whole_runs_peak_is_read_before_the_reset_and_kept_beside_the_steady_one():
    # cuDNN's autotuning and torch.compile peak in the warm-up: the steady figures after the reset miss them
    class Peaks:
        max_memory_allocated = staticmethod(lambda d: 3000 * 2**20)
        max_memory_reserved = staticmethod(lambda d: 5000 * 2**20)
    got = memory.run_peaks([torch.device("cuda", 0), CPU], api=Peaks(), level=lambda i: {"device_used_mib": 5700.0})
    assert got == {"cuda:0": {"run_peak_allocated_mib": 3000.0, "run_peak_reserved_mib": 5000.0, "run_device_used_mib": 5700.0}}
    steady = {"peak_allocated_mib": 2500.0, "peak_reserved_mib": 2600.0, "device_used_mib": 3300.0}
    row = memory.with_run_peaks(steady, got["cuda:0"])
    assert (row["peak_reserved_mib"], row["run_peak_reserved_mib"], row["run_device_used_mib"]) == (2600.0, 5000.0, 5700.0)
    assert memory.with_run_peaks(steady, None)["run_peak_reserved_mib"] == 2600.0   # no reading: the steady ones


class Epochs:
    """The synthetic workload as a data set of whole epochs (3 steps each), as VOC gives them."""

    def __init__(self, wl, steps: int = 3):
        self.wl, self.steps_per_epoch, self.n_images = wl, steps, steps * 8

    def __getattr__(self, name):
        return getattr(self.wl, name)

    def batches(self, epoch: int):
        it = self.wl.batches(epoch)
        return [next(iter(it)) for _ in range(self.steps_per_epoch)]

    def epoch_indices(self, epoch: int) -> list:
        return list(range(self.n_images))


class SlowFirstCall(nn.Module):
    """A compiled model's stand-in: its first forward takes COMPILE_S (the compilation)."""
    COMPILE_S = 0.3

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.COMPILE_S)
        return self.inner(x)


def test_epoch_mode_resets_peaks_after_the_warmup_and_compiles_outside_every_epoch(monkeypatch):
    s = spec(epochs=2, warmup=2, compile=True, data="voc")
    torch.manual_seed(0)
    wl = Epochs(builder(s.workload)(s, 0, CPU))
    model = SlowFirstCall(wl.model)
    t = trainer(s, model=model, wl=wl)
    before = [b.clone() for b in model.buffers()]
    at = []
    monkeypatch.setattr(epochs.memory, "reset_peaks", lambda devices: at.append(t.n))
    out = worker.measure(s, t, [CPU], wl)
    assert at == [s.warmup]  # once, as the first measured step takes its batch
    assert out["compile_s"] >= SlowFirstCall.COMPILE_S
    assert all(e["wall_s"] < SlowFirstCall.COMPILE_S for e in out["epochs"]), out["epochs"]
    assert [r["step"] for r in out["steps"]] == list(range(6))  # the compiling step is not counted
    assert all(torch.equal(a, b) for a, b in zip(before, model.buffers()))


def test_epoch_mode_keeps_the_whole_runs_peak_read_before_the_reset(monkeypatch):
    # VOC's --epochs runs reset the peaks inside the first epoch: the warm-up's (and compilation's) peak is read first
    s = spec(epochs=2, warmup=2, data="voc")
    torch.manual_seed(0)
    wl = Epochs(builder(s.workload)(s, 0, CPU))
    t = trainer(s, wl=wl)
    calls = []
    warmup_peak = {"run_peak_allocated_mib": 3000.0, "run_peak_reserved_mib": 5000.0, "run_device_used_mib": 5700.0}
    steady = {"device": "cuda:0", "peak_allocated_mib": 2500.0, "peak_reserved_mib": 2600.0, "device_used_mib": 3300.0}
    monkeypatch.setattr(memory, "run_peaks", lambda devices: calls.append(("read", t.n)) or {"cuda:0": warmup_peak})
    monkeypatch.setattr(memory, "reset_peaks", lambda devices: calls.append(("reset", t.n)))
    monkeypatch.setattr(memory, "peak_memory", lambda devices, rank, artefact_bytes, run:
                        [memory.with_run_peaks(dict(steady), (run or {}).get("cuda:0"))])
    out = worker.measure(s, t, [CPU], wl)
    assert calls == [("read", s.warmup), ("reset", s.warmup)]
    row = out["memory"][0]
    assert (row["peak_reserved_mib"], row["run_peak_reserved_mib"], row["run_device_used_mib"]) == (2600.0, 5000.0, 5700.0)


# ---- the probe's buffers ------------------------------------------------------------------------

def test_probe_broadcasts_buffers_once_per_step_under_gradient_accumulation(monkeypatch):
    s = spec(per_device_batch=8, micro_batch=2)  # 4 micro-batches a step
    t = trainer(s)
    count = []
    monkeypatch.setattr(loop, "broadcast_buffers", lambda module: count.append(1))
    t.explicit_buffers = True
    t.window(iter(t.wl.batches(0)), 3, "probe_no_sync")
    assert len(count) == 3


# ---- the same CPU threads per process -----------------------------------------------------------

def test_every_strategy_gets_the_same_cpu_threads_per_process_on_cuda():
    from bench.config import SweepConfig
    from bench.sweep.plan import Machine, plan
    from bench.sweep.resolve import resolve
    gpu8 = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("H100",) * 8, gpu_capabilities=((9, 0),) * 8)
    cfg = resolve(SweepConfig(workloads=("synthetic",), strategies=("single", "dp", "ddp", "fsdp"), gpus=(1, 8)), gpu8)
    assert cfg.threads_per_process == 8  # 64 cores shared by the 8 ranks of the largest count
    specs = [s for s in plan(cfg, gpu8) if isinstance(s, RunSpec)]
    assert {s.strategy for s in specs} >= {"single", "dp", "ddp", "fsdp", "comm"}
    assert {s.threads for s in specs} == {8}  # stored per result as threads_per_process; OMP_NUM_THREADS too


# ---- a broken torchvision ----------------------------------------------------------------------

def test_fsdp_shards_the_mlp_when_importing_torchvision_raises_runtime_error(monkeypatch):
    import builtins
    from bench.rank import fsdp
    from bench.workloads.synthetic import MLP
    real = builtins.__import__

    def broken(name, *a, **k):  # what a torchvision built for another torch does: "operator torchvision::nms does not exist"
        if name.startswith("torchvision"):
            raise RuntimeError("operator torchvision::nms does not exist")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", broken)
    model = MLP(8, 3)
    assert fsdp.shard_blocks(model) == list(model.layers)
