"""A DDP step above its no-overlap bound (bench.report.comm.above_bound, bench.report.bound): on a 2-core CPU DDP x2 took
933 ms against its compute 667 + all-reduce 175 = 842 ms, its probe read 248 ms of exposed communication against the
175 ms all-reduce, and the verdict read 'Communication-bound: 27% ... `./run_bench.sh tune` searches DDP's settings'.
And the bounds table, whose compute and exposed communication did not add up to its step."""
from __future__ import annotations

import dataclasses

import pytest

from bench.report import bound
from bench.report import comm as comm_report
from bench.store import forecasts, store
from test_recommend import build, payload, spec

SIZES_MS = ((2**20, 1.0), (2**26, 20.0), (2**27, 40.0))   # the all-reduce microbenchmark: 20 ms at the 64 MiB of gradients


def _on(device: str, sp):
    return dataclasses.replace(sp, device_type=device)


def _sweep(tmp_path, device: str, step_ms: float, nosync_ms: float, slowdown: float = 1.8, name: str = "s"):
    """single x1 and DDP x2 (its probe's synchronised steps at the measured step, its no_sync() steps at nosync_ms), a
    comm run with the all-reduce rows and, beside computation, the interference rows: computation `slowdown` x slower."""
    comm = {"comm": [{"size_bytes": s, "time_ms": t, "iters": 5, "ranks": 2} for s, t in SIZES_MS],
            "interference": [{"scope": "world", "ranks": 2, "op": "all_reduce", "size_bytes": s, "comm_alone_ms": t,
                              "comm_contended_ms": 2 * t, "comm_slowdown": 2.0, "compute_slowdown": slowdown,
                              "rounds": 5} for s, t in SIZES_MS]}
    path = str(tmp_path / f"{name}-{device}.sqlite")
    sw = build(path, [(_on(device, spec("single", 1)), payload(1, nosync_ms)),
                      (_on(device, spec("ddp", 2)), payload(2, step_ms, nosync_ms=nosync_ms)),
                      (_on(device, spec("ddp", 2, workload="comm", mode="comm")), comm)])
    return sw, path, next(c for c in sw.bench["synthetic"] if c.strategy == "ddp")


def _with_interference(sw, path: str):
    """The sweep with its stored interference rows, as the report reads them (bench.store.forecasts)."""
    conn = store.connect(path, readonly=True)
    try:
        sw.interference = forecasts.read_interference(conn, int(sw.sweep["sweep_id"]))
    finally:
        conn.close()
    return sw


def test_a_cpu_step_above_its_no_overlap_bound_is_contention_for_the_cores_not_a_tune_job(tmp_path):
    sw, path, ddp = _sweep(tmp_path, "cpu", 100.0, 60.0)   # 100 ms against 60 + 20 = 80 ms: above it, every step
    assert comm_report.above_bound(sw, ddp) == pytest.approx((60.0, 20.0, 80.0))
    kind, why = bound.bound(sw, "synthetic", ddp)
    assert kind == "contention (step 25% above its no-overlap bound)" and bound.bound_category(kind) == "contention"
    assert why.startswith("Above its no-overlap bound: the step, 100.00 ms (p10 100.00 ms), takes longer than its compute "
                          "(60.00 ms under no_sync()) and an all-reduce of every gradient (20.00 ms) one after the other, "
                          "80.00 ms: computation and communication slow each other down, contending for the host's cores"), why
    assert "tune" not in why and "Communication-bound" not in why
    # the probe's 40 ms against a 20 ms all-reduce: more than the whole all-reduce, said why
    assert "DDP's probe, 40.00 ms of exposed communication against a 20.00 ms all-reduce, counts that slowdown too" in why
    sw.interference = []                                     # no interference stored: no figure
    assert "measured:" not in bound.bound(sw, "synthetic", ddp)[1]
    assert "contending for the host's cores (measured: computation 1.8x slower beside an all-reduce of 128 MiB at 2 " \
           "ranks)" in why, why                              # the stored rows' figure, at their largest size


def test_on_a_gpu_a_step_above_its_bound_names_the_gpus_contention_or_a_straggler_never_the_cpus_cores(tmp_path):
    sw, path, ddp = _sweep(tmp_path, "cuda", 100.0, 60.0, slowdown=1.2)
    kind, why = bound.bound(_with_interference(sw, path), "synthetic", ddp)
    assert kind.startswith("contention") and "tune" not in why and "host's cores" not in why
    assert "NCCL's kernels share the GPU's SMs and memory bandwidth" in why and "straggler" in why
    assert "computation 1.2x slower beside an all-reduce" in why


def test_a_step_within_its_bound_keeps_its_communication_verdict(tmp_path):
    sw, _, ddp = _sweep(tmp_path, "cpu", 75.0, 55.0)          # 75 ms, not above 55 + 20 = 75 ms
    assert comm_report.above_bound(sw, ddp) is None
    kind, why = bound.bound(sw, "synthetic", ddp)
    assert kind == "communication (27%)" and "tune" in why, (kind, why)   # 20 ms of 75 exposed: DDP's settings may help
    words = " ".join(b[1] for b in comm_report.ddp_bounds_blocks(sw, "synthetic", [ddp], "processes") if b[0] == "p")
    assert "no-overlap bound is slower" in words and "run above it" not in words


def test_the_bounds_table_adds_up_to_the_probes_synchronised_step_and_one_rank_is_not_communication(tmp_path):
    sw, _, ddp = _sweep(tmp_path, "cpu", 100.0, 60.0)
    one = dataclasses.replace(ddp, device_count=1, summary=ddp.summary)   # DDP at one rank: its own work, no all-reduce
    blocks = comm_report.ddp_bounds_blocks(sw, "synthetic", [one, ddp], "processes")
    _, head, rows = next(b for b in blocks if b[0] == "table")
    got = [dict(zip(head, r)) for r in rows]
    for row in got:   # compute + exposed = the probe's synchronised step, as measured apart from the median step
        exposed = row["exposed comm ms"].split("DDP's own work ")[-1].split(" ms")[0]
        assert float(row["compute ms (under no_sync)"]) + float(exposed) == pytest.approx(
            float(row["probe's synchronised step ms"]), abs=0.011)
    assert got[0]["exposed comm ms"] == "– (no communication at 1 rank; DDP's own work 40.00 ms)"
    assert got[1]["exposed comm ms"] == "40.00"
    words = " ".join(b[1] for b in blocks if b[0] == "p")
    assert "add up to the probe's synchronised step, not to the median step" in words
    assert "DDP x2's steps run above it (p10 100.00 ms against 80.00 ms): computation and communication slow each " \
           "other down, contending for the host's cores (measured: computation 1.8x slower" in words   # the store's rows
