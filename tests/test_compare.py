"""Comparing two sweeps: processes (repeats) are the samples, each configuration is judged against its own noise,
measured from evidence (its repeats, its earlier sweeps in the store); without evidence compare says it cannot
decide; significance is corrected over configurations, and the exit status follows."""
from __future__ import annotations

import re

import pytest

from bench import stats

from bench.analysis import compare
from bench.commands import compare as compare_cli
from bench.store import store
from report_fixtures import build_compare_store

DDP2 = "bench/synthetic/ddp/cpux2/b64/g128/i0/synthetic/fp32"
SINGLE = "bench/synthetic/single/cpux1/b64/g64/i0/synthetic/fp32"


def line_of(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(key + ":"))


def test_without_evidence_one_process_per_side_cannot_decide_even_a_large_change(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 2.0))
    text, code = compare.compare(path, None, None, None)
    assert code == 0, text
    line = line_of(text, SINGLE)
    assert line.endswith("2.00x slower: cannot decide (one process per side, and fewer than 2 earlier sweeps of this "
                         "configuration in the store: nothing measures its noise; keep earlier sweeps in the store, or "
                         "run both sides with --repeats 3)"), line
    assert "REGRESSION" not in text and text.rstrip().endswith("no regression; 2 of 2 could not be decided (no evidence of their noise)")


def test_earlier_sweeps_measure_the_noise_and_one_process_per_side_then_calls_a_real_slowdown(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 8 + (1.3,), process_cv=0.02, sweep_cv=0.02, seed=1)
    text, code = compare.compare(path, None, None, None)
    line = line_of(text, SINGLE)
    assert code == 1 and line.endswith("(REGRESSION)") and "noise of this configuration from 8 sweeps" in line, text
    same = str(tmp_path / "same.sqlite")
    build_compare_store(same, (1.0,) * 9, process_cv=0.02, sweep_cv=0.02, seed=1)
    text, code = compare.compare(same, None, None, None)
    assert code == 0 and "within the noise" in line_of(text, SINGLE), text
    assert compare.compare(path, None, None, None, history=0)[1] == 0  # no earlier sweeps: no evidence, no call


def test_a_noisy_configuration_gets_a_wider_bound_than_a_quiet_one(tmp_path):
    # DDP x2 processes spread several times more than one process on a shared 2-core machine: one bound for both
    # either misses the quiet one's slowdowns or calls the noisy one's noise.
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 10, process_cv={"single": 0.02, "ddp": 0.15}, seed=3)
    text, _ = compare.compare(path, None, None, None)
    bound = lambda key: int(re.search(r"it calls slowdowns beyond (\d+)%", line_of(text, key)).group(1))  # noqa: E731
    assert bound(DDP2) > 3 * bound(SINGLE), text


def test_identical_code_is_called_a_regression_in_at_most_5_percent_of_compares(tmp_path):
    # 40 A/A compares, each with 9 earlier sweeps as evidence, processes spread 8% (single) and 15% (DDP x2) and
    # sweeps drift 4%: family-wise 5% allows 2.
    failures = 0
    for seed in range(40):
        path = str(tmp_path / f"s{seed}.sqlite")
        build_compare_store(path, (1.0,) * 11, steps_n=5, process_cv={"single": 0.08, "ddp": 0.15}, sweep_cv=0.04, seed=seed)
        failures += compare.compare(path, None, None, None)[1]
    assert failures <= 2


def test_sweeps_run_one_after_another_call_only_slowdowns_beyond_their_drift(tmp_path):
    # Repeats on both sides but no earlier sweep: the drift between sweeps is unmeasured, so a fixed bound stands in.
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.10, 1.25), repeats=5, process_cv=0.03)
    text, code = compare.compare(path, None, 1, 2)  # 10% slower, significant over processes, within the drift
    assert code == 0, text
    assert "1.1" in line_of(text, SINGLE) and "no earlier sweep: a slowdown must also pass the drift between sweeps, 15%" in text
    text, code = compare.compare(path, None, 1, 3)  # 25% slower: beyond it
    line = line_of(text, SINGLE)
    assert code == 1 and re.search(r"1\.2\dx slower \(p=[0-9.e-]+ one-sided, 95% CI of the ratio 0\.\d+-0\.\d+; "
                                   r"5 vs 5 process\(es\), no earlier sweep.*\(REGRESSION\)$", line), line


def test_interleaved_ab_sweeps_are_compared_pair_by_pair_and_a_10_percent_slowdown_fails(tmp_path):
    path = str(tmp_path / "s.sqlite")
    a, b = build_compare_store(path, (1.0, 1.10), repeats=6, process_cv=0.05, seed=4)
    conn = store.connect(path)
    store.pair_sweeps(conn, a, b)
    # Pair r of B saw the same machine as pair r of A: give both the same luck, as interleaving does.
    for r in range(6):
        luck = 1 + 0.08 * ((r % 3) - 1)
        conn.execute("UPDATE windows SET wall_s = wall_s / ? WHERE result_id IN "
                     "(SELECT result_id FROM results WHERE repeat = ?)", (luck, r))
    conn.close()
    text, code = compare.compare(path, None, a, b)
    assert "interleaved A/B pairs" in text and "6 interleaved pairs" in line_of(text, SINGLE), text
    assert code == 1 and line_of(text, SINGLE).endswith("(REGRESSION)"), text


def test_an_ab_line_says_its_ratio_is_the_paired_one_beside_the_medians_and_names_no_drift_between_sweeps(tmp_path):
    """An ab line read '24260.1 -> 28084.9 samples/s: 1.29x faster, ... no earlier sweep: a slowdown must also pass the
    drift between sweeps, 5%': 1.16x by the medians beside it; 1.29x was the geometric mean of the paired ratios, and
    interleaved pairs use no drift between sweeps. Pairs whose ratios (1.30, 1.76, 1.44, 0.84) give a geometric mean
    other than the medians' ratio say which figure is which."""
    path = str(tmp_path / "s.sqlite")
    a, b = build_compare_store(path, (1.0, 1.0), repeats=4)
    conn = store.connect(path)
    store.pair_sweeps(conn, a, b)
    for sid, sps in ((a, (30270.6, 16709.2, 18249.6, 31855.4)), (b, (39383.2, 29430.7, 26221.6, 26739.1))):
        for r, v in enumerate(sps):   # each process's window: its samples over its wall time
            conn.execute("UPDATE windows SET wall_s = samples / ? WHERE result_id IN (SELECT result_id FROM results "
                         "WHERE sweep_id = ? AND repeat = ? AND strategy = 'single')", (v, sid, r))
    conn.close()
    line = line_of(compare.compare(path, None, a, b)[0], SINGLE)
    assert line.startswith(f"{SINGLE}: median 24260.1 -> 28084.9 samples/s; paired ratio 1.29x faster (geometric means "
                           "of 4 pairs: "), line
    assert re.search(r"pairs: [\d.]+ -> [\d.]+ samples/s\), within the noise", line), line
    assert "drift between sweeps cancels in each pair" in line and "must also pass the drift" not in line
    assert "no earlier sweep" not in line and "process(es)" not in line


def test_with_repeats_the_same_numbers_are_within_the_noise(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0), repeats=3, process_cv=0.0)
    text, code = compare.compare(path, None, None, None)
    assert code == 0 and "within the noise" in line_of(text, DDP2), text


def test_a_significant_slowdown_below_the_threshold_passes(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.03), repeats=5, process_cv=0.002)
    text, code = compare.compare(path, None, None, None, 0.05, drift=0.0)
    assert code == 0 and "1.03x slower (p=" in line_of(text, SINGLE), text
    assert compare.compare(path, None, None, None, 0.01, drift=0.0)[1] == 1


def test_a_speedup_is_reported_as_faster_and_passes(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 0.5), repeats=3, process_cv=0.01)
    text, code = compare.compare(path, None, None, None)
    assert code == 0 and re.search(r"2\.0\dx faster \(p=", line_of(text, SINGLE))


def test_two_stores_compare_their_latest_sweeps_with_the_baselines_history(tmp_path):
    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    build_compare_store(a, (1.0,) * 6, process_cv=0.02)
    build_compare_store(b, (2.0,))
    text, code = compare.compare(a, b, None, None)
    assert code == 1 and "baseline: " + a + " sweep 6; candidate: " + b + " sweep 1" in text
    assert "noise of this configuration from 6 sweeps" in line_of(text, SINGLE), text
    text, code = compare.compare(a, b, 1, None)  # the first sweep as baseline: no earlier sweep, no evidence
    assert code == 0 and re.search(r"1\.9\dx slower: cannot decide", line_of(text, SINGLE))


def test_the_evidence_model_separates_process_noise_from_drift_between_sweeps():
    import math
    # three sweeps of three processes each: within-sweep sd from the repeats, the means' spread beyond it is drift
    history = [[100, 102, 98], [110, 112, 108]]
    ev = stats.evidence(history, [90, 92, 88], [100, 100, 100])
    assert ev.sweeps == 3 and ev.processes == 12 and ev.df == 2
    groups = (history[0], history[1], [90, 92, 88], [100, 100, 100])
    squares = sum((math.log(x) - sum(math.log(y) for y in g) / 3) ** 2 for g in groups for x in g)
    assert math.isclose(ev.sd_process, math.sqrt(squares / 8), rel_tol=1e-9)  # 4 sweeps x (3 - 1) degrees of freedom
    assert ev.sd_sweep > 5 * ev.sd_process  # the means differ by ~10%, the repeats by ~2%
    assert stats.evidence([[100]], [101], [99]) is None  # one earlier sweep and the baseline: too little
    singles = stats.evidence([[100], [104]], [96], [100])  # one process everywhere: drift and noise together
    assert math.isnan(singles.sd_process) and math.isclose(singles.sd_diff ** 2, 2 * singles.sd_sweep ** 2)


def test_a_configuration_that_now_fails_is_a_regression_on_its_own(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0))
    conn = store.connect(path)
    for table in ("steps", "windows"):
        conn.execute(f"DELETE FROM {table} WHERE result_id IN (SELECT result_id FROM results WHERE sweep_id = 2 AND strategy = 'ddp')")
    conn.execute("UPDATE results SET status = 'failed', reason = 'rank 1: out of memory' WHERE sweep_id = 2 AND strategy = 'ddp'")
    conn.close()
    text, code = compare.compare(path, None, None, None)
    assert code == 1 and "failed: rank 1: out of memory in the candidate (REGRESSION)" in line_of(text, DDP2)


def test_one_sweep_in_one_store_is_an_error_naming_the_count(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,))
    with pytest.raises(store.StoreError, match="holds 1"):
        compare.compare(path, None, None, None)


def test_command_line_exit_status(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 4 + (2.0,), process_cv=0.02)
    assert compare_cli.main(["--store", path]) == 1
    assert compare_cli.main(["--store", path, "--history", "0"]) == 0
    assert compare_cli.main(["--store", path, "--history", "99999999999999999999"]) == 1  # every earlier sweep, as
                                                            # the default's 4 here (SQLite's LIMIT overflowed: exit 3)
    assert compare_cli.main(["--store", str(tmp_path / "missing.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().err
    for bad in (["--threshold", "-1"], ["--threshold", "nan"], ["--drift", "inf"], ["--history", "-1"], ["--history", "2.5"]):
        assert compare_cli.main(["--store", path, *bad]) == 2, bad
        assert bad[0] in capsys.readouterr().err


def test_interleaved_sweeps_with_one_pair_cannot_decide_and_say_why(tmp_path):
    path = str(tmp_path / "s.sqlite")
    a, b = build_compare_store(path, (1.0, 2.0))
    conn = store.connect(path)
    store.pair_sweeps(conn, a, b)
    conn.close()
    text, code = compare.compare(path, None, a, b)
    assert code == 0 and line_of(text, SINGLE).endswith(
        "paired ratio 2.00x slower (1 pair): cannot decide (fewer than 2 interleaved pairs where both sides succeeded)"), text


def test_the_drift_measured_on_cpus_is_never_applied_to_a_gpu_configuration():
    # three processes a side, no earlier sweep: the 15% drift between sweeps was measured on 2-core CPUs
    a, b = [100.0, 101.0, 99.0], [70.0, 70.5, 69.5]     # 30% slower, processes spread 2%
    samples = {"cpu": (a, b, []), "gpu": (a, b, [])}
    calls = compare.judge(samples, device_types={"cpu": "cpu", "gpu": "cuda"})
    assert calls["cpu"].regression and calls["cpu"].floor == compare.DEFAULT_DRIFT
    assert not calls["gpu"].regression and "cannot decide" in calls["gpu"].words
    assert "drift between sweeps is not measured on cuda" in calls["gpu"].words and "--drift" in calls["gpu"].words
    given = compare.judge(samples, drift=0.02, device_types={"cpu": "cpu", "gpu": "cuda"})   # --drift 0.02: the user's figure
    assert given["gpu"].regression and given["gpu"].floor == 0.05


def test_one_disturbed_earlier_sweep_is_named_with_what_it_costs_and_leaving_it_out_calls_the_slowdown(tmp_path):
    # Sweep 3 ran while something else used the machine (40% slower): in the spread between sweeps it hides the
    # candidate's 30% slowdown. compare names it, what it costs, and how to leave it out; left out, the slowdown is called.
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0, 1.4, 1.0, 1.0, 1.0, 1.3), repeats=3, process_cv=0.02, sweep_cv=0.02, seed=2)
    text, code = compare.compare(path, None, None, None)
    line = line_of(text, SINGLE)
    assert code == 0 and "within the noise" in line, text
    said = re.search(r"sweep 3 ran this configuration (\d+)% slower than the median of its other sweeps and alone widens "
                     r"the bound from (\d+)% to (\d+)% \(if it was disturbed, --leave-out 3\)$", line)
    assert said and 25 <= int(said.group(1)) <= 35 and 2 * int(said.group(2)) <= int(said.group(3)), line
    text, code = compare.compare(path, None, None, None, leave_out=(3,))
    assert code == 1 and line_of(text, SINGLE).endswith("(REGRESSION)") and "sweep(s) 3 left out (--leave-out)" in text
    assert "--leave-out" not in line_of(text, SINGLE)
    quiet = str(tmp_path / "quiet.sqlite")  # no such sweep: nothing named
    build_compare_store(quiet, (1.0,) * 6 + (1.02,), repeats=3, process_cv=0.02, sweep_cv=0.02, seed=2)
    assert "--leave-out" not in compare.compare(quiet, None, None, None)[0]


@pytest.mark.parametrize("value, says", [("abc", "--leave-out: 'abc' is not a sweep id"),
                                         ("0", "--leave-out: '0' is not a sweep id"),
                                         ("99", "--leave-out 99: "), ("7", "--leave-out 7: that is the candidate"),
                                         ("6", "--leave-out 6: that is the baseline")])
def test_leave_out_names_a_bad_sweep_id_and_exits_2(tmp_path, capsys, value, says):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 7)
    assert compare_cli.main(["--store", path, "--leave-out", value]) == 2
    err = capsys.readouterr().err
    assert says in err, err


def test_leave_out_refuses_what_would_change_nothing_and_says_which_sweeps_were_not_read_anyway(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 8)
    assert compare_cli.main(["--store", path, "--sweep-a", "5", "--sweep-b", "6", "--leave-out", "7"]) == 2
    assert "--leave-out 7: not earlier than sweep 5 compared" in capsys.readouterr().err
    text, _ = compare.compare(path, None, 7, 8, history=3, leave_out=(1, 6))  # reads 3-6 without 6: 2-5; 1 never
    assert "sweep(s) 1, 6 left out (--leave-out) (1: not among the sweeps read anyway" in text, text
    ab = str(tmp_path / "ab.sqlite")
    a, b = build_compare_store(ab, (1.0, 1.0, 1.0), repeats=2)[1:]
    conn = store.connect(ab)
    store.pair_sweeps(conn, a, b)
    conn.close()
    assert compare_cli.main(["--store", ab, "--leave-out", "1"]) == 2
    assert "compared pair by pair, with no earlier sweep as evidence" in capsys.readouterr().err



def test_a_candidate_that_stopped_training_is_a_regression_however_fast(tmp_path):
    import sqlite3
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,) * 6 + (0.5,), repeats=3, process_cv=0.02, sweep_cv=0.02, seed=2)  # 2x faster; 3 processes
    conn = sqlite3.connect(path)
    conn.execute("UPDATE results SET details_json = json_set(coalesce(details_json, '{}'), '$.loss_not_finite', "
                 "json(?)) WHERE sweep_id = 7 AND strategy = 'single'",
                 ('{"steps": 20, "of": 30, "kind": "measure", "step": 10, "rank": 0, "last": true}',))
    conn.commit()
    conn.close()
    text, code = compare.compare(path, None, None, None)
    line = line_of(text, SINGLE)
    assert code == 1 and line.endswith("; but the candidate's loss not finite at 60 of 90 steps (first: measured step 10, "
                                       "rank 0): timed, but not training (it trained in the baseline) (REGRESSION)"), line
    assert "REGRESSION" not in line_of(text, DDP2)  # 2x faster and still training


def test_one_earlier_sweep_is_called_too_few_not_none(tmp_path):
    """A compare read 'no earlier sweep: a slowdown must also pass the drift' where the store held one earlier sweep of
    the configuration: too few to measure its drift (2 needed), not none."""
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0, 1.10), repeats=3, process_cv=0.03)
    line = line_of(compare.compare(path, None, 2, 3)[0], SINGLE)
    assert ("3 vs 3 process(es), too few earlier sweeps of this configuration (1; 2 needed): a slowdown must also pass "
            "the drift between sweeps, 15%") in line and "no earlier sweep" not in line, line
    assert "3 vs 3 process(es), no earlier sweep: " in line_of(compare.compare(path, None, 2, 3, history=0)[0], SINGLE)
    gpu = compare.judge({"k": ([100.0, 101.0, 99.0], [90.0, 91.0, 89.0], [[100.0, 100.5]])}, device_types={"k": "cuda"})
    assert "cannot decide (3 vs 3 process(es), too few earlier sweeps of this configuration (1; 2 needed), and the " \
           "drift between sweeps is not measured on cuda" in gpu["k"].words and not gpu["k"].decided


def test_a_configuration_the_candidate_did_not_run_or_skipped_is_not_worded_as_failed(tmp_path):
    """'only in the baseline (no ok result in the candidate)' read as if the candidate had failed it: absent and skipped
    are said as such, and neither is a regression."""
    from bench.sweep import record
    from report_fixtures import measured, spec
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    for ddp in ("ok", "skipped", None):
        sid = store.begin_sweep(conn, "bench", "{}", None)
        record.record_result(conn, sid, None, spec("synthetic", "single", 1), "ok", payload=measured(1, [50.0] * 10, 64))
        if ddp == "ok":
            record.record_result(conn, sid, None, spec("synthetic", "ddp", 2), "ok", payload=measured(2, [60.0] * 10, 64))
        elif ddp == "skipped":
            record.record_result(conn, sid, None, spec("synthetic", "ddp", 2), "skipped", "needs 2 GPUs; 1 visible")
        store.end_sweep(conn, sid, "completed")
    conn.close()
    text, code = compare.compare(path, None, 1, 2)
    assert code == 0 and line_of(text, DDP2) == f"{DDP2}: only in the baseline (skipped in the candidate: needs 2 GPUs; 1 visible)"
    text, code = compare.compare(path, None, 1, 3)
    assert code == 0 and line_of(text, DDP2) == f"{DDP2}: only in the baseline (the candidate did not run it)"
