"""Review findings 2, 4 and 1's export: the wrapper-overhead cell and the lead column judge one pair by one rule (the
throughput gap against the floor and the noise, one comparison); the export reads the overhead's own verdict and the
recommendation's own rule, not copies of them; a GPU-busy share the report calls a measurement error is no figure in
the export."""
from __future__ import annotations

import math
import sqlite3
from types import SimpleNamespace

import pytest

from bench import results, stats
from bench.forecast import overhead
from bench.report import choice, recommend, tables
from test_choice_round2 import _jittered, _unstable
from test_recommend import build, payload, spec

SWEEP_NOISE = stats.Noise(0.005, "sweep", "this sweep's spread between the 3 processes of single device x1 on this GPU")


def _config(label: str, sps: float, median_ms: float, speedup: float = math.nan, noise: float = math.nan):
    """A stand-in configuration: one steady process at `sps`, median step `median_ms` (p10-p90 0.05 ms wide)."""
    summary = SimpleNamespace(median_ms=median_ms, p10_ms=median_ms - 0.025, p90_ms=median_ms + 0.025,
                              iqr_ms=0.02, unstable=False)
    return SimpleNamespace(label=label, samples_per_s=sps, process_sps=(sps,), noise_fallback=SWEEP_NOISE,
                           summary=summary, speedup=speedup, baseline="single device x1" if speedup == speedup else "",
                           efficiency_noise=noise)


def _pair(dp_sps: float, noise: float = 0.005, dp_ms: float = 3.00, single_ms: float = 3.01):
    single = _config("single device x1", 100.0, single_ms)
    dp = _config("DataParallel x1", dp_sps, dp_ms, speedup=dp_sps / 100.0, noise=noise)
    fallback = stats.Noise(noise, "sweep", SWEEP_NOISE.detail)
    single.noise_fallback = dp.noise_fallback = fallback
    faster, slower = (dp, single) if dp_sps >= 100.0 else (single, dp)
    return dp, single, choice.apart(faster, slower)


def test_the_findings_pair_reads_resolved_in_the_wrapper_cell_as_in_the_lead_column():
    # DataParallel x1 at 105.2 against single's 100 samples/s, medians 3.00 and 3.01 ms: the lead column read 'beyond
    # 0.5% noise, this sweep', the wrapper cell 'not resolved (-4.9% by the windows' throughput ...)' (|1/1.052 - 1| is
    # 4.9%, under the 5% floor; the throughput gap is 5.2%, over it).
    dp, single, a = _pair(105.2)
    assert choice._margin_note(a) == "beyond 0.5% noise, this sweep"
    v = overhead.overhead_verdict(dp, single)
    assert (v.resolved, v.within_noise) == (True, False)
    assert overhead.wrapper_overhead(dp, single) == v.words == "wrapper overhead -4.9% (against single device x1: more time a sample, by the windows' throughput)"


def test_the_noise_is_one_comparison_on_one_gap():
    # 6% faster (a 5.7% shorter step) against a 5.8% noise: the wrapper cell held 5.7% <= 5.8% 'within the noise', the
    # lead column 6% beyond it.
    dp, single, a = _pair(106.0, noise=0.058)
    assert choice._margin_note(a).startswith("beyond 5.8% noise")
    assert overhead.wrapper_overhead(dp, single) == "wrapper overhead -5.7% (against single device x1: more time a sample, by the windows' throughput)"


@pytest.mark.parametrize("dp_sps", [90.0, 95.0, 95.3, 96.0, 99.0, 101.0, 104.0, 104.9, 105.0, 105.2, 106.0, 111.0])
@pytest.mark.parametrize("noise", [0.005, 0.03, 0.0525, 0.058, 0.2])
@pytest.mark.parametrize("dp_ms", [3.00, 3.30])    # median steps alike, and apart
def test_the_wrapper_cell_and_the_lead_column_never_disagree(dp_sps, noise, dp_ms):
    dp, single, a = _pair(dp_sps, noise, dp_ms)
    note, v = choice._margin_note(a), overhead.overhead_verdict(dp, single)
    assert ("the median steps" in v.words) == ("the median steps alike" in note), (note, v.words)
    assert (v.within_noise is True) == note.startswith("within"), (note, v.words)
    assert (v.within_noise is False and not choice.by_floor(a)) == note.startswith("beyond"), (note, v.words)


def test_the_export_calls_an_overhead_the_median_steps_leave_open_neither_within_nor_beyond_the_noise(tmp_path):
    # DataParallel x1 2% slower by its window alone, its median step single's: the cell reads 'not resolved (... by the
    # windows' throughput ...)'; the export's copy of the rule missed that branch and wrote within_noise False.
    runs = [(spec("single", 1, repeat=r), _jittered(1, 10.0, 10.0 * (1 + r * 0.001))) for r in range(3)]
    sweep = build(str(tmp_path / "alike.sqlite"), runs + [(spec("dp", 1), _jittered(1, 10.0, 10.2))])
    row = next(r for r in tables.configurations(sweep) if r["label"] == "DataParallel x1")
    assert row["efficiency_note"].startswith("wrapper overhead not resolved (") and "the median steps" in row["efficiency_note"]
    assert row["efficiency_within_noise"] is None


def test_the_recommendation_cell_is_the_rules_own_not_a_rendered_answer(tmp_path, monkeypatch):
    # DDP x1 unstable, DataParallel x1 faster on one process: the summary's cell reads 'not resolved: --repeats 3 (...)'.
    # The export rendered the whole answer (bound, traces, FSDP beside DDP) per pick to match that string.
    sweep = build(str(tmp_path / "open.sqlite"), [(spec("ddp", 1), _unstable(1, 10.0)), (spec("dp", 1), payload(1, 6.0))])
    expected = recommend.answer(sweep, "synthetic", sweep.bench["synthetic"], "fp32")[0][2]
    monkeypatch.setattr(recommend, "answer", lambda *a, **k: pytest.fail("the export rendered the recommendation"))
    row = next(r for r in tables.configurations(sweep) if r["recommended"])
    assert row["label"] == "DDP x1" and row["recommendation_resolved"] is False
    assert row["recommendation_note"] == expected == "not resolved: --repeats 3 (DDP x1, unstable, or DataParallel x1)"


def test_a_gpu_busy_share_the_report_calls_a_measurement_error_is_empty_with_why(tmp_path):
    # The export wrote the clamped 1.0 where the report read 'GPU busy 103%: over 100%, a measurement error'.
    from report_fixtures import build_h100_store
    path = str(tmp_path / "h100.sqlite")
    build_h100_store(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE traces SET work_ms = steps * 1000.0")   # 1 s of kernels a traced step: far past any step
    conn.commit()
    conn.close()
    c = results.load(path).configurations.set_index("label")
    ddp = c.loc["DDP x1 [bf16]"]
    assert ddp.gpu_busy_share is None or math.isnan(ddp.gpu_busy_share)
    assert ddp.gpu_busy_device
    assert "measurement error" in ddp.gpu_busy_why and ddp.gpu_busy_why.startswith("GPU busy ")
