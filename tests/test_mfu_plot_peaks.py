"""The utilisation plot never sets MFU against different peaks on one unlabelled axis (bench.report.utilisation.figure).
The H100 example's deeplabv3_utilisation.png drew fp32 at 40% (of 67 TFLOP/s) above bf16 at 5% (of 989), saying fp32
was the efficient precision, while bf16 did 51.0 TFLOP/s of the model's work against fp32's 26.5."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from bench.analysis.utilisation import Flops, Utilisation
from bench.report import utilisation as utilisation_report


def stand_in(precision: str, achieved: float, peak: float, strategy: str = "single", count: int = 1):
    u = Utilisation(flops=Flops(1e9), achieved_tflops=achieved, peak_tflops=peak, mfu=achieved / peak,
                    device_type="cuda", precision_key=precision)
    label = ("single device" if strategy == "single" else "DDP") + f" x{count}" + ("" if precision == "fp32" else f" [{precision}]")
    return SimpleNamespace(utilisation=u, device_type="cuda", device_count=count, strategy=strategy, variant=precision,
                           series=(strategy, precision), label=label, samples_per_s=100.0, process_sps=[100.0])


def test_several_precisions_plot_tflops_per_gpu_with_each_peak_dashed_and_named():
    fp32, bf16 = stand_in("fp32", 26.8, 67.0), stand_in("bf16", 49.45, 989.0)
    assert fp32.utilisation.mfu == pytest.approx(0.40) and bf16.utilisation.mfu == pytest.approx(0.05)
    fig = utilisation_report.figure([fp32, bf16], "deeplabv3", "cuda, H100")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "TFLOP/s per GPU (log scale)" and ax.get_yscale() == "log"
    drawn = {ln.get_label(): list(ln.get_ydata()) for ln in ax.get_lines()}
    peaks = {k: v for k, v in drawn.items() if "dense peak" in k}
    assert peaks == {"fp32 dense peak: 67 TFLOP/s per device": [67.0, 67.0],
                     "bf16 dense peak: 989 TFLOP/s per device": [989.0, 989.0]}
    points = {k: v for k, v in drawn.items() if "dense peak" not in k}
    assert sorted(v[0] for v in points.values()) == [pytest.approx(26.8), pytest.approx(49.45)]   # bf16 above fp32
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert all(any(name in t for t in legend) for name in peaks)
    low, high = ax.get_ylim()
    assert low <= 26.8 and high >= 989.0


def test_one_precision_keeps_mfu_against_its_one_peak():
    fig = utilisation_report.figure([stand_in("bf16", 49.45, 989.0), stand_in("bf16", 90.0, 989.0, "ddp", 2)],
                                    "deeplabv3", "cuda, H100")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "MFU (% of the dense peak)" and ax.get_yscale() == "linear"
    assert not [ln for ln in ax.get_lines() if "dense peak" in ln.get_label()]
    assert not any(math.isnan(y) for ln in ax.get_lines() for y in ln.get_ydata())
