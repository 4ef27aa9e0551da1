"""Comparing two sweeps: ratio, significance, pyperf wording and the exit status."""
from __future__ import annotations

import re

import pytest

from bench import compare, stats, store
from report_fixtures import build_compare_store, noisy_ms

DDP2 = "bench/synthetic/ddp/cpux2/b64/g128/i0/synthetic"
SINGLE = "bench/synthetic/single/cpux1/b64/g64/i0/synthetic"


def line_of(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(key + ":"))


def test_a_2x_slowdown_is_significant_and_fails_over_the_threshold(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 2.0))
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 1
    assert line_of(text, SINGLE).endswith("2.00x slower (REGRESSION)")
    assert float(re.search(r"p=([0-9.e-]+)", line_of(text, SINGLE)).group(1)) < 1e-6
    # DDP x2: ratio and p-value of the raw step times, slowest rank (rank 1 is 1 ms slower, not scaled)
    a = [t + 1 for t in noisy_ms(30, seed=2)]
    b = [2 * t + 1 for t in noisy_ms(30, seed=2)]
    a_sps = 128 / (stats.summarize(a).median_ms / 1000)
    b_sps = 128 / (stats.summarize(b).median_ms / 1000)
    assert line_of(text, DDP2).endswith(f"p={stats.significance(a, b):.3g}: {a_sps / b_sps:.2f}x slower (REGRESSION)")
    assert f"{a_sps:.1f} -> {b_sps:.1f} samples/s" in line_of(text, DDP2)


def test_identical_distributions_are_no_significant_difference_and_pass(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0))
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 0
    assert line_of(text, DDP2).endswith("p=1: no significant difference")
    assert "no significant regression" in text


def test_a_speedup_is_reported_as_faster_and_passes(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 0.5))
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 0 and line_of(text, SINGLE).endswith("2.00x faster")


def test_a_significant_slowdown_below_the_threshold_passes_and_above_fails(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.03))
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 0 and line_of(text, SINGLE).endswith("1.03x slower")
    assert compare.compare(path, None, None, None, 0.01)[1] == 1


def test_two_stores_compare_their_latest_sweeps(tmp_path):
    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    build_compare_store(a, (2.0, 1.0))  # latest sweep of a is the fast one
    build_compare_store(b, (2.0,))
    text, code = compare.compare(a, b, None, None, 0.05)
    assert code == 1 and "baseline: " + a + " sweep 2; candidate: " + b + " sweep 1" in text
    text, code = compare.compare(a, b, 1, None, 0.05)  # pick the slow baseline sweep explicitly
    assert code == 0 and "no significant difference" in line_of(text, SINGLE)


def test_explicit_sweeps_and_configurations_present_on_one_side_only(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0, 2.0))
    text, code = compare.compare(path, None, 1, 2, 0.05)
    assert code == 0 and "sweep 1; candidate" in text and "sweep 2;" in text
    conn = store.connect(path)
    conn.execute("DELETE FROM steps WHERE result_id IN (SELECT result_id FROM results WHERE sweep_id = 3 AND strategy = 'ddp')")
    conn.execute("UPDATE results SET status = 'failed', reason = 'x' WHERE sweep_id = 3 AND strategy = 'ddp'")
    conn.close()
    text, code = compare.compare(path, None, 2, 3, 0.05)
    assert code == 1 and f"{DDP2}: ok in the baseline, failed: x in the candidate (REGRESSION)" in text


def test_a_configuration_that_now_fails_is_a_regression_on_its_own(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 1.0))
    conn = store.connect(path)
    conn.execute("DELETE FROM steps WHERE result_id IN (SELECT result_id FROM results WHERE sweep_id = 2 AND strategy = 'ddp')")
    conn.execute("UPDATE results SET status = 'failed', reason = 'rank 1: out of memory' WHERE sweep_id = 2 AND strategy = 'ddp'")
    conn.close()
    text, code = compare.compare(path, None, None, None, 0.05)
    assert code == 1 and "failed: rank 1: out of memory in the candidate (REGRESSION)" in line_of(text, DDP2)
    assert "no significant difference" in line_of(text, SINGLE)


def test_one_sweep_in_one_store_is_an_error_naming_the_count(tmp_path):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0,))
    with pytest.raises(store.StoreError, match="holds 1"):
        compare.compare(path, None, None, None, 0.05)


def test_command_line_exit_status(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    build_compare_store(path, (1.0, 2.0))
    assert compare.main(["--store", path]) == 1
    assert compare.main(["--store", path, "--threshold", "1.5"]) == 0  # 100% slower is within 150%
    assert compare.main(["--store", str(tmp_path / "missing.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().out
