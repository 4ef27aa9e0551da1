"""Timing that does not disturb what it measures: on CUDA a window holds no host synchronisation and no
device-to-host read (proved on CPU through a stand-in device API), steps and phases come from events
read after the window; on CPU the monotonic clock keeps its meaning."""
from __future__ import annotations

import contextlib
import time

import pytest
import torch

from bench.rank import timing, worker
from bench.rank.context import Ctx
from bench.rank.loop import Trainer
from bench.rank.strategies import STRATEGIES
from bench.sweep.plan import RunSpec
from bench.workloads.registry import builder

CPU = torch.device("cpu")


class FakeEvent:
    """Stands in for torch.cuda.Event: record() takes the host clock; elapsed_time() in ms."""

    def __init__(self, api):
        self.api, self.t = api, None

    def record(self, stream=None):
        self.api.records += 1
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        assert not self.api.window_open(), "an event was read inside the window"
        return (other.t - self.t) * 1e3


class FakeAPI:
    """The device API of bench.rank.timing.EventClock, counting what happens while a window is open."""

    def __init__(self):
        self.clock = None
        self.records = 0
        self.syncs_inside, self.syncs = [], []

    def window_open(self) -> bool:
        return self.clock is not None and self.clock.is_open

    def event(self):
        return FakeEvent(self)

    def stream(self, device):
        return None

    def synchronize(self, device):
        self.syncs.append(device)
        if self.window_open():
            self.syncs_inside.append(device)


@contextlib.contextmanager
def device_reads_counted(api: FakeAPI):
    """Count tensor reads that would copy device memory to the host (a synchronisation on CUDA) while a window is open."""
    reads = []
    names = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")
    saved = {n: getattr(torch.Tensor, n) for n in names}

    def wrap(n):
        def read(self, *a, **k):
            if api.window_open():
                reads.append(n)
            return saved[n](self, *a, **k)
        return read
    for n in names:
        setattr(torch.Tensor, n, wrap(n))
    try:
        yield reads
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)


def spec(strategy="single", **kw) -> RunSpec:
    base = dict(workload="synthetic", strategy=strategy, device_type="cpu", device_count=1, per_device_batch=8,
                global_batch=8, image_size=0, steps=4, warmup=2, threads=1, seed=0, scaling="weak",
                synthetic_width=32, synthetic_depth=2)
    base.update(kw)
    return RunSpec(**base)


def trainer(s: RunSpec, api: FakeAPI, sync_devices: list) -> Trainer:
    torch.manual_seed(0)
    wl = builder(s.workload)(s, 0, CPU)
    model = STRATEGIES[s.strategy](wl.model, Ctx(CPU, s.device_count))

    def clock():
        api.clock = timing.EventClock(CPU, sync_devices, api=api)
        return api.clock
    return Trainer(spec=s, model=model, opt=worker.make_optimizer(model), wl=wl, device=CPU, clock=clock)


@pytest.mark.parametrize("strategy, accum", [("single", 1), ("single", 4), ("dp", 1)])
def test_cuda_window_has_no_synchronisation_and_no_device_read_inside(strategy, accum):
    api = FakeAPI()
    devices = ["gpu0", "gpu1"] if strategy == "dp" else ["gpu0"]  # DataParallel synchronises all its GPUs
    s = spec(strategy, micro_batch=8 // accum if accum > 1 else 0)
    t = trainer(s, api, devices)
    with device_reads_counted(api) as reads:
        out = worker.measure(s, t, [CPU], t.wl)
    assert api.syncs_inside == [] and reads == [], (api.syncs_inside, reads)
    windows = [w for w in out["windows"]]
    assert [w["kind"] for w in windows] == ["warmup", "warmup", "measure"]
    assert api.syncs == devices * 2 * len(windows)  # one synchronisation of each device at each end of each window
    measured = [r for r in out["steps"] if r["kind"] == "measure"]
    assert len(measured) == s.steps and all(isinstance(r["loss"], float) for r in measured)  # read once, after
    # Events, not the host clock, timed the steps: 5 phase marks + one boundary per step (+ the opening one),
    # and one buffer-free forward/backward pair per micro-batch.
    assert api.records == sum(1 + w["steps"] * (4 + 2 * accum) for w in windows)


def test_the_read_counter_catches_a_host_read_inside_the_window():
    # The control: a step that reads its loss inside the window must be seen.
    api = FakeAPI()
    s = spec()
    t = trainer(s, api, ["gpu0"])
    real_loss = t.wl.loss_fn
    t.wl.loss_fn = lambda out, y: (lambda loss: (loss.item(), loss)[1])(real_loss(out, y))
    with device_reads_counted(api) as reads:
        t.window(iter(t.wl.batches(0)), 2, "measure")
    assert reads == ["item", "item"]


def test_event_step_times_partition_the_window_and_phases_partition_each_step():
    api = FakeAPI()
    s = spec()
    t = trainer(s, api, ["gpu0"])
    out = t.window(iter(t.wl.batches(0)), 5, "measure")
    rows = out["rows"]
    assert len(rows) == 5
    total = sum(r["step_ms"] for r in rows)
    assert total <= out["window"]["wall_s"] * 1e3 and total > 0.5 * out["window"]["wall_s"] * 1e3
    for r in rows:
        parts = sum(r[f"{p}_ms"] for p in timing.PHASES) + r["other_ms"]
        assert parts == pytest.approx(r["step_ms"])


def test_cpu_clock_phases_add_up_to_the_step_and_attribute_delays():
    c = timing.HostClock()
    c.open()
    time.sleep(0.002)
    c.mark("data")
    c.mark("h2d")
    time.sleep(0.03)
    c.mark("forward")
    c.step_end()
    wall = c.close()
    (row,) = c.rows()
    assert row["forward_ms"] >= 30.0 and row["forward_ms"] > 5 * row["data_ms"] and row["h2d_ms"] < 1.0
    assert row["data_ms"] + row["h2d_ms"] + row["forward_ms"] + row["other_ms"] == pytest.approx(row["step_ms"])
    assert row["step_ms"] <= wall * 1e3 + 0.01


def test_the_store_says_which_method_timed_each_result(tmp_path):
    import sqlite3
    from conftest import FAST, run_bench
    path = str(tmp_path / "s.sqlite")
    p = run_bench(FAST + ["--strategies", "single", "--store", path])
    assert p.returncode == 0, p.stdout + p.stderr
    method, window = sqlite3.connect(path).execute("SELECT timing_method, window_s FROM results").fetchone()
    assert method == "cpu_clock" and window > 0
    assert timing.make_clock(torch.device("cuda", 0), api=FakeAPI()).method == "cuda_window_events"


def test_cpu_memory_is_the_process_peak_rss():
    from bench.rank.memory import peak_memory
    rows = peak_memory([CPU], rank=3)
    assert rows[0]["rank"] == 3 and rows[0]["device"] == "cpu" and rows[0]["peak_rss_mib"] > 50
