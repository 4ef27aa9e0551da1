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
