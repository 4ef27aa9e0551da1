"""The plots name configurations as the tables do (bench.report.plots.series_label, the one labeller:
bench.analysis.labels.label), list no ideal-linear line they do not draw (one device count), and the GPU-state table's
headers read as a median of the readings, its maximum beside it (bench.report.utilisation)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from bench.report import plots, utilisation as utilisation_report
from conftest import example_stores

H100 = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"


def stand_in(strategy: str, count: int, variant: str = "fp32", sps: float = 100.0):
    from bench.analysis.labels import label
    return SimpleNamespace(strategy=strategy, device_count=count, variant=variant, series=(strategy, variant),
                           label=label(strategy, count, variant), samples_per_s=sps * count, process_sps=[sps * count],
                           device_type="cuda", tokens_per_sample=None, efficiency=1.0, scaling="weak")


def legend(fig) -> list:
    ax = fig.axes[0]
    return [t.get_text() for t in (ax.get_legend() or fig.legends[0]).get_texts()]


def test_one_device_plots_name_series_as_the_tables_do_and_list_no_ideal_line():
    configs = [stand_in("single", 1), stand_in("ddp", 1), stand_in("single", 1, "bf16", 150.0)]
    for fig in (plots.throughput_figure(configs, "deeplabv3", "cuda, H100"),
                plots.overview_figure(configs, "deeplabv3", "cuda, H100")):
        names = legend(fig)
        assert "single device x1" in names and "DDP x1" in names and "single device x1 [bf16]" in names, names
        assert not any(n.startswith("ideal") for n in names), names   # nothing drawn at one count
        assert "single device [fp32]" not in names


def test_a_series_over_several_counts_names_their_range_and_keeps_its_ideal_line():
    configs = [stand_in("single", 1), stand_in("ddp", 1), stand_in("ddp", 2), stand_in("ddp", 4, "bf16")]
    names = legend(plots.throughput_figure(configs, "deeplabv3", "cuda, H100"))
    assert {"single device x1", "DDP x1–x2", "DDP x4 [bf16]", "ideal linear (from single device x1)"} <= set(names), names


def test_the_gpu_state_headers_read_median_then_the_maximum(tmp_path, monkeypatch):
    sweep = example_stores(H100, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 1)
    blocks = utilisation_report.blocks("deeplabv3", sweep.bench["deeplabv3"])
    headers = next(b[1] for b in blocks if b[0] == "table")
    assert "SM clock, median (of max)" in headers and "power W, median (of limit)" in headers, headers
    assert not any("median of" in h for h in headers)
