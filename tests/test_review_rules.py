"""Review mends (findings 7, 9, 10, 14, 16): one rule where a rule was written twice and the copies disagreed.
Stored sweeps built here with test_recommend's helpers; plans resolved without running anything."""
from __future__ import annotations

from test_hsdp_own_figure import fsdp, hsdp, mesh_line, unstable
from test_recommend import build, payload

from bench.report import choice, pages


# Finding 7 ----------------------------------------------------------------------------------------------------------

def test_hsdp_3_percent_slower_with_one_unstable_process_reads_as_the_lead_column_a_floor_tie(tmp_path):
    # HSDP x1 one unstable process 3% slower than a steady FSDP x1: the lead column (choice.apart) calls it a floor tie;
    # the mesh note said 'not resolved: HSDP x1 ran one unstable process', its own order (instability first).
    sweep = build(str(tmp_path / "f.sqlite"), [(hsdp(1), unstable(1, 103.0)), (fsdp(1), payload(1, 100.0))])
    h, f = sorted(sweep.bench["synthetic"], key=lambda c: c.strategy != "hsdp")
    assert choice.unsteady(h) and not choice.unsteady(f)
    lead = choice.apart(f, h)
    assert choice.by_floor(lead) and choice._margin_note(lead).startswith(choice.floor_words())
    line = mesh_line(sweep)
    assert f"(3% slower; not resolved: {choice.floor_words()})" in line, line
    assert "unstable" not in line


def test_the_hsdp_gap_is_worded_by_pages_slower_and_faster_words():
    assert pages.slower_words(391.8, 160.9, fast="FSDP") == "59% slower, FSDP 2.44x as fast"
    assert pages.faster_words(391.8, 160.9, "FSDP") == "2.44x as fast, FSDP 59% slower"
    assert pages.faster_words(104.0, 100.0, "FSDP") == "4% faster"
