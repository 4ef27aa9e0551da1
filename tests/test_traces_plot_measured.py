"""The traces plot against the measured step: an H200's DeepLabV3 bf16 drew 77% idle for a profiled step 81% longer
than the measured one (GPU busy 41% of that), beside an empty 'communication overlapped' panel at one device."""
from __future__ import annotations

from pathlib import Path

from bench.report import traces
from bench.report.busy import busy
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27-pm"


def test_the_profiled_bars_say_so_and_mark_the_measured_steps_busy_with_no_overlap_panel_at_one_device(tmp_path, monkeypatch):
    sweep = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)
    configs = sweep.bench["deeplabv3"]
    fig = traces.figure(configs, "deeplabv3", "one H200")
    assert len(fig.axes) == 1, [a.get_ylabel() for a in fig.axes]   # no configuration communicates
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_xticklabels()]
    bf16 = [n for n in names if n.startswith("single device x1 [bf16] r")]
    assert bf16 and all("(profiled step, +" in n and "% longer than measured)" in n for n in bf16), names
    marks = [line.get_ydata()[0] for line in ax.get_lines()]
    shares = {round(busy(c).measured * 100, 6) for c in configs}                # the bound's figure, 41% for bf16
    assert len(marks) == len(names) == 2 and {round(m, 6) for m in marks} == shares, (marks, shares)   # a bar each
    assert any(39 < m < 43 for m in marks), marks
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "GPU busy against the measured step (the bound's figure)" in legend, legend
