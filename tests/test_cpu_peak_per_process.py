"""On CPU --peak-tflops is per process: bench.analysis.utilisation.of holds each process's share of the achieved FLOP/s
against it (the configuration's over its gloo processes), so the help and the report's peak line say so. A user who
typed the machine's peak for DDP x2 read an MFU half of what it was, under a line that said 'per device'."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from bench import config
from bench.analysis import utilisation
from bench.machine import peaks
from bench.report import report, utilisation as utilisation_report


def cpu_ddp_x2():
    """DDP x2 on CPU at 1 GFLOP/s per process: 1e8 FLOP a sample, 20 samples/s over both processes."""
    c = SimpleNamespace(flops={"flops_per_sample": 1e8, "how": {}}, device_type="cpu", samples_per_s=20.0,
                        device_count=2, precision="fp32", options={}, device_names=(), label="DDP x2", variant="fp32",
                        gpu=None)
    c.utilisation = utilisation.of(c, peaks.parse_override("0.004"))   # the node's 4 GFLOP/s, two processes on it
    return c


def test_the_peak_line_says_per_process_on_cpu():
    c = cpu_ddp_x2()
    assert c.utilisation.achieved_cell() == "1.00" and c.utilisation.mfu == pytest.approx(0.25)
    line = next(b[1] for b in utilisation_report.blocks("synthetic", [c]) if b[0] == "p" and b[1].startswith("MFU against"))
    assert "TFLOP/s per process" in line and "per device" not in line, line
    # worded so where it is made, so the forecast's 'past 100% of the peak (...)' says it too, not the report alone
    assert c.utilisation.peak_text.endswith("TFLOP/s per process (--peak-tflops)"), c.utilisation.peak_text
    assert "the peak of the cores one process runs on" in line and "not the machine's" in line


def test_the_help_says_per_process_on_cpu():
    help_ = next(f.metadata["help"] for f in dataclasses.fields(config.SweepConfig) if f.name == "peak_tflops")
    assert "on CPU" in help_ and "per process" in help_
    import argparse
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    action = next(a for a in parser._actions if "--peak-tflops" in a.option_strings)
    assert "on CPU per process" in action.help
