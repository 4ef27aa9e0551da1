"""DDP's probe in the report (bench.report.comm): the compute column is the probe's no_sync() steps as measured, and a
probe whose own steps spread more than its difference is not resolved, however steady the measured steps were."""
from __future__ import annotations

import pytest

from bench.report import bound
from bench.report import comm as comm_report
from test_recommend import build, payload, spec


def _probe(p: dict, sync_ms: list, nosync_ms: list) -> dict:
    p["steps"] = [s for s in p["steps"] if s["kind"] == "measure"]
    p["steps"] += [{"kind": k, "rank": r, "step": 100 + i, "step_ms": ms}
                   for k, values in (("probe_sync", sync_ms), ("probe_no_sync", nosync_ms))
                   for r in range(2) for i, ms in enumerate(values)]
    return p


def test_one_slow_block_of_the_probe_is_not_exposed_communication_and_compute_is_the_no_sync_steps(tmp_path):
    # A CPU trial: a 3.2 ms step, its probe's two synchronised blocks 2.41 and 6.99 ms, no_sync() 1.52-1.69 ms. The
    # difference of medians (4.70 - 1.61 = 3.1 ms) came out 'resolved' against the measured steps' spread and made the
    # step 'communication-bound (94%)' with 0.18 ms of compute (the median step less the difference).
    sw = build(str(tmp_path / "p.sqlite"), [(spec("single", 1), payload(1, 3.0)),
                                            (spec("ddp", 2), _probe(payload(2, 3.2), [2.41, 6.99], [1.52, 1.61, 1.69]))])
    ddp = next(c for c in sw.bench["synthetic"] if c.strategy == "ddp")
    compute, _, _, _ = comm_report.step_bounds_ms(sw, ddp)
    assert compute == pytest.approx(1.61)                      # the no_sync() steps' median, as the column says
    assert comm_report.resolved(ddp) is None                   # 3.1 ms inside the probe's own 2.41-6.99 spread
    words = comm_report.probe_words(ddp)
    assert words.startswith("exposed communication not resolved") and "the probe's own" in words, words
    kind, _ = bound.bound(sw, "synthetic", ddp)
    assert not kind.startswith("communication"), kind


def test_a_steady_probe_beyond_every_spread_is_resolved(tmp_path):
    sw = build(str(tmp_path / "q.sqlite"), [(spec("single", 1), payload(1, 3.0)),
                                            (spec("ddp", 2), _probe(payload(2, 3.2), [3.20, 3.21, 3.22], [1.60, 1.61, 1.62]))])
    ddp = next(c for c in sw.bench["synthetic"] if c.strategy == "ddp")
    assert comm_report.resolved(ddp) == pytest.approx(1.60, abs=0.02)
    assert comm_report.step_bounds_ms(sw, ddp)[0] == pytest.approx(1.61)


def test_a_probe_whose_synchronised_steps_ran_outside_the_measured_ones_does_not_speak_for_them(tmp_path):
    # A CPU transformer: measured steps 8.0-9.0 ms, the probe's synchronised blocks 10.5 and 13.7 ms, no_sync() 6.5-7.3:
    # '5.20 ms exposed, communication-bound (63%)' beside 6.88 ms of compute in an 8.31 ms step.
    p = payload(2, 8.31)
    for i, s in enumerate(x for x in p["steps"] if x["kind"] == "measure"):
        s["step_ms"] = 8.0 + (i % 5) * 0.25
    sw = build(str(tmp_path / "e.sqlite"), [(spec("single", 1), payload(1, 7.5)),
                                            (spec("ddp", 2), _probe(p, [10.5, 13.7], [7.25, 6.52]))])
    ddp = next(c for c in sw.bench["synthetic"] if c.strategy == "ddp")
    assert comm_report.elsewhere(ddp) and comm_report.resolved(ddp) is None
    assert "ran outside the measured steps' 8.00-9.00 ms" in comm_report.probe_words(ddp), comm_report.probe_words(ddp)
    assert not bound.bound(sw, "synthetic", ddp)[0].startswith("communication")


def test_a_compressing_comm_hooks_bounds_price_what_it_sends(tmp_path):
    # bf16 and PowerSGD rows were priced at the uncompressed fp32 all-reduce of the gradients
    from types import SimpleNamespace
    c = lambda hook: SimpleNamespace(grad_mib=64.0, options={"comm_hook": hook} if hook else {})  # noqa: E731
    assert comm_report.sent_bytes(c(None)) == 64 * 2**20 and comm_report.sent_bytes(c("none")) == 64 * 2**20
    assert comm_report.sent_bytes(c("bf16")) == comm_report.sent_bytes(c("fp16")) == 32 * 2**20
    assert comm_report.sent_bytes(c("powersgd:4")) is None


def test_the_all_reduce_bound_is_the_median_of_the_comm_runs_not_the_last(tmp_path):
    # a default CPU sweep's three collectives runs gave the gradients' all-reduce 170.3, 174.6 and 175.6 ms; the bounds
    # table read the last run's 175.6 where the forecast beside it says it rests on medians of rounds
    points = ((2**20, 1.0), (2**24, 10.0), (2**26, 40.0))
    comm = [(spec("ddp", 2, workload="comm", mode="comm", repeat=i),
             {"comm": [{"size_bytes": s, "time_ms": t * k, "iters": 5, "ranks": 2} for s, t in points]})
            for i, k in enumerate((1.0, 2.0, 3.0))]   # the last run is the slowest, the median the middle one
    ddp_run = (spec("ddp", 2), payload(2, 3.2, nosync_ms=2.0))
    bounds = lambda name, runs: comm_report.step_bounds_ms(  # noqa: E731
        sw := build(str(tmp_path / name), runs), next(c for c in sw.bench["synthetic"] if c.strategy == "ddp"))[1]
    middle, last = bounds("all.sqlite", [ddp_run, *comm]), bounds("last.sqlite", [ddp_run, comm[2]])
    alone = bounds("middle.sqlite", [ddp_run, comm[1]])
    assert middle == pytest.approx(alone, rel=1e-6) and middle < last, (middle, alone, last)
