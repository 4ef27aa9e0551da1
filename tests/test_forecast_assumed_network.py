"""A forecast read on the afternoon H200 example (examples/h200-2026-11-27-pm, one GPU, no link measured): its verdicts
name the assumed network where they are read, never 'this network'; where the efficiency is unknown (no single device
x1) no 'under 75%' verdict, no superlinear per-GPU rate from two bases, no empty efficiency plot; one slow first step
does not set the range."""
from __future__ import annotations

import os
from dataclasses import replace

from bench.forecast import network as nw
from bench.forecast import outlook as fo
from test_forecast_cpu_memory import _cpu_store, _ddp
from test_forecast_gpu_read import _blocks   # the forecast section as rendered, and the figures it drew

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PM = os.path.join(ROOT, "examples", "h200-2026-11-27-pm")
ASSUMED = ("an assumed network (the h100 preset: 8x H100 NVLink + 400 Gb/s InfiniBand per GPU; nothing measured: this "
           "sweep ran on one GPU)")




def _said(bl: list) -> str:
    return " ".join(b[1] for b in bl if b[0] == "p") + " " + " ".join(
        " ".join(r) for b in bl if b[0] == "table" for r in b[2])


def test_a_one_gpu_sweeps_verdict_names_the_assumed_network_and_one_slow_step_sets_no_range(tmp_path, monkeypatch):
    # selfcheck-main read 'past 16 GPUs on this network (between 4 and 16)' and 'DDP x16: 76% (66%-77%)': the network
    # was the h100 preset (nothing measured on one GPU), the range set by a 4.60 ms first step with a 3.57 among 3.32s
    bl, drawn = _blocks(os.path.join(PM, "selfcheck.sqlite"), 1, tmp_path, monkeypatch)
    said = _said(bl)
    assert "this network" not in said
    verdict = next(b[1] for b in bl if b[0] == "p" and b[1].startswith("synthetic DDP [fp32]:"))
    # both ends of the range at 16: said so (it read nothing, as if no range were drawn: audit F5)
    assert f"past 16 GPUs on {ASSUMED} (both ends of its range: 16), scaling stops paying" in verdict, verdict
    assert "Under 75% from: the assumed network (preset h100): 32; 4x faster" in said
    table = next(b for b in bl if b[0] == "table")
    eff = table[1].index("efficiency")
    x16 = next(r[eff] for r in table[2] if r[0] == "synthetic DDP [fp32]" and r[1] == "16")
    assert x16 == "76% (75%-77%)", x16
    assert "the other 2, 4.6 ms (the first measured) and 3.57 ms" in said
    legend = [t.get_text().replace("\n", " ") for t in dict(drawn)["figure"].legends[0].get_texts()]
    assert any(t.startswith("forecast, an assumed network (") for t in legend), legend


def test_unknown_efficiency_gives_no_verdict_no_two_basis_rate_and_no_empty_plot(tmp_path, monkeypatch):
    # transformer-fit: 'efficiency unknown' beside 'Under 75% from: this network: not up to 1024', 'per GPU 274.3
    # samples/s at 2 GPUs, above the 273.8 measured at x1' (the forecast from x1's median step, 466.1 ms; the 273.8
    # from its windows, 467.6 ms a step), and a linked plot of axes, a 75% line and one tick
    bl, drawn = _blocks(os.path.join(PM, "gpu.sqlite"), 3, tmp_path, monkeypatch)
    said = _said(bl)
    assert "efficiency unknown" in said
    assert "Under 75%" not in said and "samples/s at 2 GPUs, above" not in said
    assert "figure" not in dict(drawn) and "memory_figure" in dict(drawn)
    assert not any(b[0] == "img" and b[1].endswith("transformer_forecast.png") for b in bl)
    assert "No forecast scaling-efficiency plot for transformer: its efficiency is unknown at every count" in said


def test_only_a_measured_network_is_this_network(tmp_path):
    path = _cpu_store(tmp_path)
    s, m = _ddp(path)
    measured = replace(m, net=replace(m.net, node=replace(m.net.node, measured=True), net=replace(m.net.net, measured=True)))
    assert fo.on_words(measured, [s]) == "this network"
    flat = replace(m, net=replace(m.net, node=replace(m.net.node, measured=True),
                                  net=replace(m.net.net, measured=False, source="assumed as fast as the node level")))
    assert fo.on_words(flat, [s]) == ("a partly assumed network (inside a node measured; between nodes assumed as fast "
                                      "as the other level)")
    h = nw.PRESETS["h100"]
    preset = replace(m, net=replace(m.net, node=h.node, net=h.net))
    assert fo.on_words(preset, [s]).startswith("an assumed network (the h100 preset: ")
    assert fo.on_words(preset, [s]).endswith("nothing measured: the sweep stored no all-reduce rows)")  # it ran x2
    assert fo.on_words(preset, [s], short=True) == "the assumed network (preset h100)"
