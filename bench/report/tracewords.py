"""How the report names the way a trace was read (bench.analysis.traces: a row's `method`), in one table: the traces
table's 'read from' cell and the sentence above it read the same entry, so the two never describe a method apart.

    read_from(method) -> 'kernels' | 'host ops'          method_text(methods, wait matches) -> the table's preamble
"""
from __future__ import annotations

from bench.analysis.waits import WAIT_MATCHES

# method -> (the 'read from' cell, how the shares were found)
METHODS = {
    "device_kernels": ("kernels", "on the device's kernels ('kernels'), by Holistic Trace Analysis's method"),
    "host_ops": ("host ops", "on host operations ('host ops': CPU/gloo, or CUDA where the profiler recorded no "
                             "kernels), by this suite's own adaptation of Holistic Trace Analysis's method, which reads "
                             "kernels only"),
}


def read_from(method: str) -> str:
    """The 'read from' cell of a method; an unknown one (a newer store's) as it is stored."""
    return METHODS[method][0] if method in METHODS else method


def method_text(methods: set, matches: set) -> str:
    """How the shares and waits of these traces were found: HTA's method on kernels, the suite's adaptation of it on
    host operations, and how collectives were matched across ranks."""
    how = [METHODS[m][1] for m in METHODS if m in methods]
    if not how:  # rows stored before the method was: it was the kernels where the trace had any
        how = [METHODS["device_kernels"][1] + " where the trace has kernels", "else " + METHODS["host_ops"][1]]
    text = "Shares of the traced steps " + "; ".join(how) + (" (computation first; communication where computation does "
                                                              "not hide it; then copies; the rest idle)")
    matched = "; ".join(f"{WAIT_MATCHES[m]}" for m in sorted(matches) if m in WAIT_MATCHES)
    return (text + "; overlapped: the share of communication under computation; waiting: time in collectives beyond "
            "the rank that spent least in each" + (f", collectives matched across ranks {matched}" if matched else "") + ".")
