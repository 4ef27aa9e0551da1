"""What bus bandwidth an all-reduce should reach over the GPUs it runs on, from what the environment recorded: the
links between them (bench.machine.topology: nvidia-smi's labels in torch numbering), each GPU's compute capability
(its NVLink generation) and PCIe link (bench.machine.gpuinfo: NVML's maximum generation and width).

    link = ring_bottleneck(topology["matrix"], ranks=[0, 1], gpus=env["gpus"], cpu_model=env["cpu_model"])
    link.floor_gbps     # the least a healthy link gives the all-reduce: its share of the line rate (None: no figure)
    link.describe()     # 'NV18 between GPUs 0-1'; link.medium: 'NVLink, 18 x 25 GB/s per direction'

A ring all-reduce's bus bandwidth (nccl-tests' busbw, bench.rank.commbench) is at most the per-direction rate of the
slowest link its ring crosses. NCCL chooses the ring, so the expectation is the best ring's slowest link: every order
is tried up to MAX_RING_SEARCH GPUs, beyond that the slowest pair stands (a lower expectation, never a false alarm).
NCCL also runs several rings at once over different links, so on a partial NVLink mesh it beats this bound; the bound
is for catching a shortfall, not for predicting the figure. Rates are line rates per direction, 1 GB = 1e9 bytes.
Pure functions of recorded data: the CPU tests hand them stand-in matrices.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

# NVLink: GB/s per link per direction, by compute capability (each GPU generation has one NVLink generation).
NVLINK_GBPS_PER_LINK = {
    (6, 0): 20.0,     # P100, NVLink 1: 4 links, 160 GB/s both directions together (NVIDIA Tesla P100 whitepaper)
    (7, 0): 25.0,     # V100, NVLink 2: 6 links, 300 GB/s both directions (NVIDIA V100 datasheet)
    (7, 5): 25.0,     # Turing (Quadro RTX 6000/8000): 2 links, 100 GB/s both directions (NVIDIA Quadro RTX datasheets)
    (8, 0): 25.0,     # A100, NVLink 3: 12 links, 600 GB/s both directions (NVIDIA A100 datasheet)
    (8, 6): 14.0625,  # GA102 (RTX A6000, A40, RTX 3090): four x4 links of 14.0625 GB/s each way (NVIDIA GA102 whitepaper)
    (9, 0): 25.0,     # H100/H200, NVLink 4: 18 links, 900 GB/s both directions; "450GB/s is the line rate" per
                      # direction (NCCL's maintainers, NVIDIA/nccl-tests#212)
    (10, 0): 50.0,    # B200/GB200, NVLink 5: 18 links, 1.8 TB/s both directions (NVIDIA Blackwell datasheets)
}
# PCIe per lane per direction: transfer rate (GT/s) x line-code efficiency / 8 bits (PCI-SIG base specifications:
# 8b/10b for generations 1-2, 128b/130b for 3-5, 242 of a FLIT's 256 bytes for 6). Gen4 x16: 31.5 GB/s.
PCIE_GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_CODE_EFFICIENCY = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
BITS_PER_BYTE = 8
# Between CPU sockets (SYS): NCCL's own model of the inter-socket link, GB/s (src/graph/topo.h: SKL_QPI_BW for Intel
# Skylake and later, AMD_BW, QPI_BW for the rest), the only per-vendor public figure; NCCL's effective rate, not a line rate.
SOCKET_LINK_GBPS = {"intel": 10.0, "amd": 16.0}
SOCKET_LINK_OTHER_GBPS = 6.0

# What a healthy link gives an all-reduce, as a share of its line rate:
DIRECT_SHARE = 0.6       # NVLink and PCIe switches (P2P): NCCL reaches ~80% of NVLink's line rate ("protocol overhead
                         # (~20%)": 370 of 450 GB/s on H100, NVIDIA/nccl-tests#212) and models PCIe at 76% of it (12 GB/s
                         # for gen3 x16: src/graph/topo.cc, kvDictPciGen); 60% leaves room for the self-check's message
                         # sizes, while a transport fallen back from NVLink to PCIe or host memory (a tenth or less) fails.
THROUGH_CPU_SHARE = 0.3  # through a host bridge or across sockets: NCCL copies through host memory instead of P2P on Intel
                         # and ARM CPUs (P2P only up to PXB: src/graph/paths.cc, ncclTopoCheckP2p), at a rate no public
                         # figure gives; 30% is a judgement: a healthy machine passes, a link trained far below its
                         # generation or width still fails.
MAX_RING_SEARCH = 8      # GPUs up to which every ring order is tried (7!/2 orders at 8)
PCIE_SWITCH_LEVELS = ("INT", "PIX", "PXB")   # nvidia-smi's labels for paths that stay below the CPU
HOST_BRIDGE_LEVELS = ("PHB", "NODE")         # through the CPU's host bridge(s), one NUMA node


@dataclass(frozen=True)
class Link:
    """The link between two GPUs (torch numbering) and what it should give an all-reduce."""
    a: int
    b: int
    label: str                     # nvidia-smi's: 'NV18', 'PIX', 'SYS', ... ('?' when the record has none)
    medium: str                    # in words, with the figures behind line_gbps or why there is none
    line_gbps: Optional[float]     # line rate per direction, GB/s; None: the record does not say
    share: float = DIRECT_SHARE    # the least share of line_gbps a healthy link gives

    @property
    def floor_gbps(self) -> Optional[float]:
        return None if self.line_gbps is None else self.share * self.line_gbps

    @property
    def nvlink(self) -> bool:
        return self.label.startswith("NV")

    def describe(self) -> str:
        return f"{self.label} between GPUs {self.a}-{self.b}"


def pcie_gbps(gen, width) -> Optional[float]:
    """Line rate per direction of a PCIe link, GB/s; None for a generation or width the record does not give."""
    if gen not in PCIE_GT_PER_S or not isinstance(width, int) or width <= 0:
        return None
    return PCIE_GT_PER_S[gen] * PCIE_CODE_EFFICIENCY[gen] / BITS_PER_BYTE * width


def _capability(gpu: dict) -> Optional[tuple]:
    try:
        major, minor = (int(x) for x in str(gpu.get("compute_capability")).split("."))
    except ValueError:
        return None
    return major, minor


def _pcie(ga: dict, gb: dict) -> tuple:
    """(slower endpoint's line rate or None, its words): each GPU's own link bounds the path."""
    ends = [(pcie_gbps(g.get("pcie_gen_max"), g.get("pcie_width_max")), g) for g in (ga, gb)]
    known = [(r, g) for r, g in ends if r is not None]
    if not known:
        return None, "PCIe generation and width not recorded"
    rate, g = min(known, key=lambda e: e[0])
    return rate, f"PCIe gen{g['pcie_gen_max']} x{g['pcie_width_max']}, {rate:.1f} GB/s per direction"


def link(label, a: int, b: int, gpus: dict, cpu_model: str = "") -> Link:
    """The link of nvidia-smi label `label` between torch devices a and b; `gpus`: the recorded GPU dicts by index."""
    ga, gb = gpus.get(a) or {}, gpus.get(b) or {}
    label = label or "?"
    if label.startswith("NV") and label[2:].isdigit():
        count, caps = int(label[2:]), {_capability(ga), _capability(gb)}
        rates = [NVLINK_GBPS_PER_LINK.get(c) for c in caps]
        if None in rates:
            shown = ", ".join(".".join(map(str, c)) if c else "unrecorded" for c in caps)
            return Link(a, b, label, f"NVLink of compute capability {shown}, whose per-link rate is not listed here", None)
        per = min(rates)
        return Link(a, b, label, f"NVLink, {count} x {per:g} GB/s per direction", count * per)
    rate, words = _pcie(ga, gb)
    if label in PCIE_SWITCH_LEVELS:
        return Link(a, b, label, f"{words} through PCIe switches", rate)
    if label in HOST_BRIDGE_LEVELS:
        return Link(a, b, label, f"{words} through the CPU's host bridge", rate, THROUGH_CPU_SHARE)
    if label == "SYS":
        vendor = next((v for v in SOCKET_LINK_GBPS if v in cpu_model.lower()), None)
        socket = SOCKET_LINK_GBPS.get(vendor, SOCKET_LINK_OTHER_GBPS)
        line = socket if rate is None else min(rate, socket)
        return Link(a, b, label, f"{words} and the link between CPU sockets ({vendor or 'other'} CPUs: {socket:g} GB/s "
                                 f"in NCCL's model)", line, THROUGH_CPU_SHARE)
    return Link(a, b, label, "a link the recorded topology does not name", None)


def ring_bottleneck(matrix: list, ranks: list, gpus: list, cpu_model: str = "") -> Optional[Link]:
    """The slowest link of the best ring through `ranks` (torch indices into `matrix`), or None below 2 ranks. A ring
    whose links all have a figure beats one with an unknown link; the unknown link is returned when every ring has one."""
    if len(ranks) < 2:
        return None
    by_index = {g.get("index", i): g for i, g in enumerate(gpus or [])}

    def label(a: int, b: int):
        for x, y in ((a, b), (b, a)):
            if x < len(matrix) and matrix[x] and y < len(matrix[x]) and matrix[x][y]:
                return matrix[x][y]
        return None

    links = {frozenset(p): link(label(*p), *p, by_index, cpu_model) for p in itertools.combinations(ranks, 2)}
    worth = lambda lk: -1.0 if lk.floor_gbps is None else lk.floor_gbps  # noqa: E731  unknown: worse than any figure
    if len(ranks) > MAX_RING_SEARCH:
        return min(links.values(), key=worth)
    best = None
    for rest in itertools.permutations(ranks[1:]):
        ring = (ranks[0], *rest)
        slowest = min((links[frozenset((ring[i], ring[(i + 1) % len(ring)]))] for i in range(len(ring))), key=worth)
        if best is None or worth(slowest) > worth(best):
            best = slowest
    return best
