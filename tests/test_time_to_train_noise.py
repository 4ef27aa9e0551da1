"""A time to train from one process at a precision whose process-to-process noise is not measured says so beside the
figure (bench.report.report). One H200 ran DeepLabV3 single x1 [bf16] at 199.6 samples/s in one sweep and 144.4 in
another, one process each: the reports gave 2m44s and 3m27s as firm figures, neither saying that bf16's noise was never
measured there (fp32's three processes ran 0.5% apart, which does not speak for bf16)."""
from __future__ import annotations

from pathlib import Path

from bench.report import pages, report
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27"


def _time_rows(sweep, folder) -> dict:
    md = pages.to_markdown(report.blocks(sweep, {}), str(folder))
    part = md[md.index("### Time to train"):].split("\n\n")[1]
    return {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1] for line in part.splitlines()[2:]}


def test_a_bf16_time_from_one_process_says_its_noise_is_not_measured_and_fp32s_from_three_does_not(tmp_path,
                                                                                                  monkeypatch):
    load = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)
    rows = _time_rows(load("gpu.sqlite", 1), tmp_path)
    assert rows["single device x1 [bf16]"] == "2m44s (one process; noise at bf16 not measured on this device)"
    # 3 processes, 0.5% apart: their range, no note (tests/test_compile_payback.py)
    assert rows["single device x1"].endswith("across 3 processes)") and "noise" not in rows["single device x1"]
    assert _time_rows(load("gpu.sqlite", 5), tmp_path)["single device x1 [bf16]"] == (
        "3m27s (one process; noise at bf16 not measured on this device)")
