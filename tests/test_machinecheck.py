"""selfcheck's machine checks (bench.commands.machinecheck) through stand-ins: a fake NVML with processes on
the GPUs, ranks sharing a GPU, and a fake event API whose events disagree with the host's clock."""
from __future__ import annotations

import time
from types import SimpleNamespace

from bench.commands import machinecheck


class FakeNVML:
    """NVML as pynvml exposes it: GPUs with their running processes."""

    def __init__(self, procs_per_gpu: list):
        self.procs = procs_per_gpu

    def nvmlDeviceGetCount(self):
        return len(self.procs)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=mib * 2**20) for pid, mib in self.procs[handle]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return []

    def nvmlSystemGetProcessName(self, pid):
        return b"python"


def test_other_processes_on_the_gpus_fail_the_check_and_are_listed():
    ok, detail = machinecheck.other_gpu_processes(FakeNVML([[(100, 10)], [(4242, 5120), (100, 10)]]), own_pids=(100,))
    assert not ok and "GPU 1: pid 4242 (python, 5120 MiB)" in detail and "pid 100" not in detail
    assert machinecheck.other_gpu_processes(FakeNVML([[(100, 10)], []]), own_pids=(100,))[0]
    assert not machinecheck.other_gpu_processes(None)[0]  # cannot tell: not a pass


def test_two_ranks_on_one_gpu_fail_the_check():
    same = [{"rank": 0, "host": "n1", "device": "00000000:07:00.0"}, {"rank": 1, "host": "n1", "device": "00000000:07:00.0"}]
    ok, detail = machinecheck.own_devices("k", same)
    assert not ok and "ranks [0, 1] on n1:00000000:07:00.0" in detail
    apart = [dict(same[0]), dict(same[1], device="00000000:0F:00.0"), dict(same[0], rank=2, host="n2")]
    assert machinecheck.own_devices("k", apart)[0]


class FakeEvents:
    """Events whose elapsed time is `scale` x the host's: 1.0 is a correct clock."""

    def __init__(self, scale: float):
        self.scale = scale

    def synchronize(self):
        pass

    def event(self):
        api = self

        class Event:
            def record(self):
                self.t = time.perf_counter()

            def elapsed_time(self, other):
                return (other.t - self.t) * 1e3 * api.scale
        return Event()

    def spin(self, seconds):
        time.sleep(seconds)


def test_event_timing_is_checked_against_the_host_clock_around_known_work():
    assert machinecheck.clock_agreement(FakeEvents(1.0), work_s=0.05)[0]
    assert not machinecheck.clock_agreement(FakeEvents(0.5), work_s=0.05)[0]   # events short of the work
    assert not machinecheck.clock_agreement(FakeEvents(1.5), work_s=0.05)[0]   # events beyond the host's span


def test_selfcheck_fails_a_ddp_run_whose_ranks_shared_a_gpu(tmp_path):
    from bench.commands import selfcheck
    from bench.shared.spec import RunSpec
    from bench.store import store
    s = RunSpec(workload="synthetic", strategy="ddp", device_type="cuda", device_count=2, per_device_batch=10,
                global_batch=20, image_size=0, steps=4, warmup=0, threads=1, seed=0, scaling="weak")
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    store.record_result(conn, sid, None, s, "ok", payload={
        "steps": [], "windows": [], "memory": [], "timing_method": "cuda_window_events",
        "rank_devices": [{"rank": r, "host": "n1", "device": "00000000:07:00.0"} for r in (0, 1)]})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    own = [c for c in selfcheck.checks(path) if c[0].startswith("each rank on its own GPU")]
    assert own and own[0][1] is False and "ranks [0, 1]" in own[0][2], own
