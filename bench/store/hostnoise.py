"""The per-host process noise `selfcheck` measures: one small JSON file that every store's report on this host reads.

A sweep that ran no configuration in several processes on its device cannot measure how far fresh processes of the
same code differ there. `selfcheck` runs one configuration in several processes and keeps, per host and device, the
raw per-process throughputs with where they came from; a report of any store whose sweep ran on that host and device
finds them here (bench.analysis.results), and says which host, device, date and store they came from.

    hostnoise.record({"hostname": ..., "device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3",
                      "measured_at": "2026-11-24T22:50:00+0000", "configuration": "single device x1 [fp32]",
                      "process_sps": [49566.5, 49410.2, 49601.0], "store": "/abs/selfcheck.sqlite", "sweep_id": 4})
    hostnoise.lookup("vm", "cuda", "NVIDIA H100 80GB HBM3")   # the latest entry of that host and device, or None

The file: $BENCH_HOST_NOISE, else ~/.cache/bench/host-noise.json ($XDG_CACHE_HOME where set). Rows in, rows out:
the spread is derived by bench.stats.host_noise, never stored. A file that cannot be read is as good as none.
"""
from __future__ import annotations

import json
import os
from typing import Optional

KEY = ("hostname", "device_type", "device_name")


def path() -> str:
    """Where the per-host figures live."""
    if os.environ.get("BENCH_HOST_NOISE"):
        return os.environ["BENCH_HOST_NOISE"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "bench", "host-noise.json")


def entries(where: Optional[str] = None) -> list:
    """Every entry of the file (none when it is missing or unreadable)."""
    try:
        with open(where or path(), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    return [e for e in data.get("entries", []) if isinstance(e, dict)] if isinstance(data, dict) else []


def record(entry: dict, where: Optional[str] = None) -> str:
    """Keep `entry` as its host and device's figure (replacing an older one of the same key); returns the file's path."""
    target = where or path()
    kept = [e for e in entries(target) if tuple(e.get(k) for k in KEY) != tuple(entry.get(k) for k in KEY)]
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    tmp = f"{target}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"entries": kept + [entry]}, f, indent=1)
    os.replace(tmp, target)
    return target


def lookup(hostname: Optional[str], device_type: str, device_name: Optional[str], where: Optional[str] = None) -> Optional[dict]:
    """The entry of this host and device, or None (a figure of another host or device is never used)."""
    if not hostname:
        return None
    found = [e for e in entries(where) if (e.get("hostname"), e.get("device_type"), e.get("device_name"))
             == (hostname, device_type, device_name)]
    return max(found, key=lambda e: str(e.get("measured_at") or "")) if found else None
