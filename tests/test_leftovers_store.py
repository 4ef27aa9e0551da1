"""Leftovers of the GPU user's read of the committed examples, each on stored rows.

(a) A trace's kernels are held against the traced steps' own wall time (bench.analysis.results sets traced_step_ms on
    each trace row from its result's steps of kind 'profile', that rank's): the H100 DeepLabV3 single x1 fp32 summed
    333.04 ms of kernels over 3 traced steps of 108.35, 108.38 and 108.46 ms, and its report named the 108.0 ms measured
    median instead.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import pages
from bench.report import traces as trace_report
from conftest import example_stores

H100 = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"


@pytest.fixture
def deeplabv3(tmp_path, monkeypatch):
    sweep = example_stores(H100, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)
    return {c.label: c for c in sweep.bench["deeplabv3"]}


def test_trace_rows_carry_their_traced_steps_mean_and_the_report_names_it(deeplabv3, tmp_path):
    c = deeplabv3["single device x1"]
    own = (108.35174704319797 + 108.37878258142155 + 108.46082932094578) / 3   # steps 41-43, kind 'profile', rank 0
    assert [t["traced_step_ms"] for t in c.traces] == [pytest.approx(own)]
    assert c.summary.median_ms == pytest.approx(107.99, abs=0.01)                # not the figure the error is held to
    ddp = deeplabv3["DDP x1"]   # its traced steps: 167.3, 145.1 and 110.5 ms (the warm-up step 71 left out)
    assert ddp.traces[0]["traced_step_ms"] == pytest.approx((167.30438369268086 + 145.10831764957402
                                                             + 110.5123178223148) / 3)
    md = pages.to_markdown(trace_report.blocks(list(deeplabv3.values()), "deeplabv3"), str(tmp_path))
    assert ("single device x1: GPU busy 103% is a measurement error, not a full GPU: 111.0 ms of kernels per traced step "
            "against 108.4 ms (traced steps' own wall time)") in md
    assert "against 108.0 ms (measured step)" not in md
