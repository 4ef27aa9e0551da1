"""The CPU cores this process can use: its affinity mask, and the CPU quota of its cgroup where one is set.

    cores = usable_cores()     # min(len(sched_getaffinity), ceil(cgroup quota / period)), at least 1

`docker run --cpus=4` (Kubernetes' CPU limits likewise) sets a CFS quota, not an affinity mask: every host CPU stays
in `sched_getaffinity`, and a sweep would give 8 ranks a share of all 224 while the kernel lets them run 4 CPUs' worth,
measuring the throttling, not the strategy. cgroup v2 says it in `cpu.max` ("400000 100000"; "max 100000" is no
limit), v1 in `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none). The cgroup is the process's own
(/proc/self/cgroup), read under /sys/fs/cgroup; where nothing is readable the affinity mask stands.
"""
from __future__ import annotations

import math
import os
from typing import Optional

CGROUP_ROOT = "/sys/fs/cgroup"


def affinity_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _own_paths(root: str, proc_cgroup: Optional[str]) -> list:
    """The folders of this process's cgroup and those above it (a limit set on a parent holds too), v2 and v1's cpu."""
    out = []
    for line in (proc_cgroup or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or (parts[1] and "cpu" not in parts[1].split(",")):
            continue
        bases = [root] if not parts[1] else [os.path.join(root, c) for c in ("cpu", "cpu,cpuacct", parts[1])]
        names = [n for n in parts[2].split("/") if n]
        for base in bases:
            out += [os.path.join(base, *names[:i]) for i in range(len(names), -1, -1)]
    return out


def quota_cores(root: str = CGROUP_ROOT, proc_cgroup: Optional[str] = None) -> Optional[float]:
    """The smallest CPU quota of this process's cgroup and its parents, in CPUs (None: no limit or nothing readable)."""
    if proc_cgroup is None:
        proc_cgroup = _read("/proc/self/cgroup")
    found = []
    for d in _own_paths(root, proc_cgroup):
        v2 = _read(os.path.join(d, "cpu.max"))
        if v2:
            q, _, p = v2.partition(" ")
            if q != "max" and q.isdigit() and p.isdigit() and int(p) > 0:
                found.append(int(q) / int(p))
            continue
        q, p = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
        if q and p and q.lstrip("-").isdigit() and p.isdigit() and int(q) > 0 and int(p) > 0:
            found.append(int(q) / int(p))
    return min(found) if found else None


def usable_cores(root: str = CGROUP_ROOT, proc_cgroup: Optional[str] = None) -> int:
    """The cores the suite plans for: the affinity mask, cut to the cgroup's quota rounded up (2.5 CPUs: 3 threads can
    run, throttled), at least 1."""
    cores = affinity_cores()
    quota = quota_cores(root, proc_cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota - 1e-9)))
    return max(1, cores)
