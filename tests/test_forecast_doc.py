"""docs/forecast.md cites its sources themselves, never a file outside the repository (audit F9: it cited
../shared/ANCHORS.md, which a clone does not have), and says how long the forecast takes as measured."""
from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "forecast.md"


def test_the_forecast_doc_points_at_nothing_outside_the_repository():
    text = DOC.read_text()
    root = DOC.parents[1]
    outside = [m for m in re.findall(r"(?:\.\./)+[\w./-]+", text)
               if not (DOC.parent / m).resolve().is_relative_to(root)]
    assert not outside, outside
    assert "ANCHORS.md" not in text
    assert "https://github.com/NVIDIA/nccl-tests" in text          # the presets' source, cited itself


def test_the_forecast_doc_gives_the_time_it_takes_as_measured():
    text = " ".join(DOC.read_text().split())
    assert "about a second" not in text                             # 3.2 s measured, most of it importing torch
    assert "a few seconds" in text
