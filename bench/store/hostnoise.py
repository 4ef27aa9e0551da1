"""The per-host process noise `selfcheck` measures: one small JSON file that every store's report on this host reads.

A sweep that ran no configuration in several processes on its device cannot measure how far fresh processes of the
same code differ there. `selfcheck` runs one configuration per precision in several processes and keeps, per host,
device and precision, the raw per-process throughputs with where they came from; a report of any store whose sweep ran
on that host and device finds them here (bench.analysis.results), and says which host, device, date and store they
came from. Per precision, because one precision's figure does not speak for another's: on one H200 three fp32
processes of DeepLabV3 single x1 ran 0.6% apart (compute-bound) and two bf16 ones 144 and 200 samples/s (host-bound).

    hostnoise.record({"hostname": ..., "device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3",
                      "precision": "bf16", "measured_at": "2026-11-24T22:50:00+0000",
                      "configuration": "single device x1 [bf16]", "workload": "synthetic",
                      "process_sps": [49566.5, 49410.2, 49601.0], "store": "/abs/selfcheck.sqlite", "sweep_id": 4})
    hostnoise.lookup("vm", "cuda", "NVIDIA H100 80GB HBM3", "bf16")   # that host, device and precision's latest, or None

The file: $BENCH_HOST_NOISE, else ~/.cache/bench/host-noise.json ($XDG_CACHE_HOME where set). Rows in, rows out:
the spread is derived by bench.stats.host_noise, never stored. A file that cannot be read is as good as none. An entry
without "precision" is fp32's: the files written before precisions were told apart held the fp32 single x1 alone; one
without "workload" is the synthetic MLP's, the only workload selfcheck's main sweep runs.
"""
from __future__ import annotations

import json
import os
from typing import Optional

KEY = ("hostname", "device_type", "device_name", "precision")
OLD_PRECISION = "fp32"   # an entry without "precision": what selfcheck measured before it kept one per precision
SELFCHECK_WORKLOAD = "synthetic"   # an entry without "workload": selfcheck's main sweep runs the synthetic MLP alone


def workload(entry: dict) -> str:
    """The workload the entry's processes ran: its "workload", else selfcheck's (the synthetic MLP). A report that falls
    back on the figure names it: DeepLabV3's 108 ms steps were held against the MLP's 3.2 ms ones, unnamed."""
    return entry.get("workload") or SELFCHECK_WORKLOAD


def key(entry: dict) -> tuple:
    """The entry's (hostname, device_type, device_name, precision), its precision fp32 where it names none."""
    return tuple(entry.get(k) for k in KEY[:-1]) + (entry.get("precision") or OLD_PRECISION,)


def path() -> str:
    """Where the per-host figures live."""
    if os.environ.get("BENCH_HOST_NOISE"):
        return os.environ["BENCH_HOST_NOISE"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "bench", "host-noise.json")


def entries(where: Optional[str] = None) -> list:
    """Every entry of the file (none when it is missing or unreadable), each naming its workload (`workload`)."""
    try:
        with open(where or path(), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    kept = [e for e in data.get("entries", []) if isinstance(e, dict)] if isinstance(data, dict) else []
    return [{**e, "workload": workload(e)} for e in kept]


def record(entry: dict, where: Optional[str] = None) -> str:
    """Keep `entry` as its host, device and precision's figure (replacing an older one of the same `key`: an entry
    without a precision is fp32's); returns the file's path."""
    target = where or path()
    kept = [e for e in entries(target) if key(e) != key(entry)]
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    tmp = f"{target}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"entries": kept + [entry]}, f, indent=1)
    os.replace(tmp, target)
    return target


def lookup(hostname: Optional[str], device_type: str, device_name: Optional[str], precision: str = OLD_PRECISION,
           where: Optional[str] = None) -> Optional[dict]:
    """The entry of this host, device and precision, or None (a figure of another host, device or precision is never
    used; an entry that names no precision is fp32's)."""
    return by_precision(hostname, device_type, device_name, where).get(precision)


def by_precision(hostname: Optional[str], device_type: str, device_name: Optional[str],
                 where: Optional[str] = None) -> dict:
    """precision -> the latest entry of this host and device at it ({} without a hostname): what a report names where
    its own precision has none (another precision's figure does not carry over, and it says which it had)."""
    if not hostname:
        return {}
    out: dict = {}
    for e in sorted(entries(where), key=lambda e: str(e.get("measured_at") or "")):
        k = key(e)
        if k[:3] == (hostname, device_type, device_name):
            out[k[3]] = e
    return out
