"""Phase timing on CPU: phases partition the step, and a known delay lands in the phase that had it."""
from __future__ import annotations

import time

import torch

from bench.timing import PhaseTimer, peak_memory


def test_phases_add_up_to_the_step_and_attribute_delays():
    t = PhaseTimer(torch.device("cpu"))
    t.start()
    time.sleep(0.002)
    t.mark("data")
    t.mark("h2d")
    time.sleep(0.03)
    t.mark("forward")
    row = t.stop()
    phases = row["data_ms"] + row["h2d_ms"] + row["forward_ms"]
    assert phases <= row["step_ms"] and row["step_ms"] - phases < 1.0
    assert row["forward_ms"] >= 30.0 and row["forward_ms"] > 5 * row["data_ms"]
    assert row["h2d_ms"] < 1.0


def test_cpu_memory_is_the_process_peak_rss():
    rows = peak_memory([torch.device("cpu")], rank=3)
    assert rows[0]["rank"] == 3 and rows[0]["device"] == "cpu" and rows[0]["peak_rss_mib"] > 50
