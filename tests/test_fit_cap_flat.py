"""The H200 fit of the 134m transformer (examples/h200-2026-11-27-pm, sweep 3 of gpu.sqlite) as a GPU user read it
(trial E, findings 4 and 5): the search stopped at --max-batch 128 with 15.5 GiB left and no batch out of memory, and
its trials ran 262.7 samples/s at 64 and 262.6 at 128. Read on the CPU from the committed store, and stand-ins."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import fit as fit_report
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27-pm"


@pytest.fixture
def h200_fit(tmp_path, monkeypatch):
    return example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)("gpu.sqlite", 3)


def _table_and_text(sweep) -> tuple:
    blocks = fit_report.blocks(sweep)
    table = next(b for b in blocks if b[0] == "table")
    return table, " ".join(b[1] for b in blocks if b[0] == "p")


def test_a_search_stopped_by_its_cap_says_at_least_with_the_room_left_and_an_untried_estimate(h200_fit):
    table, text = _table_and_text(h200_fit)
    [row] = table[2]
    assert table[1][2] == "largest tried that fits, per GPU"
    assert row[2] == ("at least 128 (the search's cap, --max-batch 128; 15.50 GiB left at 128; no batch ran out of "
                      "memory): raise --max-batch to find the limit; ~966 MiB a sequence: about 144 might fit, not "
                      "tried"), row   # (127287 - 65486) MiB / 64 sequences; 15868 MiB left / 966 = 16 more
    assert row[4] == "none: every batch tried fit, up to the search's cap", row
    assert "fits 128 a GPU" not in text and "DDP x1 fits at least 128 a GPU (the search's cap" in text, text
