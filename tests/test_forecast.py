"""The forecast: the step model against hand-computed cases, the network fit against synthetic timings, the
command on hand-made stores (its table, its check, its refusals) and on one real two-process CPU sweep."""
from __future__ import annotations

import hashlib
import math
import os
import random
import re
import sqlite3

import pytest

from bench import cli
from bench.analysis import forecast as fc
from bench.analysis import network as nw
from bench.config import ConfigError
from bench.store import schema, store
from bench.sweep import record
from conftest import FAST, run_bench
from report_fixtures import spec

COMPUTE = fc.Compute(data_ms=1.0, forward_ms=10.0, backward_ms=20.0, optimizer_ms=5.0)   # 36 ms without sync


def flat(busbw_gbps: float, latency_us: float = 0.0, gpus_per_node: int = 8, backend: str = "gloo") -> nw.Network:
    lv = nw.Level(busbw_gbps, latency_us, "test")
    return nw.Network(lv, lv, gpus_per_node, backend)


# ---------------------------------------------------------------- the model, by hand

def test_one_bucket_at_the_end_of_backward_adds_its_whole_all_reduce():
    # 2 ranks at 1 GB/s: 2(n-1)/n * 10 MB / 1 GB/s = 10 ms, sent when backward ends at 20 ms
    step = fc.forecast_ddp(COMPUTE, [fc.Bucket(10e6, 1.0)], flat(1.0), 2, overlap=True)
    assert step.step_ms == pytest.approx(1 + 10 + 30 + 5)
    assert step.exposed_comm_ms == pytest.approx(10.0)
    assert fc.bound_of(step) == "exposed communication"


def test_many_small_buckets_hide_behind_backward_compute_bound():
    # 4 buckets of 1 ms each, ready at 5, 10, 15, 20 ms: e = 6, 11, 16, 21 -> 1 ms past backward
    buckets = [fc.Bucket(1e6, f) for f in (0.25, 0.5, 0.75, 1.0)]
    step = fc.forecast_ddp(COMPUTE, buckets, flat(1.0), 2, overlap=True)
    assert step.step_ms == pytest.approx(37.0)
    assert fc.bound_of(step) == "compute"


def test_many_large_buckets_queue_up_communication_bound():
    # 4 buckets of 10 ms: e = 15, 25, 35, 45 (each waits for the one before), so the step ends 25 ms after backward
    buckets = [fc.Bucket(1e7, f) for f in (0.25, 0.5, 0.75, 1.0)]
    step = fc.forecast_ddp(COMPUTE, buckets, flat(1.0), 2, overlap=True)
    assert step.step_ms == pytest.approx(1 + 10 + 45 + 5)
    assert fc.bound_of(step) == "exposed communication"
    # without overlap (CPU/gloo): every all-reduce adds up
    serial = fc.forecast_ddp(COMPUTE, buckets, flat(1.0), 2, overlap=False)
    assert serial.step_ms == pytest.approx(36 + 40)
    # the MG-WFBP bounds hold: compute + t(last) <= step <= compute + sum t
    assert 36 + 10 <= step.step_ms <= serial.step_ms


def test_data_wait_larger_than_exposed_communication_is_the_bound():
    compute = fc.Compute(data_ms=30.0, forward_ms=10.0, backward_ms=20.0, optimizer_ms=5.0)
    step = fc.forecast_ddp(compute, [fc.Bucket(1e6, 1.0)], flat(1.0), 2, overlap=True)
    assert fc.bound_of(step) == "data"


def test_two_levels_ring_across_nodes_runs_at_the_slower_level_with_network_latency_on_its_inter_node_steps():
    net = nw.Network(nw.Level(100.0, 1.0, "node"), nw.Level(10.0, 5.0, "net"), gpus_per_node=8, backend="gloo")
    # 16 ranks on 2 nodes: 2*15/16 * 1e8 B / 10 GB/s = 18.75 ms; 30 steps, 2 of them between nodes: 28*1 + 2*5 us
    assert nw.allreduce_ms(net, 1e8, 16) == pytest.approx(18.75 + 0.038)
    # 8 ranks in one node: the node level alone, 14 steps of 1 us
    assert nw.allreduce_ms(net, 1e8, 8) == pytest.approx(2 * 7 / 8 * 1e8 / 100e9 * 1e3 + 0.014)
    # all-gather: half an all-reduce
    assert nw.allgather_ms(net, 1e8, 8) == pytest.approx((7 / 8 * 1e8 / 100e9 * 1e3) + 0.007)


def test_nccl_takes_tree_for_small_messages_on_many_nodes_and_ring_for_large_ones():
    net = nw.Network(nw.Level(300.0, 3.0, "node"), nw.Level(300.0, 5.0, "net"), gpus_per_node=8, backend="nccl")
    assert nw.allreduce_algorithm(net, 64e3, 1024) == "tree"       # ring: 2046 steps of latency
    assert nw.allreduce_algorithm(net, 1e9, 1024) == "ring"        # tree: 0.27 of ring's bandwidth
    assert nw.allreduce_algorithm(net, 64e3, 8) == "ring"          # one node: ring
    gloo = nw.Network(net.node, net.net, 8, "gloo")
    assert nw.allreduce_algorithm(gloo, 64e3, 1024) == "ring"
    assert nw.allreduce_ms(net, 64e3, 1024) < nw._ring_ms(net, 64e3, 1024)


def test_fsdp_one_unit_without_overlap_adds_two_gathers_and_a_reduce_scatter():
    # 2 ranks at 1 GB/s: all-gather / reduce-scatter of 10 MB = 1/2 * 10 MB / 1 GB/s = 5 ms each
    step = fc.forecast_fsdp(COMPUTE, [(10e6, 10e6)], flat(1.0), 2, overlap=False)
    assert step.step_ms == pytest.approx(36 + 15)
    # overlapped, one unit: nothing to prefetch behind, so the same collectives are exposed
    assert fc.forecast_fsdp(COMPUTE, [(10e6, 10e6)], flat(1.0), 2, overlap=True).step_ms == pytest.approx(36 + 15)
    # two units: the second unit's gathers hide behind the first's compute
    two = fc.forecast_fsdp(COMPUTE, [(5e6, 5e6), (5e6, 5e6)], flat(1.0), 2, overlap=True)
    assert 36 + 2.5 < two.step_ms < 36 + 15


def test_default_buckets_follow_ddp_construction():
    b = fc.default_buckets(60 * 2**20, 25.0)
    assert [x.size_bytes / 2**20 for x in b] == [1, 25, 25, 9]
    assert b[-1].ready_fraction == pytest.approx(1.0)


# ---------------------------------------------------------------- the fit

def test_fit_recovers_latency_and_bandwidth_from_synthetic_timings():
    rng = random.Random(0)
    alpha_ms, busbw = 0.05, 2.0    # 50 us per step, 2 GB/s
    rows = []
    for n in (2, 4):
        for size in (4096 * 4**k for k in range(8)):
            t = 2 * (n - 1) * alpha_ms + 2 * (n - 1) / n * size / (busbw * 1e6)
            rows.append({"ranks": n, "size_bytes": size, "time_ms": t * (1 + rng.uniform(-0.03, 0.03))})
    lv = nw.fit_level(rows, "test")
    assert lv.busbw_gbps == pytest.approx(busbw, rel=0.05)
    assert lv.latency_us == pytest.approx(50.0, rel=0.10)
    assert lv.measured and lv.rms_error < 0.05


def test_fit_never_returns_a_negative_latency():
    rows = [{"ranks": 2, "size_bytes": s, "time_ms": s / 1e6 - 0.01} for s in (1e5, 1e6, 1e7)]
    lv = nw.fit_level(rows, "test")
    assert lv.latency_us == 0.0 and lv.busbw_gbps == pytest.approx(1.0, rel=0.05)


def test_rows_across_nodes_fit_the_net_level_and_rows_inside_a_node_the_node_level():
    truth = nw.Network(nw.Level(50.0, 10.0, "node"), nw.Level(5.0, 50.0, "net"), gpus_per_node=4, backend="gloo")
    sizes = (2**16, 2**20, 2**24)
    inside = [{"scope": "node", "ranks": 4, "size_bytes": s, "time_ms": nw.allreduce_ms(truth, s, 4)} for s in sizes]
    across = [{"scope": "world", "ranks": n, "size_bytes": s, "time_ms": nw.allreduce_ms(truth, s, n)}
              for n in (8, 16) for s in sizes]
    levels = nw.levels_from_comm([(4, 1, [dict(r, scope="world") for r in inside]), (8, 2, across[:3] + inside),
                                  (16, 4, across[3:])])
    assert levels["node"].busbw_gbps == pytest.approx(50.0) and levels["node"].latency_us == pytest.approx(10.0)
    assert levels["net"].busbw_gbps == pytest.approx(5.0) and levels["net"].latency_us == pytest.approx(50.0)
    fitted = nw.Network(levels["node"], levels["net"], 4, "gloo")
    assert nw.allreduce_ms(fitted, 2**22, 64) == pytest.approx(nw.allreduce_ms(truth, 2**22, 64))
    assert nw.levels_from_comm([(4, 1, inside)]).keys() == {"node"}


def test_all_gather_and_reduce_scatter_cost_their_own_fit_where_measured_and_half_an_all_reduce_elsewhere():
    comm = [(2, 1, comm_rows(("all_gather",)))]
    net = nw.network_for(nw.levels_from_comm(comm), None, {}, 2, "gloo", own=nw.own_levels(comm))
    a_ms, gbps = OWN["all_gather"]
    assert nw.allgather_ms(net, 16e6, 2) == pytest.approx(a_ms + 8e6 / (gbps * 1e6))             # its own: measured
    assert nw.reduce_scatter_ms(net, 16e6, 2) == pytest.approx(nw.allreduce_ms(net, 16e6, 2) / 2)  # assumed
    assert nw.levels_from_comm(comm)["node"].busbw_gbps == pytest.approx(BUSBW)    # the all-reduce fit ignores them
    gather, scatter = nw.collective_words(net)
    assert gather.startswith("all-gather: node level measured (0.25 GB/s, 300 us per step") and "5 all-gather rows" in gather
    assert scatter.startswith("reduce-scatter: half an all-reduce (assumed")
    # a level the user names is the user's for every collective; a faster network speeds up every collective
    typed = nw.network_for({}, None, {"node": nw.Level(1.0, 100.0, "--network")}, 2, "gloo", own=nw.own_levels(comm))
    assert typed.own == () and nw.allgather_ms(typed, 16e6, 2) == pytest.approx(nw.allreduce_ms(typed, 16e6, 2) / 2)
    across = nw.Network(net.node, net.node, 1, "gloo", own=(("all_gather", "net", nw.Level(0.5, 0.0, "fit")),))
    assert nw.faster_net(across, 4.0, "what-if").levels("all_gather")[1].busbw_gbps == 2.0


@pytest.mark.parametrize("text, match", [
    ("infiniband", "neither a preset"), ("net=0@5", "must be above 0"), ("net=nan@5", "not a finite number"),
    ("net=fast@5", "not a number"), ("node=10@-1", "0 or more"), ("net=1@1,net=2@2", "given twice")])
def test_network_text_refuses_bad_levels_naming_them(text, match):
    with pytest.raises(ConfigError, match=match):
        nw.parse_network(text)


def test_network_text_takes_a_preset_and_overrides():
    preset, levels = nw.parse_network("h100,net=25@4")
    assert preset.name == "h100" and levels["net"].busbw_gbps == 25.0 and levels["net"].latency_us == 4.0
    net = nw.network_for({}, preset, levels, 8, "nccl")
    assert net.node.busbw_gbps == 370.0 and net.net.busbw_gbps == 25.0 and net.assumed() == ["node", "net"]


# ---------------------------------------------------------------- the command on a hand-made store

def _steps(count: int, step_ms: float, kind: str = "measure", n: int = 6) -> list:
    fractions = {"data_ms": 0.05, "forward_ms": 0.3, "backward_ms": 0.5, "optimizer_ms": 0.15}
    return [{"kind": kind, "rank": r, "step": i, "step_ms": step_ms, "loss": 1.0,
             **{k: f * step_ms for k, f in fractions.items()}} for r in range(count) for i in range(n)]


def _windows(count: int, step_ms: float, per_rank: int = 64, n: int = 6) -> list:
    return [{"kind": "measure", "rank": r, "wall_s": n * step_ms / 1e3, "samples": per_rank * n, "steps": n} for r in range(count)]


BUCKETS = ((4e6, 0.4), (12e6, 1.0))        # bytes, ready as a fraction of backward
ALPHA_MS, BUSBW = 0.1, 1.0                # the all-reduce rows: 100 us per step, 1 GB/s
OWN = {"all_gather": (0.3, 0.25), "reduce_scatter": (0.2, 0.5)}   # their own rows: ms per step, GB/s (gloo-like: slow)
COMM_SIZES = (4096, 2**16, 2**20, 2**22, 2**24)


def comm_rows(ops: tuple) -> list:
    """Rows of a 2-rank comm run on the ring model: the all-reduce at ALPHA_MS and BUSBW, the others at OWN."""
    rows = [{"scope": "world", "ranks": 2, "size_bytes": s, "time_ms": 2 * ALPHA_MS + s / (BUSBW * 1e6)} for s in COMM_SIZES]
    return rows + [{"op": op, "scope": "world", "ranks": 2, "size_bytes": s, "time_ms": OWN[op][0] + s / 2 / (OWN[op][1] * 1e6)}
                   for op in ops for s in COMM_SIZES]


def build_fsdp_store(path: str, ops: tuple) -> None:
    """FSDP x1 (30 ms a step, 16 MB of parameters in one unit) and x2, and a comm run at 2 measuring `ops`
    beside the all-reduce."""
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "bench --gpus 1,2 --strategies fsdp", "{}", None)
    rec = lambda sp, payload: record.record_result(conn, sid, None, sp, "ok", "", {"grad_bytes": 16e6, **payload})  # noqa: E731
    rec(spec("synthetic", "fsdp", 1), {"steps": _steps(1, 30.0), "windows": _windows(1, 30.0)})
    rec(spec("synthetic", "fsdp", 2), {"steps": _steps(2, 140.0), "windows": _windows(2, 140.0)})
    record.record_result(conn, sid, None, spec("allreduce", "comm", 2, mode="comm"), "ok", "", {"comm": comm_rows(ops)})
    store.end_sweep(conn, sid, "completed")
    conn.close()


def build_store(path: str, ddp: bool = True, busbw_gbps: float = BUSBW) -> None:
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_cores": 2})
    sid = store.begin_sweep(conn, "bench --gpus 1,2", "{}", env_id)
    rec = lambda sp, payload: record.record_result(conn, sid, env_id, sp, "ok", "", {"grad_bytes": 16e6, **payload})  # noqa: E731
    rec(spec("synthetic", "single", 1), {"steps": _steps(1, 30.0), "windows": _windows(1, 30.0)})
    if ddp:
        buckets = lambda n: [{"kind": "ddp", "rank": r, "step": 0, "bucket": b, "size_bytes": int(s),  # noqa: E731
                              "ready_ms": f * 10, "backward_ms": 10.0} for r in range(n) for b, (s, f) in enumerate(BUCKETS)]
        rec(spec("synthetic", "ddp", 1), {"steps": _steps(1, 30.0) + _steps(1, 29.0, "probe_no_sync"),
                                          "windows": _windows(1, 30.0), "buckets": buckets(1)})
        rec(spec("synthetic", "ddp", 2), {"steps": _steps(2, 60.0) + _steps(2, 35.0, "probe_no_sync"),
                                          "windows": _windows(2, 60.0), "buckets": buckets(2)})
        rec(spec("synthetic", "dp", 2), {"steps": _steps(1, 40.0), "windows": _windows(1, 40.0, 128)})
        comm = spec("allreduce", "comm", 2, mode="comm")
        rows = [{"scope": "world", "ranks": 2, "size_bytes": s, "time_ms": 2 * ALPHA_MS + s / (busbw_gbps * 1e6)}
                for s in (4096, 2**16, 2**20, 2**22, 2**24)]
        record.record_result(conn, sid, env_id, comm, "ok", "", {"comm": rows})
    store.end_sweep(conn, sid, "completed")
    conn.close()


@pytest.fixture
def hand_store(tmp_path) -> str:
    path = str(tmp_path / "hand.sqlite")
    build_store(path)
    return path


def forecast(args: list, capsys) -> tuple:
    """./run_bench.sh forecast ARGS in this process (the dispatcher, its exit status): (status, stdout, stderr)."""
    rc = cli.main(["forecast", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _row(out: str, strategy: str, count: int) -> str:
    block = out.split(f"synthetic {strategy}")[1].split("\n\n")[0]
    return next(line for line in block.splitlines() if re.match(rf"\s+{count}\s", line) and "measured" not in line)


def test_forecast_command_checks_the_measured_count_and_stores_the_error(hand_store, capsys):
    rc, stdout, stderr = forecast(["--store", hand_store, "--to", "2,4"], capsys)
    assert rc == 0, stderr
    # x2 from x1 alone: x1's measured 30 ms + both buckets' all-reduces, serial on CPU: (0.2 + 4) + (0.2 + 12) ms
    forecast_ms = 30 + 4.2 + 12.2
    assert f"forecast {forecast_ms:.2f} ms from x1, measured 60.00 ms: error {forecast_ms / 60 - 1:+.1%}" in stdout
    assert "compute -8%" in stdout            # x1's 30 ms against x2's own 35 ms under no_sync, over 60 ms
    assert "beyond 10%" in stdout and "compute without gradient sync was 35.0 ms" in stdout
    conn = sqlite3.connect(hand_store)
    (err, frm), = conn.execute("SELECT error, from_counts FROM forecasts WHERE strategy = 'ddp'").fetchall()
    assert err == pytest.approx(forecast_ms / 60 - 1) and frm == "1"
    # x4 from every count: x2's no_sync 35 ms; 4 ranks on 2 nodes of 2 (the net level assumed as the node's):
    # per bucket 2*3/4 * S / 1 GB/s + 6 steps of 100 us
    x4 = 35 + sum(1.5 * s / 1e6 + 0.6 for s, _ in BUCKETS)
    assert f"{x4:.1f}" in _row(stdout, "DDP", 4)
    assert "assumed as fast as the node level" in stdout
    assert "buckets: 2 measured" in stdout
    # DataParallel: a line through single x1 (30 ms) and dp x2 (40 ms); it cannot span nodes
    assert "40.0" in _row(stdout, "DataParallel", 2)
    assert "refused: DataParallel is one process" in _row(stdout, "DataParallel", 4)


def test_a_slow_network_named_by_the_user_says_where_scaling_stops_paying(tmp_path, capsys):
    path = str(tmp_path / "fast.sqlite")
    build_store(path, busbw_gbps=100.0)      # inside the node: 30 ms single, 35 ms compute, ~0.2 ms all-reduce
    rc, stdout, stderr = forecast(["--store", path, "--network", "net=0.1@50", "--gpus-per-node", "2"], capsys)
    assert rc == 0, stderr
    assert "--network net=0.1@50" in stdout and "measured inside a node" in stdout
    assert "DDP [fp32]: past 2 GPUs on this network, scaling stops paying (efficiency under 75% at 4)" in stdout
    assert "4x faster inter-node network" in stdout and "100 MiB buckets" in stdout and "bf16 gradients" in stdout


@pytest.mark.parametrize("args, named", [
    (["--network", "infiniband"], "'infiniband'"), (["--network", "net=0@5"], "'0'"),
    (["--network", "node=nan@1"], "'nan'"), (["--network", "net=x@1"], "'x'"),
    (["--to", "16,6.5"], "'6.5'"), (["--to", "0"], "'0'"), (["--gpus-per-node", "0"], "'0'"),
    (["--sweep", "latest"], "'latest'")])
def test_bad_flags_exit_2_naming_the_value_before_the_store_is_read(tmp_path, hand_store, args, named, capsys):
    missing = str(tmp_path / "nothing-here.sqlite")
    before = hashlib.sha256(open(hand_store, "rb").read()).hexdigest()
    for path in (missing, hand_store):
        rc, _, err = forecast(["--store", path, *args], capsys)
        assert rc == 2 and named in err, err
        assert "does not exist" not in err          # the flag, not the store, was refused
    assert not os.path.exists(missing)
    assert hashlib.sha256(open(hand_store, "rb").read()).hexdigest() == before


def test_a_store_without_ddp_is_refused_with_exit_2_and_left_unchanged(tmp_path, capsys):
    path = str(tmp_path / "single.sqlite")
    build_store(path, ddp=False)
    before = hashlib.sha256(open(path, "rb").read()).hexdigest()
    rc, _, err = forecast(["--store", path], capsys)
    assert rc == 2 and "no DDP or FSDP run" in err and "single" in err
    assert hashlib.sha256(open(path, "rb").read()).hexdigest() == before
    rc, _, err = forecast(["--store", str(tmp_path / "absent.sqlite")], capsys)
    assert rc == 2 and "does not exist" in err and not os.path.exists(tmp_path / "absent.sqlite")


@pytest.mark.parametrize("ops", [("all_gather", "reduce_scatter"), ()])
def test_fsdp_forecast_says_whether_its_collectives_were_measured_or_assumed(tmp_path, capsys, ops):
    path = str(tmp_path / "fsdp.sqlite")
    build_fsdp_store(path, ops)
    rc, stdout, stderr = forecast(["--store", path, "--to", "2"], capsys)
    assert rc == 0, stderr
    # x2 from x1 on the CPU (nothing overlaps): 30 ms + two all-gathers (forward, backward) + a reduce-scatter of 16 MB
    if ops:
        ag, rs = (OWN[op][0] + 8e6 / (OWN[op][1] * 1e6) for op in ops)
        assert "all-gather: node level measured" in stdout and "reduce-scatter: node level measured" in stdout
    else:
        ag = rs = ALPHA_MS + 8e6 / (BUSBW * 1e6)                        # half an all-reduce each
        assert "all-gather: half an all-reduce (assumed" in stdout and "reduce-scatter: half an all-reduce (assumed" in stdout
    assert f"forecast {30 + 2 * ag + rs:.2f} ms from x1, measured 140.00 ms" in stdout
    why = "cost what the microbenchmark measured them at" if ops else "were assumed half an all-reduce (none measured"
    assert why in stdout
    conn = sqlite3.connect(path)
    network, = conn.execute("SELECT network FROM forecasts WHERE strategy = 'fsdp'").fetchone()
    assert ("all-gather: node level measured" if ops else "all-gather: half an all-reduce (assumed") in network


def test_a_version_2_store_gains_the_forecast_tables_on_migration(tmp_path):
    path = str(tmp_path / "v2.sqlite")
    build_store(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE buckets")
    conn.execute("DROP TABLE forecasts")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    assert cli.main(["migrate", "--store", path]) == 0
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION == 4
    assert {"buckets", "forecasts"} <= {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == 5


# ---------------------------------------------------------------- one real two-process sweep

def test_a_real_two_process_sweep_stores_bucket_times_and_the_forecast_checks_itself(quick_sweep, tmp_path):
    proc, shared = quick_sweep  # the session's real sweep (conftest): DDP x1 and x2 among its configurations
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = str(tmp_path / "real.sqlite")
    with sqlite3.connect(shared) as src, sqlite3.connect(path) as dst:
        src.backup(dst)  # the forecast writes its check into the store: into a copy, not the shared one
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT r.device_count, b.rank, b.step, b.bucket, b.size_bytes, b.ready_ms, b.backward_ms, r.params "
                        "FROM buckets b JOIN results r USING (result_id) WHERE r.strategy = 'ddp' "
                        "AND r.workload = 'synthetic'").fetchall()
    conn.close()
    assert {(n, rank) for n, rank, *_ in rows} == {(1, 0), (2, 0), (2, 1)}      # every rank of every DDP run
    for n, rank, step in {(n, rank, step) for n, rank, step, *_ in rows}:
        mine = [r for r in rows if r[:3] == (n, rank, step)]
        assert sum(r[4] for r in mine) == mine[0][7] * 4                       # the buckets hold every gradient
        assert all(0 <= r[5] <= r[6] * 1.001 for r in mine)                    # ready inside that backward
    f = run_bench(["forecast", "--store", path, "--to", "4,16"])
    assert f.returncode == 0, f.stderr
    m = re.search(r"synthetic ddp \[fp32\] x2: forecast ([\d.]+) ms from x1, measured ([\d.]+) ms: error ([+-][\d.]+)%", f.stdout)
    assert m, f.stdout
    forecast_ms, measured_ms, err = map(float, m.groups())
    rounding = 100 * forecast_ms / measured_ms * (0.005 / forecast_ms + 0.005 / measured_ms)  # both printed to 0.01 ms
    assert err == pytest.approx((forecast_ms / measured_ms - 1) * 100, abs=0.1 + rounding)
    conn = sqlite3.connect(path)
    stored = conn.execute("SELECT error FROM forecasts WHERE workload = 'synthetic' AND strategy = 'ddp' AND device_count = 2"
                          ).fetchone()[0]
    assert math.isfinite(stored) and stored * 100 == pytest.approx(err, abs=0.1)
    print(f"\nvalidation on this machine: DDP x2 forecast {forecast_ms} ms, measured {measured_ms} ms, error {err:+.1f}%")


def test_the_report_draws_the_forecast_and_its_check(hand_store, tmp_path):
    from bench.report import report
    out = report.render(hand_store, plots_dir=str(tmp_path / "plots"), report_dir=str(tmp_path / "rep"))
    md = open(out["markdown"]).read()
    section = md.split("## Forecast past the measured counts")[1].split("\n## ")[0]
    assert ("synthetic DDP [fp32]: below 75% already at 2 devices on this network; "
            "checked within 23% at the measured counts") in section
    assert os.path.isfile(tmp_path / "plots" / "synthetic_forecast.png") and "synthetic_forecast.png" in section
    assert "| synthetic DDP [fp32] | 2 | 1 | 46.40 | 60.00 | -22.7% | compute without gradient sync was 35.0 ms" in section
    assert "| synthetic DDP [fp32] | 1024 | 512 |" in section
    assert "| synthetic DataParallel [fp32] | 1024 | 512 | – | – | – | DataParallel is one process driving" in section
    assert section.index("Forecast") < md.index("## Environment") if "## Environment" in md else True
