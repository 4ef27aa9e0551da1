"""The H200 fit of the 134m transformer (examples/h200-2026-11-27-pm, sweep 3 of gpu.sqlite) as a GPU user read it
(trial E, findings 4 and 5): the search stopped at --max-batch 128 with 15.5 GiB left and no batch out of memory, and
its trials ran 262.7 samples/s at 64 and 262.6 at 128. Read on the CPU from the committed store, and stand-ins."""
from __future__ import annotations

import math

from pathlib import Path

import pytest

from bench.analysis import fit
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


def test_the_trials_speeds_are_shown_and_a_flat_speed_per_sample_is_said_with_the_memory_it_costs(h200_fit):
    table, text = _table_and_text(h200_fit)
    assert table[1][-1] == "samples/s by batch (trials' figures, 1 measured step each)"
    assert table[2][0][-1] == "64: 262.7; 128: 262.6"
    assert ("DDP x1's speed per sample is flat from 64 to 128 (trials' figures, 1 measured step each: 262.7 and 262.6 "
            "samples/s, under the suite's 5% floor): the larger batch buys no speed here, 60.35 GiB more memory") in text


def _search(speeds: dict, verdicts: dict) -> fit.Search:
    s = fit.Search("k", "mlp", "ddp", "cuda", 1, "DDP x1", "DDP x1", ("fp32", "sgd"), 10_000.0,
                   trials=[(b, v, 1000.0 + 50.0 * b, "") for b, v in sorted(verdicts.items())])
    s.speeds = speeds
    return s


def test_a_larger_batch_faster_beyond_the_floor_or_a_search_ended_by_memory_says_neither():
    s = _search({16: 100.0, 32: 130.0}, {16: fit.FITS, 32: fit.FITS, 33: fit.OOM})
    assert not s.capped and fit_report._flat(s) == "" and fit_report._largest_cell(s, object()) == "32"
    assert fit_report._why_not(s) == "33: out of memory"
    # 16 ran 20% faster than 32, 8 much slower than 32: no higher from 16, not from 8
    s = _search({8: 60.0, 16: 120.0, 32: 100.0}, {8: fit.FITS, 16: fit.FITS, 32: fit.FITS})
    assert s.capped and fit_report._flat(s).startswith("DDP x1's speed per sample is no higher from 16 to 32 (trials' "
                                                       "figures, 1 measured step each: 120.0 and 100.0 samples/s, the "
                                                       "smaller faster)")
    s.speeds = {8: 60.0, 16: 99.0, 32: 100.0}   # 1% apart: under the floor
    assert "is flat from 16 to 32 (trials' figures, 1 measured step each: 99.0 and 100.0 samples/s" in fit_report._flat(s)


def test_a_capped_search_whose_peaks_were_not_read_back_says_no_headroom_rather_than_raising():
    # review: _left took max() of the trial's and the measured run's peaks, which raised where neither was read back
    s = _search({16: 100.0, 32: 100.0}, {16: fit.FITS, 32: fit.FITS})
    s.trials = [(b, v, None, "") for b, v, _, _ in s.trials]
    assert s.capped and math.isnan(fit_report._left(s))
    said = fit_report._capped(s, None)
    assert said.startswith("at least 32 (the search's cap, --max-batch 32; no batch ran out of memory)"), said
