"""The report opens with its answer: per workload and precision, what to run, what DataParallel would cost,
where scaling stops paying, what bounds the run, FSDP beside DDP; built from stores with known numbers."""
from __future__ import annotations

import os
import re

import pytest

from bench.analysis import results
from bench.report import bound, cpu_notes, recommend, report
from bench.store import store
from bench.sweep import record
from bench.sweep.plan import RunSpec


def spec(strategy: str, n: int, precision: str = "fp32", workload: str = "synthetic", mode: str = "bench",
         options: tuple = (), repeat: int = 0) -> RunSpec:
    return RunSpec(workload=workload, strategy=strategy, device_type="cuda", device_count=n, per_device_batch=32,
                   global_batch=32 * n, image_size=0, steps=10, warmup=2, threads=0, seed=0, scaling="weak",
                   precision=precision, options=options, mode=mode, repeat=repeat)


def payload(n: int, step_ms: float, data_ms: float = 0.0, nosync_ms: float = None, mem_mib: float = 1000.0, ranks=None,
            level_mib: float = None) -> dict:
    ranks = ranks or (n if n > 1 else 1)
    rows = [{"kind": "measure", "rank": r, "step": i, "step_ms": step_ms, "data_ms": 0.0, "host_data_ms": data_ms,
             "forward_ms": step_ms * 0.3, "backward_ms": step_ms * 0.6, "optimizer_ms": step_ms * 0.1}
            for r in range(ranks) for i in range(10)]
    if nosync_ms is not None:
        rows += [{"kind": k, "rank": r, "step": 100 + i, "step_ms": ms} for k, ms in (("probe_sync", step_ms), ("probe_no_sync", nosync_ms))
                 for r in range(ranks) for i in range(4)]
    windows = [{"kind": "measure", "rank": r, "wall_s": 10 * step_ms / 1e3, "samples": 320 * n // ranks, "steps": 10} for r in range(ranks)]
    memory = [{"rank": r, "device": f"cuda:{r}", "peak_allocated_mib": mem_mib, "peak_reserved_mib": mem_mib * 1.2,
               "device_used_mib": mem_mib * 1.5 if level_mib is None else level_mib} for r in range(ranks)]
    return {"steps": rows, "windows": windows, "memory": memory, "grad_bytes": 64 * 2**20}


def build(path: str, configs: list, loader: dict = None, skipped: tuple = (), command: str = "cmd",
          config: str = "{}") -> results.Sweep:
    conn = store.connect(path)
    env = store.insert_environment(conn, {"hostname": "h", "gpu_names": ["H100"] * 4, "cpu_cores": 8})
    sid = store.begin_sweep(conn, command, config, env)
    for sp, pl in configs:
        record.record_result(conn, sid, env, sp, "ok", payload=pl)
    for sp in skipped:
        record.record_result(conn, sid, env, sp, "skipped", "DataParallel parallelises over GPUs only")
    for n, sps in (loader or {}).items():
        ls = spec("loader", n, mode="loader")
        record.record_result(conn, sid, env, ls, "ok", payload={"windows": [{"kind": "loader", "rank": 0, "wall_s": 1.0,
                                                                           "samples": int(sps), "steps": 10}]})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    conn = store.connect(path, readonly=True)
    try:
        return results.load(conn, sid)
    finally:
        conn.close()


def text(sweep: results.Sweep) -> str:
    return " ".join(b[1] for b in recommend.blocks(sweep) if b[0] == "p")


def host_noise(monkeypatch, tmp_path, spread: float) -> None:
    """selfcheck's figure for build()'s host and GPU: three processes `spread` apart (bench.store.hostnoise)."""
    from bench.store import hostnoise
    monkeypatch.setenv("BENCH_HOST_NOISE", str(tmp_path / "host-noise.json"))
    hostnoise.record({"hostname": "h", "device_type": "cuda", "device_name": "H100", "measured_at": "2026-11-24T22:50:00",
                      "configuration": "single device x1", "process_sps": [100.0, 100.0, 100.0 * (1 + spread)],
                      "store": "/r/selfcheck.sqlite", "sweep_id": 4})


def test_ddp_wins_and_the_answer_says_what_dataparallel_would_cost(tmp_path):
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("dp", 2), payload(2, 160.0, ranks=1)),
                                            (spec("ddp", 2), payload(2, 105.0, nosync_ms=100.0))])
    t = text(sw)
    assert "synthetic, fp32: Fastest: DDP x2, 609.5 samples/s, 95% scaling efficiency against single device x1" in t
    assert "DataParallel on 2 GPUs would give 400.0 samples/s: 1.52x slower" in t
    # no kernel traces (on CUDA they run by default): the bound is not measured, never a fall-through "compute"
    assert ("What bounds the step is not measured: no kernel traces of DDP x2" in t and "Compute-bound" not in t
            and "exposed communication: 5.00 ms, 5% of a step" in t and "table: synthetic: all configurations" in t)
    summary = recommend.blocks(sw)[1]   # the first thing under the heading: one row per workload and precision
    assert summary[0] == "table" and summary[1] == recommend.SUMMARY_HEADERS
    assert summary[2] == [["synthetic", "fp32", "DDP x2", "609.5", "95%", "1.52x slower", "2",
                           "not measured (no kernel traces)", "52% (not resolved: noise not measured)",
                           "–"]]  # no FLOPs stored: no MFU


def test_when_dataparallel_beats_ddp_the_answer_says_so(tmp_path, monkeypatch):
    # DDP should lose here: its step is slower than DataParallel's at the same count, beyond selfcheck's 2% noise.
    host_noise(monkeypatch, tmp_path, 0.02)
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("dp", 2), payload(2, 110.0, ranks=1)),
                                            (spec("ddp", 2), payload(2, 180.0, nosync_ms=100.0))])
    t = text(sw)
    assert "Fastest: DataParallel x2" in t and "would give" not in t
    assert "Communication-bound: 44% of a step is exposed communication" not in t  # the winner (DP) has no probe


def test_where_scaling_stops_paying_and_a_communication_bound_run(tmp_path):
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)),
                                            (spec("ddp", 2), payload(2, 110.0, nosync_ms=100.0)),
                                            (spec("ddp", 4), payload(4, 150.0, nosync_ms=100.0))])
    t = text(sw)
    assert "Fastest: DDP x4" in t   # 47% ahead of DDP x2: the fastest (the noise is not measured: no lead called)
    # the pick past the floor: one plain sentence, not 'stops paying ... recommended as the fastest all the same'
    assert ("DDP x4 gives 2.67x the throughput of single device x1 for 4x the GPUs: 67% efficiency, under the 75% this "
            "report calls scaling that pays; at or above it up to 2 GPUs (table: synthetic: all configurations; plot: "
            "synthetic_efficiency.png).") in t, t
    assert "stops paying" not in t and "all the same" not in t
    assert "Communication-bound: 33% of a step is exposed communication" in t and "tune" in t
    at_two = build(str(tmp_path / "two.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 150.0))])
    assert "DDP x2 gives 1.33x the throughput of single device x1 for 2x the GPUs: 67% efficiency, under the 75%" \
        in text(at_two) and "at or above it up to" not in text(at_two)
    # DDP x2 recommended (DDP x4 3% faster, under the 5% floor): where scaling stops, past the pick's count
    tied = build(str(tmp_path / "tied.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 110.0)),
                                                 (spec("ddp", 4), payload(4, 214.0))])
    assert "Scaling stops paying past 2 GPUs: at 4 efficiency is 47%, below 75% (table" in text(tied), text(tied)


def test_a_data_bound_run_names_the_loader(tmp_path):
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 105.0))],
               loader={2: 620.0})
    assert "Data-bound: the loader alone delivers 620.0 samples/s" in text(sw)


def test_a_gpu_idle_most_of_a_measured_step_is_host_bound_from_its_kernel_traces(tmp_path):
    # one H100, DeepLabV3 bf16 at batch 8: 23 ms of kernels in a 64 ms step, and the bound read "compute"
    from test_kineto_traces import _kernel, _step, _write

    def traced(kernel_us: float) -> list:   # two traced steps of 2 ms on the host (the profiler's own work), one kernel each
        events = [e for k in range(2) for e in (_step(k + 1, k * 2000, 2000), _kernel("sm90_xmma_gemm_bf16", k * 2000 + 100, kernel_us))]
        return [{"rank": 0, "device_type": "cuda", "path": _write(tmp_path, f"k{int(kernel_us)}", events)}]

    def one(kernel_us: float) -> str:
        pl = {**payload(1, 1.0), "traces": traced(kernel_us)}   # a measured step of 1 ms
        return text(build(str(tmp_path / f"s{int(kernel_us)}.sqlite"), [(spec("single", 1), pl)]))

    host = one(250.0)    # 0.25 ms of kernels per 1 ms step
    assert ("Host-bound: the GPU's computation and copies take 0.2 ms of a 1.0 ms step (GPU busy 25%); it waits for "
            "the host to issue work 75% of the time") in host
    assert "--compile" in host and "GPU-bound" not in host
    busy = one(900.0)    # 0.9 of 1 ms: the traced step's 2 ms would read 55% idle, the measured step 10%
    # no FLOPs, so no MFU: the kernels set the pace, how near the hardware's limit is not known (not 'compute-bound')
    assert "GPU-bound: the GPU's computation and copies fill 90% of a 1.0 ms step" in busy and "Host-bound" not in busy
    half = one(600.0)    # busy 60%: neither idle most of the time nor GPU-bound (that takes 85%)
    assert "Host-bound" in half and "(GPU busy 60%)" in half and "GPU-bound" not in half


def test_fsdp_memory_and_speed_are_set_beside_ddp(tmp_path):
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)),
                                            (spec("ddp", 2), payload(2, 100.0, mem_mib=1000.0)),
                                            (spec("fsdp", 2), payload(2, 107.0, mem_mib=590.0))])
    assert "FSDP holds 41% less memory per GPU and is 7% slower than DDP at 2 GPUs" in text(sw)


def test_fsdp_beside_ddp_holds_the_memory_the_budget_table_holds(tmp_path):
    # The sentence read the allocator's reserved peak while the fastest-within-the-budget table reads the device level
    # (what runs out: the context and NCCL's buffers on top); on one GPU the two disagreed on the same page.
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)),
                                            (spec("ddp", 2), payload(2, 100.0, mem_mib=1000.0, level_mib=1500.0)),
                                            (spec("fsdp", 2), payload(2, 107.0, mem_mib=590.0, level_mib=1650.0))])
    assert "FSDP holds 10% more memory per GPU and is 7% slower than DDP at 2 GPUs" in text(sw)
    one = build(str(tmp_path / "one.sqlite"), [(spec("ddp", 1), payload(1, 100.0, level_mib=1500.0)),
                                               (spec("fsdp", 1), payload(1, 107.0, level_mib=1500.0))])
    assert "FSDP holds as much memory per GPU (less than 1% apart) and is 7% slower than DDP at 1 GPU " in text(one)  # not '1 GPUs', not '0% more'


def test_each_precision_gets_its_own_answer_and_the_environment_comes_last(tmp_path):
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 105.0)),
                                            (spec("single", 1, "bf16"), payload(1, 50.0)), (spec("ddp", 2, "bf16"), payload(2, 60.0))])
    t = text(sw)
    assert "synthetic, fp32: Fastest: DDP x2" in t and "synthetic, bf16: Fastest: DDP x2 [bf16], 1066.7 samples/s" in t
    bl = report.blocks(sw, {})
    headings = [b[2] for b in bl if b[0] == "h"]
    assert headings[1] == "Recommendation" and headings[-1] == "Environment"
    table = next(b for b in bl if b[0] == "table" and "precision / settings" in b[1])
    assert {row[1] for row in table[2]} == {"fp32", "bf16"}


def test_a_winner_within_noise_of_the_runner_up_is_flagged(tmp_path, monkeypatch):
    host_noise(monkeypatch, tmp_path, 0.25)   # selfcheck measured 25% between processes on this host's GPU
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 70.0)),
                                            (spec("ddp", 2, options=(("bucket_cap_mb", 100.0),)), payload(2, 69.0))])
    t = text(sw)   # the defaults, 1% slower than bucket_cap_mb=100, are recommended: fewer settings changed
    assert "Recommended: DDP x2, 914.3 samples/s" in t
    assert ("DDP x2 [fp32, bucket_cap_mb=100.0] is 1% faster, within the noise: DDP x2 is recommended, fewer settings "
            "changed from the defaults. The noise: 25%, selfcheck's spread between 3 processes of single device x1 on "
            "the synthetic MLP, on host h, H100, 2026-11-24 (/r/selfcheck.sqlite sweep 4) (a single process on at least one side: --repeats 3 "
            "measures theirs).") in t
    fast = build(str(tmp_path / "fast.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 69.0)),
                                                 (spec("ddp", 2, options=(("bucket_cap_mb", 100.0),)), payload(2, 70.0))])
    assert ("The lead over the runner-up, DDP x2 [fp32, bucket_cap_mb=100.0], is only 1%: within 25%, selfcheck's "
            "spread between 3 processes") in text(fast)   # the fastest is also the simplest: it stays, the runner-up is flagged


def test_a_clear_lead_is_not_called_noise_even_when_the_winner_is_unstable(tmp_path):
    jitter = payload(1, 100.0)
    for i, row in enumerate(jitter["steps"]):
        row["step_ms"] = 100.0 * (0.7 if i % 2 else 1.3)   # IQR far above 10% of the median: "unstable"
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), jitter), (spec("ddp", 2), payload(2, 274.0))])
    assert next(c for c in sw.bench["synthetic"] if c.strategy == "single").unstable
    t = text(sw)
    assert "Fastest: single device x1" in t and "within the noise:" not in t and "is only" not in t, t


def test_with_repeats_the_measured_spread_between_processes_decides(tmp_path):
    rows = [(spec("single", 1, repeat=r), payload(1, ms)) for r, ms in enumerate((100.0, 108.0, 112.0))]
    near = rows + [(spec("ddp", 2, repeat=r), payload(2, ms)) for r, ms in enumerate((190.0, 200.0, 210.0))]
    t = text(build(str(tmp_path / "near.sqlite"), near))   # 320 vs 296 samples/s, processes spread 12%: not separated
    assert ("Recommended: single device x1, 296.3 samples/s" in t and "DDP x2 is 8% faster, within the noise: "
            "single device x1 is recommended, it needs fewer devices. The noise: 12%, the spread between their 3 processes "
            "each.") in t, t
    tight = [(spec(s, n, repeat=r), payload(n, ms * (1 + r / 100))) for s, n, ms in (("single", 1, 100.0), ("ddp", 2, 185.0))
             for r in range(3)]
    t = text(build(str(tmp_path / "tight.sqlite"), tight))   # 9% apart, processes spread 2%: a real lead
    assert "The lead over the runner-up, single device x1, is 8%: beyond the noise, 2.0%, the spread between their 3 processes each" in t, t


def test_the_plot_a_claim_points_to_is_the_file_the_report_writes(tmp_path):
    w = "examples/my_model.py:build"
    path = str(tmp_path / "s.sqlite")
    build(path, [(spec("single", 1, workload=w), payload(1, 100.0)), (spec("ddp", 2, workload=w), payload(2, 105.0))])
    out = report.render(path, plots_dir=str(tmp_path / "plots"), report_dir=str(tmp_path / "rep"))
    with open(out["markdown"], encoding="utf-8") as f:
        named = set(re.findall(r"plot: ([^ )]+\.png)", f.read()))
    assert named and named <= {os.path.basename(p) for p in out["plots"]}, (named, out["plots"])


def test_a_tie_within_noise_goes_to_the_simpler_configuration_and_says_why(tmp_path):
    # DataParallel x1 leads single by 1% and DDP x1 by 0.5%, each in 3 processes spread 18%: within the noise.
    rows = [(spec(s, 1, repeat=r), payload(1, ms * (1 + r / 10))) for s, ms in (("single", 100.0), ("dp", 99.0), ("ddp", 99.5))
            for r in range(3)]
    sw = build(str(tmp_path / "tie.sqlite"), rows)
    best, fastest, tie = recommend.choose(sw.bench["synthetic"])
    assert (best.strategy, fastest.strategy) == ("single", "dp") and tie.within
    t = text(sw)
    assert ("synthetic, fp32: Recommended: single device x1, 290.9 samples/s (table: synthetic: all configurations; "
            "plot: synthetic_throughput.png). single device x1 is unstable: its steps spread 18% of their median "
            "(interquartile range, the steps of its 3 processes pooled; unstable above 10%) and its 3 processes' "
            "throughputs spread 18% (fastest less slowest over their median; unstable above 10%; table: synthetic: all "
            "configurations). DataParallel x1 is 1% faster, within the noise: single device x1 is "
            "recommended, the simpler strategy (DataParallel is recommended only where it is strictly faster). The noise: "
            "18%, the spread between their 3 processes each.") in t, t
    row = recommend.blocks(sw)[1][2][0]
    assert row[2] == "single device x1" and row[8] == "tie: DataParallel x1 1% faster (within 18% noise, their repeats)"
    no_single = build(str(tmp_path / "ddp.sqlite"), [x for x in rows if x[0].strategy != "single"])
    assert "Recommended: DDP x1" in text(no_single)   # without single, DDP is the simpler one
    # Strictly faster (30%, processes spread 2%): DataParallel is recommended.
    clear = [(spec(s, 1, repeat=r), payload(1, ms * (1 + r / 100))) for s, ms in (("single", 100.0), ("dp", 70.0)) for r in range(3)]
    assert "Fastest: DataParallel x1" in text(build(str(tmp_path / "clear.sqlite"), clear))


def test_an_efficiency_above_100_percent_is_capped_within_noise_and_explained_beyond_it(tmp_path, monkeypatch):
    from bench import stats
    assert stats.shown_efficiency(0.87, 0.25).text() == "87%"
    assert stats.shown_efficiency(1.03, 0.25).text() == "100% (within noise: measured 103%, noise 25%)"
    beyond = stats.shown_efficiency(1.23, 0.05)
    assert (beyond.shown, beyond.within_noise) == (1.23, False) and beyond.text().startswith(
        "123% (above the ideal by more than the 5.0% noise: superlinear")
    assert stats.shown_efficiency(1.20, 0.06, device_count=1).text() == (   # DDP x1 against single x1: no scaling
        "120% (faster than the baseline on one device by more than the 6.0% noise: the processes ran differently, not scaling)")
    assert stats.shown_efficiency(1.03, float("nan")).text().startswith(   # nothing measured the noise: not capped
        "103% (measured 103%; the noise between processes is not measured on this device, so not told from 100%")
    # single process each: DDP x2 at 2.06x of single is within the 25% selfcheck measured; shown as 100%, the measurement beside it
    host_noise(monkeypatch, tmp_path, 0.25)
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 97.0))])
    assert ("Fastest: DDP x2, 659.8 samples/s, 100% scaling efficiency against single device x1 (within noise: "
            "measured 103%, noise 25%)") in text(sw)
    assert recommend.blocks(sw)[1][2][0][4] == "100% (within noise: measured 103%, noise 25%)"
    table = next(b for b in report.blocks(sw, {}) if b[0] == "table" and "precision / settings" in b[1])
    eff = {row[0] + row[2]: row[8] for row in table[2]}
    assert eff == {"single device1": "100.0%", "DDP2": "100.0% (within noise: measured 103%, noise 25%)"}


DEFAULT_CPU = '{"strategies": ["single", "ddp"]}'   # what a CPU sweep stores where no one chose its strategies


def test_a_cpu_sweep_without_dataparallel_says_why_it_is_left_out_and_a_gpu_sweep_does_not(tmp_path):
    def cpu(strategy, n):
        return RunSpec(**{**spec(strategy, n).__dict__, "device_type": "cpu"})
    left_out = build(str(tmp_path / "cpu.sqlite"), [(cpu("single", 1), payload(1, 100.0)), (cpu("ddp", 2), payload(2, 110.0))],
                     command="./run_bench.sh --gpus 1,2", config=DEFAULT_CPU)
    assert cpu_notes.DP_LEFT_OUT in text(left_out)
    with_dp = build(str(tmp_path / "cpu_dp.sqlite"), [(cpu("single", 1), payload(1, 100.0)), (cpu("dp", 1), payload(1, 101.0))])
    assert "not in this CPU sweep" not in text(with_dp)
    gpu = build(str(tmp_path / "gpu.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 60.0))])
    assert "not in this CPU sweep" not in text(gpu)

    def dp_cell(sweep):   # the summary's "DataParallel there" where DDP x2 is recommended: never "see the skipped ..."
        table = next(b for b in recommend.blocks(sweep) if b[0] == "table")
        return table[2][0][table[1].index("DataParallel there")]
    two = [(cpu("single", 1), payload(1, 100.0)), (cpu("ddp", 2), payload(2, 60.0))]
    faster = build(str(tmp_path / "cpu2.sqlite"), two, command="./run_bench.sh --gpus 1,2", config=DEFAULT_CPU)
    assert dp_cell(faster) == "left out on CPU" and "did not run" not in text(faster)
    # the user or the sweep file chose the strategies (ddp-settings.toml, transformer.toml): DataParallel is not in
    # this sweep, and nothing says the CPU default left it out
    toml = tmp_path / "ddp.toml"
    toml.write_text('strategies = ["single", "ddp"]\n')
    for i, command in enumerate(("./run_bench.sh --strategies single,ddp --gpus 1,2", f"./run_bench.sh --config {toml}",
                                 f"./run_bench.sh --config={toml} --gpus 1,2", "./run_bench.sh --config /gone.toml")):
        chosen = build(str(tmp_path / f"chosen{i}.sqlite"), two, command=command, config=DEFAULT_CPU)
        assert dp_cell(chosen) == "not in this sweep" and "not in this CPU sweep" not in text(chosen), command
    toml.write_text('gpus = [1, 2]\n')   # a sweep file that leaves the strategies to the default
    by_file = build(str(tmp_path / "by_file.sqlite"), two, command=f"./run_bench.sh --config {toml}", config=DEFAULT_CPU)
    assert dp_cell(by_file) == "left out on CPU" and cpu_notes.DP_LEFT_OUT in text(by_file)
    assert dp_cell(gpu) == "not in this sweep" and "did not run" not in text(gpu)
    asked = build(str(tmp_path / "cpu_asked.sqlite"), [(cpu("single", 1), payload(1, 100.0)), (cpu("dp", 1), payload(1, 101.0)),
                                                       (cpu("ddp", 2), payload(2, 60.0))], skipped=(cpu("dp", 2),))
    assert dp_cell(asked) == "did not run" and "DataParallel did not run on 2 processes (see the skipped" in text(asked)


def _paragraph(sw: results.Sweep) -> str:
    """The answer's paragraph for synthetic at fp32 (the key paragraph under the table left out)."""
    return next(b[1] for b in recommend.blocks(sw) if b[0] == "p" and b[1].startswith("synthetic, fp32:"))


def test_a_gap_under_the_floor_beyond_the_noise_is_not_called_within_the_noise(tmp_path, monkeypatch):
    # bucket_cap_mb=100 3% faster than the defaults against selfcheck's 1% noise: told apart by the noise, tied only
    # because the suite calls no gap under 5% a difference; "within 1.0% noise" would be false
    host_noise(monkeypatch, tmp_path, 0.01)
    bucket = spec("ddp", 2, options=(("bucket_cap_mb", 100.0),))
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 70.0)),
                                            (bucket, payload(2, 68.0))])
    t, row = _paragraph(sw), recommend.blocks(sw)[1][2][0]
    assert row[2] == "DDP x2" and row[8] == ("tie: DDP x2 [fp32, bucket_cap_mb=100.0] 3% faster (under the 5% floor the "
                                             "suite calls a difference; noise 1.0%, selfcheck on the synthetic MLP)")
    assert ("DDP x2 [fp32, bucket_cap_mb=100.0] is 3% faster, under the 5% floor the suite calls a difference: DDP x2 "
            "is recommended, fewer settings changed from the defaults. The noise: 1.0%, selfcheck's spread") in t
    assert "the gap is beyond it." in t and "within the noise" not in t and "within 1.0%" not in t
    # the fastest is the simplest: it stays, and the runner-up's 3% reads the same way
    sw = build(str(tmp_path / "lead.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 68.0)),
                                               (bucket, payload(2, 70.0))])
    t, row = _paragraph(sw), recommend.blocks(sw)[1][2][0]
    assert row[8] == "3% (under the 5% floor the suite calls a difference; noise 1.0%, selfcheck on the synthetic MLP)"
    assert ("The lead over the runner-up, DDP x2 [fp32, bucket_cap_mb=100.0], is only 3%: under the 5% floor the suite "
            "calls a difference (the noise: 1.0%, selfcheck's spread") in t and "within" not in t


def test_a_gap_under_the_floor_with_the_noise_not_measured_says_so_never_within_the_noise(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_HOST_NOISE", str(tmp_path / "none.json"))   # no selfcheck figure, one process each
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 70.0)),
                                            (spec("ddp", 2, options=(("bucket_cap_mb", 100.0),)), payload(2, 68.0))])
    t, row = _paragraph(sw), recommend.blocks(sw)[1][2][0]
    assert row[8].endswith("3% faster (under the 5% floor the suite calls a difference; noise not measured)"), row[8]
    assert "is 3% faster, under the 5% floor the suite calls a difference: DDP x2 is recommended" in t
    assert "The noise: not measured (" in t and "--repeats 3 measures it." in t and "within the noise" not in t


def test_how_much_slower_is_one_minus_the_ratio_of_throughputs_and_a_large_gap_gives_both_readings(tmp_path, monkeypatch):
    # An H200 rehearsal: 391.8 against 160.9 samples/s read "the runner-up ... is 144% slower" (391.8 / 160.9 - 1: how much
    # faster the fastest is); slower in throughput is 1 - 160.9 / 391.8 = 59%. And 226.8 against 164.4 read 38%, truly 28%.
    from bench.report import pages
    assert pages.slower_words(391.8, 160.9) == "59% slower (the fastest 2.44x as fast)"
    assert pages.slower_words(226.8, 164.4) == "28% slower (the fastest 1.38x as fast)"
    assert pages.slower_words(400.0, 360.0) == "10% slower" and pages.slower_share(400.0, 360.0) == pytest.approx(0.1)
    assert pages.slower_words(400.0, 100.0, "the fastest") == "75% slower than the fastest, which is 4.00x as fast"
    monkeypatch.setenv("BENCH_HOST_NOISE", str(tmp_path / "none.json"))   # no selfcheck figure: the gap is not resolved
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 130.0))])
    t, row = _paragraph(sw), recommend.blocks(sw)[1][2][0]   # 492.3 against 320.0 samples/s
    # the sentence gives the lead as the lead column does (a new user read '44%' there beside '31% slower' here)
    assert "The lead over the runner-up, single device x1, is 54% (1.54x as fast): not told apart" in t, t
    assert row[8] == "54% (not resolved: noise not measured)" and "slower" not in t


def test_a_fit_sweeps_unmeasured_bound_says_fit_does_not_trace_and_how_to_get_the_bound(tmp_path):
    # An H200 fit read "no kernel traces of DDP x1 [bf16, adamw] (on CUDA a few traced steps run after every measured
    # window unless --no-profile ...)": fit refuses --profile, so no flag of the reader's left them out
    found = {"search": "ddp-x1", "batch": 32, "verdict": "fits", "budget_mib": 80000.0, "peak_mib": 1500.0}
    sw = build(str(tmp_path / "fit.sqlite"), [(spec("ddp", 1, "bf16", mode="fit"), {**payload(1, 60.0), "fit": found}),
                                              (spec("ddp", 1, "bf16"), {**payload(1, 60.0), "fit": found})])
    assert sw.fit and [c.label for c in sw.bench["synthetic"]] == ["DDP x1 [bf16]"]
    t = " ".join(recommend.sentences(sw, "synthetic", sw.bench["synthetic"], "bf16"))
    assert ("What bounds the step is not measured: this fit's measured runs left no kernel traces of DDP x1 [bf16] (a fit "
            "stored before fit traced its measured runs on CUDA, or a profiler that failed, as the traces' notes say); a "
            "sweep of it at that batch (--per-device-batch 32) traces a few steps after its measured window on CUDA and "
            "measures the bound; measured: data waits") in t, t
    assert "--no-profile" not in t
    row = recommend.answer(sw, "synthetic", sw.bench["synthetic"], "bf16")[0]
    assert row[7] == "not measured (this fit's runs left no traces)" and bound.bound_category(row[7]) == "not measured"
    plain = build(str(tmp_path / "plain.sqlite"), [(spec("ddp", 1, "bf16"), payload(1, 60.0))])   # a sweep: as before
    assert "no kernel traces of DDP x1 [bf16] (on CUDA a few traced steps run" in text(plain)


def test_a_host_bound_step_under_fsdp_cpu_offload_names_the_offload_not_kernel_launches(tmp_path):
    # An H200's FSDP x1 [bf16, offload=cpu, adamw]: GPU busy 28%, 212 ms a step against 68 ms without offload, advised
    # "fewer, larger kernels help: --compile, a larger --per-device-batch"; the host runs the optimizer step and copies
    from test_kineto_traces import _kernel, _step, _write

    def traced(name: str) -> list:   # two traced steps, 0.25 ms of kernels each: host-bound in a 1 ms measured step
        events = [e for k in range(2) for e in (_step(k + 1, k * 2000, 2000), _kernel("sm90_xmma_gemm_bf16", k * 2000 + 100, 250.0))]
        return [{"rank": 0, "device_type": "cuda", "path": _write(tmp_path, name, events)}]
    offload = spec("fsdp", 1, "bf16", options=(("offload", "cpu"),))
    alone = build(str(tmp_path / "alone.sqlite"), [(offload, {**payload(1, 1.0), "traces": traced("alone")})])
    c = alone.bench["synthetic"][0]
    kind, why = bound.bound(alone, "synthetic", c)
    assert kind.startswith("host-bound") and "fewer, larger kernels" not in why and "--compile" not in why, why
    assert ("with FSDP's CPU offload the host runs the optimizer step and the shards' copies each step: that is the "
            "offload's cost; where the memory allows, offload none (--fsdp-offload none,cpu measures both") in why
    both = build(str(tmp_path / "both.sqlite"), [(offload, {**payload(1, 1.0), "traces": traced("on")}),
                                                 (spec("fsdp", 1, "bf16"), {**payload(1, 1.0), "traces": traced("off")})])
    on, off = sorted(both.bench["synthetic"], key=lambda c: "offload" not in c.options)
    assert bound.bound(both, "synthetic", on)[1].endswith("offload none (the memory-levers table has both).")
    assert "fewer, larger kernels help: --compile" in recommend.bound(both, "synthetic", off)[1]   # without offload: launches


def test_dataparallels_lead_not_resolved_goes_to_the_simpler_configuration_and_says_why(tmp_path):
    # quick-cpu recommended DataParallel x1 (on CPU single device timed again) on a 15% lead 'not resolved': a lead the
    # noise cannot resolve is not 'strictly faster'; single device is recommended and the page says why.
    rows = [(spec("single", 1), payload(1, 115.0)), (spec("dp", 1), payload(1, 100.0)), (spec("ddp", 2), payload(2, 300.0))]
    sw = build(str(tmp_path / "s.sqlite"), rows)
    best, fastest, tie = recommend.choose(sw.bench["synthetic"])
    assert (best.strategy, fastest.strategy, tie.within) == ("single", "dp", None)
    t = text(sw)
    assert ("Recommended: single device x1, 278.3 samples/s" in t and "DataParallel x1 is 15% faster, a lead not "
            "resolved, so single device x1 is recommended: DataParallel is recommended only where it is strictly "
            "faster, and a lead the noise cannot resolve is not.") in t, t
    row = recommend.blocks(sw)[1][2][0]
    assert row[2] == "single device x1" and row[8] == "DataParallel x1 15% faster (not resolved: noise not measured)"


def test_fsdp_is_set_beside_ddp_only_at_the_same_batch_and_recipe(tmp_path):
    # A fit report set FSDP at batch 4 against DDP at batch 3, neither named ('19% slower' beside fit's '1.48x').
    def at(strategy: str, batch: int, optimizer: str = "sgd") -> RunSpec:
        return RunSpec(workload="synthetic", strategy=strategy, device_type="cuda", device_count=2, per_device_batch=batch,
                       global_batch=2 * batch, image_size=0, steps=10, warmup=2, threads=0, seed=0, scaling="weak",
                       optimizer=optimizer)
    unlike = build(str(tmp_path / "u.sqlite"), [(at("ddp", 3), payload(2, 100.0, mem_mib=1000.0)),
                                                (at("fsdp", 4), payload(2, 80.0, mem_mib=1000.0)),
                                                (at("fsdp", 3, "adamw"), payload(2, 200.0, mem_mib=900.0))])
    assert "FSDP" not in " ".join(s for s in recommend.sentences(unlike, "synthetic", unlike.bench["synthetic"], "fp32")
                                  if "than DDP" in s or "memory per GPU" in s)
    alike = build(str(tmp_path / "a.sqlite"), [(at("ddp", 3), payload(2, 100.0, mem_mib=1000.0)),
                                               (at("ddp", 2), payload(2, 60.0, mem_mib=800.0)),
                                               (at("fsdp", 4), payload(2, 80.0, mem_mib=1000.0)),
                                               (at("fsdp", 3), payload(2, 125.0, mem_mib=900.0))])
    t = text(alike)   # batch 3 against batch 3, each named: the sweep ran each label at two batches
    assert ("FSDP holds 10% less memory per GPU and is 20% slower than DDP at 2 GPUs (both batch 3 per GPU) "
            "(table: synthetic: all configurations; plot: synthetic_memory.png).") in t, t


def test_each_auxiliary_head_is_a_model_of_its_own_with_its_own_recommendation(tmp_path):
    # --deeplabv3-aux changes what is trained: one recommendation over [aux=true] and [aux=unused] would advise leaving
    # the head out of the loss wherever that run is faster (here it is: 80 ms against 100).
    import dataclasses
    unused = (("find_unused_parameters", True),)
    aux = lambda s, a: dataclasses.replace(s, deeplabv3_aux=a)  # noqa: E731
    sw = build(str(tmp_path / "s.sqlite"), [
        (aux(spec("single", 1, workload="deeplabv3"), "true"), payload(1, 100.0)),
        (aux(spec("ddp", 1, workload="deeplabv3"), "true"), payload(1, 101.0)),
        (aux(spec("ddp", 1, workload="deeplabv3", options=unused), "unused"), payload(1, 80.0))])
    rows = recommend.blocks(sw)[1][2]
    assert [(r[1], r[2].split(" (")[0]) for r in rows] == [
        ("fp32, aux=true", "single device x1 [fp32, aux=true]"),
        ("fp32, aux=unused", "DDP x1 [fp32, find_unused_parameters=True, aux=unused]")], rows
    assert "deeplabv3, fp32, aux=true: " in text(sw)
    picks = [best.label for best, _, _ in recommend.chosen(sw, sw.bench["deeplabv3"])]
    assert picks == ["single device x1 [fp32, aux=true]", "DDP x1 [fp32, find_unused_parameters=True, aux=unused]"], picks


def test_the_budget_table_holds_each_auxiliary_head_apart_too(tmp_path):
    import dataclasses
    from bench.report import frontier
    unused = (("find_unused_parameters", True),)
    aux = lambda s, a: dataclasses.replace(s, deeplabv3_aux=a)  # noqa: E731
    sw = build(str(tmp_path / "s.sqlite"), [
        (aux(spec("ddp", 1, workload="deeplabv3"), "true"), payload(1, 100.0)),
        (aux(spec("ddp", 1, workload="deeplabv3", options=unused), "unused"), payload(1, 80.0, mem_mib=900.0))])
    got = [(row[1], row[2]) for row, _ in frontier.answer("deeplabv3", sw.bench["deeplabv3"], 80000.0)]
    assert got == [("fp32, sgd, aux=true", "DDP x1 [fp32, aux=true]"),
                   ("fp32, sgd, aux=unused", "DDP x1 [fp32, find_unused_parameters=True, aux=unused]")], got


def test_the_side_by_side_and_cost_pages_hold_each_auxiliary_head_apart(tmp_path):
    import dataclasses
    from bench.analysis import cost
    from bench.report import cost as cost_report, sidebyside
    unused = (("find_unused_parameters", True),)
    aux = lambda s, a: dataclasses.replace(s, deeplabv3_aux=a)  # noqa: E731
    path = str(tmp_path / "s.sqlite")
    build(path, [(aux(spec("ddp", 1, workload="deeplabv3"), "true"), payload(1, 100.0)),
                 (aux(spec("ddp", 1, workload="deeplabv3", options=unused), "unused"), payload(1, 80.0))])
    cols = sidebyside.load_targets(sidebyside.targets([path], None))
    table = next(b for b in sidebyside.recommendation_blocks(cols, cost.parse_price("2.0")) if b[0] == "table")
    assert [(r[1], r[2].split(":")[0]) for r in table[2]] == [("fp32, aux=true", "DDP x1 [fp32, aux=true]"),
                                                            ("fp32, aux=unused", "DDP x1 [fp32, find_unused_parameters=True, aux=unused]")], table
    said = [b[1] for b in cost_report.blocks(cols[0].sweep, cost.parse_price("2.0")) if b[0] == "p"]
    assert any(t.startswith("deeplabv3 [fp32, aux=true]: ") for t in said) and any(
        t.startswith("deeplabv3 [fp32, aux=unused]: ") for t in said), said
