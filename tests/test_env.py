"""Environment capture and GPU identification, on the CPU through stand-ins.

`FakeNVML` stands in for the pynvml module over a 4-GPU machine (NVML indices 0-3, PCI buses
1B, 3B, 86, AF); `torch_view` builds the device properties torch would report under a given
CUDA_VISIBLE_DEVICES. The fake is handed to the code as a parameter, or put in sys.modules as
`pynvml` where the code loads NVML itself.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench.machine import env, gpuinfo

MIB = 2**20
BUSES = [0x1B, 0x3B, 0x86, 0xAF]  # NVML index i sits on PCI bus BUSES[i]
PIX, PXB, SYS = 10, 20, 50  # nvmlGpuTopologyLevel_t


def uuid(i: int) -> str:
    return f"{i:08x}-aaaa-bbbb-cccc-{i:012x}"


class NVMLError(Exception):
    pass


class FakeNVML:
    """pynvml over 4 GPUs. Handles are ('h', nvml_index); `links[i]` lists the far end of each
    active NVLink of GPU i: another NVML index or 'switch'."""
    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 18
    nvmlMemory_v2 = 0x02000028

    def __init__(self, links: dict | None = None, procs: list | None = None):
        self.links = links or {}
        self.procs = procs or []
        self.inits = 0
        # NVML 0,1 under one PCIe switch, 2,3 under another, the two pairs on different sockets.
        self.ancestor = {frozenset(p): lvl for p, lvl in [((0, 1), PIX), ((2, 3), PXB)]}

    def nvmlInit(self):
        self.inits += 1

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        for i, b in enumerate(BUSES):
            if bus_id == f"00000000:{b:02X}:00.0":  # NVML's own form only: proves normalisation
                return ("h", i)
        raise NVMLError("not found")

    def nvmlDeviceGetHandleByUUID(self, u):
        for i in range(4):
            if u == f"GPU-{uuid(i)}":
                return ("h", i)
        raise NVMLError("not found")

    def nvmlDeviceGetIndex(self, h):
        return h[1]

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{uuid(h[1])}".encode()  # older bindings return bytes

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{BUSES[h[1]]:02x}:00.0".encode())

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return {1: 1980, 2: 2619}[clock]

    def nvmlDeviceGetApplicationsClock(self, h, clock):
        return {1: 1755, 2: 2619}[clock]

    def nvmlDeviceGetClockInfo(self, h, clock):
        return 345

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000  # milliwatts

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetEccMode(self, h):
        return [1, 1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5  # what the GPU and its slot can train to

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 1  # idle: the link is lowered to save power

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        return self.ancestor.get(frozenset((h1[1], h2[1])), SYS)

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= len(self.links.get(h[1], [])):
            raise NVMLError("invalid argument")
        return 1

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return 2 if self.links[h[1]][link] == "switch" else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        far = self.links[h[1]][link]
        return SimpleNamespace(busId=f"0000:{BUSES[far]:02x}:00.0".encode())  # legacy form, lower case

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        used = (2000 + h[1]) * MIB if version == self.nvmlMemory_v2 else (2500 + h[1]) * MIB
        return SimpleNamespace(total=80 * 1024 * MIB, used=used, free=80 * 1024 * MIB - used)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=b) for pid, b in self.procs]


def torch_view(visible: list[int], pci: bool = True) -> list:
    """Device properties torch reports with CUDA_VISIBLE_DEVICES=<visible> (in that order)."""
    props = []
    for i in visible:
        p = SimpleNamespace(name=f"GPU model {i}", major=9, minor=0, total_memory=80 * 1024 * MIB, uuid=uuid(i))
        if pci:
            p.pci_domain_id, p.pci_bus_id, p.pci_device_id = 0, BUSES[i], 0
        props.append(p)
    return props


@pytest.fixture
def fresh_nvml(monkeypatch):
    """Make `gpuinfo.load_nvml` import whatever the test puts in sys.modules['pynvml']."""
    gpuinfo.load_nvml.cache_clear()
    yield lambda fake: monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpuinfo.load_nvml.cache_clear()


def test_reordered_visible_devices_map_torch_index_to_nvml_device_by_pci_bus_id():
    gpus = env.hardware(torch_view([3, 1]), FakeNVML())["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]
    assert [g["nvml_index"] for g in gpus] == [3, 1]
    assert [g["pci_bus_id"] for g in gpus] == ["00000000:AF:00.0", "00000000:3B:00.0"]
    assert [g["uuid"] for g in gpus] == [f"GPU-{uuid(3)}", f"GPU-{uuid(1)}"]


def test_gpu_record_carries_clocks_power_and_modes_in_named_units():
    g = env.hardware(torch_view([2]), FakeNVML())["gpus"][0]
    assert g["compute_capability"] == "9.0" and g["memory_total_mib"] == 80 * 1024
    assert (g["sm_clock_max_mhz"], g["mem_clock_max_mhz"], g["sm_clock_mhz"]) == (1980, 2619, 1755)
    assert g["sm_clock_kind"] == "applications"
    assert g["power_limit_w"] == 700.0 and g["persistence_mode"] is True and g["ecc"] is True


def test_gpu_record_carries_its_pcie_link_the_most_it_can_train_to_and_what_it_ran_at():
    # selfcheck's all-reduce expectation over PCIe paths rests on the maximum (bench.machine.linkspeed)
    g = env.hardware(torch_view([2]), FakeNVML())["gpus"][0]
    assert (g["pcie_gen_max"], g["pcie_width_max"]) == (5, 16)
    assert (g["pcie_gen_current"], g["pcie_width_current"]) == (1, 16)


def test_torch_without_pci_ids_is_mapped_by_uuid():
    g = env.hardware(torch_view([3, 1], pci=False), FakeNVML())["gpus"]
    assert [x["nvml_index"] for x in g] == [3, 1]
    assert [x["pci_bus_id"] for x in g] == ["00000000:AF:00.0", "00000000:3B:00.0"]  # from NVML


@pytest.mark.parametrize("raw", ["0000:af:00.0", b"00000000:AF:00.0\x00", "af:00.0", " 00000000:aF:00.0 "])
def test_pci_bus_id_formats_normalise_to_nvml_form(raw):
    assert gpuinfo.normalise_pci_bus_id(raw) == "00000000:AF:00.0"


def test_topology_matrix_follows_torch_numbering_not_nvml():
    # torch 0,1,2 = NVML 3,1,2: NVML 3-2 share a PCIe switch (PXB), 1 is on the other socket.
    topo = env.hardware(torch_view([3, 1, 2]), FakeNVML())["topology"]
    assert topo["numbering"] == "torch" and topo["source"] == "nvml" and "PXB" in topo["legend"]
    assert topo["matrix"] == [["X", "SYS", "PXB"],
                              ["SYS", "X", "SYS"],
                              ["PXB", "SYS", "X"]]


def test_nvlinks_between_used_gpus_are_counted_per_pair():
    # NVML 2-3 bonded by 4 links, 1-2 by 1; NVML 1's link to unused GPU 0 belongs to no pair here.
    links = {3: [2, 2, 2, 2], 2: [3, 3, 3, 3, 1], 1: [2, 0]}
    topo = env.hardware(torch_view([3, 1, 2]), FakeNVML(links=links))["topology"]
    assert topo["matrix"] == [["X", "SYS", "NV4"],
                              ["SYS", "X", "NV1"],
                              ["NV4", "NV1", "X"]]


def test_gpus_on_an_nvswitch_are_nvlink_peers_with_the_smaller_link_count():
    links = {0: ["switch"] * 18, 1: ["switch"] * 12}
    topo = env.hardware(torch_view([0, 1, 2]), FakeNVML(links=links))["topology"]
    assert topo["matrix"][0][1] == topo["matrix"][1][0] == "NV12"
    assert topo["matrix"][0][2] == "SYS"  # GPU 2 has no NVLink


def test_missing_nvml_functions_leave_fields_none_without_raising():
    class Sparse:  # an old binding: it can find a device and nothing more
        nvmlDeviceGetHandleByPciBusId = FakeNVML.nvmlDeviceGetHandleByPciBusId
    hw = env.hardware(torch_view([3, 1]), Sparse())
    g = hw["gpus"][0]
    assert g["pci_bus_id"] == "00000000:AF:00.0" and g["uuid"] == f"GPU-{uuid(3)}"  # from torch
    for key in ("nvml_index", "sm_clock_max_mhz", "sm_clock_mhz", "power_limit_w", "persistence_mode", "ecc",
                "pcie_gen_max", "pcie_width_max", "pcie_gen_current", "pcie_width_current"):
        assert g[key] is None, key
    assert hw["topology"]["matrix"] == [["X", None], [None, "X"]]


def test_nvml_errors_leave_fields_none_without_raising(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi to fall back on
    class Failing(FakeNVML):
        def __getattribute__(self, name):
            attr = object.__getattribute__(self, name)
            if name.startswith("nvml") and name != "nvmlDeviceGetHandleByPciBusId" and callable(attr):
                def fail(*a, **k):
                    raise NVMLError("not supported")
                return fail
            return attr
    hw = env.hardware(torch_view([3, 1]), Failing(links={3: [1]}))
    assert [g["nvml_index"] for g in hw["gpus"]] == [None, None]
    assert all(g["power_limit_w"] is None and g["sm_clock_mhz"] is None and g["ecc"] is None for g in hw["gpus"])
    assert hw["topology"]["matrix"] == [["X", None], [None, "X"]] and hw["gpu_driver"] == ""


def test_without_nvml_topology_and_driver_come_from_nvidia_smi_in_nvml_numbering(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\nif [ "$1" = topo ]; then echo "GPU0 X NV4"; else echo 535.104.05; fi\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    hw = env.hardware(torch_view([3, 1]), None)
    assert hw["gpu_driver"] == "535.104.05" and hw["gpu_topology"] == "GPU0 X NV4"
    assert hw["topology"] == {"numbering": "nvml", "source": "nvidia-smi topo -m", "text": "GPU0 X NV4"}
    assert hw["gpus"][0]["nvml_index"] is None and hw["gpus"][0]["pci_bus_id"] == "00000000:AF:00.0"


def test_nccl_env_collects_only_nccl_and_torch_nccl_variables(monkeypatch):
    for k in [k for k in os.environ if "NCCL" in k]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    monkeypatch.setenv("MY_NCCL_SETTING", "x")
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    assert env.nccl_env() == {"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_device_memory_reads_whole_device_and_this_process_row(fresh_nvml, monkeypatch):
    fake = FakeNVML(procs=[(os.getpid() + 1, 500 * MIB), (os.getpid(), 1234 * MIB)])
    fresh_nvml(fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: torch_view([3, 1])[i])
    # torch device 0 is NVML 3: the v2 figure (nvidia-smi's) of that device, not of NVML 0.
    assert gpuinfo.device_memory_mib(0) == {"device_used_mib": 2003.0, "process_used_mib": 1234.0,
                                            "method": "nvml_v2"}
    fake.procs = [(os.getpid() + 1, 500 * MIB)]  # pids from another namespace: NVML cannot say
    assert gpuinfo.device_memory_mib(1)["process_used_mib"] is None


def test_device_memory_without_nvml_falls_back_to_mem_get_info(fresh_nvml, monkeypatch):
    fresh_nvml(None)  # `import pynvml` fails
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: torch_view([3, 1])[i])
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (70 * 1024 * MIB, 80 * 1024 * MIB))
    assert gpuinfo.device_memory_mib(1) == {"device_used_mib": 10 * 1024, "process_used_mib": None,
                                            "method": "torch.cuda.mem_get_info"}


OLD_KEYS = ("hostname", "python", "platform", "torch", "torchvision", "cuda", "cudnn", "nccl", "gpu_names",
            "gpu_driver", "cpu_model", "cpu_cores", "torch_threads_default", "git_commit", "gloo_available",
            "nccl_available")


def test_capture_on_a_cpu_machine_is_fast_lists_no_gpus_and_never_initialises_nvml(fresh_nvml, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this test describes a machine without a CUDA device")
    fake = FakeNVML()
    fresh_nvml(fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    t0 = time.perf_counter()
    e = env.capture()
    assert time.perf_counter() - t0 < 5
    assert fake.inits == 0
    assert all(k in e for k in OLD_KEYS) and e["gpu_names"] == [] and e["gpu_driver"] == ""
    assert e["gpus"] == [] and e["topology"] is None and e["cuda_visible_devices"] == "3,1"
    assert e["cpu_cores"] >= 1 and re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", e["git_commit"])
    json.dumps(e)  # stored as JSON with every result


def test_every_nvml_function_the_code_calls_exists_in_pynvml():
    pynvml = pytest.importorskip("pynvml")  # a misspelt name would be silently None on a real GPU
    bench = Path(env.__file__).parent
    names = set()
    for f in ("gpuinfo.py", "topology.py", "env.py", "gpustate.py"):
        names |= set(re.findall(r'"(nvml[A-Z]\w+)"', (bench / f).read_text()))
    assert len(names) > 10 and [n for n in sorted(names) if not hasattr(pynvml, n)] == []


def test_torchvision_version_is_torchvisions_own_build_string_read_without_importing_it():
    # Each sweep captures the environment: importing torchvision for its version cost ~3 s of every sweep.
    import subprocess
    probe = ("import sys; from bench.machine import env; v = env.torchvision_version(); "
             "print(v, 'torchvision' in sys.modules)")
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()
    import torchvision
    assert got == [torchvision.__version__, "False"]


def test_the_cli_its_help_a_bad_flag_and_the_commands_that_read_a_store_import_no_torch():
    # `./run_bench.sh --help`, a mistyped flag (exit 2) and `report` waited 2-3 s for torch, which they never use: the
    # sweep's planning imported it at the CLI's first line (2026-11-28: --help 2.5-3.0 s, now 0.12; report 8.6-10 s,
    # now 6.4-7.0 on one store). A sweep imports it when it plans, before any process starts.
    import subprocess
    probe = ("import contextlib, io, sys; from bench import cli; from bench.report import report; "
             "from bench.commands import compare, export, forecast, history; err = io.StringIO()\n"
             "with contextlib.redirect_stderr(err): rc = cli.main(['--gpus', 'x'])\n"
             "print(rc, 'torch' in sys.modules, 'torchvision' in sys.modules)")
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()
    assert got == ["2", "False", "False"], got


def test_a_container_images_nccl_version_is_recorded_apart_and_never_shown_as_a_setting(monkeypatch):
    from types import SimpleNamespace
    from bench.report.environment import _environment_rows
    for k in [k for k in os.environ if "NCCL" in k]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("NCCL_VERSION", "2.21.5-1")   # NVIDIA's CUDA/NGC images set it: the system libnccl they ship
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    assert env.nccl_env() == {"NCCL_P2P_DISABLE": "1"}
    e = env.capture()
    assert e["image_nccl_version"] == "2.21.5-1" and "NCCL_VERSION" not in e["nccl_env"]
    sweep = SimpleNamespace(threads=[1])
    for stored in ({"nccl_env": e["nccl_env"], "image_nccl_version": "2.21.5-1"},
                   {"nccl_env": {"NCCL_P2P_DISABLE": "1", "NCCL_VERSION": "2.21.5-1"}}):   # a store of before
        rows = dict(map(tuple, _environment_rows(sweep, {"nccl": "2.27.3", "json": json.dumps(stored)})[0]))
        assert rows["NCCL settings"] == "NCCL_P2P_DISABLE=1"
        image = rows["NCCL_VERSION (container image)"]
        assert image.startswith("2.21.5-1: the image's label") and "not a setting" in image and "(2.27.3)" in image
