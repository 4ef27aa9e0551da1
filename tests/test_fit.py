"""./run_bench.sh fit (bench.commands.fit, bench.analysis.fit, bench.report.fit): the search over batches, each trial's
verdict, the store and the report's sentence through a stand-in launcher, and one real run on the CPU."""
from __future__ import annotations

import json
import sqlite3
from types import SimpleNamespace

import pytest

from bench.analysis import fit
from bench.commands import fit as fit_cmd
from bench.sweep.diagnose import Outcome
from conftest import run_bench

CUDA_OOM = "rank 1: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_the_search_doubles_until_a_batch_does_not_fit_then_bisects_to_one_sample():
    limit = 37
    largest, smallest_not, tried = fit.search(lambda b: fit.FITS if b <= limit else fit.OOM, start=1, max_batch=4096)
    assert (largest, smallest_not) == (37, 38)
    assert list(tried)[:7] == [1, 2, 4, 8, 16, 32, 64] and list(tried)[7:] == [48, 40, 36, 38, 37]
    assert fit.search(lambda b: fit.FITS, start=8, max_batch=20)[:2] == (20, None)  # the cap, said so
    assert fit.search(lambda b: fit.OVER, start=1, max_batch=64)[:2] == (None, 1)   # nothing fits
    # a start that does not fit is bisected down to the smallest batch a replica takes (BatchNorm: 2)
    assert fit.search(lambda b: fit.FITS if b <= 5 else fit.OVER, start=16, max_batch=64, smallest=2)[:2] == (5, 6)
    # an error ends the search where it stands, with what fit so far
    largest, _, tried = fit.search(lambda b: fit.FITS if b < 8 else fit.ERROR, start=1, max_batch=64)
    assert largest == 4 and tried[8] == fit.ERROR and max(tried) == 8


@pytest.mark.parametrize("status, reason, peak, want", [
    ("ok", "", 900.0, fit.FITS), ("ok", "", 1100.0, fit.OVER), ("failed", CUDA_OOM, None, fit.OOM),
    ("failed", "rank 0: killed by signal 9 (SIGKILL)", None, fit.OOM),   # the kernel's out-of-memory killer
    ("failed", "rank 0: ValueError: something else", None, fit.ERROR), ("ok", "", None, fit.ERROR)])
def test_a_trial_fits_when_it_ran_within_the_budget_and_memory_errors_do_not_fit(status, reason, peak, want):
    assert fit.verdict(status, reason, peak, 1024.0) == want


def test_peak_per_device_is_the_fullest_gpus_reserved_net_of_batches_or_the_largest_ranks_rss():
    gpu = [{"device": "cuda:0", "peak_reserved_mib": 900.0, "artefact_mib": 100.0},
           {"device": "cuda:1", "peak_reserved_mib": 850.0, "artefact_mib": 0.0}, {"device": "cpu", "peak_rss_mib": 9e9}]
    assert fit.peak_mib(gpu, "cuda") == 850.0
    assert fit.peak_mib([{"peak_rss_mib": 700.0}, {"peak_rss_mib": 720.0}], "cpu") == 720.0


def _fake_gpu_launcher(limits_per_device: dict, step_ms: dict, diverges: tuple = ()):
    """run_config on pretend GPUs: a trial over its strategy's limit runs out of memory, else it fits at 40 MiB a
    sample; a measured run takes step_ms[strategy] per step (its loss NaN throughout for a strategy in `diverges`)."""
    calls = []

    def run(spec, limits):
        calls.append((spec.mode, spec.strategy, spec.per_device_batch))
        if spec.per_device_batch > limits_per_device[spec.strategy]:
            return Outcome("failed", CUDA_OOM)
        memory = [{"rank": r, "device": f"cuda:{r}", "peak_allocated_mib": 1.0, "artefact_mib": 0.0,
                   "peak_reserved_mib": 1000.0 + 40.0 * spec.per_device_batch} for r in range(spec.device_count)]
        ms, ranks = step_ms[spec.strategy], range(spec.device_count)
        loss = {"loss": float("nan")} if spec.strategy in diverges and spec.mode == "bench" else {}
        steps = [{"kind": "measure", "rank": r, "step": i, "step_ms": ms, **loss} for r in ranks for i in range(3)]
        windows = [{"kind": "measure", "rank": r, "wall_s": 3 * ms / 1e3, "samples": 3 * spec.per_device_batch, "steps": 3}
                   for r in ranks]
        return Outcome("ok", payload={"steps": steps, "windows": windows, "memory": memory})
    return run, calls


def _h100_fit(tmp_path) -> tuple:
    """(config, names given, machine, store path) of a fit of the transformer, DDP and FSDP on 8 pretend H100s, 5 GiB."""
    from bench import options
    from bench.sweep import plan
    machine = plan.Machine(cuda_devices=8, cpu_cores=16, gpu_names=("H100",) * 8, gpu_capabilities=((9, 0),) * 8,
                           arch_list=("sm_90",), gpu_memory_bytes=(80 * 2**30,) * 8)
    path = str(tmp_path / "fit.sqlite")
    cfg, given, _ = options.prepare(["--device", "cuda", "--workloads", "transformer", "--strategies", "ddp,fsdp", "--gpus", "8",
                                     "--no-report", "--no-comm-bench", "--store", path, "--memory-budget-gib", "5"], machine=machine)
    return cfg, given, machine, path


def test_fit_stores_every_trial_and_says_which_fits_what_and_which_trains_fastest_there(tmp_path):
    from bench.analysis.results import load
    from bench.report import fit as fit_report
    from bench.store import store
    cfg, given, machine, path = _h100_fit(tmp_path)
    fit_cmd.refuse(cfg, given)
    # DDP holds everything on every GPU: room for 32 sequences; FSDP shards it: 96, at 12 ms a step against 10 ms
    run, calls = _fake_gpu_launcher({"ddp": 32, "fsdp": 96}, {"ddp": 10.0, "fsdp": 12.0})
    assert fit_cmd.run_fit(cfg, machine, 4096, "fit ...", log=lambda s: None, run_config=run) == 0
    trials = [c for c in calls if c[0] == "fit"]
    assert [b for _, s, b in trials if s == "ddp"] == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 34, 33]
    assert [c for c in calls if c[0] == "bench"] == [("bench", "ddp", 32), ("bench", "fsdp", 96)]
    conn = store.connect(path, readonly=True)
    rows = conn.execute("SELECT mode, status, per_device_batch, details_json FROM results WHERE strategy = 'ddp'").fetchall()
    oom = [r for r in rows if r["mode"] == "fit" and r["status"] == "failed"]
    assert {r["per_device_batch"] for r in oom} == {33, 34, 36, 40, 48, 64}
    assert all(json.loads(r["details_json"])["fit"]["verdict"] == "out of memory" for r in oom)  # an answer, recorded
    sweep = load(conn, conn.execute("SELECT MAX(sweep_id) FROM sweeps").fetchone()[0])
    assert not sweep.problems  # out of memory is not a failure of the sweep
    [sentence] = fit_report.sentences(sweep)
    assert sentence.startswith("transformer [fp32, sgd]: DDP x8 fits 32, FSDP x8 fits 96 a GPU; at its largest batch "
                               "FSDP x8 trains 2.50x faster than DDP x8"), sentence  # 96/12 ms against 32/10 ms
    table = next(b for b in fit_report.blocks(sweep) if b[0] == "table")
    assert table[2][0][2:6] == ["32", "2.23 GiB", "33: out of memory", "2.23 GiB"]  # 1000 MiB + 32 x 40


def test_fit_on_cpu_needs_a_budget_and_refuses_what_it_cannot_honour(tmp_path, capsys, monkeypatch):
    from bench import cli
    from bench.sweep import launch
    monkeypatch.setattr(launch, "run_config", lambda *a, **k: pytest.fail("fit ran a trial despite the refusal"))
    for flags, says in ((["--memory-budget-gib", "1", "--check-equivalence"], "fit: --check-equivalence: fit measures"),
                        ([], "fit on CPU needs --memory-budget-gib"),
                        (["--memory-budget-gib", "1", "--scaling", "strong"], "--scaling strong fixes the global batch"),
                        (["--memory-budget-gib", "1", "--max-batch", "0"], "--max-batch: '0' is not allowed")):
        assert cli.main(["fit", "--device", "cpu", "--workloads", "transformer", "--strategies", "single",
                         "--store", str(tmp_path / "s.sqlite"), *flags]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("gib", ["1e-9", "0.005"])
def test_fit_refuses_a_budget_no_process_can_meet(tmp_path, capsys, monkeypatch, gib):
    # --memory-budget-gib 1e-9 searched, each trial "peak 423 MiB of 0"
    from bench import cli
    from bench.sweep import launch
    monkeypatch.setattr(launch, "run_config", lambda *a, **k: pytest.fail("fit ran a trial despite the refusal"))
    assert cli.main(["fit", "--device", "cpu", "--workloads", "synthetic", "--strategies", "single",
                     "--store", str(tmp_path / "s.sqlite"), "--memory-budget-gib", gib]) == 2
    err = capsys.readouterr().err
    assert f"fit: --memory-budget-gib {float(gib):g} (" in err and "below the floor of 0.01 GiB (10.2 MiB)" in err, err
    assert not (tmp_path / "s.sqlite").exists()


def test_fit_prints_a_small_budget_to_the_mib_that_tells_it_apart(tmp_path):
    from bench import options
    from bench.sweep import plan
    machine = plan.Machine(cuda_devices=0, cpu_cores=16)
    cfg, given, _ = options.prepare(["--device", "cpu", "--workloads", "transformer", "--strategies", "single",
                                     "--no-report", "--store", str(tmp_path / "f.sqlite"), "--memory-budget-gib", "0.015",
                                     "--repeats", "1"], machine=machine)
    fit_cmd.refuse(cfg, given)  # 15.4 MiB: above the floor
    run, _ = _fake_cpu_launcher(lambda b: 1.0 + 5.0 * b, {"single": 0.0})
    lines = []
    fit_cmd.run_fit(cfg, machine, 4, "fit ...", log=lines.append, run_config=run)
    assert "  transformer single x1 batch 1: fits (peak 6 MiB of 15.4)" in lines, lines  # "of 15" before
    # the budget is a node's on CPU, as the report's table and the refusal say ('per process (peak RSS)' before)
    assert "within 0.015 GiB per node (the peak RSS of its processes, summed, as the report's budget table)" in lines[0]
    two = SimpleNamespace(device_count=8, nodes=2)
    assert fit_cmd.per_node(two) == 4 and fit_cmd.per_node(SimpleNamespace(device_count=2, nodes=1)) == 0
    assert fit_cmd.mib(1536.0) == "1536" and fit_cmd.mib(10.24) == "10.2"


def test_a_real_cpu_fit_measures_each_trials_peak_rss_against_the_budget(tmp_path):
    path = str(tmp_path / "fit.sqlite")
    p = run_bench(["fit", "--workloads", "transformer", "--strategies", "single", "--per-device-batch", "4", "--max-batch",
                   "4", "--memory-budget-gib", "64", "--steps", "2", "--warmup", "0", "--repeats", "1", "--no-report",
                   "--store", path])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "largest batch that fits 4 (the cap, --max-batch 4)" in p.stdout
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT r.mode, r.per_device_batch, m.peak_rss_mib, r.details_json FROM results r "
                        "JOIN memory m USING (result_id) ORDER BY r.result_id").fetchall()
    assert [(m, b) for m, b, _, _ in rows] == [("fit", 4), ("bench", 4)]  # the trial, then the measured run
    got = json.loads(rows[0][3])["fit"]
    assert got["verdict"] == "fits" and got["peak_mib"] == rows[0][2] > 100 and got["budget_mib"] == 64 * 1024
    from bench import cli
    assert cli.main(["--resume", "last", "--store", path, "--device", "cpu"]) == 2  # a search is run again, not resumed
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 2


def test_a_real_out_of_memory_error_in_a_rank_is_fits_answer_not_a_failed_sweep(tmp_path):
    # The class a failed CUDA allocation raises (torch.OutOfMemoryError), raised in the real worker at its first step,
    # through the sweep's failure record to fit's verdict: the one path no GPU lease has met yet.
    path = str(tmp_path / "oom.sqlite")
    p = run_bench(["fit", "--workloads", "synthetic", "--synthetic-width", "64", "--synthetic-depth", "1", "--strategies",
                   "single", "--per-device-batch", "1", "--max-batch", "1", "--memory-budget-gib", "64", "--steps", "2",
                   "--warmup", "0", "--repeats", "1", "--no-report", "--store", path], env={"BENCH_FAULT": "oom@0:0"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    status, reason, details = sqlite3.connect(path).execute(
        "SELECT status, reason, details_json FROM results WHERE mode = 'fit'").fetchone()
    assert status == "failed" and "OutOfMemoryError: CUDA out of memory" in reason, reason
    assert json.loads(details)["fit"]["verdict"] == fit.OOM
    assert "out of memory" in p.stdout, p.stdout


def test_settle_steps_down_from_a_measured_run_over_the_budget_then_bisects_on_measured_runs():
    # trials fit to 6 (7 did not); the measured run at 6 is over: 4 (the largest trial below that fit) is measured,
    # then 5 between them, its trial first
    tried = {1: fit.FITS, 2: fit.FITS, 4: fit.FITS, 8: fit.OVER, 6: fit.FITS, 7: fit.OVER}
    for limit, answer in ((4, 4), (5, 5)):
        new_trials, measures = [], []

        def measure(b):
            measures.append(b)
            return fit.FITS if b <= limit else fit.OVER
        got, measured = fit.settle(measure, lambda b: new_trials.append(b) or fit.FITS, 6, dict(tried))
        assert (got, measures, new_trials) == (answer, [6, 4, 5], [5]), (limit, got, measures, new_trials)
        assert measured[6] == fit.OVER and measured[4] == fit.FITS
    assert fit.settle(lambda b: fit.FITS, pytest.fail, 6, dict(tried)) == (6, {6: fit.FITS})  # holds: nothing more run
    # nothing's measured run fits: each fitting trial is measured, down to none
    assert fit.settle(lambda b: fit.OOM, pytest.fail, 2, {1: fit.FITS, 2: fit.FITS, 4: fit.OOM}) == (
        None, {2: fit.OOM, 1: fit.OOM})


def _fake_cpu_launcher(rss_mib, grows_mib: dict):
    """run_config on CPU ranks of one node: the node's peak RSS, its ranks' summed (the figure fit holds to the budget,
    bench.analysis.fit.budget_peak), is rss_mib(batch), split unevenly between the ranks; a measured run (mode 'bench')
    adds grows_mib[strategy] to it, as glibc's heap grows for several steps past a trial's two."""
    calls = []

    def run(spec, limits):
        calls.append((spec.mode, spec.strategy, spec.per_device_batch))
        rss = rss_mib(spec.per_device_batch) + (grows_mib[spec.strategy] if spec.mode == "bench" else 0.0)
        n = spec.device_count
        memory = [{"rank": r, "device": "cpu", "peak_rss_mib": rss / n + (n - 1) / 2 - r} for r in range(n)]
        ranks = range(spec.device_count)
        steps = [{"kind": "measure", "rank": r, "step": i, "step_ms": 100.0} for r in ranks for i in range(3)]
        windows = [{"kind": "measure", "rank": r, "wall_s": 0.3, "samples": 3 * spec.per_device_batch, "steps": 3}
                   for r in ranks]
        return Outcome("ok", payload={"steps": steps, "windows": windows, "memory": memory})
    return run, calls


def _cpu_fit(tmp_path, grows_mib: dict):
    """A CPU fit of DDP and FSDP x2 within 1.5 GiB a node through the stand-in: every trial's node peaks 1000 + 150 MiB
    a sample (its two ranks together), so 3 fits (1450 MiB) and 4 does not (1600); the measured runs add grows_mib.
    Returns (calls, store, sweep)."""
    from bench import options
    from bench.analysis.results import load
    from bench.store import store
    from bench.sweep import plan
    machine = plan.Machine(cuda_devices=0, cpu_cores=16)
    path = str(tmp_path / "fit.sqlite")
    cfg, given, _ = options.prepare(["--device", "cpu", "--workloads", "transformer", "--strategies", "ddp,fsdp",
                                     "--gpus", "2", "--no-report", "--store", path, "--memory-budget-gib", "1.5",
                                     "--repeats", "1"], machine=machine)
    fit_cmd.refuse(cfg, given)
    run, calls = _fake_cpu_launcher(lambda b: 1000.0 + 150.0 * b, grows_mib)
    assert fit_cmd.run_fit(cfg, machine, 64, "fit ...", log=lambda s: None, run_config=run) == 0
    conn = store.connect(path, readonly=True)
    return calls, conn, load(conn, conn.execute("SELECT MAX(sweep_id) FROM sweeps").fetchone()[0])


def test_a_batch_whose_measured_run_passes_the_budget_does_not_fit_and_fit_measures_the_next_smaller(tmp_path):
    from bench.report import fit as fit_report
    # FSDP's measured runs peak 120 MiB above their trials: at 3, 1570 MiB, over 1536 by 34; at 2, 1420 MiB, within
    calls, conn, sweep = _cpu_fit(tmp_path, {"ddp": 10.0, "fsdp": 120.0})
    assert [c for c in calls if c[1] == "fsdp"] == [("fit", "fsdp", b) for b in (1, 2, 4, 3)] + [("bench", "fsdp", 3),
                                                                                                 ("bench", "fsdp", 2)]
    rows = conn.execute("SELECT per_device_batch, details_json FROM results WHERE mode = 'bench' AND strategy = 'fsdp' "
                        "ORDER BY result_id").fetchall()
    got = [(r["per_device_batch"], json.loads(r["details_json"])["fit"]) for r in rows]  # both stored as they ran
    assert [(b, d["batch"], d["verdict"], d["peak_mib"]) for b, d in got] == [(3, 3, fit.OVER, 1570.0), (2, 2, fit.FITS, 1420.0)]
    assert not sweep.problems
    ddp, fsdp = sweep.fit  # read back from the store alone
    assert (ddp.largest, fsdp.largest) == (3, 2)
    assert fsdp.smallest_not == (3, "over the budget in the measured run", 1570.0, "")
    assert fsdp.overturned == [(3, 1450.0, fit.OVER, 1570.0)]
    [sentence] = fit_report.sentences(sweep)
    assert sentence.startswith("transformer [fp32, sgd]: DDP x2 fits 3, FSDP x2 fits 2 a process"), sentence
    assert ("FSDP x2's trial at 3 fit (peak 1.42 GiB) but its measured run there did not (peak 1.53 GiB, over by 34 MiB), "
            "so it fits 2" in sentence), sentence
    assert "in the longer measured run" not in sentence  # the answer's own measured run fit
    # why a trial can fit where its measured run does not, with this sweep's own figure (1570 against 1450 MiB), never
    # another run's presented as measured here ('FSDP's peak RSS rose 12% ..., DDP's 2%')
    assert sentence.endswith("(on the CPU the heap grows for some steps past a trial's two; in this sweep the measured "
                             "run's peak RSS against its trial's at the same batch: FSDP x2 at 3 +8.3%)."), sentence
    assert "measured here" not in sentence and "12%" not in sentence
    table = next(b for b in fit_report.blocks(sweep) if b[0] == "table")
    assert table[2][1][1:6] == ["FSDP x2", "2", "1.27 GiB", "3: its trial fit (peak 1.42 GiB), its measured run did not "
                                "(peak 1.53 GiB, over by 34 MiB)", "1.39 GiB"]  # measured at 2: 1420 MiB


def test_a_measured_run_within_the_budget_keeps_the_searchs_answer_and_records_its_verdict(tmp_path):
    from bench.report import fit as fit_report
    calls, conn, sweep = _cpu_fit(tmp_path, {"ddp": 10.0, "fsdp": 20.0})
    assert [c for c in calls if c[0] == "bench"] == [("bench", "ddp", 3), ("bench", "fsdp", 3)]  # one measured run each
    details = [json.loads(r[0])["fit"] for r in conn.execute("SELECT details_json FROM results WHERE mode = 'bench'")]
    assert [(d["batch"], d["verdict"], d["peak_mib"]) for d in details] == [(3, fit.FITS, 1460.0), (3, fit.FITS, 1470.0)]
    assert [(s.largest, s.measured, s.overturned) for s in sweep.fit] == [(3, {3: (fit.FITS, 1460.0)}, []),
                                                                         (3, {3: (fit.FITS, 1470.0)}, [])]
    [sentence] = fit_report.sentences(sweep)
    assert sentence.startswith("transformer [fp32, sgd]: DDP x2 fits 3, FSDP x2 fits 3 a process") and "did not" not in sentence
    table = next(b for b in fit_report.blocks(sweep) if b[0] == "table")
    assert [r[4] for r in table[2]] == ["4: peak 1.56 GiB, over by 64 MiB"] * 2


def test_a_largest_batch_whose_measured_run_did_not_train_is_said_and_not_compared(tmp_path):
    from bench.analysis.results import load
    from bench.report import fit as fit_report
    from bench.store import store
    cfg, _, machine, path = _h100_fit(tmp_path)
    run, _ = _fake_gpu_launcher({"ddp": 32, "fsdp": 96}, {"ddp": 10.0, "fsdp": 12.0}, diverges=("fsdp",))
    assert fit_cmd.run_fit(cfg, machine, 4096, "fit ...", log=lambda s: None, run_config=run) == 0
    conn = store.connect(path, readonly=True)
    sweep = load(conn, conn.execute("SELECT MAX(sweep_id) FROM sweeps").fetchone()[0])
    conn.close()
    [sentence] = fit_report.sentences(sweep)
    assert "FSDP x8 trains" not in sentence and "at its largest batch DDP x8 trains" in sentence, sentence
    assert "at its largest batch FSDP x8 did not train (loss not finite at 24 of 24 steps" in sentence, sentence


# The H200 fit of 2026-11-27 (sweep 4), DDP x1 of the transformer at 14 a GPU: its trial's memory row. The allocator's
# peak reserved is within 16 GiB, the device level (the CUDA context and NCCL's buffers on top) is not.
H200_TRIAL = {"rank": 0, "device": "cuda:0", "peak_allocated_mib": 14000.0, "peak_reserved_mib": 15982.0,
              "device_used_mib": 17306.8125, "run_device_used_mib": 17306.8125, "artefact_mib": 0.65625}


def test_a_cuda_trial_within_the_budget_by_its_reserved_peak_but_over_it_by_its_device_level_does_not_fit():
    peak = fit.peak_mib([H200_TRIAL], "cuda")
    assert peak == pytest.approx(17306.8125 - 0.65625)  # the device level, net of the pre-generated batches
    assert fit.verdict("ok", "", peak, 16 * 1024.0) == fit.OVER  # the reserved peak, 15981 MiB, said "fits"
    assert fit.peak_of_rows([H200_TRIAL], "cuda")[1] == fit.DEVICE_LEVEL
    # the whole run's device level counts where it is the higher (the measured run at 14: 17470.8 steady, 17978.8 whole)
    measured = dict(H200_TRIAL, peak_reserved_mib=16146.0, device_used_mib=17470.8125, run_device_used_mib=17978.8125)
    assert fit.peak_mib([measured], "cuda") == pytest.approx(17978.8125 - 0.65625)


def test_a_cuda_row_with_no_device_level_falls_back_to_the_reserved_peak_said_so():
    rows = [{"device": "cuda:0", "peak_reserved_mib": 900.0, "artefact_mib": 100.0, "device_used_mib": None},
            {"device": "cuda:1", "peak_reserved_mib": 850.0, "artefact_mib": 0.0}]
    assert fit.peak_of_rows(rows, "cuda") == (850.0, fit.RESERVED)
    assert fit.peak_of_rows([{"device": "cuda:0", "peak_allocated_mib": 700.0}], "cuda") == (700.0, fit.RESERVED)
    assert fit.peak_of_rows([], "cuda") == (None, fit.RESERVED)
    # one device with a level is enough: the rule takes device levels, not a mix of the two figures
    assert fit.peak_of_rows([*rows, {"device": "cuda:2", "peak_reserved_mib": 9e3, "device_used_mib": 800.0}],
                            "cuda") == (800.0, fit.DEVICE_LEVEL)


def _levels_gpu_launcher(context_mib: float, warmup_mib: float):
    """run_config on pretend GPUs that never run out: the allocator reserves 1000 + 40 MiB a sample, the device level
    adds context_mib (the CUDA context, NCCL), and a measured run's whole-run level warmup_mib more."""
    def run(spec, limits):
        reserved = 1000.0 + 40.0 * spec.per_device_batch
        run_level = reserved + context_mib + (warmup_mib if spec.mode == "bench" else 0.0)
        memory = [{"rank": r, "device": f"cuda:{r}", "peak_allocated_mib": 1.0, "artefact_mib": 0.0,
                   "peak_reserved_mib": reserved, "device_used_mib": reserved + context_mib,
                   "run_device_used_mib": run_level} for r in range(spec.device_count)]
        ranks = range(spec.device_count)
        steps = [{"kind": "measure", "rank": r, "step": i, "step_ms": 10.0} for r in ranks for i in range(3)]
        windows = [{"kind": "measure", "rank": r, "wall_s": 0.03, "samples": 3 * spec.per_device_batch, "steps": 3}
                   for r in ranks]
        return Outcome("ok", payload={"steps": steps, "windows": windows, "memory": memory})
    return run


def test_fit_judges_by_the_device_level_and_steps_down_where_the_measured_run_passes_the_budget(tmp_path):
    from bench.analysis.results import load
    from bench.report import fit as fit_report, frontier
    from bench.store import store
    cfg, _, machine, path = _h100_fit(tmp_path)  # 5 GiB: 5120 MiB
    # trials fit to 85 by the device level (1700 + 40 b; by the reserved peak alone, 103); the measured runs' whole-run
    # level is 200 MiB higher: over at 85, 84, 82 and 81, within at 80 (5100 MiB)
    assert fit_cmd.run_fit(cfg, machine, 4096, "fit ...", log=lambda s: None, run_config=_levels_gpu_launcher(700.0, 200.0)) == 0
    conn = store.connect(path, readonly=True)
    sweep = load(conn, conn.execute("SELECT MAX(sweep_id) FROM sweeps").fetchone()[0])
    conn.close()
    ddp = sweep.fit[0]
    assert max(b for b, v, _, _ in ddp.trials if v == fit.FITS) == 85 and ddp.peak_at(86) == 1700.0 + 40 * 86
    assert [b for b, (v, _) in ddp.measured.items() if v == fit.OVER] == [85, 84, 82, 81]
    assert (ddp.largest, ddp.measured[80]) == (80, (fit.FITS, 5100.0))
    # the same figure as the fastest-within-the-budget table: it names a configuration at 80, not "nothing fits"
    at_80 = next(c for c in sweep.bench["transformer"] if c.key == ddp.bench_keys[80])
    assert (frontier.peak_mib(at_80), frontier.peak_source(at_80)) == (5100.0, "device level")
    [(row, _)] = frontier.answer("transformer", sweep.bench["transformer"], ddp.budget_mib)
    assert row[2] != "nothing fits" and row[4] == "4.98 GiB", row
    blocks = fit_report.blocks(sweep)
    assert "the device level on the fullest GPU" in blocks[1][1] and "peak reserved on the fullest" not in blocks[1][1]
    assert not any("stored as fitting" in b[1] for b in blocks if b[0] == "p")


def test_a_trial_stored_as_fitting_under_the_reserved_peak_is_read_back_as_stored_and_marked(tmp_path):
    from types import SimpleNamespace
    from bench.report import fit as fit_report
    s = fit.Search("k", "transformer", "ddp", "cuda", 1, "DDP x1", "DDP x1 [bf16, adamw]", ("bf16", "adamw"), 16384.0,
                   trials=[(12, fit.FITS, 15266.25, ""), (14, fit.FITS, 17306.16, ""), (15, fit.OVER, 18372.1, "")])
    sweep = SimpleNamespace(fit=[s], bench={})
    assert s.largest == 12  # the stored verdict is held to today's rule: 14 is over the budget (trial A, finding 1)
    blocks = fit_report.blocks(sweep)
    table = next(b for b in blocks if b[0] == "table")
    assert table[2][0][2:5] == ["12 (the largest tried that fits, by its trial; not measured); 13 not tried "
                                "(fit --per-device-batch 13 --max-batch 13 with this sweep's flags tries them)", "14.91 GiB", "14: peak 16.90 GiB, over by 922 MiB"]
    assert any(b[1].startswith("Stored as fitting, but over the budget by today's figure: DDP x1 at 14.")
               for b in blocks if b[0] == "p"), blocks


def test_a_fit_sweeps_recommendation_passes_over_measured_runs_over_the_budget_and_names_each_batch(tmp_path):
    # A CPU fit report recommended against 'FSDP x2 [fp32, adamw], 19% slower' (FSDP at batch 4, whose measured run went
    # over the budget, against DDP at batch 3, neither named) while fit's own sentence on the page said 1.48x.
    from bench.report import frontier, recommend
    _, _, sweep = _cpu_fit(tmp_path, {"ddp": 10.0, "fsdp": 120.0})   # FSDP's measured run at 3 passes the budget
    t = " ".join(recommend.sentences(sweep, "transformer", sweep.bench["transformer"], "fp32"))
    assert t.startswith("Fastest: DDP x2 at batch 3, 60.0 samples/s"), t
    assert "Left out of the recommendation, over the memory budget in their measured run: FSDP x2 at batch 3" in t, t
    assert "The lead over the runner-up, FSDP x2 at batch 2, is 50% (1.50x as fast)" in t, t  # fit's own 1.50x
    assert "FSDP beside DDP: in the largest batch that fits below, each at its own largest batch." in t
    assert "than DDP" not in t
    [(row, text)] = frontier.answer("transformer", sweep.bench["transformer"], 1536.0, batches=True)
    assert row[2] == "DDP x2 at batch 3" and row[6].startswith("FSDP x2 at batch 3 by 34 MiB (+2%)"), row  # CPU: [5] the node's


def test_a_fit_whose_every_measured_run_passed_the_budget_recommends_nothing_and_says_so(tmp_path):
    # The H200 fit example (a store from before fit stepped down): the summary recommended DDP x1 at 14, whose measured
    # run was 1.56 GiB over the budget, beside 'Nothing measured fits 16.00 GiB per GPU' on the same page.
    from bench.report import recommend
    _, _, sweep = _cpu_fit(tmp_path, {"ddp": 2000.0, "fsdp": 2000.0})   # every measured run over 1.5 GiB
    row, said = recommend.answer(sweep, "transformer", sweep.bench["transformer"], "fp32")
    assert row[2] == "nothing fits the budget" and recommend.recommended(sweep, sweep.bench["transformer"], "fp32") is None
    assert said[0].startswith("Nothing to recommend within the memory budget: every measured run went over it (DDP x2 "
                              "at batch 3, "), said


def test_fit_says_the_batches_it_will_try_from_its_start_and_that_a_search_ending_at_the_cap_met_no_limit(tmp_path):
    # An H200 fit from --per-device-batch 64 to --max-batch 128 printed 'batches 1, 2, 4, ... then bisection' and ran 64,
    # 128; then 'largest batch that fits 128 (the cap, --max-batch 128); measuring it (2 trial(s))', as if 128 were the
    # limit and were measured in 2 trials, where every batch fit and the limit lay above the cap.
    from bench import options
    from bench.sweep import plan
    machine = plan.Machine(cuda_devices=1, cpu_cores=16, gpu_names=("H200",), gpu_capabilities=((9, 0),),
                           arch_list=("sm_90",), gpu_memory_bytes=(141 * 2**30,))
    cfg, given, _ = options.prepare(["--device", "cuda", "--workloads", "transformer", "--strategies", "ddp", "--gpus", "1",
                                     "--per-device-batch", "64", "--no-report", "--no-comm-bench", "--store",
                                     str(tmp_path / "fit.sqlite"), "--memory-budget-gib", "64"], machine=machine)
    fit_cmd.refuse(cfg, given)
    for limit, found in ((1000, "largest batch that fits 128 (the cap, --max-batch 128) from 2 trials; every batch "
                                "tried fit: the limit is above the cap; raise --max-batch to find it; measuring it"),
                         (96, "largest batch that fits 96; 97 does not; from 8 trials; measuring it")):
        run, calls = _fake_gpu_launcher({"ddp": limit}, {"ddp": 10.0})
        lines = []
        assert fit_cmd.run_fit(cfg, machine, 128, "fit ...", log=lines.append, run_config=run) == 0
        assert [b for mode, _, b in calls if mode == "fit"][:2] == [64, 128]
        assert lines[0].endswith("1 configuration(s), batches 64, 128 until one does not fit (at most --max-batch 128), "
                                 "then bisection"), lines[0]
        assert f"transformer ddp x1: {found}" in lines, lines
    assert fit_cmd.ladder_words({"transformer": 1}, 4096) == ("batches 1, 2, 4, ..., 4096 until one does not fit (at most "
                                                              "--max-batch 4096), then bisection")
    assert fit_cmd.ladder(48, 128) == [48, 96, 128]   # the search's own steps: doubling, the last at the cap
    # an error ended the search below the cap: it reached neither the cap nor a batch that does not fit
    assert fit_cmd.found_words(8, None, {4: fit.FITS, 8: fit.FITS, 16: fit.ERROR}, 128) == (
        "largest batch that fits 8; the search stopped at an error at batch 16; from 3 trials; measuring it")
