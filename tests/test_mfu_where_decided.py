"""MFU stands in the tables where a batch, a fit under a budget and a memory lever are chosen (issue 39.3): the budget
table (bench.report.frontier), fit's table (bench.report.fit) and the levers table (bench.report.levers), in the
configuration table's own cell (bench.analysis.utilisation.Utilisation.mfu_cell). Held on the H200 store of
2026-11-27's evening: fit's answer, DDP x1 at batch 144, read 22% MFU in the recommendation alone."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import fit as fit_report, frontier, levers
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27-eve"
FIT, CHECKPOINTING = 1, 2


@pytest.fixture
def example(tmp_path, monkeypatch):
    return example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)


def table(blocks: list) -> tuple:
    return next((b[1], b[2]) for b in blocks if b[0] == "table")


def test_the_budget_and_fit_tables_give_the_picks_mfu(example):
    sweep = example("gpu.sqlite", FIT)
    [c] = sweep.bench["transformer"]
    want = c.utilisation.mfu_cell()
    assert want == "22.0%", want
    headers, rows = table(frontier.blocks(sweep, *frontier.budget_mib(sweep)))
    assert headers[-1] == "MFU" and rows[0][-1] == want, rows
    headers, rows = table(fit_report.blocks(sweep))
    column = headers.index("MFU at the largest")
    assert rows[0][column] == want and headers[column - 1] == "samples/s at the largest", rows


def test_the_levers_table_gives_mfu_with_and_without_and_hfu_where_checkpointing_recomputes(example):
    sweep = example("gpu.sqlite", CHECKPOINTING)
    headers, rows = table(levers.blocks(sweep))
    assert headers[-1] == "MFU with / without"
    full = next(r for r in rows if r[1] == "activation checkpointing full")
    on, off = full[-1].split(" / ")
    assert "(HFU " in on and "HFU" not in off, full[-1]   # the recomputation is the GPU's work, not the model's
    assert on.split(" ")[0].endswith("%") and off.endswith("%")


def test_an_unresolved_budget_pick_gives_no_mfu(example):
    from types import SimpleNamespace
    assert frontier.mfu_cell(None) == "–" and frontier.mfu_cell(SimpleNamespace(utilisation=None)) == "–"
