"""The H200 transformer fit (sweep 4 of examples/h200-2026-11-27/gpu.sqlite) as a GPU user read it (trial C, findings
1, 7 and 11): its search ran 8, 16, 12, 14, 15 under the old rule (--per-device-batch 8 --max-batch 16); held to
today's, 12 fits and 14 does not, and 13 was never tried, yet the page read '12' beside 'smallest that did not fit:
14' as a resolved boundary, described a search of 'batches 1, 2, 4, ...', gave one column's overages in MiB and GiB,
and its frontier plot labelled the batch-14 runs, over the budget, 'DDP x1 [bf16, adamw]'. Stand-ins built here with
the store's figures; no GPU needed."""
from __future__ import annotations

import json
from types import SimpleNamespace

from bench.analysis import fit
from bench.report import fit as fit_report
from bench.report import frontier
from bench.report import frontierplot

BUDGET = 16384.0
ORDER = [8, 16, 12, 14, 15]
# batch -> (stored verdict, device-level peak MiB) as sweep 4 stored DDP x1's trials: 14 kept as fitting by the
# allocator's peak reserved (15.61 GiB), its device level 16.90 GiB
DDP = {8: (fit.FITS, 11972.4), 16: (fit.OVER, 19000.0), 12: (fit.FITS, 15266.25), 14: (fit.FITS, 17306.16),
       15: (fit.OVER, 18372.1)}
COMMAND = ("./run_bench.sh fit --store results/gpu.sqlite --workloads transformer --strategies ddp,fsdp --precision bf16 "
           "--optimizer adamw --per-device-batch 8 --max-batch 16 --memory-budget-gib 16 --no-report")


def _rows(strategy: str, trials: dict, order: list) -> list:
    """A fit sweep's results rows as bench.store.read gives them, in the order the search wrote them."""
    search = f"bench/transformer/{strategy}/cudax1/b0"
    return [{"result_id": i, "mode": "fit", "status": "ok", "reason": "", "workload": "transformer",
             "strategy": strategy, "device_type": "cuda", "device_count": 1, "per_device_batch": b,
             "precision": "bf16", "optimizer": "adamw", "options_json": "{}", "activation_checkpointing": "none",
             "config_key": f"fit/{strategy}/b{b}",
             "details_json": json.dumps({"fit": {"search": search, "verdict": trials[b][0], "peak_mib": trials[b][1],
                                                 "budget_mib": BUDGET, "bench_key": f"bench/{strategy}/b{b}"}})}
            for i, b in enumerate(order, 1)]


def _memory(trials: dict, order: list):
    return lambda rid: [{"device": "cuda:0", "device_used_mib": trials[order[rid - 1]][1]}]


def _sweep(trials=DDP, order=ORDER, command=COMMAND, config=None):
    [s] = fit.searches(_rows("ddp", trials, order), _memory(trials, order), {"ddp": "DDP"})
    row = {"command_line": command, "config_json": json.dumps(config if config is not None else {"per_device_batch": 8})}
    return SimpleNamespace(fit=[s], bench={}, sweep=row), s


def _text(blocks) -> str:
    return " ".join(b[1] for b in blocks if b[0] == "p")


def test_an_untried_batch_between_the_largest_that_fits_and_the_smallest_that_did_not_is_said():
    sweep, s = _sweep()
    assert s.largest == 12 and s.smallest_not[0] == 14 and s.untried == [13]
    blocks = fit_report.blocks(sweep)
    [row] = next(b for b in blocks if b[0] == "table")[2]
    assert row[2] == ("12 (the largest tried that fits, by its trial; not measured); 13 not tried "
                      "(fit --per-device-batch 13 --max-batch 13 with this sweep's flags tries them)"), row
    text = _text(blocks)
    assert "DDP x1 fits 12 (the largest tried; 13 not tried: fit --per-device-batch 13 --max-batch 13 with this sweep's flags tries them) a GPU" in text, text


def test_a_measured_run_over_the_budget_names_the_untried_batch_beside_the_largest_tried():
    sweep, s = _sweep()
    s.measured = {14: (fit.FITS, 17978.16)}   # the measured run at 14, stored as fitting, 17.56 GiB
    text = _text(fit_report.blocks(sweep))
    assert ("DDP x1: 14 ran, but over the 16.00 GiB budget by 1.56 GiB; 12 is the largest tried that fits (by its "
            "trial; no measured run there); 13 not tried (fit --per-device-batch 13 --max-batch 13 with this sweep's flags tries them)") in text, text
    assert "largest within it: 12" not in text


def test_a_boundary_the_trials_bracket_reads_as_resolved():
    trials = {**DDP, 13: (fit.OVER, 16400.0)}
    sweep, s = _sweep(trials, ORDER + [13])
    assert s.untried == []
    blocks = fit_report.blocks(sweep)
    [row] = next(b for b in blocks if b[0] == "table")[2]
    assert row[2] == "12 (by its trial; not measured)" and row[4].startswith("13: peak 16.02 GiB"), row
    assert "not tried" not in _text(blocks)


def test_the_search_is_described_as_the_stored_sweep_ran_it():
    sweep, s = _sweep()
    assert s.order == ORDER
    text = _text(fit_report.blocks(sweep))
    assert ("batches 8, 16 (from --per-device-batch 8, doubling up to --max-batch 16) until one did not fit, then "
            "bisection between the largest that fit and the smallest that did not (tried, in order: DDP x1 8, 16, 12, "
            "14, 15)") in text, text
    assert "1, 2, 4" not in text
    # no --per-device-batch and no --max-batch: from 1 up to the default cap
    trials = {1: (fit.FITS, 2000.0), 2: (fit.FITS, 3000.0), 4: (fit.OVER, 17000.0), 3: (fit.FITS, 4000.0)}
    sweep, _ = _sweep(trials, [1, 2, 4, 3], command="./run_bench.sh fit --workloads transformer", config={})
    text = _text(fit_report.blocks(sweep))
    assert "batches 1, 2, 4, ... (from 1, doubling up to --max-batch's default, 4096)" in text, text
    assert fit.max_batch_of("fit --max-batch=32") == 32 and fit.max_batch_of("fit --gpus 2") is None


def test_one_column_gives_its_overages_in_one_unit():
    sweep, s = _sweep()
    s.measured = {14: (fit.FITS, 17978.16)}
    blocks = fit_report.blocks(sweep)
    [row] = next(b for b in blocks if b[0] == "table")[2]
    # 14's trial 922 MiB over, its measured run 1.56 GiB: both in GiB, two decimals
    assert row[4] == "14: peak 16.90 GiB, over by 0.90 GiB; its measured run: peak 17.56 GiB, over by 1.56 GiB", row
    assert "MiB" not in row[4]
    # an overage GiB's two decimals would read as none: the whole column in MiB
    assert frontier.over_unit([5.0, 1597.0]) == "MiB" and frontier.over_unit([922.16, 1597.0]) == "GiB"
    assert frontier.over_unit([34.0, 64.0]) is None and frontier.over_unit([1597.0, 1822.0]) is None  # one unit already
    assert frontier.over_size(922.16, "GiB") == "0.90 GiB" and frontier.over_size(1597.0, "MiB") == "1597 MiB"
    assert frontier.over_size(0.3) == "307 KiB" and frontier.over_size(922.16) == "922 MiB"   # a lone figure as before


def _config(strategy: str, label: str, batch: int, peak: float, sps: float):
    return SimpleNamespace(strategy=strategy, label=label, device_type="cuda", device_count=1, global_batch=batch,
                           samples_per_s=sps, device_mib={"cuda:0": peak}, run_device_mib={}, reserved_mib={},
                           memory_mib={}, precision="bf16", optimizer="adamw", aux="false")


def _labels(fig) -> list:
    return sorted(t.get_text() for t in fig.axes[0].texts)


def test_the_fit_frontier_plot_names_each_point_s_batch_and_marks_those_over_the_budget_hollow():
    over = [_config("ddp", "DDP x1 [bf16, adamw]", 14, 17978.16, 226.8),
            _config("fsdp", "FSDP x1 [bf16, adamw]", 14, 18202.0, 164.4)]
    fig = frontierplot.frontier_figure(over, "transformer", "H200", BUDGET)
    assert _labels(fig) == ["DDP x1 [bf16, adamw] at batch 14 (over)", "FSDP x1 [bf16, adamw] at batch 14 (over)"]
    ax = fig.axes[0]
    faces = [c.get_facecolors() for c in ax.collections if len(c.get_offsets())]
    assert len(faces) == 2 and all(len(f) == 0 or f[0][3] == 0 for f in faces), faces   # hollow
    legend = ax.get_legend()
    entries = dict(zip([t.get_text() for t in legend.get_texts()], legend.legend_handles))
    assert "hollow: over the budget" in entries
    assert entries["DDP"].get_facecolors()[0][3] == 1, "the strategy's legend entry is filled, its colour"
    # within the budget at their own batches (a fit sweep's answers): each named with its batch, filled, no '(over)'
    fits = [_config("ddp", "DDP x1 [bf16, adamw]", 12, 15266.25, 220.0),
            _config("fsdp", "FSDP x1 [bf16, adamw]", 13, 16000.0, 160.0)]
    fig = frontierplot.frontier_figure(fits, "transformer", "H200", BUDGET)
    assert _labels(fig) == ["DDP x1 [bf16, adamw] at batch 12", "FSDP x1 [bf16, adamw] at batch 13"]
    assert "hollow: over the budget" not in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # a sweep at one batch per count, within the budget: labels as they were
    same = [_config("ddp", "DDP x1 [bf16, adamw]", 12, 15266.25, 220.0)]
    assert _labels(frontierplot.frontier_figure(same, "transformer", "H200", BUDGET)) == ["DDP x1 [bf16, adamw]"]
