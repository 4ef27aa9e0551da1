"""What the forecast says it rests on, on hand-made stores: the network inside a node named as assumed in its words as on
its plot, a compute run the analysis calls unstable named beside the figures it moves, and the bound a step falls
through to when no term beyond the one-device step counts (the local step, with its measured bound where the caller
gives one)."""
from __future__ import annotations

import pytest

from bench import cli
from bench.analysis import forecastable, results
from bench.forecast import check as fk
from bench.forecast import interference as itf
from bench.forecast import network as nw
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import step as fc
from bench.store import store
from bench.sweep import record
from report_fixtures import spec
from test_forecast import _buckets, _machine, _memory

FRACTIONS = {"data_ms": 0.01, "forward_ms": 0.3, "backward_ms": 0.55, "optimizer_ms": 0.14}
FAST = "node=10000@0.01,net=10000@0.01"     # a network whose collectives hide behind backward: no term counts


def _steps(step_ms: list, kind: str = "measure") -> list:
    return [{"kind": kind, "rank": 0, "step": i, "step_ms": t, "loss": 1.0, **{k: f * t for k, f in FRACTIONS.items()}}
            for i, t in enumerate(step_ms)]


def _windows(step_ms: list) -> list:
    return [{"kind": "measure", "rank": 0, "wall_s": sum(step_ms) / 1e3, "samples": 64 * len(step_ms),
             "steps": len(step_ms)}]


def build(path: str, ddp_x1_ms: list) -> None:
    """One process each of single x1 (12 steps of 30 ms) and DDP x1 (its steps ddp_x1_ms), the machine at 2."""
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_cores": 2})
    sid = store.begin_sweep(conn, "bench --gpus 1", "{}", env_id)
    rec = lambda sp, payload: record.record_result(conn, sid, env_id, sp, "ok", "", {"grad_bytes": 16e6, **payload})  # noqa: E731
    rec(spec("synthetic", "single", 1), {"steps": _steps([30.0] * 12), "windows": _windows([30.0] * 12)})
    rec(spec("synthetic", "ddp", 1), {"steps": _steps(ddp_x1_ms), "windows": _windows(ddp_x1_ms), "buckets": _buckets(1),
                                      "memory": _memory(1, 200.0)})
    record.record_result(conn, sid, env_id, spec("allreduce", "comm", 2, mode="comm"), "ok", "", _machine(2))
    store.end_sweep(conn, sid, "completed")
    conn.close()


def forecast(args: list, capsys) -> tuple:
    rc = cli.main(["forecast", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _loaded(path: str):
    conn = store.connect(path, readonly=True)
    try:
        return forecastable.load(conn, None), results.load(conn, results.pick_sweep(conn, None))
    finally:
        conn.close()


def _table_row(out: str, count: int) -> str:
    block = out.split("synthetic DDP")[1].split("\n\n")[0]
    return next(line for line in block.splitlines() if line.split()[:1] == [str(count)] and "measured;" not in line)


# ---------------------------------------------------------------- the network inside a node, in words

def test_a_one_gpu_sweeps_forecast_names_its_assumed_network_inside_a_node_in_words_as_its_plot_does():
    from bench.report import forecastplots as fp
    one_gpu = fs.Machine(nw.network_for({}, nw.PRESETS["h100"], {}, 8, "nccl"), itf.assumed("cuda"))
    inside = fk.assumed_words(one_gpu, [], (2, 4, 8))       # 2-8 GPUs: one node, on the preset's NVLink figures
    assert "assumed, not measured: interference none and the network inside a node (preset h100):" in inside
    assert "between nodes" not in inside                      # no count of these leaves the node
    assert "and the network between nodes (preset h100)" in fk.assumed_words(one_gpu, [], (2, 64))
    # the plot's legend names what the text names: one list (check.assumed), over the counts the plot draws
    assert fp.assumed_words(one_gpu) == " and ".join(w for w, _ in fk.assumed(one_gpu, fo.DOUBLING))
    assert fp.assumed_words(one_gpu) == "interference and network inside a node and network between nodes"


def test_the_forecast_command_says_a_typed_network_inside_a_node_is_assumed(tmp_path, capsys):
    path = str(tmp_path / "typed.sqlite")
    build(path, [30.0] * 12)
    rc, out, err = forecast(["--store", path, "--to", "2", "--network", "node=370@3", "--gpus-per-node", "8"], capsys)
    assert rc == 0, err
    # the interference is measured at 2: only the typed level inside the node is assumed, the counts stay on one node
    said = next(line for line in out.splitlines() if "assumed, not measured:" in line)
    assert "assumed, not measured: the network inside a node (--network node=370@3): outside the range" in said
    assert "between nodes" not in said


# ---------------------------------------------------------------- an unstable run behind the forecast

UNSTEADY = [20.0, 40.0] * 6     # one process, steps 20 and 40 ms by turns: interquartile range 20 ms of a 30 ms median


def test_a_forecast_resting_on_an_unstable_run_says_so_beside_its_straggler_jitter_term(tmp_path, capsys):
    path = str(tmp_path / "unsteady.sqlite")
    build(path, UNSTEADY)
    _, sweep = _loaded(path)
    ddp_x1 = next(c for c in sweep.bench["synthetic"] if c.strategy == "ddp")
    assert ddp_x1.unstable and len(ddp_x1.process_sps) == 1       # the analysis calls it unstable (the recommendation's flag)
    said = forecastable.unstable_words(ddp_x1)
    assert said.startswith(f"{ddp_x1.label}, unstable: one process (--repeats 3 measures the spread between processes), "
                           f"its steps spread 67% of their median")
    rc, out, err = forecast(["--store", path, "--to", "2,4", "--network", FAST], capsys)
    assert rc == 0, err
    block = out.split("synthetic DDP")[1].split("\n\n")[0]
    assert f"the compute and the straggler/jitter term rest on {said}" in block            # rests on
    assert _table_row(out, 4).endswith("straggler/jitter (unstable run)")                  # the bound it moves
    recommendation = next(line for line in out.splitlines() if line.startswith("  synthetic DDP [fp32]: "))
    assert recommendation.endswith(f"; rests on {said}; its straggler/jitter term is that spread")


def test_a_forecast_resting_on_a_steady_run_names_no_instability(tmp_path, capsys):
    path = str(tmp_path / "steady.sqlite")
    build(path, [30.0] * 12)
    rc, out, err = forecast(["--store", path, "--to", "2,4", "--network", FAST], capsys)
    assert rc == 0, err
    assert "unstable" not in out


def test_the_reports_forecast_section_names_the_unstable_run_it_rests_on(tmp_path):
    from bench.report import forecast as rf
    path = str(tmp_path / "unsteady.sqlite")
    build(path, UNSTEADY)
    _, sweep = _loaded(path)
    said = forecastable.unstable_words(next(c for c in sweep.bench["synthetic"] if c.strategy == "ddp"))
    b = rf.blocks(path, sweep, str(tmp_path / "plots"))
    sentence = next(x[1] for x in b if x[0] == "p" and x[1].startswith("synthetic DDP"))
    assert f"rests on {said}; " in sentence
    rows = next(x[2] for x in b if x[0] == "table" and x[1][0] == "setting" and x[1][1] == "devices")
    rests = next(r[-1] for r in rows if r[0].startswith("synthetic DDP") and r[1] == "rests on")
    assert f"the compute and the straggler/jitter term rest on {said}" in rests


# ---------------------------------------------------------------- the bound a step falls through to

def test_a_step_with_no_term_past_its_share_is_bound_by_the_local_step_with_its_measured_bound_where_given():
    step = fc.Step(ranks=8, step_ms=100.0, compute=fc.Compute(1.0, 30.0, 60.0, 9.0), exposed_comm_ms=1.0, comm_ms=20.0,
                   sync_ms=2.0)
    assert fc.bound_of(step) == "local step"                            # never "compute": the step may be host-bound
    assert fc.bound_of(step, fc.local_bound("host-bound (GPU busy 40%)")) == "local step (host-bound, measured)"
    assert fc.local_bound("") == "local step"


def test_the_forecast_falls_through_to_the_local_step_and_shows_the_bound_its_caller_measured(tmp_path, capsys):
    path = str(tmp_path / "local.sqlite")
    build(path, [30.0] * 12)
    f, _ = _loaded(path)
    m = fs.Machine(nw.network_for({}, None, {"node": nw.Level(10000, 0.01, "typed"), "net": nw.Level(10000, 0.01, "typed")},
                                  8, "nccl"), itf.assumed("cuda"))
    s = next(s for s in f.sets if s.strategy == "ddp")
    assert {p.bound for p in fs.series(s, fs.inputs(s, m), (2, 4), m)} == {"local step"}
    fo.attach_bounds(f.sets, lambda c: "host-bound (GPU busy 40%)")     # a stand-in for the report's measured bound
    inp = fs.inputs(s, m)
    assert {p.bound for p in fs.series(s, inp, (2, 4), m)} == {"local step (host-bound, measured)"}
    assert "the step on one device: host-bound (GPU busy 40%), measured on DDP x1" in "; ".join(inp.words)
    fo.attach_bounds(f.sets, lambda c: "not measured (no kernel traces)")   # nothing measured: nothing claimed
    assert {p.bound for p in fs.series(s, fs.inputs(s, m), (2, 4), m)} == {"local step"}
    # the command passes the report's bound in (bench.report.bound.bound): on CPU what was measured
    from bench.report import bound
    _, sweep = _loaded(path)
    kind = bound.bound(sweep, "synthetic", next(c for c in sweep.bench["synthetic"] if c.strategy == "ddp"))[0]
    rc, out, err = forecast(["--store", path, "--to", "2,4", "--network", FAST], capsys)
    assert rc == 0, err
    assert _table_row(out, 4).endswith(fc.local_bound(kind)), _table_row(out, 4)
    assert f"the step on one device: {kind}, measured on DDP x1" in out
    assert not any(line.rstrip().endswith(" compute") for line in out.splitlines())


@pytest.mark.parametrize("kind", ["compute-bound (GPU busy 94%)", "CPU work (data 1%)"])
def test_the_local_steps_column_keeps_only_the_head_of_the_measured_bound(kind):
    assert fc.local_bound(kind) == f"local step ({kind.split(' (')[0]}, measured)"
