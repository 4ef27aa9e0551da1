"""What a GPU user reading the committed H200/H100 examples met (trial A, /tmp/trialA findings 1, 2, 8, 13, 14), each
held by a stand-in sweep built here: no GPU needed."""
from types import SimpleNamespace

from bench.analysis import fit


def _h200_fit_search(name="DDP x1", measured_peak=17978.16):
    """The H200 transformer fit (sweep 4 of examples/h200-2026-11-27/gpu.sqlite) as read back: trials stored as fitting
    to 14 by the allocator's peak reserved, whose device level at 14 is 16.90 GiB in a 16 GiB budget, and a measured
    run at 14 stored as fitting that peaked 17.56 GiB."""
    key = f"bench/{name}/b14"
    return fit.Search("k" + name, "transformer", "ddp", "cuda", 1, name, f"{name} [bf16, adamw]", ("bf16", "adamw"),
                      16384.0, trials=[(8, fit.FITS, 11972.4, ""), (12, fit.FITS, 15266.25, ""),
                                       (14, fit.FITS, 17306.16, ""), (15, fit.OVER, 18372.1, "")],
                      bench_keys={14: key, 12: f"bench/{name}/b12"}, measured={14: (fit.FITS, measured_peak)}), key


def test_a_batch_over_the_budget_is_never_the_largest_that_fits_and_is_said_as_over():
    from bench.report import fit as fit_report
    s, key = _h200_fit_search()
    assert s.largest == 12 and s.restated == [14] and s.ran_over == [(14, 17978.16)]
    c = SimpleNamespace(key=key, samples_per_s=226.8, tokens_per_sample=1024, tokens_per_s_per_device=232239.0,
                        device_type="cuda", device_mib={"cuda:0": 17978.16}, run_device_mib={}, reserved_mib={},
                        memory_mib={}, loss_not_finite=0)
    sweep = SimpleNamespace(fit=[s], bench={"transformer": [c]})
    blocks = fit_report.blocks(sweep)
    [row] = next(b for b in blocks if b[0] == "table")[2]
    assert row[2] == ("12 (the largest tried that fits, by its trial; not measured); 13 not tried (fit --per-device-batch 13 "
                      "--max-batch 13 with this sweep's flags tries them)") and row[3] == "14.91 GiB", row   # 13 never tried (trial C, 1)
    assert row[5] == "at 14: 17.56 GiB (over)" and row[6] == "–", row
    text = " ".join(b[1] for b in blocks if b[0] == "p")
    assert "fits 14" not in text and "(over)" not in row[3], text
    assert ("DDP x1: 14 ran (226.8 samples/s), but over the 16.00 GiB budget by 1.56 GiB; 12 is the largest tried that "
            "fits (by its trial; no measured run there); 13 not tried") in text, text
    assert "by today's rule they do not fit" in text


def test_nothing_within_the_budget_reads_none_verified():
    from bench.report import fit as fit_report
    s, _ = _h200_fit_search()
    s.trials = [t for t in s.trials if t[0] >= 14]
    sweep = SimpleNamespace(fit=[s], bench={})
    assert s.largest is None
    text = " ".join(b[1] for b in fit_report.blocks(sweep) if b[0] == "p")
    assert "DDP x1: 14 ran, but over the 16.00 GiB budget by 1.56 GiB; none verified within the budget" in text, text


def test_one_shard_group_quotes_no_figure_of_another_run():
    # Every H200 report said HSDP at one shard group was "not FSDP (one H100 stepped 53% slower than fsdp)": a constant
    # from examples/h100-2026-11-24, beside this sweep's own HSDP x1 9% slower (transformer-sharded) and HSDP x2 2.4x
    # faster (rehearsal) than FSDP at the same count.
    from bench.config import SweepConfig
    from bench.rank import fsdp
    from bench.report import training_state
    from bench.shared.spec import ONE_SHARD_GROUP
    from bench.sweep import settings
    c = SimpleNamespace(strategy="hsdp", options={"shard_size": 1}, device_count=1, label="HSDP x1 [bf16, adamw]")
    said = [training_state.hsdp_mesh(c), fsdp.mesh_words(1, 1)["note"],
            *settings.hsdp_lines(SweepConfig(strategies=("hsdp",), gpus=(1, 2)))]
    for text in said:
        assert "%" not in text and "H100" not in text, text
        assert "all-reduces every gradient shard over a replicate group of one rank" in text and "not FSDP" in text, text
    assert "H100" not in ONE_SHARD_GROUP


def _levers_sweep(tmp_path, full_steps_ms: list):
    from bench.analysis.results import load
    from bench.shared.spec import RunSpec
    from bench.store import store
    from bench.sweep import record
    from report_fixtures import measured
    conn = store.connect(str(tmp_path / "s.sqlite"))
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    base = dict(workload="transformer", device_type="cpu", device_count=2, per_device_batch=8, global_batch=16,
                image_size=0, steps=8, warmup=1, threads=1, seed=0, scaling="weak")
    for ac, step_ms, rss in (("none", [100.0] * 8, 1500.0), ("full", full_steps_ms, 1000.0)):
        s = RunSpec(strategy="ddp", activation_checkpointing=ac, **base)
        record.record_result(conn, sid, None, s, "ok", payload={**measured(2, step_ms, 8),
                             "memory": [{"rank": r, "device": "cpu", "peak_rss_mib": rss} for r in range(2)]})
    return load(conn, sid)


def test_a_levers_ratio_from_an_unstable_process_is_flagged_not_resolved(tmp_path):
    # One H100 read activation checkpointing at 1.51x, 1.80x and 1.90x as long on three near-identical setups, each ratio
    # from one process whose steps spread 19-34% of their median, with no flag beside them.
    from bench.report import levers
    shaky = levers.blocks(_levers_sweep(tmp_path, [100.0, 100.0, 160.0, 160.0, 100.0, 160.0, 100.0, 160.0]))
    [row] = next(b for b in shaky if b[0] == "table")[2]
    assert row[6].startswith("not resolved (") and row[7].startswith("unstable, one process (IQR: with "), row
    text = [b[1] for b in shaky if b[0] == "p"][-1]
    assert ", not resolved: DDP x2 [fp32, ac=full] ran one process whose steps spread" in text, text
    steady = levers.blocks(_levers_sweep(tmp_path / "b", [125.0] * 8))
    [row] = next(b for b in steady if b[0] == "table")[2]
    assert row[6:8] == ["1.25x", "stable"], row


def test_the_time_to_train_subtitle_names_compilation_only_where_a_configuration_compiled():
    # deeplabv3_time_to_train.png of the H200 example read "warm-up and compilation included": nothing was compiled.
    from bench.report import trainplot
    bars = [("single device x1 [bf16]", 164.0), ("DDP x1 [bf16]", 170.0)]
    plain = trainplot.time_to_train_figure(bars, "estimate", "deeplabv3", "x")
    assert plain.axes[0].get_title() == "this run (estimate, warm-up included)"
    compiled = trainplot.time_to_train_figure(bars, "estimate", "deeplabv3", "x", compiled=True)
    assert compiled.axes[0].get_title() == "this run (estimate, warm-up and compilation included)"


def test_category_labels_keep_a_margin_below_and_recommended_stars_hide_no_marker(tmp_path):
    # deeplabv3_step_times.png: the upright label "single device x1 [bf16]" reached the image's bottom edge;
    # synthetic_overview.png: two filled "recommended" stars covered three of six series' markers.
    from bench.analysis.results import load
    from bench.store import store
    from bench.report import plots
    from pathlib import Path
    conn = store.connect(str(Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26" / "gpu.sqlite"),
                         readonly=True)
    cs = load(conn, 1).bench["deeplabv3"]
    conn.close()
    fig = plots.step_times_figure(cs, "deeplabv3", "x")
    fig.draw_without_rendering()
    r = fig._get_renderer()
    lowest = min(t.get_window_extent(r).y0 for t in fig.axes[0].get_xticklabels())
    assert lowest >= 0.1 * fig.dpi, lowest   # at least 0.1 in between the longest label and the edge
    over = plots.overview_figure(cs, "deeplabv3", "x", picks=[cs[0]])
    [star] = [ln for ln in over.axes[0].get_lines() if ln.get_label() == "recommended"]
    assert star.get_markerfacecolor() == "none", star.get_markerfacecolor()


def test_the_frontier_legend_lists_only_what_is_drawn():
    # transformer_frontier.png of the H200 fit: a legend entry for a 'frontier' line that was not drawn (one point beat
    # the other) and a grey 'x1' marker matching no point, when every point was at one count.
    from bench.report import frontierplot
    from bench.store import store
    from bench.analysis.results import load
    from pathlib import Path
    conn = store.connect(str(Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27" / "gpu.sqlite"),
                         readonly=True)
    cs = load(conn, 4).bench["transformer"]
    conn.close()
    fig = frontierplot.frontier_figure(cs, "transformer", "x", 16384.0)
    names = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert not any(n.startswith("frontier") or n == "x1" for n in names), names


def test_a_lever_is_set_beside_a_twin_with_the_same_auxiliary_head_and_batch(tmp_path):
    # An H200 sweep (--deeplabv3-aux true,unused --find-unused-parameters false,true) set [find_unused_parameters,
    # aux=unused] beside [aux=true] and read "find_unused_parameters makes a step 1.12x as long": the 12% was what
    # unused parameters cost, and [aux=unused] without find_unused_parameters (its true twin) DDP refuses.
    from bench.analysis.results import load
    from bench.report import levers
    from bench.shared.spec import RunSpec
    from bench.store import store
    from bench.sweep import record
    from report_fixtures import measured
    conn = store.connect(str(tmp_path / "s.sqlite"))
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    base = dict(workload="deeplabv3", device_type="cpu", device_count=1, image_size=64, steps=8, warmup=1, threads=1,
                seed=0, scaling="weak")
    for aux, unused, batch, step_ms in (("true", False, 2, 100.0), ("true", True, 2, 100.0), ("unused", True, 2, 112.0),
                                        ("true", True, 4, 190.0)):
        s = RunSpec(strategy="ddp", deeplabv3_aux=aux, per_device_batch=batch, global_batch=batch,
                    options=(("find_unused_parameters", True),) if unused else (), **base)
        record.record_result(conn, sid, None, s, "ok", payload={**measured(1, [step_ms] * 8, batch),
                             "memory": [{"rank": 0, "device": "cpu", "peak_rss_mib": 1000.0}]})
    rows = next(b for b in levers.blocks(load(conn, sid)) if b[0] == "table")[2]
    assert [(r[1], r[2], r[6]) for r in rows] == [("find_unused_parameters", "DDP x1 [fp32, aux=true]", "1.00x")], rows


def test_a_fit_cut_by_sigterm_ends_interrupted_with_its_trials_kept(tmp_path):
    # An H200 fit under `timeout` (SIGTERM) was left 'running' and read back as 'died': no handler, no end of the sweep.
    import os
    import signal
    import sqlite3
    from test_fit import _h100_fit, _levels_gpu_launcher
    from bench.commands import fit as fit_cmd
    cfg, _, machine, path = _h100_fit(tmp_path)
    inner, lines = _levels_gpu_launcher(700.0, 200.0), []

    def run(spec, limits):
        if spec.per_device_batch > 1:
            os.kill(os.getpid(), signal.SIGTERM)   # the second trial: as `timeout` sends it
        return inner(spec, limits)
    noted: list = []
    before = signal.signal(signal.SIGTERM, lambda num, _frame: noted.append(num))   # without fit's own: noted, not fatal
    try:
        assert fit_cmd.run_fit(cfg, machine, 4096, "fit ...", log=lines.append, run_config=run) == 128 + signal.SIGTERM
        assert noted == [] and signal.getsignal(signal.SIGTERM) is not before   # fit's handler had it; ours is back
    finally:
        signal.signal(signal.SIGTERM, before)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT status FROM sweeps").fetchall() == [("interrupted",)]
    assert conn.execute("SELECT per_device_batch, mode, status FROM results ORDER BY result_id").fetchall() == [
        (1, "fit", "ok"), (2, "fit", "interrupted")]   # the trial it cut is in the store, as a sweep's would be
    from conftest import read_sweep
    from bench.report import fit as fit_report
    [s] = read_sweep(path).fit   # read back: the cut trial is no trial, and the page renders
    assert s.order == [1] and not s.errors and fit_report.blocks(read_sweep(path))
    assert "interrupted by SIGTERM: its trials and measured runs so far are kept" in lines[-1], lines[-1]


def test_an_out_of_memory_error_from_a_fragmented_allocator_is_said_as_fragmentation_not_capacity():
    # The H200's measured runs at 148-154 (their trials fit) ran out with 16.7-18.0 GiB reserved but unallocated; its
    # trials at 155-256 ran out with under 0.25 GiB so: capacity. PyTorch's messages, as stored.
    from bench.analysis import oom
    tail = (" If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "to avoid fragmentation.")
    frag = ("rank 0 on vm: OutOfMemoryError: CUDA out of memory. Tried to allocate 18.80 GiB. GPU 0 has a total capacity "
            "of 139.80 GiB of which 1.73 GiB is free. Including non-PyTorch memory, this process has 138.06 GiB memory in "
            "use. Of the allocated memory 118.80 GiB is allocated by PyTorch, and 17.97 GiB is reserved by PyTorch but "
            "unallocated." + tail)
    full = ("rank 0 on vm: OutOfMemoryError: CUDA out of memory. Tried to allocate 18.92 GiB. GPU 0 has a total capacity "
            "of 139.80 GiB of which 18.80 GiB is free. Including non-PyTorch memory, this process has 120.99 GiB memory in "
            "use. Of the allocated memory 119.52 GiB is allocated by PyTorch, and 191.77 MiB is reserved by PyTorch but "
            "unallocated." + tail)
    assert oom.words(frag) == ("fragmentation, not capacity: 17.97 GiB reserved but unallocated and 1.73 GiB free "
                               "against 18.80 GiB asked; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True may fit it")
    assert oom.words(full) == "" and oom.read(full).unallocated_mib == 191.77
    assert oom.words("rank 1: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB") == ""  # no figures



def test_a_signal_inside_a_deferred_block_waits_for_its_end_whichever_thread_the_kernel_gives_it():
    # With torch imported a process has other threads: the main thread's mask alone let a SIGTERM sent while a fit
    # ended its sweep run the handler inside the block (the sweep stayed 'running').
    import os
    import signal
    import threading
    from bench.shared.procs import Interrupted, interruptible, signals_deferred
    inside, go, sent = threading.Event(), threading.Event(), threading.Event()

    def sender():   # a thread started before the block, as torch's are: it does not inherit the block's mask
        go.wait(10)
        os.kill(os.getpid(), signal.SIGTERM)
        sent.set()
    t = threading.Thread(target=sender)
    t.start()
    with interruptible():
        try:
            with signals_deferred():
                go.set()
                sent.wait(10)
                for _ in range(1000):   # the main thread runs Python's handlers between bytecodes: give it many
                    sum(range(100))
                inside.set()
            raise AssertionError("no signal came after the block")
        except Interrupted as e:
            assert inside.is_set() and e.signum == signal.SIGTERM   # after the block, not inside it


def test_fragmentation_needs_the_cache_and_the_free_memory_to_hold_the_request_in_any_unit():
    from bench.analysis import oom
    msg = ("CUDA out of memory. Tried to allocate {a}. GPU 0 has a total capacity of 79.10 GiB of which {f} is free. "
           "Of the allocated memory 70.00 GiB is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated.")
    # more held unallocated than free, but the two together less than asked: capacity, not fragmentation
    assert oom.words(msg.format(a="4.00 GiB", f="512.00 MiB", u="1.00 GiB")) == ""
    assert oom.words(msg.format(a="1.50 GiB", f="512.00 MiB", u="1.00 GiB")).startswith(
        "fragmentation, not capacity: 1.00 GiB reserved but unallocated and 512 MiB free against 1.50 GiB asked")
    small = oom.read(msg.format(a="20.00 MiB", f="512.00 KiB", u="1048576 bytes"))
    assert (small.asked_mib, small.free_mib, small.unallocated_mib) == (20.0, 0.5, 1.0)


def test_the_fit_terminal_names_a_measured_runs_fragmentation(tmp_path):
    from test_fit import _h100_fit, _levels_gpu_launcher
    from bench.commands import fit as fit_cmd
    from bench.sweep.diagnose import Outcome
    cfg, _, machine, path = _h100_fit(tmp_path)
    inner, lines = _levels_gpu_launcher(700.0, 0.0), []
    frag = ("rank 0: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.10 GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 1.50 GiB "
            "is reserved by PyTorch but unallocated.")

    def run(spec, limits):   # trials fit to 85 by the device level (5 GiB); the measured run at 85 runs out
        if spec.mode == "bench" and spec.per_device_batch == 85:
            return Outcome("failed", frag)
        return inner(spec, limits)
    fit_cmd.run_fit(cfg, machine, 4096, "fit ...", log=lines.append, run_config=run)
    said = [ln for ln in lines if "at batch 85: its trial fit" in ln]
    assert said and "(fragmentation, not capacity: 1.50 GiB reserved but unallocated" in said[0], lines


def test_a_levers_ratio_inside_its_processes_spread_is_not_resolved_and_their_spread_is_named(tmp_path):
    # An H200's checkpointing pairs read 'stable' beside two processes a side 14-21% apart: the cell names the spread,
    # and a ratio no farther from 1 than that spread is not resolved.
    from bench.analysis.results import load
    from bench.report import levers
    from bench.shared.spec import RunSpec
    from bench.store import store
    from bench.sweep import record
    from report_fixtures import measured

    def sweep(path, full_ms: tuple):
        conn = store.connect(str(path))
        sid = store.begin_sweep(conn, "cmd", "{}", None)
        base = dict(workload="transformer", device_type="cpu", device_count=1, per_device_batch=8, global_batch=8,
                    image_size=0, steps=8, warmup=1, threads=1, seed=0, scaling="weak")
        for ac, per_process in (("none", (100.0, 121.0)), ("full", full_ms)):
            for repeat, ms in enumerate(per_process):
                s = RunSpec(strategy="ddp", activation_checkpointing=ac, repeat=repeat, **base)
                record.record_result(conn, sid, None, s, "ok", payload={**measured(1, [ms] * 8, 8),
                                     "memory": [{"rank": 0, "device": "cpu", "peak_rss_mib": 1000.0}]})
        return load(conn, sid)
    [row] = next(b for b in levers.blocks(sweep(tmp_path / "a.sqlite", (200.0, 220.0))) if b[0] == "table")[2]
    assert row[6] == "1.91x" and row[7].startswith("unstable (without: its steps spread 19% of their median"), row
    [row] = next(b for b in levers.blocks(sweep(tmp_path / "b.sqlite", (115.0, 120.0))) if b[0] == "table")[2]
    assert row[6].startswith("not resolved ("), row
