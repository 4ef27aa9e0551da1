"""Memory gets a range in the forecast's check as the step does (issue 43, audit F4): the check stores the memory's range
and whether the measured peak fell inside it (forecast_mem_mib_low/high, mem_in_range: columns a version-6 store
written before them gains when a check is next written, and reads without), the terminal's check line and the
report's check table give them, and the fit words say where the range's high end crosses the budget."""
from __future__ import annotations

import sqlite3

import pytest

from bench.commands import forecast as cmd
from bench.forecast import check as fk
from bench.forecast import memory as mm
from bench.store import forecasts, schema, store
from test_forecast_spread import build, ddp


def _mem(n: int, mib: float) -> mm.Memory:
    return mm.Memory(n, {"activations and the rest (measured)": mib})


def test_the_fit_words_say_where_the_ranges_high_end_crosses_the_budget():
    # at 0.99 of the budget with a peak spread of +-3%: 'fits at every count' said nothing of a high end above it
    pts = [_mem(n, 990.0) for n in (2, 4, 8)]
    highs = {n: 990.0 * 1.03 for n in (2, 4, 8)}
    assert mm.fit_words(pts, 1000.0, "ddp") == "fits in 1000 MiB at every count"
    assert mm.fit_words(pts, 1000.0, "ddp", highs=highs) == (
        "fits in 1000 MiB at every count; at its range's high end it does not fit in 1000 MiB at any count up to 8 (at "
        "least 1020 MiB per device)")
    assert mm.fit_words(pts, 1020.0, "ddp", highs=highs) == "fits in 1020 MiB at every count"   # the high end fits too
    fsdp = [_mem(1, 1100.0), _mem(2, 990.0), _mem(4, 900.0)]
    assert mm.fit_words(fsdp, 1000.0, "fsdp", highs={1: 1133.0, 2: 1019.7, 4: 927.0}) == (
        "does not fit on one device at this batch; FSDP fits from 2 devices; at its range's high end FSDP fits from 4 "
        "devices")
    up_to = [_mem(n, mib) for n, mib in ((2, 900.0), (4, 950.0), (8, 990.0))]
    assert mm.fit_words(up_to, 1000.0, "ddp", highs={2: 927.0, 4: 978.5, 8: 1019.7}) == (
        "fits in 1000 MiB at every count; at its range's high end it fits in 1000 MiB up to 4 devices")
    assert mm.fit_words(pts, 1000.0, "ddp", highs={2: float("nan")}) == "fits in 1000 MiB at every count"   # no range


def _peaks(tmp_path) -> str:
    # three processes at x1 whose peaks (beyond the process before its model) were 194, 200 and 206 MiB: x2's memory
    # 200 MiB forecast with a range from them, 200 MiB measured
    path = str(tmp_path / "peaks.sqlite")
    build(path, [30.0, 30.0, 30.0], x2_ms=[48.0, 48.5, 49.0], peaks=(194.0, 200.0, 206.0))
    return path


def test_the_check_stores_the_memorys_range_and_whether_the_peak_fell_inside(tmp_path):
    path = _peaks(tmp_path)
    f, s, _, _ = ddp(path)
    (row,) = fk.validate(s, f.runs, None, {}, "now")
    lo, hi = row["forecast_mem_mib_low"], row["forecast_mem_mib_high"]
    assert lo < row["forecast_mem_mib"] < hi and hi - lo > 10 and row["forecast_mem_mib"] == pytest.approx(200.0)
    assert row["mem_in_range"] == 1 and row["measured_mem_mib"] == pytest.approx(200.0)
    conn = store.connect(path)
    forecasts.write_validation(conn, 1, [row])
    conn.close()
    got = sqlite3.connect(path).execute("SELECT forecast_mem_mib_low, forecast_mem_mib_high, mem_in_range FROM "
                                        "forecasts").fetchone()
    assert got == (pytest.approx(lo), pytest.approx(hi), 1)


def test_a_memory_range_whose_draws_never_varied_is_neither_inside_nor_outside(tmp_path):
    # one peak measured, three times alike: the line says "no range", so the check must not count it "outside"
    path = str(tmp_path / "flat.sqlite")
    build(path, [30.0, 30.0, 30.0], x2_ms=[48.0, 48.5, 49.0], peaks=(200.0, 200.0, 200.0))
    f, s, _, _ = ddp(path)
    (row,) = fk.validate(s, f.runs, None, {}, "now")
    assert row["forecast_mem_mib_low"] == pytest.approx(row["forecast_mem_mib_high"])
    assert row["mem_in_range"] is None


def test_the_terminal_and_the_report_give_the_memorys_range_and_the_high_end_against_the_budget(tmp_path, capsys):
    path = _peaks(tmp_path)
    # 1.37 GiB a node (two processes): the central 700 MiB a process fits, the high end (718) does not
    assert cmd.main(["--store", path, "--to", "2,4", "--memory-budget-gib", "1.37"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "synthetic ddp [fp32] x2: forecast" in x)
    assert "; memory 200 MiB (range 18" in line and "MiB) against 200 measured (+0%" in line, line
    assert line.endswith(", inside its range"), line
    assert "memory: 1 of 1 peaks inside its range" in out
    said = next(x for x in out.splitlines() if x.startswith("  memory: fits"))
    assert ("fits in the 1.37 GiB budget (--memory-budget-gib) per node at every count; at its range's high end it "
            "does not fit") in said, said
    from bench.report import report
    rep = report.render(path, plots_dir=str(tmp_path / "plots"), report_dir=str(tmp_path / "rep"))
    section = open(rep["markdown"]).read().split("## Forecast past the measured counts")[1].split("\n## ")[0]
    assert "| memory MiB (range) / measured | memory error | memory inside |" in section
    row = next(x for x in section.splitlines() if x.startswith("| synthetic DDP [fp32] | 2 | 1 |"))
    assert "| 200 (18" in row and ") / 200 | +0% | yes |" in row, row


def test_a_version_6_store_written_before_the_memory_range_reads_and_gains_it_on_the_next_check(tmp_path):
    path = _peaks(tmp_path)
    conn = sqlite3.connect(path)                              # as a store written before: the forecasts table without
    conn.executescript("DROP TABLE forecasts;" + next(
        st for st in schema.SCHEMA.split(";") if "CREATE TABLE IF NOT EXISTS forecasts (" in st).replace(
        "    forecast_mem_mib_low REAL, forecast_mem_mib_high REAL, mem_in_range INTEGER,\n", ""))
    conn.close()
    cols = lambda: [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(forecasts)")]  # noqa: E731
    assert "mem_in_range" not in cols() and "in_range" in cols()
    conn = store.connect(path, readonly=True)                 # read as it is: version 6, no migration asked
    assert forecasts.read_validation(conn, 1) == []
    conn.close()
    f, s, _, _ = ddp(path)
    conn = store.connect(path)
    forecasts.write_validation(conn, 1, fk.validate(s, f.runs, None, {}, "now"))
    (row,) = forecasts.read_validation(conn, 1)
    conn.close()
    assert {"forecast_mem_mib_low", "forecast_mem_mib_high", "mem_in_range"} <= set(cols())
    assert row["mem_in_range"] == 1
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION == 6


def test_a_version_5_store_migrates_with_the_memory_range_columns(tmp_path):
    path = str(tmp_path / "v5.sqlite")
    v5 = (schema.SCHEMA.replace(", rounds_json TEXT", "")
          .replace("forecast_step_ms_low REAL, forecast_step_ms_high REAL, in_range INTEGER,", "")
          .replace("forecast_mem_mib_low REAL, forecast_mem_mib_high REAL, mem_in_range INTEGER,", ""))
    conn = sqlite3.connect(path)
    conn.executescript(v5 + ";PRAGMA user_version = 5;")
    conn.close()
    store.connect(path).close()
    cols = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(forecasts)")]
    assert cols[-6:] == ["forecast_step_ms_low", "forecast_step_ms_high", "in_range", "forecast_mem_mib_low",
                         "forecast_mem_mib_high", "mem_in_range"]


def test_the_results_frames_memory_words_take_the_ranges_high_end_as_the_terminal_does(tmp_path, monkeypatch):
    # r.forecast's memory_fits called fit_words without the high ends the terminal and the report pass it
    from bench import results
    path = _peaks(tmp_path)
    seen = []
    real = mm.fit_words
    monkeypatch.setattr(mm, "fit_words", lambda *a, **k: seen.append((a, k)) or real(*a, **k))
    frame = results.load(path).forecast
    assert len(frame) and seen
    assert all((len(a) > 5 and a[5]) or k.get("highs") for a, k in seen), seen


def test_showing_the_results_does_not_run_the_forecast(tmp_path, monkeypatch):
    from bench import results
    from bench.report import forecastrows
    path = _peaks(tmp_path)
    monkeypatch.setattr(forecastrows, "ROWS", {"forecast": None, "checks": None})   # would raise if called
    r = results.load(path)
    said = repr(r)
    assert "forecast not read yet" in said and "checks not read yet" in said and "configurations" in said
