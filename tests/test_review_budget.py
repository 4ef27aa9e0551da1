"""Review mends of the memory budget and the forecast section's layout (review finding 17).

(17) The forecast section's plots live in bench.report.forecastplots; bench/report/forecast.py stays under 400 lines.
"""
from __future__ import annotations

from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100-2026-11-26"


def test_the_forecast_sections_plots_are_their_own_module():
    from bench.report import forecast, forecastplots
    assert len((ROOT / "bench" / "report" / "forecast.py").read_text().splitlines()) <= 400
    for name in ("figure", "memory_figure", "_band", "_key", "_what_ifs", "_off_scale", "colors", "assumed_words"):
        assert hasattr(forecastplots, name) and not hasattr(forecast, name), name
