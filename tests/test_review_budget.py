"""Review mends of the memory budget and the forecast section's layout (review findings 8, 12, 13, 17).

(8) A configuration's batch per device is computed once (bench.forecast.batches.per_device).
(12) The report imports own_baseline from bench.forecast.overhead, where it is defined, not through outlook.
(13) fit_words' default budget name is budget_text's: '0.421 GiB' beside the page's '431 MiB'.
(17) The forecast section's plots live in bench.report.forecastplots; bench/report/forecast.py stays under 400 lines.
"""
from __future__ import annotations

import ast
from pathlib import Path

from bench.forecast import memory as mm
from bench.report import frontier

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100-2026-11-26"


def test_fit_words_name_a_budget_under_1_gib_as_the_page_does():
    pts = [mm.Memory(n, {"activations and the rest (measured)": 300.0}) for n in (1, 2)]
    assert mm.fit_words(pts, 431.0, "ddp") == "fits in 431 MiB at every count"    # was 'fits in 0.421 GiB'


def _imports(path: Path) -> dict:
    """{name imported: module} of a source file's top-level 'from X import name' lines."""
    return {a.asname or a.name: n.module for n in ast.parse(path.read_text()).body
            if isinstance(n, ast.ImportFrom) for a in n.names}


def test_own_baseline_is_imported_from_the_module_that_defines_it():
    assert _imports(ROOT / "bench" / "report" / "recommend.py")["own_baseline"] == "bench.forecast.overhead"


def test_the_batch_per_device_is_computed_once():
    from bench.forecast import batches
    from bench.report import recommend
    assert not hasattr(frontier, "per_device_batch") and recommend.per_device_batch is batches.per_device
    assert _imports(ROOT / "bench" / "report" / "recommend.py")["per_device_batch"] == "bench.forecast.batches"


def test_the_forecast_sections_plots_are_their_own_module():
    from bench.report import forecast, forecastplots
    assert len((ROOT / "bench" / "report" / "forecast.py").read_text().splitlines()) <= 400
    for name in ("figure", "memory_figure", "_band", "_key", "_what_ifs", "_off_scale", "colors", "assumed_words"):
        assert hasattr(forecastplots, name) and not hasattr(forecast, name), name
