"""The GPU's state in the measured window (bench.machine.gpustate, bench.analysis.gpustate): a sampling thread over a
fake NVML whose throttle reasons change mid-window, its rows through the store, and the report flagging the
configuration that throttled with the reason, the GPU, the clock it left and for how much of that GPU's window (judged
per GPU: one of eight capped is not averaged away)."""
from __future__ import annotations

import re
import threading

import pytest

from bench.analysis import gpustate as state
from bench.machine import gpustate
from bench.report import pages, recommend, report
from test_utilisation import H100, MLP_FLOPS, build, payload, rspec

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
             "power_w": (700 if i >= n - k else 600) + i % 3, "reasons": reasons if i >= n - k else 0} for i in range(n)]


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
    # judged on the GPU that throttled (40% of its window), not on both pooled (20%)
    words = "power cap on rank 0 (cuda:0), 1 of 2 GPUs: SM clock 1410 of 1980 MHz for 40% of the window"
    assert ddp.gpu.samples == 100 and ddp.gpu.gpus == 2 and ddp.gpu.words() == words
    text = recommend.answer(sw, "synthetic", sw.bench["synthetic"], "fp32")[1]
    # by how much: the throttled GPU's clock, 60% of its window at 1980 and 40% at 1410 MHz, averaged 1752 (-11.5%)
    assert (f"It throttled in the measured window ({words}): the SM clock of rank 0 (cuda:0), the slowest GPU, averaged "
            "1752 of 1980 MHz (-11.5%, as low as 1410 MHz), power 602 of 700 W (median), so its throughput is at most "
            "about 11.5% under an uncapped clock's (clock-bound work scales at most with the clock).") in text
    md = pages.to_markdown(report.blocks(sw, {}), str(tmp_path))   # the report's blocks, no plots drawn
    table = md[md.index("| strategy | precision / settings | GPUs"):]
    assert re.search(r"\| DDP \| fp32 \| 2 \|.*\| " + re.escape(words) + r" \|", table)
    assert re.search(r"\| single device \| fp32 \| 1 \|.*\| no \|", table)
    assert "### synthetic: the GPU's state in the measured window" in md
    # power: the readings from 1 s into each window (NVML's one-second average), both GPUs' together
    assert "| DDP x2 | fp32 | 1980 of 1980 MHz | 602 of 700 | 72 | power cap on rank 0 (cuda:0)" in md
    assert "held one GPU's clock for 5% of its window or more, judged per GPU" in md


def test_a_power_cap_says_how_much_it_held_the_clock_down_not_only_that_it_did(tmp_path):
    # One H200 at its 700 W cap for 93% of a 280-sample window (examples/h200-2026-11-27-pm, transformer-fit): the
    # flag gave the median clock while capped (1965 of 1980 MHz) and "its speed is the throttled machine's", read as a
    # degraded number; the clock's mean over the window, its lowest and the power say how much (at most ~2%).
    clocks = ([1965] * 174 + [1980] * 26 + [1950] * 18 + [1875] * 12 + [1920] * 10 + [1890] * 8 + [1905] * 8
              + [1935] * 6 + [1785] * 6 + [1800] * 6 + [1710] * 2 + [1725] * 2 + [1740] * 2)
    rows = [{"rank": 0, "device": "cuda:0", "sample": i, "t_ms": 50.0 * i, "sm_clock_max_mhz": 1980,
             "power_limit_w": 700, "temperature_c": 60, "sm_clock_mhz": mhz, "power_w": 660 + i % 16,
             "reasons": 0 if i % 14 == 0 else POWER_CAP} for i, mhz in enumerate(clocks)]
    mean = sum(clocks) / len(clocks)
    g = state.summarise(rows)
    assert g.throttled and g.clock_mean_mhz == pytest.approx(mean) and g.clock_low_mhz == 1710
    assert g.shortfall() == pytest.approx(1 - mean / 1980)   # 1.9%, where the median (1965) says 0.8%
    path = str(tmp_path / "s.sqlite")
    sw = build(path, [(rspec("ddp", 1), payload(1, 10.4, MLP_FLOPS, gpu_samples=rows))])
    text = " ".join(recommend.answer(sw, "synthetic", sw.bench["synthetic"], "fp32")[1])
    assert (f"for 93% of the window): the SM clock averaged {mean:.0f} of 1980 MHz (-1.9%, as low as 1710 MHz), power "
            f"{g.power_w:.0f} of 700 W (median), so its throughput is at most about 1.9% under an uncapped clock's "
            "(clock-bound work scales at most with the clock).") in text
    assert "throttled machine's" not in text
    # a cap that never lowered the clock on average is flagged, and said to hold nothing down
    flat = state.summarise([dict(r, sm_clock_mhz=1980) for r in rows])
    assert flat.shortfall() == 0 and flat.throttled


def eight_gpus(throttled: dict) -> list:
    """An 8-GPU DDP run's samples, rank r on cuda:r, power-capped for the share of its window `throttled` gives it."""
    return [dict(r, rank=k, device=f"cuda:{k}") for k in range(8) for r in rows_with(throttled.get(k, 0.0))]


def test_one_gpu_of_eight_capped_for_30_percent_is_flagged_and_named_not_pooled_away(tmp_path):
    rows = eight_gpus({5: 0.3})
    s = state.summarise(rows)
    pooled = sum(1 for r in rows if r["reasons"]) / len(rows)
    assert pooled < state.THROTTLED_SHARE   # 3.75%: pooled, the throttle would pass unseen
    assert s.throttled and s.gpus == 8 and s.samples == 400
    assert s.words() == "power cap on rank 5 (cuda:5), 1 of 8 GPUs: SM clock 1410 of 1980 MHz for 30% of the window"
    two = state.summarise(eight_gpus({5: 0.3, 2: 0.1, 7: 0.02}))   # the 2% one stays under the threshold
    assert two.words() == ("power cap on 2 of 8 GPUs, longest rank 5 (cuda:5): SM clock 1410 of 1980 MHz for 30% of "
                           "the window")
    path = str(tmp_path / "s.sqlite")
    sw = build(path, [(rspec("ddp", 8), payload(8, 10.4, MLP_FLOPS, gpu_samples=rows))], gpus=(H100,) * 8)
    md = pages.to_markdown(report.blocks(sw, {}), str(tmp_path))
    assert "| DDP x8 | fp32 | 1980 of 1980 MHz |" in md and "power cap on rank 5 (cuda:5), 1 of 8 GPUs" in md


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
