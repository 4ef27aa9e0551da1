"""NVML's power reading in short windows, and a throttling "no" on a handful of samples (bench.analysis.gpustate).

The committed H100 self-check stored 2-4 samples per 43-150 ms window, every one reading the same power to the third
decimal (123.243 W: NVML's one-second average, the idle draw from before the window), while the MLP ran at 43% MFU; the
report printed '123 of 700' as the busy GPU's power and 'no' throttling on 2 samples. DeepLabV3's 3.2 s windows read
510-574 W, changing every ~100 ms.
"""
from __future__ import annotations

from bench.analysis import gpustate as state
from bench.report import pages, report
from test_utilisation import MLP_FLOPS, build, payload, rspec


def window(result: int, n: int, every_ms: float, power, reasons: int = 0) -> list:
    """One GPU's samples in one window: n samples every_ms apart, power(i) W each."""
    return [{"result_id": result, "rank": 0, "device": "cuda:0", "sample": i, "t_ms": every_ms * i,
             "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "power_w": power(i), "power_limit_w": 700,
             "temperature_c": 42, "reasons": reasons} for i in range(n)]


def short_stale() -> list:
    """The self-check's DataParallel x1 [bf16]: 2 samples over 43 ms, both the idle draw from before the window."""
    return window(4, 2, 43.2, lambda i: 122.581)


def long_busy() -> list:
    """DeepLabV3 fp32 single x1: 67 samples over 3.3 s; NVML climbs from the idle draw and refreshes every 2 samples."""
    return window(1, 67, 50.0, lambda i: min(570.0, 123.0 + 40 * (i // 2)) + (i // 2) % 3)


def test_a_window_whose_power_never_changed_reads_not_updated_and_too_few_samples_are_not_a_no():
    s = state.summarise(short_stale())
    assert s.power_w is None and s.power_text() == "not updated in the window (43 ms)"
    assert not s.throttled and s.too_few and s.verdict() == "too few samples (2)"


def test_a_long_window_counts_power_from_a_second_in_and_says_no_on_enough_samples():
    s = state.summarise(long_busy())
    assert s.power_text() == "571 of 700"    # the readings from 1 s in: the work's draw, not the climb from idle
    assert s.fewest == 67 and not s.too_few and s.verdict() == "no"
    frozen = state.summarise(window(1, 67, 50.0, lambda i: 123.243))   # long, but NVML never refreshed it
    assert frozen.power_w is None and frozen.power_text() == "not updated in the window (3300 ms)"


def test_the_report_shows_a_stale_power_as_not_updated_and_few_samples_as_too_few(tmp_path):
    sw = build(str(tmp_path / "s.sqlite"), [(rspec("single", 1), payload(1, 3.2, MLP_FLOPS, gpu_samples=short_stale())),
                                            (rspec("ddp", 1), payload(1, 3.3, MLP_FLOPS, gpu_samples=long_busy()))])
    md = pages.to_markdown(report.blocks(sw, {}), str(tmp_path))
    assert ("| single device x1 | fp32 | 1980 of 1980 MHz | not updated in the window (43 ms) | 42 | too few samples (2) "
            "| 2 |") in md
    assert "| DDP x1 | fp32 | 1980 of 1980 MHz | 571 of 700 | 42 | no | 67 |" in md
    assert "122" not in md.split("the GPU's state in the measured window")[1].split("\n\n")[2]   # no idle draw shown
    assert "it reads 'not updated in the window'" in md and "Too few samples (N): a GPU sampled fewer than 20" in md
    table = md[md.index("| strategy | precision / settings | GPUs"):]
    assert "| too few samples (2) | stable |" in table
