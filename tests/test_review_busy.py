"""Review mend (findings 1 and 11): the GPU busy share, its 'over 100%' verdict and every figure printed beside them are
of one step, the measured median. Judged against the traced steps' wall time, 111 ms of kernels beside a 108.4 ms
traced step and a 112 ms median read 'GPU busy 99%: over 100%, a measurement error'; beside a 115 ms traced step and a
108 ms median the share was clamped to a silent 'GPU busy 100%'. The traces table's method wording is one table in
the report layer (bench.report.tracewords)."""
from __future__ import annotations

from types import SimpleNamespace

from bench.report import bound, pages, tracewords
from bench.report import traces as trace_report
from bench.report.busy import busy


def _single(work_ms: float, median_ms: float, traced_ms: float) -> SimpleNamespace:
    """A stand-in single-GPU configuration: 3 traced steps of `work_ms` kernels each, `traced_ms` their own wall time."""
    row = {"rank": 0, "span_ms": 3 * traced_ms, "steps": 3, "method": "device_kernels", "work_ms": 3 * work_ms,
           "exposed_comm_ms": 0.0, "compute_share": work_ms / traced_ms, "comm_share": 0.0, "copy_share": 0.0,
           "idle_share": 0.0, "traced_step_ms": traced_ms}
    return SimpleNamespace(summary=SimpleNamespace(median_ms=median_ms, iqr_ms=0.5), traces=[row], label="single x1",
                           device_count=1, exposed_comm_ms=float("nan"))


def test_kernels_under_the_median_but_past_the_traced_step_are_no_over_100_percent():
    b = busy(_single(111.0, 112.0, 108.4))
    assert not b.over and b.error() == ""
    assert b.words() == "GPU busy 99%"
    assert "over 100%" not in bound._compute_sentence(b, "", "w", 0.6)


def test_kernels_past_the_median_but_inside_the_traced_step_are_an_error_not_a_silent_100_percent(tmp_path):
    c = _single(111.0, 108.0, 115.0)
    b = busy(c)
    assert b.over and b.words() == "GPU busy 103%: over 100%, a measurement error"
    assert b.error().startswith("GPU busy 103% is a measurement error, not a full GPU: 111.0 ms of kernels per traced "
                                "step against the 108.0 ms measured median step (97% of the traced steps' own wall "
                                "time, 115.0 ms); likely cause: the kernels fit the traced steps' 115.0 ms but not the "
                                "measured step")
    assert "sum to 103% of a 108.0 ms step" in bound._compute_sentence(b, "", "w", 0.6)
    md = pages.to_markdown(trace_report.blocks([c], "w"), str(tmp_path))
    assert "| single x1 | 0 | kernels | 103% (over 100%: a measurement error) |" in md


def test_a_share_just_past_100_percent_never_prints_as_100_percent():
    b = busy(_single(108.3, 108.0, 110.0))
    assert b.over and b.words() == "GPU busy 100.3%: over 100%, a measurement error"


def test_a_busier_gpu_past_the_step_is_said_not_clamped():
    rows = [{"rank": r, "span_ms": 300.0, "steps": 3, "method": "device_kernels", "work_ms": 3 * w,
             "exposed_comm_ms": 0.0} for r, w in enumerate((105.0, 50.0))]
    b = busy(SimpleNamespace(summary=SimpleNamespace(median_ms=100.0), traces=rows))
    assert not b.over and b.devices["rank 0"] > 1.0
    assert b.words() == "GPU busy 50% (rank 1; rank 0 105%: over 100%, a measurement error)"


def test_the_method_wording_is_one_table_in_the_report_layer():
    from bench.analysis import traces as trace_analysis
    assert not hasattr(trace_analysis, "method_text") and not hasattr(trace_analysis, "METHODS")
    assert not hasattr(trace_report, "Busy") and not hasattr(trace_report, "_mean")
    for method, (cell, how) in tracewords.METHODS.items():
        assert tracewords.read_from(method) == cell and f"('{cell}'" in how
        assert how in tracewords.method_text({method}, set())
