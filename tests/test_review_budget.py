"""Review mends of the memory budget and the forecast section's layout (review findings 6, 8, 12, 13, 17).

(6) The budget rule (typed > the sweep's > the GPU's, a sweep's stored budget within GPU_MEMORY_TOLERANCE_MIB of the
    GPU's memory being the GPU's) is written once, in bench.forecast.memory.budget: the page's table and its forecast
    held one sweep to budgets up to 16 MiB apart, written '79.18 GiB' and '79.2 GiB' on one page.
(8) A configuration's batch per device is computed once (bench.forecast.batches.per_device).
(12) The report imports own_baseline from bench.forecast.overhead, where it is defined, not through outlook.
(13) fit_words' default budget name is budget_text's: '0.421 GiB' beside the page's '431 MiB'.
(17) The forecast section's plots live in bench.report.forecastplots; bench/report/forecast.py stays under 400 lines.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from types import SimpleNamespace

from bench.forecast import memory as mm
from bench.forecast import outlook as fo
from bench.report import frontier
from conftest import example_stores

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100-2026-11-26"


def _sweep(device: str, gpu_mib, swept_gib=None) -> SimpleNamespace:
    """A stand-in sweep: its environment's GPU memory (nvidia-smi's total), its stored --memory-budget-gib."""
    env = {"json": json.dumps({"gpus": [{"memory_total_mib": gpu_mib}] if gpu_mib else []})}
    cfg = {"memory_budget_gib": swept_gib} if swept_gib else {}
    return SimpleNamespace(envs=[env], sweep={"config_json": json.dumps(cfg)},
                           bench={"w": [SimpleNamespace(device_type=device)]})


def test_the_table_and_the_forecast_hold_a_sweep_to_one_budget_figure():
    # resolve stored the H100's memory as round(GiB, 2) = 79.18 GiB = 81080.3 MiB; nvidia-smi reads 81079 MiB
    cuda = _sweep("cuda", 81079.0, 79.18)
    table, how = frontier.budget_mib(cuda)
    forecast, name = fo.budget(cuda)
    assert table == forecast == 81079.0                     # the table had held 81080.3 MiB, the forecast 81079
    assert how.startswith("79.18 GiB per GPU (the GPU's memory") and name == "the GPU's 79.18 GiB"
    # a budget the sweep set: its own figure, one format in both ('16 GiB' beside '16.00 GiB' before)
    fit = _sweep("cuda", 143155.0, 16.0)
    assert frontier.budget_mib(fit) == (16 * 1024, "16.00 GiB per GPU (--memory-budget-gib)")
    assert fo.budget(fit) == (16 * 1024, "the sweep's 16.00 GiB budget")
    assert fo.budget(fit, 1.0) == (1024, "the 1.00 GiB budget (--memory-budget-gib)") and frontier.budget_mib(fit, 1.0)[0] == 1024
    # a CPU sweep on a host with a GPU: no budget in either (the forecast had held it to the GPU's memory)
    cpu = _sweep("cpu", 81079.0)
    assert fo.budget(cpu) == (None, "") and frontier.budget_mib(cpu)[0] is None


def test_the_tolerance_is_named_once():
    src = "\n".join(p.read_text() for p in (ROOT / "bench" / "report" / "frontier.py", ROOT / "bench" / "forecast" / "outlook.py"))
    assert "< 16" not in src and "memory_total_mib" not in src   # the rule and the GPU lookup live in forecast.memory
    assert mm.GPU_MEMORY_TOLERANCE_MIB == 16.0


def test_one_page_writes_its_budget_in_one_format(tmp_path, monkeypatch):
    from bench.report import report
    example_stores(H100, ("selfcheck.sqlite",), tmp_path, monkeypatch)
    out = report.render(str(tmp_path / "selfcheck.sqlite"), 1, str(tmp_path / "plots"), str(tmp_path / "report"))
    md = Path(out["markdown"]).read_text()
    assert "within 79.18 GiB per GPU" in md and "fits in the GPU's 79.18 GiB at every count" in md
    assert not re.search(r"\b79\.2 GiB", md)                 # the forecast's '.3g' form of the same budget


def test_fit_words_name_a_budget_under_1_gib_as_the_page_does():
    pts = [mm.Memory(n, {"activations and the rest (measured)": 300.0}) for n in (1, 2)]
    assert mm.fit_words(pts, 431.0, "ddp") == "fits in 431 MiB at every count"    # was 'fits in 0.421 GiB'
    assert mm.fit_words(pts, 16 * 1024, "ddp") == "fits in 16.00 GiB at every count"


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
