"""The interference microbenchmark (bench.rank.interference) against stand-ins whose slowdowns are known, the CUDA
driver's events against a stand-in device API, and the real rows of the session's quick sweep."""
from __future__ import annotations

import json
import re
import sqlite3
import threading
import time

import pytest
import torch

from bench.rank import interference as ri

TICK_S = 0.0005


class Machine:
    """A collective and a load that slow each other by known factors: each is work (ms alone) done in ticks, at
    1/comm_x (the collective) or 1/compute_x (the load) of its speed while the other runs."""

    def __init__(self, comm_ms: float, chunk_ms: float, comm_x: float, compute_x: float):
        self.comm_ms, self.chunk_ms, self.comm_x, self.compute_x = comm_ms, chunk_ms, comm_x, compute_x
        self.loading = threading.Event()
        self.communicating = threading.Event()

    def _work(self, ms: float, slowed: threading.Event, x: float) -> None:
        left, last = ms, time.perf_counter()
        while left > 0:
            time.sleep(min(TICK_S, left / 1e3))    # no sleeping past the work's end when the machine is quiet
            now = time.perf_counter()
            left -= (now - last) * 1e3 / (x if slowed.is_set() else 1.0)
            last = now

    def collective(self, async_op: bool = True):
        done = threading.Event()

        def run():
            self.communicating.set()
            try:
                self._work(self.comm_ms, self.loading, self.comm_x)
            finally:
                self.communicating.clear()
                done.set()
        threading.Thread(target=run, daemon=True).start()

        class Work:
            def wait(self):
                done.wait()
        return Work()

    def chunk(self) -> None:
        self.loading.set()
        try:
            self._work(self.chunk_ms, self.communicating, self.compute_x)
        finally:
            self.loading.clear()


@pytest.mark.parametrize("comm_x, compute_x", [(2.0, 1.5), (1.0, 3.0)])
def test_the_microbenchmark_recovers_known_slowdowns_from_a_stand_in(comm_x, compute_x):
    # The stand-in keeps time with sleeps: on a loaded 2-core machine a sleep wakes milliseconds late, and each of
    # the k chunks' late ends adds to "the load's extra time" (1 in ~11 runs beside three busy loops read 3.0x as
    # 3.5x). Chunks of 20 ms keep k at 10; a reading outside 15% is taken again, up to three times, and every
    # attempt is named if none holds: code that got a ratio wrong fails all three.
    m = Machine(comm_ms=100.0, chunk_ms=20.0, comm_x=comm_x, compute_x=compute_x)
    driver = ri.HostDriver(m.collective, m.chunk)
    tries = []
    for _ in range(3):
        chunk_ms = driver.chunks_ms(5) / 5
        row = ri.measure(driver, chunk_ms, torch.device("cpu"), rounds=3, budget_s=6.0)
        assert row["rounds"] == 3
        kept = json.loads(row["rounds_json"])          # every valid round's raw times, the forecast's spread (store v6)
        assert len(kept) == 3 and sorted(r[0] for r in kept)[1] == pytest.approx(row["comm_alone_ms"])
        got = (row["comm_alone_ms"], row["comm_slowdown"], row["compute_slowdown"])
        tries.append(got)
        if got == pytest.approx((100.0, comm_x, compute_x), rel=0.15):
            return
    pytest.fail(f"(comm alone ms, comm slowdown, compute slowdown) wanted (100, {comm_x}, {compute_x}) within 15%, "
                f"got {tries}")


def test_a_round_whose_collective_outlasts_the_load_does_not_count():
    assert ri.Round(10.0, 30.0, 25.0, 20.0).slowdowns() is None          # the collective ran past the load
    assert ri.Round(10.0, 20.0, 30.0, 20.0).slowdowns() == (2.0, 2.0)    # 20 ms beside it: 10 of 20 ms of load lost
    assert ri.Round(10.0, 20.0, 40.0, 20.0).slowdowns()[1] == ri.STOPPED  # the load made no progress


class FakeEvent:
    def __init__(self, api):
        self.api, self.stream = api, None

    def record(self, stream=None):
        self.stream = stream
        self.api.calls.append(("record", stream))

    def elapsed_time(self, other):
        return self.api.durations[self.stream]


class FakeStreams:
    """The device API with streams; elapsed times per stream are set by the test."""

    def __init__(self):
        self.calls: list = []
        self.durations = {"side": 20.0, "current": 30.0}

    def event(self):
        return FakeEvent(self)

    def stream(self, device):
        return "current"

    def new_stream(self, device):
        return "side"

    def wait_stream(self, stream, other):
        self.calls.append(("wait", stream, other))

    def use(self, stream):
        api = self

        class Use:
            def __enter__(self):
                api.calls.append(("use", stream))

            def __exit__(self, *exc):
                api.calls.append(("leave", stream))
        return Use()

    def synchronize(self, device):
        self.calls.append(("sync",))


def test_the_cuda_driver_runs_the_collective_on_a_side_stream_beside_the_load_and_syncs_once_a_round():
    api, log = FakeStreams(), []
    d = ri.CudaDriver(lambda async_op: log.append(("collective", async_op)), lambda: log.append("chunk"),
                      torch.device("cuda", 0), api, lead=2)
    assert d.together_ms(3) == (20.0, 30.0)
    assert log == ["chunk", "chunk", ("collective", False), "chunk", "chunk", "chunk"]  # lead-in, collective, load
    assert api.calls == [("wait", "side", "current"), ("use", "side"), ("record", "side"), ("record", "side"),
                         ("leave", "side"), ("record", "current"), ("record", "current"), ("sync",)]
    api.calls.clear()
    assert d.alone_ms() == 20.0 and api.calls.count(("sync",)) == 1


class Timeline:
    """A GPU as a timeline: the host issues work at its own pace, each stream runs its work in order once the host
    has issued it, an event fires when its stream reaches it. Issuing the collective costs the host `issue_ms`
    (c10d's work before NCCL's kernel is queued) and issuing a chunk `launch_ms`; nothing contends."""

    def __init__(self, comm_ms: float, chunk_ms: float, issue_ms: float, launch_ms: float = 0.005):
        self.comm_ms, self.chunk_ms, self.issue_ms, self.launch_ms = comm_ms, chunk_ms, issue_ms, launch_ms
        self.host, self.free, self.current = 0.0, {"current": 0.0, "side": 0.0}, "current"

    def _queue(self, ms: float) -> None:
        self.free[self.current] = max(self.host, self.free[self.current]) + ms

    def collective(self, async_op: bool = False) -> None:
        self.host += self.issue_ms
        self._queue(self.comm_ms)

    def chunk(self) -> None:
        self.host += self.launch_ms
        self._queue(self.chunk_ms)

    # the device API (timing.CudaAPI's methods)
    def event(self):
        gpu = self

        class Event:
            def record(self, stream=None):
                self.t = max(gpu.host, gpu.free[stream])
                gpu.free[stream] = self.t

            def elapsed_time(self, other):
                return other.t - self.t
        return Event()

    def stream(self, device):
        return self.current

    def new_stream(self, device):
        return "side"

    def wait_stream(self, stream, other):
        self.free[stream] = max(self.free[stream], self.free[other])

    def use(self, stream):
        gpu = self

        class Use:
            def __enter__(self):
                self.before, gpu.current = gpu.current, stream

            def __exit__(self, *exc):
                gpu.current = self.before
        return Use()

    def synchronize(self, device):
        self.host = max(self.host, *self.free.values())


def test_the_cuda_driver_times_device_work_never_the_hosts_issue_latency():
    # one H100, a one-rank NCCL group: a lone all-reduce read 0.09-0.21 ms and beside the load 0.04-0.15 ms (a
    # "slowdown" of 0.4) while the chunks beside it read 2% slow: each span's start event fired on an idle stream
    # before the host had issued its work. Here issuing the collective takes the host 0.1 ms, its kernel 0.05 ms.
    gpu = Timeline(comm_ms=0.05, chunk_ms=1.0, issue_ms=0.1)
    d = ri.CudaDriver(gpu.collective, gpu.chunk, torch.device("cuda", 0), gpu, lead=2)
    assert d.alone_ms() == pytest.approx(0.05)
    assert d.chunks_ms(4) == pytest.approx(4.0)
    assert d.together_ms(3) == (pytest.approx(0.05), pytest.approx(3.0))
    row = ri.measure(d, chunk_ms=1.0, device=torch.device("cuda", 0), rounds=3)
    assert row["comm_slowdown"] == pytest.approx(1.0) and row["compute_slowdown"] == pytest.approx(1.0)


def test_the_quick_sweep_stores_interference_rows_the_forecast_reads(quick_sweep):
    proc, path = quick_sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT i.op, i.size_bytes, i.comm_alone_ms, i.comm_contended_ms, i.comm_slowdown, "
                        "i.compute_slowdown, i.rounds, i.load, i.ranks FROM interference i JOIN results r USING (result_id) "
                        "WHERE r.mode = 'comm'").fetchall()
    conn.close()
    ops = {r[0] for r in rows}
    assert {"all_reduce", "co_run"} <= ops and all(r[8] == 2 for r in rows)
    measured = [r for r in rows if r[0] == "all_reduce"]
    assert measured and all(r[1] >= ri.MIN_BYTES for r in measured)
    assert all(r[2] > 0 and r[3] > 0 and r[6] >= ri.MIN_ROUNDS for r in measured if r[4] is not None)
    assert any(r[4] is not None for r in measured)
    # the quick sweep's MLP layer, batch 2 x width 128: the collectives' load one GEMM of it, the co-run's (on CPU)
    # layers of it trained in turn, as many as hold the model's parameters
    assert all("GEMM (2 x 128)" in r[7] for r in rows if r[0] != "co_run")
    co = [r[7] for r in rows if r[0] == "co_run"]
    assert co and all(re.fullmatch(r"\d+ layer\(s\) \(2 x 128\) @ \(128 x 128\) trained in turn \(forward, both "
                                   r"gradients, momentum SGD: [\d.]+ MiB of parameters\)", c) for c in co), co


def test_the_cpu_co_run_trains_layers_in_turn_that_hold_the_models_bytes():
    # Two ranks training the MLP (16 MiB) at once took 1.15x in training where one GEMM co-run read 1.01-1.18x: what
    # they share is the working set (weights, gradients, momentum), which one GEMM does not have.
    k = 64
    chunk, layers = ri.training_chunk((8, k), 3 * 4 * k * k + 1, torch.device("cpu"))
    assert layers == 4                                          # as many (k x k) float32 layers as hold the bytes
    w = chunk.weights
    before = [t.clone() for t in w]
    for i in range(layers):
        chunk()
        moved = [not torch.equal(a, b) for a, b in zip(w, before)]
        assert sum(moved) == i + 1                               # one more layer trained at each call, in turn
    assert ri.training_chunk((8, k), 10 * 2**40, torch.device("cpu"))[1] == ri.MAX_CO_RUN_LAYERS   # capped
    assert ri.training_chunk((8, k), 0, torch.device("cpu"))[1] == 1
    row = ri.co_run(ri.HostDriver(lambda async_op: None, chunk), torch.device("cpu"), rounds=3, chunk_ms=0.05,
                    min_chunks=layers)
    assert row["op"] == "co_run" and row["rounds"] == 3 and row["compute_slowdown"] > 0


def test_a_co_run_of_long_rounds_takes_fewer_of_them_and_never_fewer_than_its_minimum():
    # DeepLabV3's 224 MiB make 56 layers of 4.9 ms: a round's half lasts 0.28 s, and 5 of them took 2.8 s a run.
    assert ri.co_rounds(50.0) == ri.ROUNDS                                  # the MLP's short rounds: all of them
    assert ri.co_rounds(ri.CO_RUN_MS / 4) == 4
    assert ri.co_rounds(275.0) == ri.MIN_CO_RUN_ROUNDS == 3
    assert ri.co_rounds(1e6) == ri.MIN_CO_RUN_ROUNDS
    calls = []
    chunk = lambda: calls.append(1) or time.sleep(0.002)  # noqa: E731
    row = ri.co_run(ri.HostDriver(lambda async_op: None, chunk), torch.device("cpu"), chunk_ms=200.0, min_chunks=2)
    assert row["rounds"] == ri.MIN_CO_RUN_ROUNDS and len(calls) == 2 * 2 * ri.MIN_CO_RUN_ROUNDS   # solo + together


class TwoRanks:
    """Two ranks on virtual clocks, rank 1's chunks `skew` slower (a slower GPU: they drift apart over any lead-in),
    nothing contending: the true slowdowns are 1. A collective completes comm_ms after the later rank issues it; the
    driver's figures are rank 0's, the one that waits (the slowest rank's figure, as measure's MAX takes it)."""

    def __init__(self, chunk_ms: float, comm_ms: float, skew: float):
        self.chunk_ms, self.comm_ms, self.speed, self.t = chunk_ms, comm_ms, (1.0, 1.0 + skew), [0.0, 0.0]
        self.timing = "virtual"

    def barrier(self, group=None) -> None:
        self.t = [max(self.t)] * 2

    def lead_in(self, k: int) -> None:
        self.t = [t + k * self.chunk_ms * f for t, f in zip(self.t, self.speed)]

    def chunks_ms(self, k: int) -> float:
        self.lead_in(k)
        return k * self.chunk_ms

    def alone_ms(self) -> float:
        issued, done = self.t[0], max(self.t) + self.comm_ms
        self.t = [done, done]
        return done - issued

    def together_ms(self, k: int) -> tuple:
        issued, done = list(self.t), max(self.t) + self.comm_ms
        self.t = [max(done, t + k * self.chunk_ms * f) for t, f in zip(issued, self.speed)]
        return done - issued[0], k * self.chunk_ms


def test_alone_and_together_are_measured_behind_the_same_lead_in_so_rank_skew_reads_as_no_slowdown(monkeypatch):
    # 8 GPUs drift apart over the lead-in: when only "alone" had it, the collective read 3 ms alone and 2 ms beside
    # the load (a slowdown of 0.67, clamped to none); behind the same lead-in both hold the same wait
    ranks = TwoRanks(chunk_ms=1.0, comm_ms=2.0, skew=0.2)
    monkeypatch.setattr(ri, "_barrier", ranks.barrier)
    row = ri.measure(ranks, chunk_ms=1.0, device=torch.device("cpu"), rounds=3)
    assert row["rounds"] == 3
    assert row["comm_alone_ms"] == pytest.approx(3.0)   # 2 ms + rank 1's 1 ms of drift over the 5 ms lead-in
    assert row["comm_slowdown"] == pytest.approx(1.0) and row["compute_slowdown"] == pytest.approx(1.0)
