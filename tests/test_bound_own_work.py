"""DDP x1 between bounds: a one-rank DDP step under the compute-bound share only by DDP's own work, as its probe measured
it, is not 'host-bound' with '--compile' advice; and its overhead's figures each say their basis (the H200 afternoon's
self-check: 'wrapper overhead 11.4%', '0.30 ms, 9% of a step', GPU busy 84% against single device x1's 91%)."""
from __future__ import annotations

from pathlib import Path

from bench.report import bound, comm, report
from conftest import example_stores
from test_kineto_traces import _kernel, _step, _write
from test_recommend import build, payload, spec

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27-pm"


def _traced(tmp_path, name: str, kernel_us: float, step_us: float = 10000.0) -> list:
    """Two traced steps of `step_us`, one kernel of `kernel_us` each, on one rank."""
    events = [e for k in range(2) for e in (_step(k + 1, k * step_us, step_us), _kernel("sm90_xmma_gemm", k * step_us + 100, kernel_us))]
    return [{"rank": 0, "device_type": "cuda", "path": _write(tmp_path, name, events)}]


def test_ddp_x1_under_the_threshold_by_its_own_work_is_between_bounds_not_host_bound(tmp_path):
    # 8 ms of kernels in a 10 ms step (busy 80%), 1 ms of it DDP's own work by the probe: 8 / 9 = 89% without it
    ddp = {**payload(1, 10.0, nosync_ms=9.0), "traces": _traced(tmp_path, "d", 8000.0)}
    sw = build(str(tmp_path / "b.sqlite"), [(spec("ddp", 1), ddp)])
    kind, why = bound.bound(sw, "synthetic", sw.bench["synthetic"][0])
    assert kind == "between bounds (GPU busy 80%; DDP's own work 1.00 ms of 10.00)", kind
    assert bound.bound_category(kind) == "between bounds" and "--compile" not in why, why
    assert "without it, 9.00 ms, the GPU is busy 89%, compute-bound" in why, why
    # the same probe beside 5 ms of kernels: 5 / 9 = 56%, the host's work still, and the advice stands
    host = {**payload(1, 10.0, nosync_ms=9.0), "traces": _traced(tmp_path, "h", 5000.0)}
    hs = build(str(tmp_path / "h.sqlite"), [(spec("ddp", 1), host)])
    kind, why = bound.bound(hs, "synthetic", hs.bench["synthetic"][0])
    assert kind.startswith("host-bound (GPU busy 50%") and "--compile" in why, (kind, why)


def test_the_h200_selfchecks_ddp_x1_reads_between_bounds_and_each_overhead_figure_says_its_basis(tmp_path, monkeypatch):
    sweep = example_stores(EXAMPLE, ("selfcheck.sqlite",), tmp_path, monkeypatch)("selfcheck.sqlite", 1)
    by = {c.label: c for c in sweep.bench["synthetic"]}
    ddp, single = by["DDP x1"], by["single device x1"]
    kind, why = bound.bound(sweep, "synthetic", ddp)
    assert kind == "between bounds (GPU busy 84%; DDP's own work 0.30 ms of 3.32)", kind
    assert "--compile" not in why and "the GPU is busy 92%, compute-bound" in why, why
    assert bound.bound(sweep, "synthetic", single)[0] == "GPU-bound (GPU busy 91%, MFU 46.2%)"   # under 50% MFU
    assert comm.probe_words(ddp) == ("DDP's own work at one rank (no communication): 0.30 ms a step by DDP's probe, 9% "
                                     "of its 3.32 ms median step")
    cell = report.efficiency_text(ddp, ".1%", sweep.bench["synthetic"])
    assert cell == "wrapper overhead 11.4% (against single device x1: more time a sample, by the windows' throughput)"
