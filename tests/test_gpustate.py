"""The GPU's state in the measured window (bench.machine.gpustate, bench.analysis.gpustate): a sampling thread over a
fake NVML whose throttle reasons change mid-window, its rows through the store, and the report flagging the
configuration that throttled with the reason, the clock it left and for how much of the window."""
from __future__ import annotations

import re
import threading

import pytest

from bench.analysis import gpustate as state
from bench.machine import gpustate
from bench.report import pages, recommend, report
from test_utilisation import MLP_FLOPS, build, payload, rspec

POWER_CAP, IDLE, APP_CLOCKS = 0x4, 0x1, 0x2


class ThrottlingNVML:
    """NVML over one GPU (an H100 SXM: 1980 MHz, 700 W) that runs free for its first `free` samples, then hits its power
    cap: 1410 MHz at 700 W, reason SwPowerCap (read through the pre-535 name: this binding lacks the new one)."""

    def __init__(self, free: int):
        self.free, self.reads = free, 0
        self.enough = threading.Event()

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        self.reads += 1
        if self.reads >= self.free + 6:
            self.enough.set()
        return POWER_CAP if self.reads > self.free else IDLE if self.reads == 1 else 0

    def nvmlDeviceGetClockInfo(self, h, clock):
        assert clock == 1  # NVML_CLOCK_SM
        return 1410 if self.reads > self.free else 1980

    def nvmlDeviceGetPowerUsage(self, h):
        return 700_000 if self.reads > self.free else 520_000

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60 + self.reads

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return 1980

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000


def test_the_sampler_records_the_window_and_sees_the_throttle_reasons_change_mid_window():
    nvml = ThrottlingNVML(free=4)
    sampler = gpustate.Sampler(["cuda:0"], nvml=nvml, handles=[("h", 0)], interval_s=0.001).start()
    assert nvml.enough.wait(10)
    rows = sampler.stop(rank=1)
    assert len(rows) >= 10 and [r["sample"] for r in rows] == list(range(len(rows)))
    assert all(r["rank"] == 1 and r["device"] == "cuda:0" and r["sm_clock_max_mhz"] == 1980 and r["power_limit_w"] == 700.0
               for r in rows)
    assert [r["t_ms"] for r in rows] == sorted(r["t_ms"] for r in rows) and rows[0]["t_ms"] < 1.0
    assert [r["reasons"] for r in rows[:4]] == [IDLE, 0, 0, 0] and {r["reasons"] for r in rows[4:]} == {POWER_CAP}
    assert rows[0]["power_w"] == 520.0 and rows[-1]["power_w"] == 700.0 and rows[-1]["sm_clock_mhz"] == 1410
    s = state.summarise(rows)
    share = (len(rows) - 4) / len(rows)
    assert s.throttled and s.words() == f"power cap: SM clock 1410 of 1980 MHz for {share:.0%} of the window"
    assert [t.reason for t in s.throttles] == ["power cap"]  # idle is not throttling


def test_a_long_window_keeps_an_evenly_spaced_record_of_bounded_size(monkeypatch):
    monkeypatch.setattr(gpustate, "MAX_SAMPLES", 8)
    now = [0.0]
    sampler = gpustate.Sampler(["cuda:0"], nvml=ThrottlingNVML(free=1000), handles=[("h", 0)], clock=lambda: now[0])
    sampler._limits, sampler._t0 = [{}], 0.0
    for _ in range(40):   # what the thread does: a sample, then a wait of the interval
        sampler._take()
        now[0] += sampler.interval_s
    kept = sampler.samples[0]
    assert 5 <= len(kept) <= 9 and sampler.interval_s >= 64 * gpustate.INTERVAL_S   # halved and doubled again and again
    assert {round(b["t_ms"] - a["t_ms"], 3) for a, b in zip(kept, kept[1:])} == {round(sampler.interval_s * 1e3, 3)}
    assert kept[-1]["t_ms"] == pytest.approx((now[0] - sampler.interval_s) * 1e3)   # the latest sample is kept


def test_without_cuda_or_nvml_nothing_is_sampled():
    assert gpustate.Sampler(["cpu"]).start().stop(0) == []
    assert gpustate.Sampler(["cuda:0"], nvml=None, handles=[None]).start().stop(0) == []


def rows_with(share: float, n: int = 50, reasons: int = POWER_CAP) -> list:
    k = round(share * n)
    return [{"rank": 0, "device": "cuda:0", "sample": i, "t_ms": 50.0 * i, "sm_clock_max_mhz": 1980, "power_limit_w": 700,
             "temperature_c": 70 + (i % 3), "sm_clock_mhz": 1410 if i >= n - k else 1980,
             "power_w": 700 if i >= n - k else 600, "reasons": reasons if i >= n - k else 0} for i in range(n)]


def test_a_reason_held_for_a_sliver_of_the_window_or_one_the_user_set_is_not_throttling():
    assert state.summarise(rows_with(0.4)).words() == "power cap: SM clock 1410 of 1980 MHz for 40% of the window"
    brief = state.summarise(rows_with(0.02))
    assert not brief.throttled and brief.words() == "" and brief.throttles[0].share == 0.02
    assert not state.summarise(rows_with(1.0, reasons=APP_CLOCKS)).throttled  # the applications clocks the user set
    assert state.summarise([]) is None


def test_the_report_flags_a_configuration_that_throttled_with_its_reason(tmp_path):
    hot = rows_with(0.4)
    cool = [dict(r, reasons=0, sm_clock_mhz=1980) for r in rows_with(0.0)]
    path = str(tmp_path / "s.sqlite")
    sw = build(path, [(rspec("single", 1), payload(1, 10.32, MLP_FLOPS, gpu_samples=cool)),
                      (rspec("ddp", 2), payload(2, 10.4, MLP_FLOPS, gpu_samples=hot + [dict(r, rank=1, device="cuda:1")
                                                                                         for r in cool]))])
    ddp = next(c for c in sw.bench["synthetic"] if c.strategy == "ddp")
    assert ddp.gpu.samples == 100 and ddp.gpu.words() == "power cap: SM clock 1410 of 1980 MHz for 20% of the window"
    text = recommend.answer(sw, "synthetic", sw.bench["synthetic"], "fp32")[1]
    assert ("Its GPUs throttled in the measured window (power cap: SM clock 1410 of 1980 MHz for 20% of the window): "
            "its speed is the throttled machine's.") in text
    md = pages.to_markdown(report.blocks(sw, {}), str(tmp_path))   # the report's blocks, no plots drawn
    table = md[md.index("| strategy | precision / settings | GPUs"):]
    assert re.search(r"\| DDP \| fp32 \| 2 \|.*\| power cap: SM clock 1410 of 1980 MHz for 20% of the window \|", table)
    assert re.search(r"\| single device \| fp32 \| 1 \|.*\| no \|", table)
    assert "### synthetic: the GPU's state in the measured window" in md
    assert "| DDP x2 | fp32 | 1980 of 1980 MHz | 600 of 700 | 72 | power cap: SM clock 1410" in md


@pytest.mark.parametrize("name", ["nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
                                  "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature"])
def test_the_sampler_calls_functions_pynvml_has(name):
    pynvml = pytest.importorskip("pynvml")
    assert hasattr(pynvml, name) and name in open(gpustate.__file__).read()


def test_sampling_beside_the_cuda_window_neither_synchronises_nor_reads_the_device(monkeypatch):
    # the CUDA timing stand-in of tests/test_timing.py fails on any synchronisation or device read inside a window
    from bench.rank import worker
    from test_timing import FakeAPI, device_reads_counted, spec, trainer
    nvml, real = ThrottlingNVML(free=2), gpustate.Sampler
    monkeypatch.setattr(worker.gpustate, "Sampler", lambda devices: real(["cuda:0"], nvml=nvml, handles=[("h", 0)],
                                                                         interval_s=0.001))
    api = FakeAPI()
    s = spec(device_type="cuda", steps=30)
    t = trainer(s, api, ["gpu0"])
    with device_reads_counted(api) as reads:
        out = worker.measure(s, t, [worker.torch.device("cpu")], t.wl)
    assert api.syncs_inside == [] and reads == []
    assert len(out["gpu_samples"]) >= 2 and {r["device"] for r in out["gpu_samples"]} == {"cuda:0"}
