"""The forecast section as a new user read it on the default CPU report (2 cores, DDP x2 at most): what was measured,
that every count past it is an extrapolation, and what it assumes there (the network between nodes), said before any
figure, with what a device is on CPU; on a GPU sweep its own assumptions and nothing of CPU."""
from __future__ import annotations

import dataclasses
import os

from bench.analysis import forecastable
from bench.forecast import outlook as fo
from bench.report import forecast as rf
from bench.store import store
from test_forecast_cpu_memory import _blocks, _cpu_store

H100 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "h100-2026-11-26")


def test_the_cpu_forecast_says_first_what_was_measured_and_that_past_one_node_the_network_is_assumed(tmp_path):
    # 1024 'devices' on 512 nodes from two one-thread processes, the network between nodes taken as fast as the node
    # level, and ranges ('55% (48%-63%)') that read as covering it: said nowhere before the figures
    bl, _, _ = _blocks(_cpu_store(tmp_path), tmp_path)
    assert bl[0] == ("h", 2, "Forecast past the measured counts")
    lead = bl[1][1]
    assert lead.startswith("Measured: up to 2 processes, on one node. Every count past 2 is an extrapolation"), lead
    assert "past one node (2 processes), the network between nodes, taken as fast as the node level" in lead
    assert "The ranges in brackets cover the spread of the measured inputs, not these assumptions" in lead
    assert "`./run_bench.sh forecast --network net=GBPS@US`" in lead and "node=GBPS@US" not in lead
    assert "On CPU a device is one process" in lead and "GPU" not in lead


def test_a_measured_network_leaves_only_the_extrapolation_and_a_gpu_sweep_reads_no_cpu_caveat(tmp_path):
    conn = store.connect(_cpu_store(tmp_path), readonly=True)
    try:
        f = forecastable.load(conn, None)
    finally:
        conn.close()
    m = fo.machine(f.sweep, f.runs)
    measured = dataclasses.replace(m, net=dataclasses.replace(m.net, net=dataclasses.replace(m.net.net, measured=True)))
    said = rf.scope_words(f.sets, measured, [1])
    assert said.startswith("Measured: up to 2 processes, on one node. Every count past 2 is an extrapolation from them.")
    assert "assumed" not in said and "--network" not in said
    assert "one process of 1 torch thread" in said
    # the H100 example (one GPU, the h100 preset): its assumptions named, nothing of CPU
    bl, _, _ = _blocks(os.path.join(H100, "gpu.sqlite"), tmp_path / "gpu")
    lead = bl[1][1]
    assert lead.startswith("Measured: up to 1 GPU, on one node. Every count past 1 is an extrapolation from it"), lead
    assert "the network inside a node, preset h100" in lead and "past one node (8 GPUs)" in lead
    assert "CPU" not in lead and "process" not in lead and "--network node=GBPS@US,net=GBPS@US" in lead
