"""The collectives microbenchmark's rules, in this process: nccl-tests' sizes and bus-bandwidth factors, the
iteration count per size, the CUDA-event timer (through a stand-in device API on a one-rank gloo group) and
which collectives the plan asks for. Two real gloo ranks measure all three in tests/test_fsdp.py."""
from __future__ import annotations

import dataclasses
import time

import pytest
import torch
import torch.distributed as dist

from bench.rank import commbench as cb
from bench.shared.spec import RunSpec

CPU = torch.device("cpu")


def test_sizes_and_bus_factors_follow_nccl_tests():
    # all-gather's S is its output, reduce-scatter's its input: n times what each rank holds after or before
    inp, out, size = cb.buffers("all_gather", 3 * 4096 + 12, 3, CPU)
    assert (inp.numel(), out.numel(), size) == (1025, 3075, 3075 * 4)
    inp, out, size = cb.buffers("reduce_scatter", 3 * 4096, 3, CPU)
    assert (inp.numel(), out.numel(), size) == (3072, 1024, 3072 * 4)
    inp, out, size = cb.buffers("all_reduce", 4096, 3, CPU)
    assert inp is out and size == 4096
    assert cb.bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert cb.bus_factor("all_gather", 4) == cb.bus_factor("reduce_scatter", 4) == pytest.approx(0.75)
    assert cb.bus_bandwidth_gbps(10**9, 1000.0, 4, "all_gather") == pytest.approx((1.0, 0.75))
    with pytest.raises(ValueError, match="'broadcast'"):
        cb.buffers("broadcast", 4096, 2, CPU)


def test_small_messages_get_the_minimum_iterations_and_the_largest_fit_the_budget():
    budget_s = cb.BUDGET_S / len(cb.OPS)
    for probe_s in (2e-6, 15e-6, 3e-4, 1e-3):          # NCCL's and gloo's small messages
        warmups, iters = cb.iterations(probe_s, budget_s)
        assert iters >= cb.MIN_ITERS and iters * probe_s >= cb.MIN_TIMED_S * 0.999
        assert warmups == cb.WARMUP_ITERS - cb.PROBE_CALLS   # nccl-tests' 5 warm-ups, the first call and probes included
        assert (cb.PROBE_CALLS + warmups + iters) * probe_s <= budget_s
    assert cb.iterations(15e-6, budget_s)[1] > 10 * cb.MIN_ITERS     # launches averaged over MIN_TIMED_S, not 20
    assert cb.iterations(0.02, budget_s) == (0, 5)       # 8 calls fit: the first, two probes and 5 timed
    assert cb.iterations(0.4, budget_s) == (0, 1)        # past the budget: one timed call, never none
    assert cb.iterations(0.0, budget_s)[1] >= cb.MIN_ITERS


class Event:
    """Stands in for torch.cuda.Event: remembers how many collectives had run when it was recorded."""

    def __init__(self, api):
        self.api, self.calls, self.stream = api, None, None

    def record(self, stream=None):
        self.calls, self.stream = len(self.api.calls), stream
        self.api.log.append(("record", self.calls))

    def elapsed_time(self, end) -> float:
        assert self.api.log[-1][0] == "synchronize", "an event was read before the host synchronised"
        return 2.0 * (end.calls - self.calls)            # 2 ms per collective between the two events


class API:
    """The device API of bench.rank.timing.CudaAPI, logging records and synchronisations."""

    def __init__(self):
        self.calls, self.log = [], []

    def event(self):
        return Event(self)

    def stream(self, device):
        return f"current stream of {device}"

    def synchronize(self, device):
        self.log.append(("synchronize", len(self.calls)))


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_cuda_events_bracket_exactly_the_timed_collectives(one_rank, monkeypatch):
    api = API()
    run = cb.run_op
    monkeypatch.setattr(cb, "run_op", lambda op, i, o, g: (api.calls.append(op), run(op, i, o, g)))
    timer = cb.make_timer(torch.device("cuda", 0), api)
    assert isinstance(timer, cb.EventTimer) and isinstance(cb.make_timer(CPU), cb.HostTimer)
    row = cb.measure("all_gather", 4096, CPU, None, 1, timer, budget_s=1.0)
    (_, start), (_, end), (_, synced) = api.log            # two events, then one synchronisation, nothing else
    assert api.log[0][0] == api.log[1][0] == "record" and api.log[2][0] == "synchronize"
    assert end - start == row["iters"] and synced == end == len(api.calls)   # the timed loop, all of it, only it
    assert start == cb.WARMUP_ITERS                       # before it: the first call, two probes, the other warm-ups
    assert row["time_ms"] == pytest.approx(2.0) and row["timing"] == "cuda_events"
    assert row["op"] == "all_gather" and row["size_bytes"] == 4096 and row["iters"] >= cb.MIN_ITERS


def test_one_preempted_probe_does_not_cut_the_timed_calls(one_rank, monkeypatch):
    # On a shared machine one call can be descheduled: a single 8 ms probe of a 4 KiB gloo all-reduce once cut
    # its timed calls to 18. The faster of two probes sets the counts.
    calls = []
    run = cb.run_op

    def first_probe_preempted(op, i, o, g):
        calls.append(op)
        if len(calls) == 2:
            time.sleep(0.1)
        run(op, i, o, g)
    monkeypatch.setattr(cb, "run_op", first_probe_preempted)
    row = cb.measure("all_reduce", 4096, CPU, None, 1, cb.make_timer(CPU), budget_s=cb.BUDGET_S / len(cb.OPS))
    assert row["iters"] >= cb.MIN_ITERS, row


def test_every_collective_runs_waited_and_async_without_a_deprecation_warning(one_rank):
    # torch 2.13 deprecated all_gather_into_tensor and reduce_scatter_tensor: every rank's log carried the warning
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for op in cb.OPS:
            inp, out, _ = cb.buffers(op, 4096, 1, CPU)
            assert cb.run_op(op, inp, out, None) is None
            cb.run_op(op, inp, out, None, async_op=True).wait()
            assert torch.equal(out, torch.ones_like(out))   # one rank of ones: every collective gives ones


def test_host_clock_rows_say_so(one_rank):
    rows = cb.collective_sweep(CPU, 4096, ops=("reduce_scatter",), budget_s=0.2)
    assert [(r["scope"], r["op"], r["size_bytes"], r["timing"]) for r in rows] == [("world", "reduce_scatter", 4096, "host_clock")]


def test_a_sweep_with_fsdp_measures_all_gather_and_reduce_scatter_and_one_without_only_all_reduce():
    from bench.config import SweepConfig
    from bench.sweep.plan import Machine, plan
    from bench.sweep.resolve import resolve
    gpu2 = Machine(cuda_devices=2, cpu_cores=8, gpu_names=("H100",) * 2, gpu_capabilities=((9, 0),) * 2)

    def ops(strategies):
        cfg = resolve(SweepConfig(workloads=("synthetic",), strategies=strategies, gpus=(1, 2)), gpu2)
        comm = [s for s in plan(cfg, gpu2) if isinstance(s, RunSpec) and s.mode == "comm"]
        assert len(comm) == 1 and RunSpec.from_json(comm[0].to_json()) == comm[0]
        return comm[0].comm_ops
    assert ops(("ddp",)) == ("all_reduce",)
    assert ops(("ddp", "fsdp")) == cb.OPS


def comm_spec(out_dir) -> RunSpec:
    return RunSpec(workload="allreduce", strategy="comm", device_type="cpu", device_count=1, per_device_batch=0,
                   global_batch=0, image_size=0, steps=0, warmup=0, threads=1, seed=0, scaling="weak", mode="comm",
                   comm_max_bytes=4096, comm_ops=("all_reduce",), interference=True, out_dir=str(out_dir))


def test_an_exception_in_the_interference_stage_keeps_the_bandwidth_rows_and_says_why(one_rank, monkeypatch, tmp_path):
    import json
    from bench.rank import commrun, interference
    from bench.shared.spec import COMM_ROWS_FILE
    groups = []

    def out_of_memory(device, sizes, ops, load_shape=None, scope="world", group=None, api=None, state_bytes=0):
        groups.append(group)
        raise RuntimeError("CUDA out of memory. Tried to allocate 64.00 MiB\nmore lines")
    monkeypatch.setattr(interference, "interference_sweep", out_of_memory)
    out = commrun.comm_run(comm_spec(tmp_path), CPU, world=1, rank=0)
    assert [(r["op"], r["size_bytes"]) for r in out["comm"]] == [("all_reduce", 4096)] and out["comm"][0]["busbw_gbps"] >= 0
    assert out["interference_error"] == "rank 0: RuntimeError: CUDA out of memory. Tried to allocate 64.00 MiB"
    assert "interference" not in out
    assert groups[0] is not None and groups[0] != dist.group.WORLD   # a group of its own: never matched with the gather
    assert json.loads((tmp_path / COMM_ROWS_FILE).read_text()) == out["comm"]   # on disk before the stage began
    assert (tmp_path / commrun.STAGE_ERROR.format(rank=0)).read_text() == out["interference_error"]


def test_a_comm_run_that_failed_in_its_interference_stage_is_kept_with_its_bandwidth_rows(tmp_path):
    import json
    from bench.shared.spec import COMM_ROWS_FILE
    from bench.sweep.diagnose import Outcome
    from bench.sweep.launch import kept_comm_rows
    spec = comm_spec(tmp_path)
    died = Outcome("failed", "rank 1: killed by signal 6 (SIGABRT)", {"log_tail": "watchdog"}, failed_rank=1)
    assert kept_comm_rows(spec, died) is died   # nothing written yet: the microbenchmark itself failed
    rows = [{"scope": "world", "ranks": 2, "op": "all_reduce", "size_bytes": 4096, "time_ms": 0.1, "busbw_gbps": 0.04}]
    (tmp_path / COMM_ROWS_FILE).write_text(json.dumps(rows))
    kept = kept_comm_rows(spec, died)
    assert kept.status == "ok" and kept.payload["comm"] == rows
    assert kept.payload["interference_error"] == "the run failed in it: rank 1: killed by signal 6 (SIGABRT)"
    (tmp_path / "interference-error-rank1.txt").write_text("rank 1: RuntimeError: CUDA out of memory")  # its own, first
    assert kept_comm_rows(spec, died).payload["interference_error"] == (
        "rank 1: RuntimeError: CUDA out of memory; then the run failed in it: rank 1: killed by signal 6 (SIGABRT)")
    bench = RunSpec(**{**spec.__dict__, "mode": "bench", "workload": "synthetic", "strategy": "ddp"})
    assert kept_comm_rows(bench, died) is died
    # stored ok with its rows; the report says the stage failed beside the bandwidth tables
    from bench.analysis import results
    from bench.report import comm
    from bench.store import store
    from bench.sweep import record
    conn = store.connect(str(tmp_path / "s.sqlite"))
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    record.record_result(conn, sid, None, dataclasses.replace(spec, device_count=2), "ok", payload=dict(kept.payload))
    sweep = results.load(conn, sid)
    conn.close()
    assert [n for n, _, r in sweep.comm if r] == [2] and sweep.comm_notes == [(2, kept.payload["interference_error"])]
    text = " ".join(b[1] for b in comm.microbenchmark_blocks(sweep) if b[0] == "p")
    assert "The interference stage (collectives beside computation) at 2 failed: the run failed in it: rank 1" in text
