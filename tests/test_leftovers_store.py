"""Leftovers of the GPU user's read of the committed examples, each on stored rows.

(a) A trace's kernels are held against the traced steps' own wall time (bench.analysis.results sets traced_step_ms on
    each trace row from its result's steps of kind 'profile', that rank's): the H100 DeepLabV3 single x1 fp32 summed
    333.04 ms of kernels over 3 traced steps of 108.35, 108.38 and 108.46 ms, and its report named the 108.0 ms measured
    median instead.
(b) selfcheck's host-noise entry names its workload (bench.commands.selfcheck._noise_entry): it keeps the configuration
    repeated most at each precision, whatever its workload, and an entry without "workload" reads back as the synthetic
    MLP's (bench.store.hostnoise), so a DeepLabV3 figure was kept as the MLP's.
(c) The export gives the GPU's state as the report reads it (bench.report.tables.gpu_state): it wrote
    gpu_throttled=False where the report read 'too few samples (2)', and no power, where the report read 'not updated
    in the window (43 ms)'; each is empty now, with why in the column beside it.
(d) report --memory-budget-gib reaches the forecast section (bench.report.forecast.blocks, to
    bench.forecast.outlook.budget): a page re-budgeted on the command line held its recommendation to the budget typed
    and its forecast to the sweep's own, or the GPU's memory.
(e) Names other modules read from bench.report.report and bench.analysis.results but those modules do not use
    (report.wrapper_text, report.OWN_BASELINE, results.pick_sweep) are re-exported by name, not kept as imports that
    pyflakes flags and a '# noqa' hid from flake8 alone.
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bench.report import pages
from bench.sweep import record
from bench.report import traces as trace_report
from conftest import example_stores

H100 = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"


@pytest.fixture
def deeplabv3(h100_deeplabv3):
    return h100_deeplabv3


def test_trace_rows_carry_their_traced_steps_mean_and_the_report_names_it(deeplabv3, tmp_path):
    c = deeplabv3["single device x1"]
    own = (108.35174704319797 + 108.37878258142155 + 108.46082932094578) / 3   # steps 41-43, kind 'profile', rank 0
    assert [t["traced_step_ms"] for t in c.traces] == [pytest.approx(own)]
    assert c.summary.median_ms == pytest.approx(107.99, abs=0.01)                # not the figure the error is held to
    ddp = deeplabv3["DDP x1"]   # its traced steps: 167.3, 145.1 and 110.5 ms (the warm-up step 71 left out)
    assert ddp.traces[0]["traced_step_ms"] == pytest.approx((167.30438369268086 + 145.10831764957402
                                                             + 110.5123178223148) / 3)
    md = pages.to_markdown(trace_report.blocks(list(deeplabv3.values()), "deeplabv3"), str(tmp_path))
    assert ("single device x1: GPU busy 103% is a measurement error, not a full GPU: 111.0 ms of kernels per traced step "
            "against the 108.0 ms measured median step (102% of the traced steps' own wall time, 108.4 ms)") in md
    assert "against 108.0 ms (measured step)" not in md


def _deeplabv3_bf16_processes(path: str, repeats: tuple) -> None:
    """More processes of the H100 fixture's DeepLabV3 single x1 [bf16] (its steps as the fixture's first one)."""
    from bench.store import store
    from report_fixtures import H100, H100_DEEPLAB, h100_spec, spread_steps
    median, p10, p90 = H100_DEEPLAB[("single", "bf16", False)][:3]
    conn = store.connect(path)
    sid, env_id = conn.execute("SELECT sweep_id, env_id FROM sweeps ORDER BY sweep_id DESC").fetchone()
    for r in repeats:
        ms = [t * (1 + 0.02 * r) for t in spread_steps(median, p10, p90)]
        pl = {"steps": [{"kind": "measure", "rank": 0, "step": i, "step_ms": t} for i, t in enumerate(ms)],
              "windows": [{"kind": "measure", "rank": 0, "wall_s": sum(ms) / 1e3, "samples": 8 * len(ms), "steps": len(ms)}],
              "memory": [{"rank": 0, "device": "cuda:0", "device_name": H100, "peak_allocated_mib": 2559}]}
        record.record_result(conn, sid, env_id, h100_spec("deeplabv3", "single", "bf16", repeat=r), "ok", payload=pl)
    conn.close()


def test_a_host_noise_entry_names_its_workload_and_reads_back_as_it(tmp_path, monkeypatch):
    from bench.commands import selfcheck
    from bench.store import hostnoise
    from report_fixtures import H100, build_h100_store
    monkeypatch.setenv("BENCH_HOST_NOISE", str(tmp_path / "host-noise.json"))
    path = str(tmp_path / "s.sqlite")
    sid = build_h100_store(path, 0.01)          # fp32: the MLP in 3 processes; DeepLabV3 bf16 single x1 in one
    _deeplabv3_bf16_processes(path, (1, 2))     # bf16: DeepLabV3 the configuration repeated, in 3 processes
    _, _, detail = selfcheck.host_noise(path, sid)
    fp32, bf16 = (hostnoise.lookup("vm", "cuda", H100, p) for p in ("fp32", "bf16"))
    assert (fp32["workload"], bf16["workload"]) == ("synthetic", "deeplabv3")   # written, not hostnoise's default
    assert hostnoise.workload(bf16) == "deeplabv3" and hostnoise.workload(fp32) == "synthetic"
    said_bf16 = detail.split("; fp32: ")[0]    # its steps spread 17% (the H100's bf16), so it says so before the workload
    assert said_bf16.startswith("bf16: ") and "of single device x1 [bf16] (all 3 unstable" in said_bf16, detail
    assert "on deeplabv3, on host vm" in said_bf16 and "synthetic MLP" not in said_bf16
    assert "single device x1 on the synthetic MLP, on host vm" in detail


def test_the_export_leaves_empty_what_the_report_does_not_give_and_says_why(tmp_path):
    from bench.commands import export
    from test_gpustate_stale import long_busy, short_stale
    from test_utilisation import MLP_FLOPS, build, payload, rspec
    path = str(tmp_path / "s.sqlite")
    build(path, [(rspec("single", 1), payload(1, 3.2, MLP_FLOPS, gpu_samples=short_stale())),   # 2 samples, 43 ms
                 (rspec("ddp", 1), payload(1, 3.3, MLP_FLOPS, gpu_samples=long_busy()))])      # 67 samples, 3.3 s
    assert export.main(["--store", path, "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "configurations.csv", newline="") as f:
        rows = {r["label"]: r for r in csv.DictReader(f)}
    short, long = rows["single device x1"], rows["DDP x1"]
    assert (short["gpu_throttled"], short["gpu_throttled_why"]) == ("", "too few samples (2)")   # was False
    assert (short["gpu_power_w"], short["gpu_power_why"]) == ("", "not updated in the window (43 ms)")
    assert short["gpu_power_limit_w"] == "700.0" and short["gpu_sm_clock_mhz"] == "1980.0"
    assert (long["gpu_throttled"], long["gpu_throttled_why"]) == ("False", "")                   # 67 samples: a "no"
    assert (float(long["gpu_power_w"]), long["gpu_power_why"]) == (571.0, "")


def test_a_budget_given_to_the_report_holds_its_forecast_too(tmp_path, monkeypatch):
    from bench.report import report
    example_stores(H100, ("selfcheck.sqlite",), tmp_path, monkeypatch)   # the MLP needs 1.58 GiB a GPU at least
    out = report.render(str(tmp_path / "selfcheck.sqlite"), 1, str(tmp_path / "plots"), str(tmp_path / "report"),
                        memory_budget_gib=1.0)
    md = Path(out["markdown"]).read_text()
    assert "Nothing measured fits 1.00 GiB per GPU" in md                  # the recommendation, as before
    ddp = next(line for line in md.splitlines() if line.startswith("synthetic DDP [fp32]:"))
    assert "memory: does not fit in the 1.00 GiB budget (--memory-budget-gib) at any count" in ddp, ddp
    assert "fits in the GPU's" not in md


def test_the_re_exported_names_are_the_defining_modules_own():
    # report.py and results.py keep names other modules and tests read from them: bound by name to the one definition
    # (a '# noqa' import re-exported them, which pyflakes flagged as unused)
    from bench.analysis import results
    from bench.report import efficiency, report
    from bench.store import read
    assert (report.wrapper_text, report.OWN_BASELINE) == (efficiency.wrapper_text, efficiency.OWN_BASELINE)
    assert results.pick_sweep is read.pick_sweep
