"""A run whose loss is NaN or infinite is timed but trains nothing (a diverged model, uninitialised weights, an fp16
overflow): the sweep's line, the configuration table and the recommendation say so, and such a run is never recommended,
however fast its steps were."""
from __future__ import annotations

import math

from bench import stats
from bench.analysis import results
from bench.report import recommend
from bench.store import store
from bench.sweep import record, run
from bench.sweep.diagnose import Outcome
from report_fixtures import spec, steps, windows


def test_the_record_counts_losses_that_are_not_finite_with_the_first_of_them():
    rows = steps(2, [50.0] * 4, "warmup") + steps(2, [50.0] * 4)
    assert stats.loss_not_finite(rows) is None
    rows[9]["loss"], rows[10]["loss"] = float("nan"), float("inf")  # measured steps 1 and 2 of rank 0
    # rank 0's last loss is finite again: a transient overflow (fp16's scaler skips such a step), not a diverged run
    assert stats.loss_not_finite(rows) == {"steps": 2, "of": 16, "kind": "measure", "step": 1, "rank": 0, "last": False}
    assert stats.loss_words(stats.loss_not_finite(rows)) == (
        "loss not finite at 2 of 16 steps (first: measured step 1, rank 0), finite again by the last step")
    rows[11]["loss"] = float("nan")  # and its last: NaN stays, the run trains nothing
    assert stats.loss_words(stats.loss_not_finite(rows)).endswith("(first: measured step 1, rank 0): timed, but not training")


def test_a_diverged_configuration_is_flagged_and_never_recommended_however_fast(tmp_path):
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "bench sweep", "{}", None)
    fast = steps(1, [10.0] * 6)
    for row in fast[2:]:
        row["loss"] = math.nan
    rid = record.record_result(conn, sid, None, spec("synthetic", "single", 1), "ok",
                               payload={"steps": fast, "windows": windows(1, [10.0] * 6, 64)})
    record.record_result(conn, sid, None, spec("synthetic", "ddp", 2), "ok",
                         payload={"steps": steps(2, [40.0] * 6), "windows": windows(2, [40.0] * 6, 64)})
    store.end_sweep(conn, sid, "completed")
    line = run._summary_line(conn, rid, Outcome("ok"))
    assert "[loss not finite at 4 of 6 steps (first: measured step 2, rank 0): timed, but not training]" in line, line
    sweep = results.load(conn, sid)
    conn.close()
    single = next(c for c in sweep.bench["synthetic"] if c.strategy == "single")
    assert single.loss_not_finite["steps"] == 4 and single.samples_per_s > 2 * max(
        c.samples_per_s for c in sweep.bench["synthetic"] if c.strategy == "ddp")
    row, said = recommend.answer(sweep, "synthetic", sweep.bench["synthetic"], "fp32")
    assert said[0].startswith("Fastest: DDP x2"), said
    assert any(s.startswith("Left out of the recommendation, timed but not training: single device x1 (loss not "
                            "finite at 4 of 6 steps") for s in said), said


def test_a_transient_overflow_is_said_but_the_configuration_stays_in_the_recommendation(tmp_path):
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "bench sweep", "{}", None)
    fast = steps(1, [10.0] * 6)
    fast[0]["loss"] = math.inf
    rid = record.record_result(conn, sid, None, spec("synthetic", "single", 1), "ok",
                               payload={"steps": fast, "windows": windows(1, [10.0] * 6, 64)})
    record.record_result(conn, sid, None, spec("synthetic", "ddp", 2), "ok",
                         payload={"steps": steps(2, [40.0] * 6), "windows": windows(2, [40.0] * 6, 64)})
    store.end_sweep(conn, sid, "completed")
    assert "[loss not finite at 1 of 6 steps (first: measured step 0, rank 0), finite again by the last step]" in (
        run._summary_line(conn, rid, Outcome("ok")))
    sweep = results.load(conn, sid)
    conn.close()
    _, said = recommend.answer(sweep, "synthetic", sweep.bench["synthetic"], "fp32")
    assert said[0].startswith("Fastest: single device x1") and not any("Left out" in s for s in said), said


def test_a_forecast_resting_on_a_run_that_did_not_train_says_no_figure_of_it_is_a_training_steps(tmp_path):
    from types import SimpleNamespace
    from bench.analysis import forecastable
    from bench.forecast import outlook
    conn = store.connect(str(tmp_path / "s.sqlite"))
    sid = store.begin_sweep(conn, "bench sweep", "{}", None)
    diverged = steps(1, [10.0] * 6)
    for row in diverged:
        row["loss"] = math.nan
    record.record_result(conn, sid, None, spec("synthetic", "ddp", 1), "ok",
                         payload={"steps": diverged, "windows": windows(1, [10.0] * 6, 64)})
    store.end_sweep(conn, sid, "completed")
    (c,) = results.load(conn, sid).bench["synthetic"]
    conn.close()
    words = forecastable.unstable_words(c)
    assert words == "DDP x1, which did not train (loss not finite at 6 of 6 steps (first: measured step 0, rank 0))", words
    point = SimpleNamespace(unsteady=words, bound="straggler/jitter", count=64)
    assert outlook.unsteady_words([point], "straggler/jitter") == f"; rests on {words}; no figure of it is a training step's"
