"""selfcheck's machine checks (bench.commands.machinecheck) through stand-ins: a fake NVML with processes on
the GPUs, ranks sharing a GPU, and a fake event API whose events disagree with the host's clock."""
from __future__ import annotations

import time
from types import SimpleNamespace

from bench.commands import machinecheck
from bench.sweep import record


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

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):  # NVML index i sits at bus 0x10 + i
        return int(bus_id.split(":")[1], 16) - 0x10

    def nvmlDeviceGetIndex(self, handle):
        return handle


def torch_sees(*nvml_indices) -> list:
    """torch's device properties under CUDA_VISIBLE_DEVICES=<nvml_indices> (PCI ids: NVML index i at bus 0x10 + i)."""
    return [SimpleNamespace(pci_domain_id=0, pci_bus_id=0x10 + i, pci_device_id=0, uuid=f"u{i}") for i in nvml_indices]


def test_other_processes_on_the_gpus_fail_the_check_and_are_listed():
    ok, detail = machinecheck.other_gpu_processes(FakeNVML([[(100, 10)], [(4242, 5120), (100, 10)]]), own_pids=(100,))
    assert not ok and "GPU 1: pid 4242 (python, 5120 MiB)" in detail and "pid 100" not in detail
    assert machinecheck.other_gpu_processes(FakeNVML([[(100, 10)], []]), own_pids=(100,))[0]
    assert not machinecheck.other_gpu_processes(None)[0]  # cannot tell: not a pass


def test_only_the_gpus_this_sweep_sees_are_checked_for_other_processes_in_torchs_numbering():
    # a shared node: another job on NVML GPUs 0 and 2; this sweep runs with CUDA_VISIBLE_DEVICES=3,1
    nvml = FakeNVML([[(4242, 5120)], [], [(777, 100)], []])
    ok, detail = machinecheck.other_gpu_processes(nvml, own_pids=(100,), devices=torch_sees(3, 1))
    assert ok and detail == "no other process on the 2 GPU(s) this sweep uses"
    ok, detail = machinecheck.other_gpu_processes(nvml, own_pids=(100,), devices=torch_sees(2, 1))
    assert not ok and detail.startswith("GPU 0 (NVML 2): pid 777") and "4242" not in detail   # torch's GPU 0 is NVML's 2
    lost = [SimpleNamespace(name="x")]   # neither a PCI bus id nor a UUID NVML knows: cannot tell, not a pass
    assert machinecheck.other_gpu_processes(nvml, devices=lost) == (
        False, "GPU 0 (torch's numbering) not found in NVML by PCI bus id or UUID: cannot tell whether other processes use them")


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
    record.record_result(conn, sid, None, s, "ok", payload={
        "steps": [], "windows": [], "memory": [], "timing_method": "cuda_window_events",
        "rank_devices": [{"rank": r, "host": "n1", "device": "00000000:07:00.0"} for r in (0, 1)]})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    own = [c for c in selfcheck.checks(path) if c[0].startswith("each rank on its own GPU")]
    assert own and own[0][1] is False and "ranks [0, 1]" in own[0][2], own


# ---------------------------------------------------------------- all-reduce bus bandwidth against the links

def gpu(index: int, cc: str = "9.0", gen: int | None = 5, width: int | None = 16) -> dict:
    """One GPU as bench.machine.env records it (the fields the expectation reads)."""
    return {"index": index, "compute_capability": cc, "pcie_gen_max": gen, "pcie_width_max": width,
            "pci_bus_id": f"00000000:{index + 0x10:02X}:00.0"}


def environment(matrix: list, gpus: list, cpu: str = "Intel(R) Xeon(R) Platinum 8480+", nccl: dict | None = None) -> dict:
    return {"topology": {"numbering": "torch", "source": "nvml", "matrix": matrix}, "gpus": gpus, "cpu_model": cpu,
            "nccl_env": nccl or {}}


def comm_rows(peak_gbps: float, op: str | None = None) -> list:
    rows = [{"scope": "world", "size_bytes": s, "busbw_gbps": peak_gbps * f} for s, f in ((2**20, 0.1), (2**28, 1.0))]
    rows.append({"scope": "node", "size_bytes": 2**28, "busbw_gbps": 10 * peak_gbps})  # another scope: not counted
    return [dict(r, op=op) for r in rows] if op else rows


H100_PAIR = environment([["X", "NV18"], ["NV18", "X"]], [gpu(0), gpu(1)])
PCIE4_PAIR = environment([["X", "PIX"], ["PIX", "X"]], [gpu(0, "8.0", 4), gpu(1, "8.0", 4)])
SYS_PAIR = environment([["X", "SYS"], ["SYS", "X"]], [gpu(0, "8.6", 4), gpu(1, "8.6", 4)], cpu="AMD EPYC 7763")


def test_nvlink_h100_pair_expects_60_percent_of_18_links_at_25_gb_s_per_direction():
    from bench.machine import linkspeed
    lk = linkspeed.ring_bottleneck(H100_PAIR["topology"]["matrix"], [0, 1], H100_PAIR["gpus"])
    assert (lk.label, lk.line_gbps, lk.floor_gbps) == ("NV18", 450.0, 270.0) and lk.nvlink
    ok, detail = machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(360.0), H100_PAIR)
    assert ok and "NV18 between GPUs 0-1" in detail and ">= 270.0 GB/s" in detail and "measured 360.0" in detail


def test_nvlink_shortfall_names_the_link_the_transport_settings_and_what_to_check():
    env = dict(H100_PAIR, nccl_env={"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO"})
    ok, detail = machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(22.0), env)
    assert ok is False
    assert "NV18 between GPUs 0-1" in detail and "expected >= 270.0 GB/s busbw" in detail and "measured 22.0 GB/s" in detail
    assert "as if over PCIe or host memory" in detail and "NCCL_P2P_DISABLE=1" in detail
    assert "NCCL_DEBUG" not in detail  # it changes the log, not the transport


def test_pcie_gen4_pair_expects_its_line_rate_share_and_names_a_shortfall():
    from bench.machine import linkspeed
    assert round(linkspeed.pcie_gbps(4, 16), 1) == 31.5 and round(linkspeed.pcie_gbps(5, 16), 1) == 63.0
    ok, detail = machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(22.0), PCIE4_PAIR)
    assert ok and "PIX between GPUs 0-1" in detail and "PCIe gen4 x16" in detail and ">= 18.9 GB/s" in detail
    ok, detail = machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(5.0), PCIE4_PAIR)
    assert ok is False and "below what this PCIe path carries" in detail and "no NCCL setting" in detail


def test_a_path_between_cpu_sockets_expects_the_slower_of_pcie_and_the_socket_link():
    ok, detail = machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(9.0), SYS_PAIR)
    assert ok and "SYS between GPUs 0-1" in detail and "16 GB/s in NCCL's model" in detail and ">= 4.8 GB/s" in detail
    assert machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(2.0), SYS_PAIR)[0] is False


def test_the_ring_goes_over_nvlink_where_it_can_and_its_slowest_link_is_named():
    from bench.machine import linkspeed
    # GPUs 0-1 and 2-3 are NVLink pairs, 1-2 and 3-0 only PCIe: the best ring 0-1-2-3 still crosses PIX twice;
    # 0-2 and 1-3 are SYS, which a ring through PIX avoids.
    m = [["X", "NV4", "SYS", "PIX"], ["NV4", "X", "PIX", "SYS"], ["SYS", "PIX", "X", "NV4"], ["PIX", "SYS", "NV4", "X"]]
    lk = linkspeed.ring_bottleneck(m, [0, 1, 2, 3], [gpu(i, "8.6", 4) for i in range(4)])
    assert lk.label == "PIX" and lk.line_gbps == linkspeed.pcie_gbps(4, 16)
    # Over only the NVLink pair the ring never leaves it
    assert linkspeed.ring_bottleneck(m, [2, 3], [gpu(i, "8.6", 4) for i in range(4)]).label == "NV4"


def test_one_device_has_no_link_and_the_check_says_so_without_failing():
    from bench.machine import linkspeed
    assert linkspeed.ring_bottleneck([["X"]], [0], [gpu(0)]) is None
    ok, detail = machinecheck.allreduce_busbw("cuda", 1, 1, [], H100_PAIR)
    assert ok is None and "no link" in detail and "0 by definition" in detail


def test_cpu_gloo_compares_nothing_and_passes_with_a_bandwidth():
    ok, detail = machinecheck.allreduce_busbw("cpu", 2, 1, comm_rows(0.4), {})
    assert ok and "CPU/gloo: no link to compare" in detail and "0.40 GB/s" in detail
    assert machinecheck.allreduce_busbw("cpu", 2, 1, comm_rows(0.0), {})[0] is False


def test_only_all_reduce_rows_count_when_other_collectives_are_stored():
    rows = comm_rows(300.0) + [dict(r, op="all_gather", busbw_gbps=1.0) for r in comm_rows(1.0)]
    ok, detail = machinecheck.allreduce_busbw("cuda", 2, 1, rows, H100_PAIR)
    assert ok and "measured 300.0" in detail
    assert machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(300.0, op="all_gather"), H100_PAIR)[0] is False


def test_without_a_figure_for_the_link_nothing_is_compared_and_the_detail_says_why():
    no_pcie = environment([["X", "PXB"], ["PXB", "X"]], [gpu(0, gen=None), gpu(1, gen=None)])
    ok, detail = machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(5.0), no_pcie)
    assert ok and "PCIe generation and width not recorded" in detail and "nothing compared" in detail
    assert "nothing compared" in machinecheck.allreduce_busbw("cuda", 2, 1, comm_rows(5.0), {"topology": None})[1]


def test_ranks_are_mapped_to_torch_devices_by_their_pci_bus_ids():
    gpus = [gpu(i) for i in range(4)]
    ranks = [{"rank": 1, "device": gpus[3]["pci_bus_id"]}, {"rank": 0, "device": gpus[2]["pci_bus_id"]}]
    assert machinecheck.torch_indices(ranks, gpus) == [2, 3]
    assert machinecheck.torch_indices(ranks + [{"rank": 2, "device": "elsewhere"}], gpus) is None
