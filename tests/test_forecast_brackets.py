"""A range that rounds to one value is said, never hidden or called no range (issue 43, audit F5): the check's line
keeps 'no range: no input measured twice' for a range none was drawn for, and gives a narrow one its ends; the table
says once, under it, what a figure without brackets means; 'past N (between N1 and N2)' with N1 == N2 says so."""
from __future__ import annotations

import numpy as np

from bench.commands import forecast as cmd
from bench.forecast import brackets
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import spread
from test_forecast_spread import build

PLAIN = "A forecast figure without brackets has a range that rounds to the figure itself"


def _steady(tmp_path) -> str:
    # three processes at x1 within 0.0008 ms of 30 ms, the machine's rows on one exact line (no network spread), the
    # interference's rounds not kept: the x2 step's range is drawn from the processes alone, 48.499-48.502 ms
    path = str(tmp_path / "steady.sqlite")
    build(path, [30.0, 30.0004, 30.0008], x2_ms=[48.0, 48.5, 49.0])
    return path


def test_a_step_range_narrower_than_its_last_digit_is_given_its_ends_not_called_no_range(tmp_path, capsys):
    path = _steady(tmp_path)
    assert cmd.main(["--store", path, "--to", "2,4"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "synthetic ddp [fp32] x2: forecast" in x)
    step = line.split("; memory")[0]                                # the memory's peaks are alike: no range, said
    assert "no input measured twice" not in step, line              # before: both ends print 48.50, called 'no range'
    assert "(range 48.49" in line and "48.50" in line and ", inside the range" in line, line
    table = out.split("synthetic DDP [fp32]\n")[1].split("efficiency under")[0]
    assert "48.5 " in table and "48.5 (" not in table              # the step's cell has no brackets ...
    assert PLAIN in table                                          # ... and the line under the table says why


def test_the_report_says_under_its_table_what_a_figure_without_brackets_means(tmp_path):
    from bench.report import report
    out = report.render(_steady(tmp_path), plots_dir=str(tmp_path / "plots"), report_dir=str(tmp_path / "rep"))
    section = open(out["markdown"]).read().split("## Forecast past the measured counts")[1].split("\n## ")[0]
    after = section.split("| setting | devices | nodes | step ms |")[1]
    assert PLAIN in after.split("The check:")[0]
    row = next(x for x in section.splitlines() if x.startswith("| synthetic DDP [fp32] | 2 | 1 | 48.50 |"))
    assert "| 48.50 | 48.499-48.502 | 48.50 |" in row, row               # the check's range: its ends told apart


def test_a_range_is_said_as_none_only_where_nothing_varied():
    assert brackets.check_range(None, None) == " (no range: no input measured twice)"
    assert brackets.check_range(48.5, 48.5) == " (no range: no input measured twice)"
    assert brackets.check_range(3.3201, 3.3249) == " (range 3.320-3.325 ms)"
    assert brackets.check_range(3.30, 3.34) == " (range 3.30-3.34 ms)"
    assert brackets.ends(3.32011, 3.32049) == "3.3201-3.3205" and brackets.ends(None, None) == "–"

    def point(lo, hi):
        return fs.Point(count=2, nodes=1, step_ms=3.3225, samples_per_s=1e5, efficiency=0.9,
                        ranges={"step_ms": (lo, hi), "samples_per_s": (9e4, 1.1e5), "efficiency": (0.85, 0.95)})
    assert fo.unbracketed_words([point(3.3201, 3.3249)]) == PLAIN + "."
    assert fo.unbracketed_words([point(3.3225, 3.3225)]).endswith("no range: nothing it rests on was measured twice.")
    assert fo.unbracketed_words([point(3.1, 3.5)]) == ""
    assert fo.unbracketed_words([point(3.3201, 3.3249), point(3.3225, 3.3225)]) == (
        PLAIN + ", or none where nothing it rests on was measured twice.")


def test_past_n_with_both_ends_of_its_range_alike_says_so():
    # an H200 run read 'past 16 GPUs ... scaling stops paying' with no '(between ...)': both ends were 16
    s = type("S", (), {"label": "w DDP [fp32]", "single": object(), "strategy": "ddp", "variant": "fp32",
                       "any": type("C", (), {"device_type": "cuda"})()})()
    pts = [fs.Point(count=n, nodes=1, efficiency=eff, bound="straggler/jitter",
                    draws={"efficiency": np.full(spread.DRAWS, eff)})
           for n, eff in ((2, 0.95), (4, 0.85), (8, 0.78), (16, 0.70), (32, 0.60))]
    assert fo.stop_range(pts) == (8, 8)
    assert "past 8 GPUs on this network (both ends of its range: 8), scaling stops paying" in fo.recommendation(s, pts)
