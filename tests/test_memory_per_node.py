"""On CPU the ranks of a node share one RAM: the memory budget is held against the node's total, the peak RSS of the
processes it runs summed, and the page gives that total beside the per-process peak (a new user's default CPU report
read 'DDP x2, 4.4 samples/s at a peak of 1.40 GiB per process. The least memory: single device x1, 1.17 GiB', and
held --memory-budget-gib against each rank's peak: a budget set to the box's RAM let DDP x2 'fit' where its two
processes needed 2.80 GiB). On CUDA each GPU has its own memory, and nothing changes."""
from __future__ import annotations

from types import SimpleNamespace

from bench.analysis import fit
from bench.report import fit as fit_report, frontier, pages
from bench.report import frontierplot
from test_frontier import GIB, build, payload, spec


def _sweep(tmp_path, device: str, budget_gib: float):
    """DDP x2, the faster, at 700 MiB a rank (1400 MiB the node), and single device x1 at 800 MiB."""
    return build(str(tmp_path / f"{device}.sqlite"), [(spec("ddp", 2, device=device), payload(2, 10.0, 700.0, device)),
                                                      (spec("single", 1, device=device), payload(1, 16.0, 800.0, device))],
                 config_json={"memory_budget_gib": budget_gib})


def test_a_cpu_budget_holds_the_nodes_total_and_the_page_gives_it_beside_the_per_process_peak(tmp_path):
    sweep = _sweep(tmp_path, "cpu", 1.0)
    budget, how = frontier.budget_mib(sweep)
    assert (budget, how) == (GIB, "1.00 GiB per node (--memory-budget-gib)")
    ddp = next(c for c in sweep.bench["synthetic"] if c.strategy == "ddp")
    assert (frontier.peak_mib(ddp), frontier.node_mib(ddp), frontier.held_mib(ddp)) == (700.0, 1400.0, 1400.0)
    ((row, text),) = frontier.answer("synthetic", sweep.bench["synthetic"], budget)
    # DDP x2's ranks each fit 1 GiB, but not together: single device x1 is the answer, DDP x2 over by 376 MiB
    assert row[2:-1] == ["single device x1", "2000.0", "800 MiB", "800 MiB", "DDP x2 by 376 MiB (+37%)"], row
    assert "Fastest within 1.00 GiB per node: single device x1, 2000.0 samples/s at a peak of 800 MiB per node " \
           "(1 process)" in text, text
    without = frontier.answer("synthetic", sweep.bench["synthetic"], None)[0][1]
    assert "DDP x2, 6400.0 samples/s at a peak of 700 MiB per process, 1.37 GiB per node (2 processes)" in without
    assert "The least memory: single device x1, 800 MiB per node (1 process)" in without  # 800 against the node's 1400
    md = pages.to_markdown(frontier.blocks(sweep, budget, how), str(tmp_path))
    assert "| its peak memory per process | per node (its processes summed) | did not fit (over the budget by) |" in md
    assert "per node: the peak RSS of the processes one node runs, summed, since they share its RAM: the budget is " \
           "held against the node's." in md
    assert frontier.budget_mib(_sweep(tmp_path / "n", "cpu", 0.0))[1] == "none (on CPU --memory-budget-gib sets one, per node)"


def test_the_cpu_frontier_plots_the_nodes_total(tmp_path):
    sweep = _sweep(tmp_path, "cpu", 1.0)
    fig = frontierplot.frontier_figure(sweep.bench["synthetic"], "synthetic", "cpu", GIB)
    ax = fig.axes[0]
    xs = sorted(float(c.get_offsets()[0][0]) for c in ax.collections if len(c.get_offsets()))
    assert xs == [800.0, 1400.0] and "peak memory per node: the peak RSS of its processes, summed" in ax.get_xlabel()
    assert "per node" in fig._suptitle.get_text()


def test_on_cuda_each_gpu_is_held_to_the_budget_alone_as_before(tmp_path):
    sweep = _sweep(tmp_path, "cuda", 1.0)
    ((row, text),) = frontier.answer("synthetic", sweep.bench["synthetic"], GIB)
    assert row[2:-1] == ["DDP x2", "6400.0", "700 MiB", "–"], row   # no node column: each GPU has its own memory
    assert "at a peak of 700 MiB per GPU" in text and "per node" not in text and "per process" not in text
    assert all(frontier.node_mib(c) is None for c in sweep.bench["synthetic"])


def test_the_nodes_total_sums_its_ranks_and_a_multi_node_run_is_its_fullest_node():
    rows = [{"rank": r, "device": "cpu", "peak_rss_mib": mib} for r, mib in enumerate((700.0, 720.0))]
    assert fit.peak_of_rows(rows, "cpu") == (1420.0, fit.NODE_RSS)   # fit's verdicts hold the node's total too
    assert fit.peak_mib(rows + [{"rank": 1, "device": "cpu", "peak_rss_mib": 690.0}], "cpu") == 1420.0  # a repeat's lower
    assert fit.node_total({"rank 0": 10.0, "rank 1": 20.0, "rank 2": 30.0, "rank 3": 5.0}, per_node=2) == 35.0
    two_nodes = SimpleNamespace(device_type="cpu", device_count=4, nodes=2,
                                memory_mib={"rank 0": 10.0, "rank 1": 20.0, "rank 2": 30.0, "rank 3": 5.0})
    assert frontier.processes_per_node(two_nodes) == 2 and frontier.node_mib(two_nodes) == 35.0
    gpu = [{"rank": r, "device": f"cuda:{r}", "peak_reserved_mib": 900.0, "device_used_mib": 1000.0} for r in range(2)]
    assert fit.peak_of_rows(gpu, "cuda") == (1000.0, fit.DEVICE_LEVEL)   # per GPU, never summed


def test_a_cpu_fit_says_per_node_and_restates_a_verdict_judged_by_one_ranks_peak():
    # a CPU fit stored before the node's total: batch 3 fit by its largest rank (850 MiB) where its two ranks need 1700
    s = fit.Search("k", "transformer", "ddp", "cpu", 2, "DDP x2", "DDP x2", ("fp32", "sgd"), 1536.0,
                   trials=[(2, fit.FITS, 1400.0, ""), (3, fit.FITS, 1700.0, ""), (4, fit.OVER, 2000.0, "")])
    blocks = fit_report.blocks(SimpleNamespace(fit=[s], bench={}))
    assert s.largest == 2 and "1.50 GiB per node (the peak RSS of the processes one node runs, summed" in blocks[1][1]
    table = next(b for b in blocks if b[0] == "table")
    assert table[1][3] == "its peak in the trial (per node)" and table[1][5] == "peak in the measured run (per node)"
    said = next(b[1] for b in blocks if b[0] == "p" and b[1].startswith("Stored as fitting"))
    assert "(the largest rank's peak RSS alone, not the node's processes summed)" in said and "CUDA" not in said
