"""The link between each pair of used GPUs, in torch's numbering, named as `nvidia-smi topo -m` names it.

`nvidia-smi topo -m` numbers GPUs as NVML does (PCI order over the whole machine), which is not
torch's numbering once CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER reorders devices; a report that
says "ranks 0 and 1 talk over NVLink" needs the matrix in torch's numbering. So it is rebuilt here
from NVML with the handles that `gpuinfo.nvml_handle` found for torch devices 0..n-1.

NVLink: each GPU's active links are walked; a link whose far end is another used GPU (matched by
PCI bus id) counts for that pair, and two GPUs that both reach an NVSwitch are NVLink peers through
it, with as many links as the one with fewer (nvidia-smi shows NV18 between H100 SXM GPUs).
Without NVLink, the PCIe level comes from nvmlDeviceGetTopologyCommonAncestor.
"""
from __future__ import annotations

from bench.machine.gpuinfo import call, normalise_pci_bus_id

LEGEND = {
    "X": "self",
    "NV#": "a bonded set of # NVLinks (directly or through an NVSwitch)",
    "INT": "same board (a multi-GPU board)",
    "PIX": "at most a single PCIe bridge",
    "PXB": "multiple PCIe bridges, without the PCIe host bridge",
    "PHB": "a PCIe host bridge (typically the CPU)",
    "NODE": "PCIe and the interconnect between PCIe host bridges within a NUMA node",
    "SYS": "PCIe and the SMP interconnect between NUMA nodes (e.g. QPI/UPI)",
}
# nvmlGpuTopologyLevel_t values -> nvidia-smi's labels
LEVELS = {0: "INT", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_ACTIVE = 1
NVLINK_DEVICE_SWITCH = 2  # nvmlIntNvLinkDeviceType_t


def nvlink_counts(nvml, handles: list, bus_ids: list) -> tuple[list[list[int]], list[int]]:
    """(direct[a][b]: active links from GPU a that end at GPU b, to_switch[a]: links from a to an NVSwitch)."""
    n = len(handles)
    torch_index = {b: i for i, b in enumerate(bus_ids) if b}
    direct, to_switch = [[0] * n for _ in range(n)], [0] * n
    for a, handle in enumerate(handles):
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            if call(nvml, "nvmlDeviceGetNvLinkState", handle, link) != NVLINK_ACTIVE:
                continue  # inactive, or past this GPU's last link (NVML answers an error)
            if call(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link) == NVLINK_DEVICE_SWITCH:
                to_switch[a] += 1
                continue
            remote = call(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            b = torch_index.get(normalise_pci_bus_id(getattr(remote, "busId", None)))
            if b is not None and b != a:  # links to GPUs this run does not use are not its topology
                direct[a][b] += 1
    return direct, to_switch


def nvml_topology(nvml, handles: list, bus_ids: list) -> dict:
    """{'numbering': 'torch', 'source': 'nvml', 'matrix': n x n labels (None: unknown), 'legend'}
    for the GPUs whose NVML handles and PCI bus ids are given in torch order."""
    direct, to_switch = nvlink_counts(nvml, handles, bus_ids)

    def link(a: int, b: int) -> str | None:
        if a == b:
            return "X"
        links = max(direct[a][b], direct[b][a])
        if not links and to_switch[a] and to_switch[b]:
            links = min(to_switch[a], to_switch[b])
        if links:
            return f"NV{links}"
        return LEVELS.get(call(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b]))

    n = len(handles)
    return {"numbering": "torch", "source": "nvml", "matrix": [[link(a, b) for b in range(n)] for a in range(n)],
            "legend": LEGEND}
