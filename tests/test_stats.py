"""Statistics are computed from raw values, and say when a result may be unstable."""
from __future__ import annotations

import numpy as np
import pytest

from bench import stats


def test_summary_of_known_values():
    s = stats.summarize([10.0, 11.0, 12.0, 13.0, 14.0])
    assert (s.n, s.median_ms, s.mean_ms) == (5, 12.0, 12.0)
    assert s.p10_ms == pytest.approx(10.4) and s.p90_ms == pytest.approx(13.6)
    assert s.iqr_ms == pytest.approx(2.0)
    # t(0.975, 4) = 2.776; sd = 1.581; half-width = 2.776 * 1.581 / sqrt(5) = 1.963
    assert s.ci95_high_ms - s.mean_ms == pytest.approx(1.963, abs=1e-3)
    assert s.unstable  # IQR 2.0 > 10% of 12.0


def test_tight_values_are_stable():
    assert not stats.summarize([100.0, 101.0, 99.0, 100.5, 100.2]).unstable


def test_slowest_rank_defines_each_step():
    rows = [{"rank": 0, "step": 0, "step_ms": 5}, {"rank": 1, "step": 0, "step_ms": 9},
            {"rank": 0, "step": 1, "step_ms": 7}, {"rank": 1, "step": 1, "step_ms": 6}]
    assert stats.step_times_ms(rows) == [9.0, 7.0]


def test_speedup_and_efficiency():
    assert stats.samples_per_s(32, 250.0) == 128.0
    assert stats.speedup(300.0, 100.0) == 3.0
    assert stats.efficiency(300.0, 100.0, 4) == 0.75


def test_significance_separates_shifted_distributions_only():
    rng = np.random.default_rng(0)
    a = rng.normal(100, 2, 40)
    assert stats.significance(a, rng.normal(100, 2, 40)) > 0.01
    assert stats.significance(a, rng.normal(110, 2, 40)) < 1e-6


def test_window_throughput_is_all_samples_over_the_slowest_ranks_window():
    windows = [{"kind": "measure", "rank": 0, "wall_s": 2.0, "samples": 100}, {"kind": "measure", "rank": 1, "wall_s": 2.5, "samples": 100},
               {"kind": "warmup", "rank": 0, "wall_s": 9.0, "samples": 50}]
    assert stats.window_throughput(windows) == (pytest.approx(80.0), 2.5)
    epochs = [{"kind": f"epoch{e}", "rank": r, "wall_s": 10.0 + r, "samples": 40} for e in range(2) for r in range(2)]
    assert stats.window_throughput(epochs)[0] == pytest.approx(160 / 22.0)


def test_process_comparison_uses_processes_and_says_nothing_with_one_per_side():
    one = stats.compare_processes([100.0], [80.0])
    assert not one.decidable and one.ratio == pytest.approx(0.8) and np.isnan(one.p_slower)
    same = stats.compare_processes([100, 104, 98, 101, 99], [102, 97, 100, 103, 99])
    assert same.decidable and same.p_slower > 0.1 and same.ci95[0] < 1 < same.ci95[1]
    slower = stats.compare_processes([100, 104, 98, 101, 99], [90, 93, 88, 91, 89])
    assert slower.p_slower < 0.001 and slower.ratio == pytest.approx(0.9, abs=0.01) and slower.ci95[1] < 1


def test_holm_keeps_only_what_survives_the_family_correction():
    assert stats.holm({"a": 0.001, "b": 0.03, "c": 0.04}, 0.05) == {"a"}  # 0.03 > 0.05 / 2 stops it
    assert stats.holm({"a": 0.001, "b": 0.02}, 0.05) == {"a", "b"}
    assert stats.holm({"a": float("nan")}, 0.05) == set()


def test_repeat_spread_flags_processes_that_disagree():
    assert stats.repeat_spread([100.0, 120.0, 110.0]) == pytest.approx(20 / 110)
    assert np.isnan(stats.repeat_spread([100.0]))


@pytest.mark.parametrize("df", [1, 2, 4.5, 9, 30])
def test_student_t_is_scipys_t_without_importing_scipy_stats(df):
    from scipy import stats as st
    from bench.stats import student_t
    for q in (0.025, 0.5, 0.95, 0.975, 0.9875):
        assert student_t.ppf(q, df) == pytest.approx(st.t.ppf(q, df), rel=1e-9)
    for t in (-3.0, -0.5, 0.0, 1.2, 4.0):
        assert student_t.cdf(t, df) == pytest.approx(st.t.cdf(t, df), rel=1e-9, abs=1e-15)
        assert student_t.sf(t, df) == pytest.approx(st.t.sf(t, df), rel=1e-9, abs=1e-15)
