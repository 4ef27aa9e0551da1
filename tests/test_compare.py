"""Comparing two sweeps: processes (repeats) are the samples, one process per side decides nothing within
the stated noise bound, significance is corrected over configurations, and the exit status follows."""
from __future__ import annotations

import re

import pytest

from bench.analysis import compare
from bench.store import store
from report_fixtures import build_compare_store

DDP2 = "bench/synthetic/ddp/cpux2/b64/g128/i0/synthetic/fp32"
SINGLE = "bench/synthetic/single/cpux1/b64/g64/i0/synthetic/fp32"


def line_of(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(key + ":"))


def test_one_process_per_side_cannot_call_a_difference_within_the_noise_bound(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.2))  # 1.2x slower: what identical code showed between processes here
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 0, text
    line = line_of(text, SINGLE)
    assert "1.20x slower, within the noise bound of 25% between fresh processes" in line
    assert "one process per side: cannot separate a change from process noise" in line and "--repeats 5" in line


def test_one_process_per_side_still_calls_a_change_beyond_the_noise_bound(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 2.0))
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 1 and line_of(text, SINGLE).endswith("(REGRESSION)") and "2.00x slower, beyond" in line_of(text, SINGLE)
    assert compare.compare(path, None, None, None, 0.05, noise=1.5)[1] == 0  # a bound the user states


def test_sweeps_run_one_after_another_call_only_slowdowns_beyond_their_drift(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.10, 1.25), repeats=5, process_cv=0.03)
    text, code = compare.compare(path, None, 1, 2, 0.05)  # 10% slower, significant over processes, within the drift
    assert code == 0, text
    assert "1.1" in line_of(text, SINGLE) and "slower by more than 15% (sweeps run one after another drift" in text
    text, code = compare.compare(path, None, 1, 3, 0.05)  # 25% slower: beyond it
    line = line_of(text, SINGLE)
    assert code == 1 and re.search(r"1\.2\dx slower \(p=[0-9.e-]+ one-sided, 95% CI of the ratio 0\.\d+-0\.\d+, "
                                   r"5 vs 5 processes\) \(REGRESSION\)", line), line


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
    text, code = compare.compare(path, None, a, b, 0.05)
    assert "interleaved A/B pairs" in text and "6 vs 6 pairs" in line_of(text, SINGLE), text
    assert code == 1 and line_of(text, SINGLE).endswith("(REGRESSION)"), text


def test_with_repeats_identical_code_almost_never_fails(tmp_path):
    # 20 A/A pairs whose processes differ by chance (sd 5%): at most one may be called a regression.
    failures = 0
    for seed in range(20):
        path = str(tmp_path / f"s{seed}.sqlite")
        build_compare_store(path, (1.0, 1.0), steps_n=5, repeats=5, process_cv=0.05, seed=seed)
        failures += compare.compare(path, None, None, None, 0.05)[1]
    assert failures <= 1


def test_with_repeats_the_same_numbers_are_no_significant_difference(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0), repeats=3, process_cv=0.0)
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 0 and "no significant difference" in line_of(text, DDP2), text


def test_a_significant_slowdown_below_the_threshold_passes(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.03), repeats=5, process_cv=0.002)
    text, code = compare.compare(path, None, None, None, 0.05, drift=0.0)
    assert code == 0 and "1.03x slower (p=" in line_of(text, SINGLE), text
    assert compare.compare(path, None, None, None, 0.01, drift=0.0)[1] == 1


def test_a_speedup_is_reported_as_faster_and_passes(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 0.5), repeats=3, process_cv=0.01)
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 0 and re.search(r"2\.0\dx faster \(p=", line_of(text, SINGLE))


def test_two_stores_compare_their_latest_sweeps(tmp_path):
    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    build_compare_store(a, (2.0, 1.0))  # latest sweep of a is the fast one
    build_compare_store(b, (2.0,))
    text, code = compare.compare(a, b, None, None, 0.05)
    assert code == 1 and "baseline: " + a + " sweep 2; candidate: " + b + " sweep 1" in text
    text, code = compare.compare(a, b, 1, None, 0.05)  # pick the slow baseline sweep explicitly
    assert code == 0 and "no change" in line_of(text, SINGLE)


def test_a_configuration_that_now_fails_is_a_regression_on_its_own(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0))
    conn = store.connect(path)
    for table in ("steps", "windows"):
        conn.execute(f"DELETE FROM {table} WHERE result_id IN (SELECT result_id FROM results WHERE sweep_id = 2 AND strategy = 'ddp')")
    conn.execute("UPDATE results SET status = 'failed', reason = 'rank 1: out of memory' WHERE sweep_id = 2 AND strategy = 'ddp'")
    conn.close()
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 1 and "failed: rank 1: out of memory in the candidate (REGRESSION)" in line_of(text, DDP2)


def test_one_sweep_in_one_store_is_an_error_naming_the_count(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,))
    with pytest.raises(store.StoreError, match="holds 1"):
        compare.compare(path, None, None, None, 0.05)


def test_command_line_exit_status(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 2.0))
    assert compare.main(["--store", path]) == 1
    assert compare.main(["--store", path, "--noise", "1.5"]) == 0
    assert compare.main(["--store", str(tmp_path / "missing.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().out
    assert compare.main(["--store", path, "--threshold", "-1"]) == 2
