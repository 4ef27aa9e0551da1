"""history over stored sweeps built here (no real sweep): a marked step begins a level, so the noise of later steps
is measured within it (trial B: after one real regression a 3x slowdown read 'within the noise (sd 65%)');
--leave-out means what compare's does; the samples/s beside a ratio are the figures it is of; a sweep that did not
finish says so where it is shown and judged; --since that leaves no sweep says so."""
from __future__ import annotations

import re
import sqlite3

import pytest

from bench import cli
from bench.analysis import compare
from bench.analysis import history as hist
from bench.report import history as page
from bench.store import read, store
from report_fixtures import build_compare_store

SINGLE = "bench/synthetic/single/cpux1/b64/g64/i0/synthetic/fp32"
DDP2 = "bench/synthetic/ddp/cpux2/b64/g128/i0/synthetic/fp32"


def history_of(path: str, **kw) -> hist.History:
    conn = read.connect(path)
    try:
        return hist.build(conn, **kw)
    finally:
        conn.close()


def marks(h: hist.History) -> dict:
    return {(s.key, p.sweep_id): p.marked for s in h.series for p in s.points if p.marked}


def point(h: hist.History, key: str, sid: int) -> hist.Point:
    return next(p for s in h.series if s.key == key for p in s.points if p.sweep_id == sid)


def test_a_marked_step_begins_a_level_and_the_next_regression_is_judged_by_the_noise_within_it(tmp_path):
    """4 sweeps, then 1.5x slower for 4 (marked), then 1.5x slower again. Measured across the first shift, the noise
    of the second step held the 1.5x level change and called the next 1.5x 'within the noise'."""
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 4 + (1.5,) * 4 + (2.25,), repeats=3, process_cv=0.02, sweep_cv=0.02, seed=1)
    h = history_of(path)
    assert marks(h) == {(SINGLE, 5): "regression", (DDP2, 5): "regression",
                        (SINGLE, 9): "regression", (DDP2, 9): "regression"}, marks(h)
    p = point(h, SINGLE, 9)
    assert p.level == 5 and p.call.evidence.sweeps == 4     # sweeps 5-7 before its baseline, and the baseline 8
    assert point(h, SINGLE, 4).level is None and point(h, SINGLE, 5).level is None
    _, rows = page.series_table(next(s for s in h.series if s.key == SINGLE), None)
    assert "noise measured only from sweeps since sweep 5 (a marked step there began its level)" in rows[-1][5]
    # what compare says of that step when the sweeps before the level are left out: the same call
    text, code = compare.compare(path, None, 8, 9, leave_out=(1, 2, 3, 4))
    assert code == 1 and f"{SINGLE}: {compare.means_words(p.call.means)}: {p.call.words} (REGRESSION)" in text, text


def test_leave_out_means_what_compares_does_and_is_checked_as_compare_checks_it(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 7, repeats=3, process_cv=0.02, sweep_cv=0.02, seed=2)
    h = history_of(path, leave_out=(3,))
    full = history_of(path)
    assert marks(h) == marks(full) == {}     # no level: the evidence is compare's, less sweep 3
    for key in (SINGLE, DDP2):
        p = point(h, key, 7)
        text, _ = compare.compare(path, None, 6, 7, leave_out=(3,))
        assert f"{key}: {compare.means_words(p.call.means)}: {p.call.words}" in text, text
        assert p.call.evidence.sweeps == point(full, key, 7).call.evidence.sweeps - 1
    for value, says in (("abc", "--leave-out: 'abc' is not a sweep id"), ("99", "holds no sweep 99"),
                        ("6", "--leave-out 6: no step of this history has its baseline after sweep 6")):
        code = cli.main(["history", "--store", path, "--leave-out", value, "--report-dir", str(tmp_path / "r"),
                         "--plots-dir", str(tmp_path / "p")])
        err = capsys.readouterr().err
        assert code == 2 and says in err, err
        assert not (tmp_path / "r").exists()
    assert cli.main(["history", "--store", path, "--leave-out", "3", "--report-dir", str(tmp_path / "r"),
                     "--plots-dir", str(tmp_path / "p")]) == 0
    assert "sweep(s) 3 left out of the noise (--leave-out)" in capsys.readouterr().out
    assert "sweep(s) 3 left out of every step's noise (--leave-out)" in open(tmp_path / "r" / "history.md").read()


def set_processes(path: str, sid: int, strategy: str, sps: tuple) -> None:
    """Give each process of one configuration of a sweep the samples/s given (its windows' wall time)."""
    conn = store.connect(path)
    for r, v in enumerate(sps):
        conn.execute("UPDATE windows SET wall_s = samples / ? WHERE result_id IN (SELECT result_id FROM results "
                     "WHERE sweep_id = ? AND repeat = ? AND strategy = ?)", (v, sid, r, strategy))
    conn.close()


def reproduces(line: str) -> None:
    """'A -> B samples/s: 1.45x faster' (or slower): B / A gives the ratio beside them, to its rounding."""
    m = re.search(r"([\d.]+) -> ([\d.]+) samples/s(?: \(\w[^)]*\))?: ([\d.]+)x (faster|slower)", line)
    assert m, line
    a, b, r = float(m.group(1)), float(m.group(2)), float(m.group(3))
    assert (b / a if m.group(4) == "faster" else a / b) == pytest.approx(r, abs=0.006), line


def test_the_samples_per_s_beside_a_ratio_are_the_geometric_means_it_is_of(tmp_path):
    """compare read '80.4 -> 84.4 samples/s: 1.17x faster' (the medians, 1.05 apart) beside the ratio of the geometric
    means over processes; the history's step cell did the same. Processes whose medians' ratio (1.17) is not their
    geometric means' (1.45)."""
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0), repeats=3)
    set_processes(path, 1, "single", (100.0, 50.0, 60.0))
    set_processes(path, 2, "single", (70.0, 65.0, 200.0))
    text, _ = compare.compare(path, None, 1, 2)
    line = next(x for x in text.splitlines() if x.startswith(SINGLE + ":"))
    reproduces(line)
    assert line.startswith(f"{SINGLE}: 66.9 -> 96.9 samples/s: 1.45x faster"), line
    assert "the geometric means over each side's processes, the figures its ratio is of" in text.splitlines()[0]
    h = history_of(path)
    _, rows = page.series_table(next(s for s in h.series if s.key == SINGLE), None)
    assert float(rows[1][1]) == 70.0 and rows[1][5].startswith("66.9 -> 96.9 samples/s: 1.45x faster"), rows[1]
    reproduces(rows[1][5])


def test_an_ab_line_gives_the_geometric_means_its_paired_ratio_is_of(tmp_path):
    path = str(tmp_path / "s.sqlite")
    a, b = build_compare_store(path, (1.0, 1.0), repeats=4)
    conn = store.connect(path)
    store.pair_sweeps(conn, a, b)
    conn.close()
    set_processes(path, a, "single", (30270.6, 16709.2, 18249.6, 31855.4))
    set_processes(path, b, "single", (39383.2, 29430.7, 26221.6, 26739.1))
    line = next(x for x in compare.compare(path, None, a, b)[0].splitlines() if x.startswith(SINGLE + ":"))
    assert line.startswith(f"{SINGLE}: median 24260.1 -> 28084.9 samples/s; paired ratio 1.29x faster (geometric means "
                           "of 4 pairs: "), line
    m = re.search(r"pairs: ([\d.]+) -> ([\d.]+) samples/s\)", line)
    assert m and float(m.group(2)) / float(m.group(1)) == pytest.approx(1.29, abs=0.006), line


def interrupt(path: str, sid: int, repeats: int, strategy: str = "", repeat: int = -1) -> None:
    """Make sweep `sid` one that was interrupted: its --repeats recorded, the process(es) named left interrupted."""
    conn = sqlite3.connect(path)
    conn.execute("UPDATE sweeps SET status = 'interrupted', config_json = ? WHERE sweep_id = ?",
                 (f'{{"repeats": {repeats}}}', sid))
    conn.execute("UPDATE results SET status = 'interrupted', reason = 'sweep interrupted by SIGINT (Ctrl-C)' "
                 "WHERE sweep_id = ? AND (? = '' OR strategy = ?) AND (? < 0 OR repeat = ?)",
                 (sid, strategy, strategy, repeat, repeat))
    conn.commit()
    conn.close()


def test_a_sweep_that_did_not_finish_is_marked_where_it_is_shown_and_judged_and_an_interrupted_run_is_not_failed(tmp_path):
    """Trial B: a sweep interrupted after 2 of its 3 rounds showed as a normal row and was judged as one; nothing in
    history.md said it was interrupted. It is judged (on the processes that ran), and says so everywhere."""
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 4, repeats=3, process_cv=0.02, sweep_cv=0.02, seed=1)
    interrupt(path, 4, 3, repeat=2)
    h = history_of(path)
    p = point(h, SINGLE, 4)
    assert p.partial == "interrupted: 2 of 3 processes" and p.call is not None and p.call.comparison.n_b == 2
    s = next(s for s in h.series if s.key == SINGLE)
    _, rows = page.series_table(s, None)
    assert rows[-1][0].endswith(", interrupted)") and rows[-1][2].endswith("(interrupted: 2 of 3 processes)"), rows[-1]
    assert "judged on the processes that ran (interrupted: 2 of 3 processes)" in rows[-1][5]
    assert all(line.endswith("; sweep 4 interrupted: 2 of 3 processes") for line in hist.summary_lines(h)), hist.summary_lines(h)
    # a configuration whose every process was interrupted is not 'FAILED (ok in sweep 3)': it was stopped, not broken
    interrupt(path, 4, 3, strategy="ddp")
    h = history_of(path)
    assert marks(h) == {} and point(h, DDP2, 4).failed.startswith("interrupted:")
    assert not any("FAILED" in row[5] for row in page.series_table(next(s for s in h.series if s.key == DDP2), None)[1])


def test_since_that_leaves_no_sweep_says_how_many_the_store_holds(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 4)
    assert cli.main(["history", "--store", path, "--since", "2999-01-01", "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "0 of its 4 sweeps are since 2999-01-01; a history needs two" in err and "0 sweep(s)" not in err, err
