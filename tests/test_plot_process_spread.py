"""The plots show how far a configuration's processes ran apart, as the report's text does (trial E, finding 11): one
H200's DeepLabV3 [bf16] ran 140.3, 166.0 and 153.3 samples/s in three processes, and the throughput and overview plots
drew 153.3 alone, the time-to-train bar '3m17s' alone (the table: 3m02s-3m44s across 3 processes), and the step-time
box pooled the three as if one run's jitter. Stand-in configurations, built here: no store, no GPU."""
import math
from types import SimpleNamespace

import pytest

from bench.analysis import reference
from bench.report import compile as compile_report
from bench.report import plots
from bench.report import trainplot
from bench.stats import median

BF16_SPS = [140.3, 166.0, 153.3]


def _config(precision: str, sps: list, step_ms=(50.0, 52.0, 49.0)):
    variant = precision
    return SimpleNamespace(
        strategy="single", device_count=1, variant=variant, series=("single", variant), precision=precision,
        label="single device x1" + ("" if precision == "fp32" else f" [{precision}]"), device_type="cuda",
        tokens_per_sample=None, process_sps=list(sps), samples_per_s=median(sps), step_ms=list(step_ms),
        global_batch=8, warmup_s=math.nan, process_warmup_s=[], warmup_steps=0, epoch_wall_s=[], epoch_images=None,
        data="synthetic", compiled=False, compile_s=None, image_size=256, key=f"k/{precision}")


def _configs():
    return [_config("fp32", [75.1]), _config("bf16", BF16_SPS)]   # fp32: one process, bf16: three


def _whiskers(ax) -> list:
    """(x, low, high) of each vertical whisker drawn on ax."""
    from matplotlib.collections import LineCollection
    return [(round(float(seg[0][0]), 3), round(float(min(seg[0][1], seg[1][1])), 3), round(float(max(seg[0][1], seg[1][1])), 3))
            for coll in ax.collections if isinstance(coll, LineCollection) for seg in coll.get_segments() if len(seg)]


@pytest.mark.parametrize("draw", ["throughput", "overview"])
def test_the_throughput_plots_draw_each_configurations_range_of_processes(draw):
    cs = _configs()
    fig = (plots.throughput_figure(cs, "deeplabv3", "H200") if draw == "throughput"
           else plots.overview_figure(cs, "deeplabv3", "H200", picks=[cs[1]]))
    ax = fig.axes[0]
    assert _whiskers(ax) == [(1.0, 140.3, 166.0)], _whiskers(ax)   # bf16's three processes; fp32's one: bare point
    labels = ax.get_legend_handles_labels()[1]
    assert labels.count(plots.SPREAD_LABEL) == 1 and "range of its processes" in plots.SPREAD_LABEL, labels


def test_one_process_each_draws_no_whiskers_and_no_entry():
    cs = [_config("fp32", [75.1]), _config("bf16", [153.3])]
    for fig in (plots.throughput_figure(cs, "deeplabv3", "H200"), plots.overview_figure(cs, "deeplabv3", "H200")):
        assert _whiskers(fig.axes[0]) == []
        assert plots.SPREAD_LABEL not in fig.axes[0].get_legend_handles_labels()[1]


def test_the_time_to_train_bar_carries_its_processes_range_as_the_table_gives_it():
    cs = _configs()
    bars, how = reference.train_times(cs)
    ax = trainplot.time_to_train_figure(bars, how, "deeplabv3", "H200", spans=trainplot.train_spans(cs)).axes[0]
    low, high = reference.process_range(cs[1])
    [(x, lo, hi)] = _whiskers(ax)
    assert (x, lo, hi) == (1.0, round(low / 60, 3), round(high / 60, 3))
    texts = [t.get_text() for t in ax.texts]
    cell = compile_report._time_cell(cs[1], bars[1][1], cs)   # the table's '3m11s (2m56s-3m29s across 3 processes)'
    assert "across 3 processes" in cell and texts[1].replace("\n", " ") == cell.replace("(", "").replace(")", ""), texts
    assert "\n" not in texts[0], texts   # one process: its figure alone
    assert "range of its processes" in ax.get_legend_handles_labels()[1]
    # the label sits above the whisker's top and inside the axes
    assert ax.get_ylim()[1] > high / 60


def test_the_step_time_boxes_say_they_pool_the_processes():
    fig = plots.step_times_figure(_configs(), "deeplabv3", "H200")
    assert "processes pooled" in fig.get_suptitle()
    caption = fig.get_supxlabel().replace("\n", " ")
    assert "(single device x1 [bf16]: 3)" in caption and "deeplabv3_throughput.png" in caption, caption
    alone = plots.step_times_figure([_config("fp32", [75.1])], "deeplabv3", "H200")
    assert "pooled" not in alone.get_suptitle() and not alone.get_supxlabel()


def test_a_bar_past_an_hour_reads_as_the_table_does():
    # review: the bars had their own h:m format ('2h40m') beside the table's '2h40m31s', and raised on nan
    from bench.report import trainplot
    from bench.report.names import hms
    assert trainplot.bar_text(9631.0, (9600.0, 9700.0, 3), False) == hms(9631.0) == "2h40m31s"
    assert trainplot.bar_text(9631.0, (9600.0, 9700.0, 3), True) == "2h40m31s\n2h40m00s-2h41m40s\nacross 3 processes"
