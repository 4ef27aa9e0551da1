"""The forecast agrees with itself and with the report, on hand-made stores (a new user's CPU trial found each of these
wrong): every setting held against the single device x1 the analysis holds it against (activation checkpointing
included), a step that never shrinks from a measured count to the next (the network model anchored to the lone calls
measured), each row's efficiency basis said, and the verdict in the sweep's own unit with a range in plain words."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from bench import cli
from bench.analysis import forecastable
from bench.forecast import network as nw
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.store import store
from bench.sweep import record
from report_fixtures import spec
from test_forecast import COMM_SIZES, _buckets, _memory, _steps, _windows, build_store


def _load(path: str):
    conn = store.connect(path, readonly=True)
    try:
        return forecastable.load(conn, None)
    finally:
        conn.close()


def _machine(ranks: int, lone_x: float) -> dict:
    """The machine at `ranks`: the all-reduce microbenchmark at 100 us per step and 1 GB/s, and the interference run's
    lone call `lone_x` times as long (one call after a lead-in, the wait for the later rank in it), 3x beside the load."""
    t = lambda s: 2 * (ranks - 1) * 0.1 + 2 * (ranks - 1) / ranks * s / 1e6  # noqa: E731
    return {"comm": [{"scope": "world", "ranks": ranks, "size_bytes": s, "time_ms": t(s)} for s in COMM_SIZES],
            "interference": [{"scope": "world", "ranks": ranks, "op": "all_reduce", "size_bytes": s,
                              "comm_alone_ms": lone_x * t(s), "comm_contended_ms": 3 * lone_x * t(s),
                              "comm_slowdown": 3.0, "compute_slowdown": 2.0, "rounds": 5} for s in COMM_SIZES]}


def _ac_store(path: str) -> None:
    """single x1 and DDP x1, x2 without checkpointing (30, 31, 60 ms) and with (45, 46, 70 ms), full checkpointing
    written last, as a sweep with --activation-checkpointing none,full writes it; the machine at x2."""
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_cores": 2})
    sid = store.begin_sweep(conn, "bench --gpus 1,2 --activation-checkpointing none,full", "{}", env_id)
    for ac, (single, x1, x2) in (("none", (30.0, 31.0, 60.0)), ("full", (45.0, 46.0, 70.0))):
        sp = lambda strategy, n: dataclasses.replace(spec("synthetic", strategy, n), activation_checkpointing=ac)  # noqa: E731
        record.record_result(conn, sid, env_id, sp("single", 1), "ok", "",
                             {"grad_bytes": 16e6, "steps": _steps(1, single), "windows": _windows(1, single)})
        for n, step in ((1, x1), (2, x2)):
            record.record_result(conn, sid, env_id, sp("ddp", n), "ok", "", {
                "grad_bytes": 16e6, "steps": _steps(n, step) + _steps(n, 0.6 * step, "probe_no_sync"),
                "windows": _windows(n, step), "buckets": _buckets(n), "memory": _memory(n, 200.0)})
    record.record_result(conn, sid, env_id, spec("allreduce", "comm", 2, mode="comm"), "ok", "", _machine(2, 1.0))
    store.end_sweep(conn, sid, "completed")
    conn.close()


def test_each_setting_is_held_against_the_single_device_x1_of_its_own_activation_checkpointing(tmp_path):
    # The forecast keyed single x1 by precision, layout, compile and optimizer only: with none,full every setting was
    # held against the last one written (ac=full, 45 ms), DDP [fp32] at 62% efficiency where its own baseline gave 44%.
    path = str(tmp_path / "ac.sqlite")
    _ac_store(path)
    f = _load(path)
    m = fo.machine(f.sweep, f.runs)
    ddp = {s.variant: s for s in f.sets if s.strategy == "ddp"}
    assert set(ddp) == {"fp32", "fp32, ac=full"}
    for variant, single_ms in (("fp32", 30.0), ("fp32, ac=full", 45.0)):
        s = ddp[variant]
        assert s.single is not None and s.single.label == s.any.baseline, (variant, s.single and s.single.label)
        assert s.single.summary.median_ms == pytest.approx(single_ms)
        p = fs.point(s, fs.inputs(s, m), 16, m)     # efficiency: steps against this setting's own single x1's step
        assert p.efficiency == pytest.approx(p.samples_per_s / (16 * 64 / (single_ms / 1e3)))


class _Setting:
    label, single, strategy, variant = "w DDP [fp32]", object(), "ddp", "fp32"

    def __init__(self, device_type: str):
        self.any = type("C", (), {"device_type": device_type})()


def _points(lo_draws_stop_at_2: bool) -> list:
    """Efficiency 90% at 2, 4 and 8, 60% at 16; in a third of the draws (lo_draws_stop_at_2) already 60% at 2."""
    out = []
    for n, eff in ((2, 0.9), (4, 0.9), (8, 0.9), (16, 0.6)):
        draws = [eff] * 400
        if lo_draws_stop_at_2:
            draws[:130] = [0.6] * 130
        out.append(fs.Point(count=n, nodes=1, efficiency=eff, bound="exposed communication",
                            draws={"efficiency": np.asarray(draws)}))
    return out


def test_the_verdict_counts_in_the_sweeps_unit_and_says_the_ranges_open_end_plainly():
    # a CPU sweep read 'past 8 GPUs on this network (between no count and 8)'
    text = fo.recommendation(_Setting("cpu"), _points(True))
    assert "past 8 processes on this network (between 1 and 8), scaling stops paying" in text, text
    assert "GPU" not in text and "no count" not in text
    assert "past 8 GPUs on this network (between 1 and 8)" in fo.recommendation(_Setting("cuda"), _points(True))
    one = [dataclasses.replace(p, efficiency=0.6 if p.count == 2 else p.efficiency) for p in _points(False)]
    assert "already at 2 processes on this network" in fo.recommendation(_Setting("cpu"), one)
    # 'below 75% already at 2 ... (at the range's high end it pays up to 8)' read as paying and not in one sentence
    said = fo.recommendation(_Setting("cpu"), one)
    assert "(forecast 60%; at the range's high end at or above 75% up to 8 processes)" in said, said
    assert "pays up to" not in said


def _slow_lone_store(path: str, lone_x: float) -> None:
    """build_store's sweep (single x1, DDP x1 and x2), its machine at x2 with the lone calls lone_x times what the
    network's fit of the microbenchmark says."""
    build_store(path, machine_counts=(), dp=False)
    conn = store.connect(path)
    env_id = conn.execute("SELECT env_id FROM sweeps").fetchone()[0]
    record.record_result(conn, 1, env_id, spec("allreduce", "comm", 2, mode="comm"), "ok", "", _machine(2, lone_x))
    conn.close()


@pytest.mark.parametrize("gpus_per_node", [None, 8])
def test_the_step_never_shrinks_past_a_measured_count_where_the_model_underestimates_the_measured_collective(
        tmp_path, gpus_per_node):
    # x2 was priced from the lone calls measured, 3, 4 and 8 from the network model, which said a quarter of them:
    # a CPU forecast stepped 6.7 ms at x2 and 3.6 at x3, 4.4 at x4 (weak scaling, the same work per rank).
    path = str(tmp_path / "lone.sqlite")
    _slow_lone_store(path, lone_x=4.0)
    f = _load(path)
    m = fo.machine(f.sweep, f.runs, given_gpus_per_node=gpus_per_node)
    s = next(s for s in f.sets if s.strategy == "ddp")
    steps = [p.step_ms for p in fs.series(s, fs.inputs(s, m), (2, 3, 4, 8), m)]
    assert steps == sorted(steps), steps
    # the measured count is still priced by what was measured: x2 as with no model behind it at all
    lone = fo.machine(f.sweep, f.runs, levels={"node": _far_off(), "net": _far_off()}, given_gpus_per_node=gpus_per_node)
    assert fs.point(s, fs.inputs(s, lone), 2, lone).step_ms == pytest.approx(steps[0])
    assert any("anchored to the lone calls measured (4x at x2" in w for w in fs.inputs(s, m).words)


def _far_off():
    """A network level typed far off the measurement (1 MB/s, a second a step): what the lone calls replace at x2."""
    return nw.Level(0.001, 1e6, "typed far off")


def test_a_measured_rows_efficiency_says_its_basis_beside_the_forecasts(tmp_path, capsys):
    # x2 measured read 20% at 8.2 ms beside a forecast x8 at 17% with a shorter step: windows against steps, unmarked
    path = str(tmp_path / "basis.sqlite")
    build_store(path, dp=False)
    assert cli.main(["forecast", "--store", path, "--to", "2,4"]) == 0
    out = capsys.readouterr().out
    block = out.split("synthetic DDP")[1].split("\n\n")[0]
    x2 = [line for line in block.splitlines() if re.match(r"\s+2\s", line)]
    assert "(windows)" in next(line for line in x2 if "measured" in line)
    assert "(windows)" not in next(line for line in x2 if "measured" not in line)
    assert fo.BASIS_WORDS in block
