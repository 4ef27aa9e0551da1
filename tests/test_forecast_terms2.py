"""The forecast as a second GPU user read it (trial C's findings 1, 9 and 11): a fit sweep's forecast names the batch it
rests on, a row above 100% from a sharded optimizer gives its net effect in place of a bound, the what-ifs test the
assumed inter-node network both ways, and the plot's legend explains only what is drawn, unresolved lines dashed.
The committed GPU examples' stores are read (as tests/test_forecast_gpu_read.py does); nothing is measured here."""
from __future__ import annotations

import os
from types import SimpleNamespace

from bench.forecast import batches
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.report import forecastplots as fp
from bench.store import store
from test_forecast_gpu_read import H100, H200
from test_forecast_gpu_read import _blocks as _drawn


def _blocks(path: str, sid: int, tmp_path, monkeypatch=None) -> tuple:
    """(the forecast section's blocks, {'figure' | 'memory_figure': its last such Figure})."""
    bl, figs = _drawn(path, sid, tmp_path, monkeypatch)
    return bl, dict(figs)


def _sentence(bl: list, label: str) -> str:
    return next(b[1] for b in bl if b[0] == "p" and b[1].startswith(label + ":"))


def _labels(fig) -> list:
    return [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]


# ---------------------------------------------------------------- finding 1: the batch a fit's forecast rests on

def test_a_fit_sweeps_forecast_names_the_batch_it_rests_on_over_the_budget_already_at_x1(tmp_path, monkeypatch):
    # H200 transformer-fit (sweep 4): the measured runs at batch 14, over the sweep's 16 GiB already at one GPU, while
    # the fit's trials at 12 fitted; the forecast read 'does not fit ... at any count' and named no batch
    bl, figs = _blocks(os.path.join(H200, "gpu.sqlite"), 4, tmp_path, monkeypatch)
    for name, peak in (("DDP", "17.56"), ("FSDP", "17.78")):
        said = _sentence(bl, f"transformer {name} [bf16, adamw]")
        assert said.startswith(f"transformer {name} [bf16, adamw]: forecast at batch 14 a GPU, the batch of {name} x1's"
                               " run"), said
        assert ("does not fit in the sweep's 16.00 GiB budget at any count up to 1024 (at least" in said
                and f"at batch 14 a GPU over the budget already at x1 ({peak} GiB measured)" in said), said
    labels = _labels(figs["memory_figure"])      # its plot's lines name it too (no efficiency: no line in the other)
    assert any(t.startswith("DDP [bf16, adamw] at batch 14 a GPU: forecast") for t in labels), labels


def test_a_sweep_of_one_batch_names_none_and_one_of_several_names_each(tmp_path):
    def config(strategy, count, batch, key):
        return SimpleNamespace(global_batch=batch * count, device_count=count, scaling="weak", key=key,
                               device_type="cuda", strategy=strategy)
    one = SimpleNamespace(fit=[], bench={"m": [config("single", 1, 8, "a"), config("ddp", 2, 8, "b")]})
    several = SimpleNamespace(fit=[], bench={"m": [config("single", 1, 8, "a"), config("ddp", 2, 4, "b")]})
    for sweep, said in ((one, ""), (several, "at batch 4 a GPU")):
        s = fs.Setting("m", "ddp", "fp32", {2: sweep.bench["m"][1]}, {})
        batches.mark([s], sweep)
        assert s.batch == said
        assert batches.over_words(s, 1024.0, 2048.0) == (f"; {said} over the budget already at x2 (2.00 GiB measured)"
                                                         if said else "")
    assert batches.over_words(s, 4096.0, 2048.0) == ""            # within the budget: nothing to say


# ---------------------------------------------------------------- finding 9: above 100%, the net effect

def test_a_row_above_100_percent_from_a_sharded_optimizer_gives_its_net_effect_not_a_bound():
    bound = dict(fo.COLUMNS)["bound"]
    # H100 transformer ZeRO at 64: 101%, 4.06 ms of optimizer at one rank, 0.06 here, its bound 'exposed communication'
    p = fs.Point(count=64, nodes=8, step_ms=42.6, efficiency=1.01, bound="exposed communication", algorithm="tree",
                 exposed_comm_ms=2.44, optimizer_one_ms=4.06, optimizer_ms=0.06)
    said = bound(None, p)
    assert "exposed communication (tree)" not in said.split(":")[0], said
    assert said == ("no bound above 100%: optimizer 4.00 ms saved by the shards against 2.44 ms exposed communication "
                    "(tree): net 1.56 ms a step saved"), said
    under = fs.Point(count=256, nodes=32, efficiency=0.99, bound="exposed communication", algorithm="tree",
                     exposed_comm_ms=3.0, optimizer_one_ms=4.06, optimizer_ms=0.02)
    assert bound(None, under) == "exposed communication (tree)"   # under 100%: a bound as before


def test_the_h100_transformers_zero_rows_above_100_percent_give_their_net_effect(tmp_path):
    bl, _ = _blocks(os.path.join(H100, "gpu.sqlite"), 2, tmp_path)
    table = next(b for b in bl if b[0] == "table")
    eff, bound = table[1].index("efficiency"), table[1].index("bound")
    rows = [r for r in table[2] if r[0] == "transformer DDP+ZeRO [bf16, adamw]" and r[1].isdigit()]
    over = [r for r in rows if int(r[eff].split("%")[0]) > 100]
    assert over and all(r[bound].startswith("no bound above 100%: optimizer ") and " ms exposed communication" in r[bound]
                        for r in over), [r[bound] for r in over]


# ---------------------------------------------------------------- finding 11: the network both ways; the legend

def test_the_what_ifs_test_the_assumed_inter_node_network_slower_as_well_as_faster():
    # the H100 transformer: DDP+ZeRO's 101% at 64 GPUs rests on the preset's 400 GB/s between nodes, a line rate
    from bench.analysis import forecastable
    conn = store.connect(os.path.join(H100, "gpu.sqlite"), readonly=True)
    try:
        f = forecastable.load(conn, 2)
    finally:
        conn.close()
    m = fo.machine(f.sweep, f.runs)
    s = next(s for s in f.sets if s.strategy == "zero" and s.variant == "bf16, adamw")
    ws = dict(fo.what_ifs(s, fs.inputs(s, m), m, fo.DOUBLING, draws=0))
    assert "4x faster inter-node network" in ws and "2x slower inter-node network" in ws, list(ws)
    at = {what: next(p for p in pts if p.count == 1024) for what, pts in ws.items()}
    # a faster network moves nothing here; a slower one does: the verdict leans on the preset in that direction
    assert at["4x faster inter-node network"].exposed_comm_ms == at["this network"].exposed_comm_ms
    assert at["2x slower inter-node network"].exposed_comm_ms > at["this network"].exposed_comm_ms + 1.0
    assert "2x slower inter-node network: " in fo.below_words(list(ws.items()), 1024)


def test_the_forecast_legend_explains_only_the_marks_drawn_and_unresolved_lines_are_dashed(tmp_path, monkeypatch):
    # the H100 transformer: one measured count (x1), four of five lines on one unstable process
    _, figs = _blocks(os.path.join(H100, "gpu.sqlite"), 2, tmp_path, monkeypatch)
    fig = figs["figure"]
    labels = _labels(fig)
    assert not any("measured (dots)" in t or "hollow" in t for t in labels), labels
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines() if " forecast" in ln.get_label()}
    shaky = {k: ln for k, ln in lines.items() if "not resolved, dashed" in k}
    assert len(shaky) == 4 and all(ln.get_linestyle() == "--" for ln in shaky.values())
    steady = [ln for k, ln in lines.items() if k not in shaky and len(ln.get_xdata())]
    assert len(steady) == 1 and steady[0].get_linestyle() == "-"           # DDP+ZeRO [bf16, adamw]: resolved, solid
    # a sweep that measured x2: its dot and the check's hollow forecast are drawn, and explained
    from test_report_figures import _forecast_lines
    _, _, lines2 = _forecast_lines(tmp_path / "hand")
    said = _labels(fp.figure("synthetic", "cpu", lines2))
    assert any("measured (dots)" in t and "hollow" in t for t in said), said
