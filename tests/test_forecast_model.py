"""The forecast's model against hand-computed cases: the two-lane pipeline with and without interference, FSDP's
schedule, the slowest-of-N-ranks term, the interference lookup, the network (NCCL's tree, the per-call constant),
the memory model, and the inputs derived from stored rows (bucket times per repeat)."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from bench.forecast import step as fc
from bench.forecast import inputs as fi
from bench.forecast import interference as itf
from bench.forecast import memory as mm
from bench.forecast import network as nw

COMPUTE = fc.Compute(data_ms=1.0, forward_ms=10.0, backward_ms=20.0, optimizer_ms=5.0)   # 36 ms without sync
SERIAL = itf.assumed("cpu")          # computation stops while a collective runs: the no-overlap bound


def flat(busbw_gbps: float, latency_us: float = 0.0, gpus_per_node: int = 8, backend: str = "gloo") -> nw.Network:
    lv = nw.Level(busbw_gbps, latency_us, "test")
    return nw.Network(lv, lv, gpus_per_node, backend)


# ---------------------------------------------------------------- the pipeline

def test_one_bucket_at_the_end_of_backward_adds_its_whole_all_reduce():
    # 2 ranks at 1 GB/s: 2(n-1)/n * 10 MB / 1 GB/s = 10 ms, sent when backward ends at 20 ms
    step = fc.forecast_ddp(COMPUTE, [fc.Bucket(10e6, 1.0)], flat(1.0), 2)
    assert step.step_ms == pytest.approx(1 + 10 + 30 + 5)
    assert step.exposed_comm_ms == pytest.approx(10.0)
    assert fc.bound_of(step) == "exposed communication"


def test_many_small_buckets_hide_behind_backward_the_local_step_bounds():
    # 4 buckets of 1 ms each, ready at 5, 10, 15, 20 ms: e = 6, 11, 16, 21 -> 1 ms past backward
    buckets = [fc.Bucket(1e6, f) for f in (0.25, 0.5, 0.75, 1.0)]
    step = fc.forecast_ddp(COMPUTE, buckets, flat(1.0), 2)
    assert step.step_ms == pytest.approx(37.0)
    assert fc.bound_of(step) == "local step"        # no term past its share: the one-device step, never "compute"


def test_large_buckets_queue_up_and_with_computation_stopped_every_all_reduce_adds_up():
    # 4 buckets of 10 ms: e = 15, 25, 35, 45 (each waits for the one before), so the step ends 25 ms after backward
    buckets = [fc.Bucket(1e7, f) for f in (0.25, 0.5, 0.75, 1.0)]
    step = fc.forecast_ddp(COMPUTE, buckets, flat(1.0), 2)
    assert step.step_ms == pytest.approx(1 + 10 + 45 + 5)
    assert fc.bound_of(step) == "exposed communication"
    serial = fc.forecast_ddp(COMPUTE, buckets, flat(1.0), 2, SERIAL)
    assert serial.step_ms == pytest.approx(36 + 40)
    assert 36 + 10 <= step.step_ms <= serial.step_ms      # the MG-WFBP bounds: compute + t(last) <= step <= compute + sum t


def test_a_collective_beside_backward_runs_slower_and_stretches_backward_by_the_measured_shares():
    # backward 20 ms; a 10 ms all-reduce ready at 25% (5 ms), another of 10 ms at the end. Both slowdowns 2:
    # from 5 ms the first runs at half speed, 20 ms, while backward does 10 ms of its 15 (t = 25); the last 5 ms of
    # backward alone (t = 30), then the second all-reduce alone (t = 40). Step: 1 + 10 + 40 + 5.
    both = itf.Interference(assumed_comm_x=2.0, assumed_compute_x=2.0)
    step = fc.forecast_ddp(COMPUTE, [fc.Bucket(10e6, 0.25), fc.Bucket(10e6, 1.0)], flat(1.0), 2, both)
    assert step.step_ms == pytest.approx(56.0)
    assert step.stretch_ms == pytest.approx(10.0)       # backward's computation ended at 30 ms, not 20
    free = fc.forecast_ddp(COMPUTE, [fc.Bucket(10e6, 0.25), fc.Bucket(10e6, 1.0)], flat(1.0), 2)
    assert free.step_ms == pytest.approx(46.0)          # no interference: the first hides, the second adds 10


def test_the_pipeline_simulator_orders_each_lane_and_waits_for_what_a_task_needs():
    tasks = [fc.Task("compute", 4.0), fc.Task("comm", 3.0, ((0, "end"),)), fc.Task("compute", 1.0),
             fc.Task("compute", 2.0, ((1, "end"),))]
    spans = fc.simulate(tasks)
    assert spans == [(0.0, 4.0), (4.0, 7.0), (4.0, 5.0), (7.0, 9.0)]
    with pytest.raises(ValueError, match="deadlock"):
        fc.simulate([fc.Task("comm", 1.0, ((1, "end"),)), fc.Task("compute", 1.0, ((0, "end"),))])
    with pytest.raises(ValueError, match="deadlock"):   # over draws alike
        fc.simulate_draws([fc.Task("comm", np.ones(3), ((1, "end"),)), fc.Task("compute", 1.0, ((0, "end"),))])
    start, end = fc.simulate_draws([fc.Task(t.lane, t.work_ms * np.array([1.0, 2.0]), t.after) for t in tasks])
    assert end[0].tolist() == [e for _, e in spans] and end[1].tolist() == [2 * e for _, e in spans]


def test_fsdp_units_gather_ahead_reshard_all_but_the_root_and_step_their_optimizer_on_a_shard():
    # 2 units of 5 MB, 2 ranks at 1 GB/s: every all-gather and reduce-scatter 1/2 * 5 MB / 1 GB/s = 2.5 ms.
    # AG0 0-2.5; fwd0 2.5-7.5 (AG1 2.5-5 behind it); fwd1 7.5-12.5; AG'1 12.5-15 (the root, unit 0, keeps its
    # parameters); bwd1 15-25; RS1 25-27.5 beside bwd0 25-35; RS0 35-37.5. Optimizer 5 / 2 ranks.
    units = [(5e6, 5e6), (5e6, 5e6)]
    step = fc.forecast_fsdp(COMPUTE, units, flat(1.0), 2)
    assert step.step_ms == pytest.approx(1 + 37.5 + 2.5)
    # computation stopped while a collective runs: every one of the 5 collectives adds its 2.5 ms to the 30 of compute
    assert fc.forecast_fsdp(COMPUTE, units, flat(1.0), 2, SERIAL).step_ms == pytest.approx(1 + 30 + 12.5 + 2.5)
    # not resharded after forward: no second all-gather at all
    assert fc.forecast_fsdp(COMPUTE, units, flat(1.0), 2, SERIAL, reshard=False).step_ms == pytest.approx(1 + 30 + 10 + 2.5)


def test_the_slowest_of_n_ranks_is_read_off_the_steps_where_enough_lie_beyond_and_extrapolated_past_them():
    steps = [float(x) for x in range(1, 101)]
    assert fi.tail_excess_ms(steps, 1) == 0.0
    assert fi.tail_excess_ms(steps, 2) == pytest.approx(1 + 0.5 ** 0.5 * 99 - 50.5)   # numpy's linear quantile
    # 1024 ranks: quantile 0.99932, past 100 steps: an exponential tail above the upper quartile (75.25), its scale
    # the median excess of the top 25 steps (12.75) over ln 2
    q = 0.5 ** (1 / 1024)
    assert fi.tail_excess_ms(steps, 1024) == pytest.approx(75.25 + 12.75 / math.log(2) * math.log(0.25 / (1 - q)) - 50.5)
    assert fi.tail_excess_ms(steps, 1024) > fi.tail_excess_ms(steps, 8) > fi.tail_excess_ms(steps, 2)
    assert fi.direct_up_to(100) == 13 and fi.direct_up_to(30) == 3                     # 5 steps beyond the quantile
    assert "read off them up to 3 ranks" in fi.tail_words(30, "x1") and "exponential tail" in fi.tail_words(30, "x1")
    assert fi.tail_excess_ms(steps[:7], 8) == 0.0 and "too few to tell a tail" in fi.tail_words(7, "x1")
    # vectorised over draws: each row its own steps
    rows = np.array([steps, [2 * v for v in steps]])
    assert fi.tail_excess_ms(rows, 1024) == pytest.approx([fi.tail_excess_ms(steps, 1024), 2 * fi.tail_excess_ms(steps, 1024)])
    step = fc.forecast_ddp(COMPUTE, [fc.Bucket(1e6, 1.0)], flat(1.0), 2, sync_ms=3.0)
    assert step.step_ms == pytest.approx(36 + 1 + 3) and step.sync_ms == 3.0


def test_one_slow_step_does_not_set_the_tail_of_a_thousand_ranks():
    # the H100 example read the slowest of 64 and more ranks off the single slowest of x1's 30 steps: one outlier
    # moved its 1024-device forecast from 87% to 78%
    steps = list(100 + 2 * np.random.default_rng(0).standard_normal(30))
    spiked = sorted(steps)[:-1] + [300.0]
    for n in (64, 1024):
        assert abs(fi.tail_excess_ms(spiked, n) - fi.tail_excess_ms(steps, n)) < 2.0     # less than one sd of the steps
        assert fi.tail_excess_ms(spiked, n) < 20.0


def test_the_slowest_of_n_ranks_is_its_own_term_and_bound_never_exposed_communication():
    # 1 ms of communication hidden behind backward; 10 ms of straggler/jitter: the bound says so
    step = fc.forecast_ddp(COMPUTE, [fc.Bucket(1e5, 0.5)], flat(1.0), 2, sync_ms=10.0)
    assert fc.terms(step)["straggler/jitter"] == pytest.approx(10.0)
    assert fc.terms(step)["exposed communication"] == pytest.approx(0.0, abs=1e-9)
    assert fc.bound_of(step) == "straggler/jitter"


def test_ddp_broadcasts_its_buffers_before_forward_on_a_ring():
    # 2 MB at 1 GB/s: S / B = 2 ms (+ 1 step of 100 us)
    step = fc.forecast_ddp(COMPUTE, [fc.Bucket(1e6, 1.0)], flat(1.0, 100.0), 2, buffer_bytes=2e6)
    assert step.step_ms == pytest.approx(36 + (1 + 0.2) + 2.1)


def test_default_buckets_follow_ddp_construction():
    b = fc.default_buckets(60 * 2**20, 25.0)
    assert [x.size_bytes / 2**20 for x in b] == [1, 25, 25, 9]
    assert b[-1].ready_fraction == pytest.approx(1.0)


# ---------------------------------------------------------------- interference, as the forecast reads it

def _inter_rows(ranks: int = 2, nodes: int = 1) -> list:
    """alone = 1 + S/1e6 ms, contended = 5 + 2 S/1e6 ms, the load's loss while it runs = 2 + S/1e6 ms."""
    rows = []
    for s in (2**16, 2**20, 2**22, 2**24):
        alone, contended, lost = 1 + s / 1e6, 5 + 2 * s / 1e6, 2 + s / 1e6
        rows.append({"op": "all_reduce", "ranks": ranks, "nodes": nodes, "size_bytes": s, "comm_alone_ms": alone,
                     "comm_contended_ms": contended, "comm_slowdown": contended / alone,
                     "compute_slowdown": contended / (contended - lost)})
    return rows + [{"op": "co_run", "ranks": ranks, "size_bytes": 0, "compute_slowdown": 1.25}]


def test_interference_lines_are_fitted_over_sizes_and_priced_at_any_size():
    inter = itf.from_rows(_inter_rows(), "cpu", "at 2 ranks")
    s = 3e6
    assert inter.alone_ms("all_reduce", s, 2) == pytest.approx(1 + 3)
    assert inter.comm_x("all_reduce", s, 2) == pytest.approx((5 + 6) / (1 + 3))
    assert inter.compute_x("all_reduce", s, 2) == pytest.approx(11 / (11 - 5))
    assert inter.alone_ms("all_reduce", s, 4) is None          # priced by the network model at counts not measured
    assert inter.comm_x("all_reduce", s, 64) == pytest.approx(11 / 4)   # ...with the nearest count's slowdowns
    assert inter.comm_x("all_gather", s, 2) == pytest.approx(11 / 4)     # a collective not measured: the all-reduce's
    assert inter.co_run_x(2) == 1.25 and inter.co_run_x(1) == 1.0
    assert inter.co_run_x(4, 2) == 1.25 and inter.co_run_x(2, 2) == 1.0   # 2 ranks a node; 1 a node: no core shared
    across = itf.from_rows([{**r, "nodes": 2} for r in _inter_rows()], "cpu")
    assert across.co_run_x(2, 2) == 1.25       # measured across 2 nodes that share cores (the local test cluster)
    assert "interference measured (at 2 ranks)" in inter.words()
    # one noisy size does not steer its bucket: the line through the others holds within a few percent
    noisy = _inter_rows()
    noisy[2] = {**noisy[2], "comm_contended_ms": noisy[2]["comm_contended_ms"] * 0.3}
    assert itf.from_rows(noisy, "cpu").comm_x("all_reduce", 2**22, 2) > 0.5 * inter.comm_x("all_reduce", 2**22, 2)


def test_interference_not_measured_is_assumed_and_says_so():
    assert itf.from_rows([], "cuda").compute_x("all_reduce", 1e6, 8) == 1.0
    assert "assumed none" in itf.from_rows([], "cuda").words()
    cpu = itf.from_rows([], "cpu")
    assert cpu.compute_x("all_reduce", 1e6, 2) == math.inf and "assumed serial" in cpu.words()


def test_a_pipeline_at_a_measured_count_prices_its_collectives_from_the_interference_rows():
    inter = itf.from_rows(_inter_rows(), "cpu")
    net = flat(100.0)      # the network model would say 0.04 ms for 4 MB: the rows say 1 + 4 = 5 ms
    assert fc.collective_ms(net, inter, "all_reduce", 4e6, 2) == pytest.approx(5.0)
    # at a count not measured: the model anchored to the rows (x 5 / 0.04 measured over the model at 2), not the bare
    # model, which would step 125x faster at 4 than the measured 2
    assert fc.collective_ms(net, inter, "all_reduce", 4e6, 4) == pytest.approx(nw.allreduce_ms(net, 4e6, 4) * 5.0 / 0.04)
    across = itf.from_rows(_inter_rows(nodes=2), "cpu")     # measured across 2 nodes of 1: priced there only
    assert fc.collective_ms(flat(100.0, gpus_per_node=1), across, "all_reduce", 4e6, 2) == pytest.approx(5.0)
    assert fc.collective_ms(flat(100.0, gpus_per_node=2), across, "all_reduce", 4e6, 2) == pytest.approx(0.04)


# ---------------------------------------------------------------- the network

def test_two_levels_ring_across_nodes_runs_at_the_slower_level_with_network_latency_on_its_inter_node_steps():
    net = nw.Network(nw.Level(100.0, 1.0, "node"), nw.Level(10.0, 5.0, "net"), gpus_per_node=8, backend="gloo")
    # 16 ranks on 2 nodes: 2*15/16 * 1e8 B / 10 GB/s = 18.75 ms; 30 steps, 2 of them between nodes: 28*1 + 2*5 us
    assert nw.allreduce_ms(net, 1e8, 16) == pytest.approx(18.75 + 0.038)
    assert nw.allreduce_ms(net, 1e8, 8) == pytest.approx(2 * 7 / 8 * 1e8 / 100e9 * 1e3 + 0.014)
    assert nw.allgather_ms(net, 1e8, 8) == pytest.approx((7 / 8 * 1e8 / 100e9 * 1e3) + 0.007)


def test_nccl_tree_carries_ninety_percent_of_ring_bandwidth_times_its_size_correction_and_wins_on_latency():
    net = nw.Network(nw.Level(300.0, 3.0, "node"), nw.Level(300.0, 5.0, "net"), gpus_per_node=8, backend="nccl")
    # 1 GiB: log2(2^30 / 64) = 24, past NCCL's table: factor 1. Tree 2 S / (0.9 B) + 2 (7 * 3 + 7 * 5) us on 128 nodes
    assert nw._tree_ms(net, 2**30, 1024) == pytest.approx(2 * 2**30 / (0.9 * 300e9) * 1e3 + 2 * (7 * 3 + 7 * 5) / 1e3)
    assert nw.tree_correction(2**20) == 0.5 and nw.tree_correction(64) == 0.9 and nw.tree_correction(2**30) == 1.0
    assert nw.allreduce_algorithm(net, 64e3, 1024) == "tree"        # ring: 2046 steps of latency
    assert nw.allreduce_algorithm(net, 1e9, 64) == "ring"           # 8 nodes: ring's bandwidth term beats tree's 0.9
    assert nw.allreduce_algorithm(net, 1e9, 1024) == "tree"         # 128 nodes: 2046 ring steps of latency (NCCL's model too)
    assert nw.allreduce_algorithm(net, 64e3, 8) == "ring"           # one node: ring
    assert nw.allreduce_algorithm(nw.Network(net.node, net.net, 8, "gloo"), 64e3, 1024) == "ring"


def test_fit_separates_a_per_call_constant_from_the_per_step_latency_given_two_counts():
    rng = random.Random(0)
    call_ms, alpha_ms, busbw = 0.2, 0.05, 2.0    # 200 us per call, 50 us per step, 2 GB/s
    rows = [{"ranks": n, "size_bytes": s, "time_ms": (call_ms + 2 * (n - 1) * alpha_ms + 2 * (n - 1) / n * s / (busbw * 1e6))
             * (1 + rng.uniform(-0.02, 0.02))} for n in (2, 4, 8) for s in (4096 * 4**k for k in range(8))]
    lv = nw.fit_level(rows, "test")
    assert lv.busbw_gbps == pytest.approx(busbw, rel=0.05)
    assert lv.call_us == pytest.approx(200.0, rel=0.15) and lv.latency_us == pytest.approx(50.0, rel=0.15)
    one = nw.fit_level([r for r in rows if r["ranks"] == 2], "test")   # one count cannot tell them apart: per step
    assert one.call_us == 0.0 and "one count" in one.source
    assert one.latency_us == pytest.approx((200 + 100) / 2, rel=0.15)


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
    assert levels["net"].busbw_gbps == pytest.approx(5.0) and levels["net"].latency_us == pytest.approx(50.0, rel=0.01)
    fitted = nw.Network(levels["node"], levels["net"], 4, "gloo")
    assert nw.allreduce_ms(fitted, 2**22, 64) == pytest.approx(nw.allreduce_ms(truth, 2**22, 64), rel=0.01)


@pytest.mark.parametrize("text, match", [
    ("infiniband", "neither a preset"), ("net=0@5", "must be above 0"), ("net=nan@5", "not a finite number"),
    ("net=fast@5", "not a number"), ("node=10@-1", "0 or more"), ("net=1@1,net=2@2", "given twice")])
def test_network_text_refuses_bad_levels_naming_them(text, match):
    from bench.config import ConfigError
    with pytest.raises(ConfigError, match=match):
        nw.parse_network(text)


def test_presets_say_their_inter_node_levels_are_assumed_line_rates():
    preset, levels = nw.parse_network("h100,net=25@4")
    assert preset.name == "h100" and levels["net"].busbw_gbps == 25.0
    assert all("assumed" in p.net.source and "line rate" in p.net.source for p in nw.PRESETS.values())
    net = nw.network_for({}, preset, levels, 8, "nccl")
    assert net.node.busbw_gbps == 370.0 and net.net.busbw_gbps == 25.0 and net.assumed() == ["node", "net"]


# ---------------------------------------------------------------- memory per device

def _base(strategy: str = "ddp", count: int = 1, state=None, peak=500.0, units=(), device_type="cpu") -> mm.Base:
    state = state or {"params_mib": 100.0, "grads_mib": 100.0, "optimizer_mib": 100.0, "buckets_mib": 100.0}
    return mm.base_of(strategy, count, {}, state, peak, "test", [u * 2**20 for u in units], device_type, 64.0)


def test_memory_per_device_of_each_strategy_by_hand():
    base = _base(units=(10, 30, 30, 30))           # DDP x1: P = G = O = buckets = 100 MiB, peak 500: the rest 100
    assert base.rest_mib == pytest.approx(100.0)
    assert mm.per_device(base, "ddp", 8, {}).total_mib == pytest.approx(500.0)
    assert mm.per_device(base, "zero", 8, {}).total_mib == pytest.approx(100 + 100 + 12.5 + 100 + 100)
    # FSDP at 8: (P + G + O) / 8 + the root (10) and two others (30 + 30) gathered + the largest unit's gradients (30)
    fsdp = mm.per_device(base, "fsdp", 8, {})
    assert fsdp.total_mib == pytest.approx(3 * 12.5 + (10 + 60 + 30) + 100)
    assert fsdp.parts["gathered units"] == pytest.approx(100.0)
    assert mm.per_device(base, "fsdp", 8, {"reshard": False}).total_mib == pytest.approx(37.5 + (100 + 30) + 100)
    assert mm.per_device(base, "hsdp", 8, {"shard_size": 4}).total_mib == pytest.approx(3 * 25 + 100 + 100)
    # on CPU a rank's RSS peak holds the whole model once before sharding: the check's floor
    assert fsdp.floor_mib == pytest.approx(100 + 100) and fsdp.checked_mib == pytest.approx(fsdp.total_mib)
    strong = mm.per_device(base, "ddp", 8, {}, "strong", samples=16.0)   # a quarter of the samples: a quarter of the rest
    assert strong.parts["activations and the rest (measured)"] == pytest.approx(25.0)


def test_a_sharded_measurement_is_unsharded_before_it_is_forecast():
    state = {"params_mib": 50.0, "grads_mib": 50.0, "optimizer_mib": 50.0, "buckets_mib": 0.0}
    base = _base("fsdp", 2, state, peak=300.0, units=(20, 40, 40))   # FSDP x2: each rank holds half
    assert (base.params_mib, base.optimizer_mib) == (100.0, 100.0)
    # counted at x2: 150 of state and 20 + 80 + 40 gathered: the rest is 300 - 290
    assert base.rest_mib == pytest.approx(10.0)
    zero = _base("zero", 4, {"params_mib": 100.0, "grads_mib": 100.0, "optimizer_mib": 25.0, "buckets_mib": 100.0})
    assert zero.optimizer_mib == 100.0


def test_fit_words_say_where_a_strategy_fits():
    base = _base(units=(10, 30, 30, 30))
    pts = lambda strategy: [mm.per_device(base, strategy, n, {}) for n in (1, 2, 4, 8)]  # noqa: E731
    assert mm.fit_words(pts("ddp"), 600.0, "ddp") == "fits in 600 MiB at every count"
    assert mm.fit_words(pts("ddp"), 400.0, "ddp").startswith("does not fit")
    assert mm.fit_words(pts("fsdp"), 380.0, "fsdp") == "does not fit on one device at this batch; FSDP fits from 2 devices"
    assert mm.fit_words(pts("zero"), 460.0, "zero").endswith("DDP+ZeRO fits from 2 devices")  # the report's name
    assert "no memory budget" in mm.fit_words(pts("ddp"), None, "ddp")


# ---------------------------------------------------------------- inputs from stored rows

def test_bucket_ready_times_are_divided_by_their_own_repeats_backward():
    # two repeats share rank and step numbers; one's backward took 10 ms, the other's 20: bucket 0 at 40% in both
    rows = [{"result_id": rid, "kind": "ddp", "rank": 0, "step": 5, "bucket": b, "size_bytes": 100, "ready_ms": t}
            for rid, times in ((1, (4.0, 10.0)), (2, (8.0, 20.0))) for b, t in enumerate(times)]
    assert fi.bucket_fractions(rows) == [(100.0, pytest.approx(0.4)), (100.0, 1.0)]


def test_memory_inputs_take_the_rank_holding_most_and_the_rss_over_its_baseline():
    rows = [{"result_id": 1, "rank": r, "peak_rss_mib": 700.0 + 10 * r, "baseline_rss_mib": 500.0, "params_mib": 16.0,
             "grads_mib": 16.0, "optimizer_mib": 16.0, "buckets_mib": 16.0, "peak_allocated_mib": None} for r in range(2)]
    state, peak, method = fi.memory(rows)
    assert state["params_mib"] == 16.0 and peak == pytest.approx(210.0) and "RSS" in method


def test_on_cuda_the_device_level_context_and_nccl_included_is_what_the_budget_holds():
    # the allocator peaked at 1000 MiB, nvidia-smi saw the process at 1900: 900 MiB of context, NCCL and cache
    rows = [{"result_id": 1, "rank": 0, "device": "cuda:0", "peak_allocated_mib": 1000.0, "artefact_mib": 0.0,
             "process_used_mib": 1900.0, "params_mib": 100.0, "grads_mib": 100.0, "optimizer_mib": 100.0,
             "buckets_mib": 100.0}]
    state, peaks, method, runtime = fi._memory(rows)
    assert peaks == [1000.0] and runtime == pytest.approx(900.0) and "allocator" in method
    base = mm.base_of("ddp", 1, {}, state, 1000.0, method, [], "cuda", 64.0, runtime)
    m = mm.per_device(base, "ddp", 8, {})
    assert m.total_mib == pytest.approx(1000.0) and m.device_mib == pytest.approx(1900.0)
    assert mm.fits(m, 1500.0) is False                       # the allocator's 1000 would fit; the device level does not
    assert mm.fit_words([m], 1500.0, "ddp").startswith("does not fit")


def test_the_pipeline_over_draws_is_the_pipeline_run_draw_by_draw():
    # FSDP's schedule (gathers issued on a unit's start, reduce-scatters on its end) and DDP's, with every task's time
    # and both slowdowns drawn: numpy over the draws gives each draw's own simulation
    rng = np.random.default_rng(1)
    draws = 7
    compute = fc.Compute(*(v * rng.uniform(0.8, 1.2, draws) for v in (1.0, 10.0, 20.0, 5.0)))
    inter = itf.Interference(assumed_comm_x=2.0, assumed_compute_x=1.5)
    units = [(5e6, 5e6), (3e6, 3e6), (8e6, 8e6)]
    buckets = [fc.Bucket(4e6, rng.uniform(0.2, 0.5, draws)), fc.Bucket(6e6, 1.0)]
    for run in (lambda c, b: fc.forecast_fsdp(c, units, flat(1.0), 4, inter),
                lambda c, b: fc.forecast_ddp(c, b, flat(1.0), 4, inter, sync_ms=2.0)):
        together = run(compute, buckets).step_ms
        for k in range(draws):
            one = fc.Compute(*(float(getattr(compute, f)[k]) for f in ("data_ms", "forward_ms", "backward_ms", "optimizer_ms")))
            alone = run(one, [fc.Bucket(b.size_bytes, float(np.ravel(b.ready_fraction)[k if np.ndim(b.ready_fraction) else 0]))
                              for b in buckets])
            assert together[k] == pytest.approx(alone.step_ms)
