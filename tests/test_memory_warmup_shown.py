"""The configuration table and the frontier plot say what their memory figures are: the device level at the warm-up's
end is one nvidia-smi reading, after PyTorch emptied the cache cuDNN's benchmark search filled, not the run's peak; the
warm-up's peak reserved stands beside it (bench.report.report, bench.report.frontierplot). On the H100 the column
"whole run, device level MiB" read 5631 for DeepLabV3 fp32 single x1, whose allocator held 21234 MiB (21204 net of the
suite's batches) in its warm-up: someone sizing a 16 GiB card never learnt it."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import frontierplot, report
from conftest import example_stores

H100 = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    return example_stores(H100, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)


def test_no_column_claims_the_whole_run_and_the_warmup_peak_stands_beside_the_reading(sweep):
    table = next(b for b in report.blocks(sweep, {}) if b[0] == "table" and "precision / settings" in b[1])
    headers, rows = table[1], table[2]
    assert not any("whole run" in h for h in headers), headers
    end, peak = headers.index(report.WARMUP_END_HEADER), headers.index(report.WARMUP_PEAK_HEADER)
    row = next(r for r in rows if r[0] == "single device" and r[1] == "fp32")
    assert (row[end], row[peak]) == ("5631", "21204"), row
    prose = " ".join(b[1] for b in report.blocks(sweep, {}) if b[0] == "p")
    assert "not the run's peak" in prose and "whole run's device level" not in prose


def test_the_frontier_plot_draws_the_warmup_peak_and_names_its_axis_honestly(sweep):
    fig = frontierplot.frontier_figure(sweep.bench["deeplabv3"], "deeplabv3", "cuda, H100", 79.65 * 1024)
    ax = fig.axes[0]
    assert "whole run" not in ax.get_xlabel() and "warm-up's end" in ax.get_xlabel(), ax.get_xlabel()
    # to the warm-up's reserved peak with the CUDA context: the axis is the device level, which holds the context (the
    # segment ended at the reserved figure without it, ~0.6 GiB short, and could point left of a small model's point)
    from bench.report.frontier import warmup
    single = next(c for c in sweep.bench["deeplabv3"] if c.label == "single device x1")
    with_context = warmup(single)[1] / 1024
    assert with_context > 21204 / 1024
    warm = [ln for ln in ax.get_lines() if list(ln.get_xdata())[-1] == pytest.approx(with_context)]
    assert warm and frontierplot.WARMUP_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
    assert all(x[-1] >= x[0] for x in (list(ln.get_xdata()) for ln in ax.get_lines() if ln.get_linestyle() == ":"))
    assert ax.get_xlim()[1] >= with_context
