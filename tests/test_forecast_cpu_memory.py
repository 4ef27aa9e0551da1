"""The CPU forecast's memory as the default CPU report's memory section gives it: a process's peak RSS (not its rise
over the process's RSS before the model), labelled so in the table, the plot and what its range rests on, and a budget
held against a node's processes summed, as that section holds it; figures never in powers of ten."""
from __future__ import annotations

import dataclasses

from bench.analysis import forecastable
from bench.analysis.results import load, pick_sweep
from bench.forecast import inputs as fi
from bench.forecast import outlook as fo
from bench.forecast import settings as fs
from bench.forecast import spread
from bench.report import forecast as rf
from bench.report import forecastplots as fp
from bench.report import frontier
from bench.store import store
from test_forecast import build_store


def _blocks(path: str, tmp_path, monkeypatch=None) -> tuple:
    """(the forecast section's blocks, the analysis' sweep, the memory figures drawn)."""
    figs = []
    if monkeypatch is not None:
        real = fp.memory_figure
        monkeypatch.setattr(fp, "memory_figure", lambda *a, **k: figs.append(real(*a, **k)) or figs[-1])
    conn = store.connect(path, readonly=True)
    try:
        sweep = load(conn, pick_sweep(conn, 1))
    finally:
        conn.close()
    return rf.blocks(path, sweep, str(tmp_path / "plots"), "test"), sweep, figs


def _cpu_store(tmp_path) -> str:
    path = str(tmp_path / "cpu.sqlite")
    build_store(path)        # single x1, DDP x1 and x2 on CPU, each rank's RSS 500 MiB before its model
    return path


def _ddp(path: str) -> tuple:
    """(DDP's setting, its machine) of the CPU store at path."""
    conn = store.connect(path, readonly=True)
    try:
        f = forecastable.load(conn, None)
    finally:
        conn.close()
    m = fo.machine(f.sweep, f.runs)
    return next(s for s in f.sets if s.strategy == "ddp"), m


def test_the_cpu_forecasts_memory_is_the_memory_sections_peak_rss_not_its_rise(tmp_path, monkeypatch):
    # DeepLabV3 DDP x2: the forecast read 'MiB/device 1037' (the RSS's rise over its pre-model 389 MiB) beside the
    # memory section's 1436 MiB, and its plot said 'memory per device (MiB; CUDA: the device level)'
    path = _cpu_store(tmp_path)
    bl, sweep, figs = _blocks(path, tmp_path, monkeypatch)
    table = next(b for b in bl if b[0] == "table")
    col = table[1].index("MiB/device")
    cells = {r[col].split(" ")[0] for r in table[2] if r[0] == "synthetic DDP [fp32]" and r[1].isdigit()}
    x1 = next(c for c in sweep.bench["synthetic"] if c.strategy == "ddp" and c.device_count == 1)
    assert cells == {f"{frontier.peak_mib(x1):.0f}"} == {"700"}, cells    # 500 before the model + 200 of it
    text = " ".join(b[1] for b in bl if b[0] == "p")
    assert "MiB/device is a process's peak RSS (its largest rank's), the figure the memory section gives" in text
    assert "on CPU both less the process's RSS before its model" in text              # the check's, said so
    ax = figs[0].axes[0]
    assert ax.get_ylabel() == "peak RSS per process (MiB, as the memory section)" and "CUDA" not in ax.get_ylabel()
    rests = next(r[-1] for r in table[2] if r[0] == "synthetic DDP [fp32]" and r[1] == "rests on")
    assert ("memory: one process's peak RSS above its RSS before the model, no range (--repeats 3 gives it one), its "
            "RSS before the model (500 MiB, the median of processes) added as measured") in rests
    pk = fi.Spread((200.0, 210.0, 190.0))                     # three processes: their rises listed, the baseline added
    base = dataclasses.replace(fs.inputs(*_ddp(path)).memory, runtime_mib=389.0)
    assert spread.memory_words(base, pk) == ("memory: the largest rank's peak RSS above its RSS before the model, "
                                             "3 processes (200, 210, 190 MiB), its RSS before the model (389 MiB, "
                                             "the median of processes) added as measured")
    assert spread.memory_words(dataclasses.replace(base, device_type="cuda"), pk) == (
        "memory: the largest rank's peak, 3 processes (200, 210, 190 MiB)")          # CUDA: as it was


def test_a_spreads_figures_are_never_written_in_powers_of_ten():
    assert fi.Spread((1036.6, 1025.2, 99.94)).words("MiB") == "3 processes (1037, 1025, 99.9 MiB)"


def test_a_cpu_forecast_holds_a_budget_to_a_nodes_processes_summed_as_the_memory_section_does(tmp_path, monkeypatch):
    # the memory section holds a CPU budget against a node's processes summed (bench.analysis.fit.budget_peak): DDP x2
    # at 700 MiB a process needs 1400 MiB of a 1 GiB node, while the forecast held one process's figure and read 'fits'
    path = _cpu_store(tmp_path)
    conn = store.connect(path, readonly=True)
    try:
        sweep = load(conn, pick_sweep(conn, 1))
    finally:
        conn.close()
    figs = []
    real = fp.memory_figure
    monkeypatch.setattr(fp, "memory_figure", lambda *a, **k: figs.append(real(*a, **k)) or figs[-1])
    bl = rf.blocks(path, sweep, str(tmp_path / "plots"), "test", memory_budget_gib=1.0)
    # the plot holds each count to the share of the node its processes get, as the sentence does: one process has the
    # whole 1024 MiB, two 512 each (it drew 512 at every count, the x1 point 'over' a budget the text said it was within)
    line = next(ln for ln in figs[0].axes[0].get_lines() if "a process's share" in ln.get_label())
    shares = dict(zip(line.get_xdata(), line.get_ydata()))
    assert shares[1] == 1024.0 and shares[2] == 512.0 and shares[max(shares)] == 512.0, shares
    said = next(b[1] for b in bl if b[0] == "p" and b[1].startswith("synthetic DDP [fp32]:"))
    assert ("memory: does not fit in the 1.00 GiB budget (--memory-budget-gib) per node at any count up to 1024 "
            "(at least 1400 MiB per node)") in said, said
    assert "no memory budget: --memory-budget-gib sets one, held against a node's processes summed" in next(
        b[1] for b in rf.blocks(path, sweep, str(tmp_path / "p2"), "test") if b[0] == "p" and "synthetic DDP" in b[1])


def test_a_sharded_cpu_forecast_holds_at_least_the_whole_model_each_process_builds_first():
    # On CPU every FSDP rank builds the whole model before sharding and RSS peaks never reset: the page's figure (what the
    # budget holds) read the shards' steady state and could say 'fits' at counts the construction peak cannot.
    from bench.forecast import memory as mm
    base = mm.Base(1, "fsdp", 800.0, 800.0, 1600.0, 0.0, 100.0, (50.0,) * 16, "rss", "cpu", 1.0, 3300.0, 400.0)
    at8 = mm.per_device(base, "fsdp", 8, {})
    assert at8.floor_mib == 900.0 and at8.total_mib < at8.floor_mib
    assert at8.device_mib == 900.0 + 400.0   # the floor plus the pre-model RSS, not the shards' steady state
    on_gpu = dataclasses.replace(base, method="nvml", device_type="cuda")
    cuda = mm.per_device(on_gpu, "fsdp", 8, {})
    assert cuda.floor_mib == 0.0 and cuda.device_mib == cuda.total_mib + 400.0   # a GPU frees what it built


def test_a_named_batch_over_a_cpu_nodes_budget_already_at_its_smallest_count_is_said_by_the_nodes_total():
    # review: the forecast's 'over the budget already at xN' held one process's peak RSS to a node's budget, so DDP x2
    # at 700 MiB a process (1400 MiB a node) passed a 1 GiB node budget the memory section says it is over
    from types import SimpleNamespace
    from bench.forecast import batches
    c = SimpleNamespace(device_type="cpu", device_count=2, nodes=1, memory_mib={"rank 0": 700.0, "rank 1": 700.0})
    s = SimpleNamespace(batch="at batch 8", configs={2: c})
    assert batches.over_words(s, 1024.0, frontier.held_mib(c)) == (
        "; at batch 8 over the budget already at x2 (1.37 GiB measured)")
