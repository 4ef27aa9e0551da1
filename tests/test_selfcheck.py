"""The GPU self-check: with no GPU it says so and checks nothing; its checks run for real on the CPU path."""
from __future__ import annotations

import pytest

from bench.sweep import record

from conftest import run_bench


def test_without_a_gpu_selfcheck_says_so_and_exits_0_having_checked_nothing(tmp_path):
    p = run_bench(["selfcheck", "--store", str(tmp_path / "s.sqlite")], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no CUDA GPU visible" in p.stdout and "nothing was checked" in p.stdout
    assert not (tmp_path / "s.sqlite").exists() and "PASS" not in p.stdout


@pytest.mark.timeout(600)
def test_selfcheck_on_the_cpu_path_runs_every_check_and_they_pass(tmp_path):
    p = run_bench(["selfcheck", "--device", "cpu", "--store", str(tmp_path / "s.sqlite")], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [l for l in p.stdout.splitlines() if l.startswith(("  PASS", "  FAIL", "  SKIP"))]
    text = "\n".join(lines)
    assert lines and all(l.startswith("  PASS") for l in lines if "fp16" not in l), text
    for name in ("every configuration ran", "timing agrees: bench/synthetic/ddp/cpux2", "memory recorded",
                 "equivalence: ddp x2", "equivalence gate at 2: ddp", "all-reduce busbw on 2",
                 "CPU/gloo: no link to compare", "runs one step: DDP (ddp x2)", "runs one step: FSDP (fsdp x2)",
                 "runs one step: bf16 autocast (ddp x2)", "process noise measured"):
        assert name in text, name
    # single x1 ran in 3 processes: their spread is kept as this host's process noise, for any store's report here
    import json
    import os
    from bench.commands import selfcheck
    (entry,) = json.load(open(os.environ["BENCH_HOST_NOISE"]))["entries"]
    assert entry["device_type"] == "cpu" and len(entry["process_sps"]) == 3
    # on 2 shared cores its processes may step unsteadily: the entry then says so beside the configuration's name
    assert entry["configuration"] == "single device x1" + (f" ({selfcheck.unsteady_words(entry['processes'])})"
                                                           if any(p["unstable"] for p in entry["processes"]) else "")
    assert len(entry["processes"]) == 3
    # a plain `report --store` renders the last sweep (a one-step bf16 run): the line names the main sweep
    assert f"the main sweep's report: ./run_bench.sh report --store {tmp_path / 's.sqlite'} --sweep 1" in p.stdout
    assert entry["store"] == str(tmp_path / "s.sqlite") and "selfcheck's spread between 3 processes" in text
    fp16 = [l for l in lines if "runs one step: fp16 with the gradient scaler" in l]
    assert len(fp16) == 1 and fp16[0].startswith("  SKIP") and "skipped by design" in fp16[0], text
    assert "3 sweep(s)" in p.stdout and "not on the CPU path" in p.stdout  # compile and DeepLabV3: said, not hidden
    # a one-step sweep's run is a smoke test: its line and its check give no speed (2 steps, no warm-up)
    assert "[1/1] synthetic fsdp cpu x2: ok, ran 2 steps after 0 warm-up (a smoke test, not a speed)" in p.stdout, p.stdout
    fsdp = [l for l in lines if "runs one step: FSDP" in l]
    assert len(fsdp) == 1 and fsdp[0].endswith("ok, ran 2 steps after 0 warm-up (a smoke test, not a speed)"), fsdp
    assert not (tmp_path / "report.md").exists()  # the self-check renders no report over a sweep's results/report.md


def test_the_configurations_it_runs_on_1_2_and_8_gpus_with_and_without_bf16():
    from bench.commands import selfcheck_sweeps as ss
    for n in (1, 2, 8):
        for bf16 in (True, False):
            steps = {s.what: s for s in ss.steps("cuda", n, bf16)}
            assert set(steps) == {"DDP", "FSDP", "fp16 with the gradient scaler", "bf16 autocast", "torch.compile",
                                  "DeepLabV3, channels_last, synthetic images"}
            assert all(s.count == n for s in steps.values())  # the largest count: every GPU
            assert not any(s.by_design for w, s in steps.items() if w != "bf16 autocast")  # on CUDA a skip fails
            assert bool(steps["bf16 autocast"].by_design) is not bf16 and steps["bf16 autocast"].in_main is bf16
            assert steps["FSDP"].gate is (n == 2) and steps["torch.compile"].compile
            dl = steps["DeepLabV3, channels_last, synthetic images"]
            assert (dl.workload, dl.strategy, dl.channels_last) == ("deeplabv3", "ddp", True)
            runs = ss.sweeps("cuda", n, bf16, "/s.sqlite")
            titles = [t for t, _ in runs]
            main = runs[0][1]
            assert titles[0] == "main sweep" and "--no-report" in main
            assert ("--check-equivalence" in main) is (n <= 2)  # above 2 the gate runs at 2 in a sweep of its own
            assert main[main.index("--gpus") + 1] == ("1" if n == 1 else f"1,{n}")
            assert main[main.index("--precision") + 1] == ("fp32,bf16" if bf16 else "fp32")
            # one sweep per step the main sweep does not run and that can run here (a step skipped by design runs no
            # sweep: planning refuses one whose every configuration is a skip), and the gate at 2 of its own above 2
            assert len(runs) == 1 + sum(not s.in_main and not s.by_design for s in steps.values()) + (n > 2)
            assert ("equivalence gate at 2" in titles) is (n > 2)
            for title, argv in runs[1:]:
                assert argv[argv.index("--gpus") + 1] == (str(n) if title.startswith("one step") else "2")
                assert "--no-report" in argv and argv[argv.index("--store") + 1] == "/s.sqlite"
            compile_argv = dict(runs)["one step: torch.compile"]
            assert "--compile" in compile_argv and compile_argv[compile_argv.index("--warmup") + 1] == "1"
            deeplab = dict(runs)["one step: DeepLabV3, channels_last, synthetic images"]
            assert "--channels-last" in deeplab and "--data" not in deeplab and "--image-size" in deeplab
            if n > 2:
                gate = dict(runs)["equivalence gate at 2"]
                assert gate[gate.index("--strategies") + 1] == "dp,ddp,fsdp" and "--check-equivalence" in gate
    assert [s.what for s in ss.steps("cpu", 2, False)] == ["DDP", "FSDP", "fp16 with the gradient scaler", "bf16 autocast"]


def test_every_argv_it_builds_is_a_valid_sweep(tmp_path):
    # Each sweep passes the suite's own checks on machines of 1, 2 and 8 GPUs (resolved without a GPU) and runs something.
    from bench import options
    from bench.commands import selfcheck_sweeps as ss
    from bench.sweep.plan import Machine, RunSpec, plan
    for n in (1, 2, 8):
        h100 = Machine(cuda_devices=n, cpu_cores=16, gpu_names=("NVIDIA H100 80GB HBM3",) * n,
                       gpu_capabilities=((9, 0),) * n, arch_list=("sm_90",))
        for title, argv in ss.sweeps("cuda", n, True, str(tmp_path / "s.sqlite")):
            cfg = options.prepare(argv, machine=h100)[0]
            runs = [s for s in plan(cfg, h100) if isinstance(s, RunSpec)]
            assert runs, (n, title)


def test_a_one_step_sweep_runs_each_configuration_once_untraced_on_cuda_and_only_the_main_sweep_measures_noise(tmp_path):
    # On one H100 the one-step sweeps took the CUDA defaults (3 processes each for the noise, 3 traced steps) and the
    # self-check outran its limit: one process proves a path runs; the main sweep alone measures the host's noise.
    from bench import options
    from bench.commands import selfcheck_sweeps as ss
    from bench.sweep.plan import Machine, RunSpec, plan
    for n in (1, 8):
        h100 = Machine(cuda_devices=n, cpu_cores=16, gpu_names=("NVIDIA H100 80GB HBM3",) * n,
                       gpu_capabilities=((9, 0),) * n, arch_list=("sm_90",))
        for title, argv in ss.sweeps("cuda", n, True, str(tmp_path / "s.sqlite")):
            cfg = options.prepare(argv, machine=h100)[0]
            bench = [s for s in plan(cfg, h100) if isinstance(s, RunSpec) and s.mode == "bench"]
            if title == "main sweep":
                assert cfg.noise_repeats == ss.NOISE_PROCESSES and max(s.repeat for s in bench) == ss.NOISE_PROCESSES - 1
                for precision in ("fp32", "bf16"):   # the host's noise at each precision: one does not speak for another
                    assert sorted(s.repeat for s in bench if (s.strategy, s.device_count, s.precision) == (
                        "single", 1, precision)) == list(range(ss.NOISE_PROCESSES)), (n, precision)
                continue
            assert [s.repeat for s in bench] == [0] * len(bench), (n, title)
            assert not cfg.profile and all(s.profile_steps == 0 for s in bench), (n, title)


def _processes(path: str, sid: int, precision: str, throughputs: tuple, jitter: float = 0.0) -> None:
    """The synthetic MLP's single x1 at `precision` in one process per throughput factor (1.0: the H100's step); its
    steps alternate between the step and (1 + jitter) times it (jitter 0.5: an IQR of about 40% of their median)."""
    from bench.store import store
    from report_fixtures import H100, H100_SYNTHETIC_MS, h100_spec
    conn = store.connect(path)
    env_id = conn.execute("SELECT env_id FROM sweeps WHERE sweep_id = ?", (sid,)).fetchone()[0]
    for r, f in enumerate(throughputs):
        ms = [H100_SYNTHETIC_MS / f * (1 + jitter * (i % 2)) for i in range(20)]
        pl = {"steps": [{"kind": "measure", "rank": 0, "step": i, "step_ms": t} for i, t in enumerate(ms)],
              "windows": [{"kind": "measure", "rank": 0, "wall_s": sum(ms) / 1e3, "samples": 512 * len(ms), "steps": len(ms)}],
              "memory": [{"rank": 0, "device": "cuda:0", "device_name": H100, "peak_allocated_mib": 1618,
                          "peak_reserved_mib": 1718, "device_used_mib": 2469}]}
        record.record_result(conn, sid, env_id, h100_spec("synthetic", "single", precision, repeat=r, batch=512), "ok",
                             payload=pl)
    conn.close()


def test_the_host_noise_is_kept_per_precision_and_a_precision_without_repeats_gets_none(tmp_path, monkeypatch):
    # One H200: fp32 processes of DeepLabV3 single x1 0.5% apart, two bf16 ones 38%: the main sweep's fp32 and bf16 both
    # repeat single x1 (its noise probe at every precision), and each precision's spread is kept under its own key.
    from bench.commands import selfcheck
    from bench.store import hostnoise
    from report_fixtures import H100, build_h100_store
    monkeypatch.setenv("BENCH_HOST_NOISE", str(tmp_path / "host-noise.json"))
    path = str(tmp_path / "s.sqlite")
    sid = build_h100_store(path, 0.01)   # fp32 MLP in 3 processes; DeepLabV3 fp32 and bf16 in one each
    name, ok, detail = selfcheck.host_noise(path, sid)
    assert name == "process noise measured" and ok is False and "no bf16 configuration ran in two processes" in detail
    assert hostnoise.lookup("vm", "cuda", H100, "fp32")["precision"] == "fp32"
    assert hostnoise.lookup("vm", "cuda", H100, "bf16") is None   # fp32's figure is never kept as bf16's
    _processes(path, sid, "bf16", (1.0, 0.72, 1.0))
    name, ok, detail = selfcheck.host_noise(path, sid)
    assert ok is True and detail.startswith("bf16: 28%, selfcheck's spread between 3 processes of single device x1 [bf16]")
    assert "; fp32: 1.0%, selfcheck's spread between 3 processes of single device x1 on the synthetic MLP, on host vm" in detail
    bf16, fp32 = (hostnoise.lookup("vm", "cuda", H100, p) for p in ("bf16", "fp32"))
    assert (bf16["precision"], bf16["configuration"], len(bf16["process_sps"])) == ("bf16", "single device x1 [bf16]", 3)
    assert fp32["configuration"] == "single device x1" and len(hostnoise.entries()) == 2


def test_a_noise_figure_from_unstable_processes_says_so_in_its_line_its_entry_and_the_reports_that_use_it(tmp_path,
                                                                                                      monkeypatch):
    # selfcheck --device cpu on 2 cores: its three single x1 processes were all unstable (steps' IQR 19-29% of their
    # median), yet it printed "PASS process noise measured fp32: 12%" and every later report read that 12% as
    # "measured on steady processes". The figure stands (a spread is a spread); it says what its processes were.
    from bench.analysis import results
    from bench.commands import selfcheck
    from bench.report import recommend
    from bench.store import hostnoise, store
    from report_fixtures import H100, build_h100_store
    monkeypatch.setenv("BENCH_HOST_NOISE", str(tmp_path / "host-noise.json"))
    path = str(tmp_path / "s.sqlite")
    sid = build_h100_store(path, 0.01)
    _processes(path, sid, "fp32", (1.0, 0.85, 1.0), jitter=0.5)   # fp32's three processes again: each unstable
    _processes(path, sid, "bf16", (1.0, 0.72, 1.0))               # bf16's three: steady
    name, ok, detail = selfcheck.host_noise(path, sid)
    shaky = "(all 3 unstable: their steps' IQR 40%, 40% and 40% of their median, above 10%)"
    assert ok is True and f"fp32: 15%, selfcheck's spread between 3 processes of single device x1 {shaky} on the synthetic MLP, on host vm" \
        in detail, detail
    assert "bf16: 28%, selfcheck's spread between 3 processes of single device x1 [bf16] on the synthetic MLP, on host" in detail  # steady
    bf16, fp32 = (hostnoise.lookup("vm", "cuda", H100, p) for p in ("bf16", "fp32"))
    assert [p["unstable"] for p in fp32["processes"]] == [True] * 3 and round(fp32["processes"][0]["iqr_fraction"], 2) == 0.4
    assert [p["unstable"] for p in bf16["processes"]] == [False] * 3
    # a report of another store on this host that decides a tie on the fp32 figure names it with its processes' state
    other = str(tmp_path / "other.sqlite")
    build_h100_store(other, None)   # nothing repeated: selfcheck's figures are what it has
    conn = store.connect(other, readonly=True)
    try:
        sweep = results.load(conn, results.pick_sweep(conn, None))
    finally:
        conn.close()
    said = " ".join(b[1] for b in recommend.blocks(sweep) if b[0] == "p")
    assert ("is 8% faster, within the noise: single device x1 is recommended, fewer settings changed from the defaults. "
            f"The noise: 15%, selfcheck's spread between 3 processes of single device x1 {shaky} on the synthetic MLP, on host vm") in said, said


def _record(conn, sid, status="ok", reason=None, **spec):
    from bench.shared.spec import RunSpec
    s = RunSpec(**{**dict(workload="synthetic", strategy="ddp", device_type="cuda", device_count=2, per_device_batch=8,
                          global_batch=16, image_size=0, steps=2, warmup=0, threads=1, seed=0, scaling="weak"), **spec})
    payload = {"steps": [], "windows": [], "memory": [], "timing_method": "cuda_window_events"} if status == "ok" else None
    record.record_result(conn, sid, None, s, status, reason, payload=payload)


def test_the_checks_read_every_sweep_of_the_selfcheck_and_a_skipped_step_fails_on_cuda_with_its_reason(tmp_path):
    from bench.commands import selfcheck, selfcheck_sweeps as ss
    from bench.store import store
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    assert selfcheck.checks(path) == [("every configuration ran", False, f"{path} holds no sweep of a self-check")]
    old = store.begin_sweep(conn, "an earlier self-check", "{}", None)  # another process's sweep: not read
    _record(conn, old, "failed", "long ago", strategy="fsdp")
    conn.execute("UPDATE sweeps SET pid = pid + 1 WHERE sweep_id = ?", (old,))
    main, one, two, three = (store.begin_sweep(conn, "cmd", "{}", None) for _ in range(4))
    _record(conn, main)                                                      # DDP, in the main sweep
    _record(conn, one, strategy="fsdp")                                      # FSDP, in a sweep of its own
    _record(conn, two, "skipped", "fp16 needs X", precision="fp16")          # a skip on CUDA: a failure
    _record(conn, three, "skipped", "bf16 needs compute capability 8.0 (Ampere) or later; this GPU has 7.0",
            precision="bf16")                                                # bf16 without hardware: stated
    conn.close()
    steps = tuple(ss.steps("cuda", 2, False))[:4]
    got = {c: (ok, d) for c, ok, d in selfcheck.checks(path, None, steps)}
    assert got["runs one step: DDP (ddp x2)"][0] is True and got["runs one step: FSDP (fsdp x2)"][0] is True
    assert got["runs one step: fp16 with the gradient scaler (ddp x2)"] == (False, "skipped: fp16 needs X")
    ok, detail = got["runs one step: bf16 autocast (ddp x2)"]
    assert ok is None and "skipped by design" in detail and "this GPU has 7.0" in detail
    assert got["every configuration ran"][0] is True  # the earlier self-check's failure is not this one's
    gate = {c: (ok, d) for c, ok, d in selfcheck.checks(path, None, steps, gate=("dp", "ddp", "fsdp"))}
    assert gate["equivalence gate at 2: dp,ddp,fsdp"][0] is False and "ddp: not run" in gate["equivalence gate at 2: dp,ddp,fsdp"][1]


def test_the_timing_check_fails_when_window_and_steps_disagree(tmp_path):
    # The check is not a formality: a store whose window is twice its steps fails it.
    from bench.commands import selfcheck
    from bench.store import store
    from bench.sweep.plan import RunSpec
    s = RunSpec(workload="synthetic", strategy="single", device_type="cpu", device_count=1, per_device_batch=10,
                global_batch=10, image_size=0, steps=4, warmup=0, threads=1, seed=0, scaling="weak")
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    record.record_result(conn, sid, None, s, "ok", payload={
        "steps": [{"kind": "measure", "rank": 0, "step": i, "step_ms": 10.0} for i in range(4)],
        "windows": [{"kind": "measure", "rank": 0, "wall_s": 0.080, "samples": 40, "steps": 4}],
        "memory": [{"rank": 0, "device": "cpu", "peak_rss_mib": 100.0}], "timing_method": "cpu_clock"})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    timing = [c for c in selfcheck.checks(path) if c[0].startswith("timing agrees")]
    assert timing and timing[0][1] is False and "50.0% apart" in timing[0][2], timing


def test_the_lines_name_each_process_and_give_the_last_loss_and_the_equivalence_difference(tmp_path):
    # selfcheck --device cpu printed "timing agrees: bench/synthetic/single/cpux1/..." three times (its three single x1
    # processes: a FAIL could not be traced to one), "every timed run trained ... yes" and "equivalence: ddp x2 [fp32]
    # parameters match" with no figure, though the store holds the losses and the largest difference.
    from bench.commands import selfcheck
    from bench.shared.spec import RunSpec
    from bench.store import store

    def spec(strategy, n, repeat=0, mode="bench"):
        return RunSpec(workload="synthetic", strategy=strategy, device_type="cpu", device_count=n, per_device_batch=10,
                       global_batch=10 * n, image_size=0, steps=4, warmup=0, threads=1, seed=0, scaling="weak",
                       repeat=repeat, mode=mode)

    def run(n, loss):
        return {"steps": [{"kind": "measure", "rank": r, "step": i, "step_ms": 10.0, "loss": loss + (3 - i) / 10}
                          for r in range(n) for i in range(4)],
                "windows": [{"kind": "measure", "rank": r, "wall_s": 0.040, "samples": 40, "steps": 4} for r in range(n)],
                "memory": [{"rank": r, "device": "cpu", "peak_rss_mib": 100.0} for r in range(n)],
                "timing_method": "cpu_clock"}
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    for r, loss in enumerate((2.21, 2.25, 2.33)):
        record.record_result(conn, sid, None, spec("single", 1, r), "ok", payload=run(1, loss))
    record.record_result(conn, sid, None, spec("ddp", 2), "ok", payload=run(2, 2.30))
    record.record_result(conn, sid, None, spec("ddp", 2, mode="equivalence"), "ok", payload={
        "max_abs_diff": 3.0e-7, "optimizer_steps": 3, "state_max_rel_diff": 0.0, "state_tensors": 6})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    got = {c: (ok, d) for c, ok, d in selfcheck.checks(path, gate=("ddp",))}
    key = "bench/synthetic/single/cpux1/b10/g10/i0/synthetic/fp32"
    for i in (1, 2, 3):
        assert got[f"timing agrees: {key} (process {i} of 3)"][0] is True, got.keys()
        assert got[f"memory recorded: {key} (process {i} of 3)"][0] is True
    assert "timing agrees: bench/synthetic/ddp/cpux2/b10/g20/i0/synthetic/fp32" in got   # one process: no count
    assert got["every timed run trained (its last loss finite)"] == (True, "yes: last loss 2.21-2.33 over 4 runs")
    assert got["equivalence: ddp x2 [fp32]"] == (True, "parameters match: max |diff| 3e-07 after 3 optimizer steps, "
                                                       "optimizer state max relative diff 0 over 6 tensors")
    assert got["equivalence gate at 2: ddp"] == (True, "parameters match one process's (max |diff| 3e-07)")


def test_a_stored_nvlink_all_reduce_that_fell_short_fails_naming_the_link_of_the_gpus_its_ranks_used(tmp_path):
    # The wiring from the store: the comm result's environment (topology, GPUs), its ranks' GPUs (by PCI bus id) and
    # its rows. Ranks ran on torch GPUs 2 and 3, joined by NV18, while GPUs 0-1 have only PCIe.
    from bench.commands import selfcheck
    from bench.shared.spec import RunSpec
    from bench.store import store
    bus = [f"00000000:{0x10 + i:02X}:00.0" for i in range(4)]
    gpus = [{"index": i, "compute_capability": "9.0", "pcie_gen_max": 5, "pcie_width_max": 16, "pci_bus_id": bus[i]}
            for i in range(4)]
    matrix = [["X", "PIX", "SYS", "SYS"], ["PIX", "X", "SYS", "SYS"], ["SYS", "SYS", "X", "NV18"], ["SYS", "SYS", "NV18", "X"]]
    env = {"gpus": gpus, "topology": {"numbering": "torch", "matrix": matrix}, "cpu_model": "Intel Xeon",
           "nccl_env": {"NCCL_SHM_DISABLE": "1"}}
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    eid = store.insert_environment(conn, env)
    sid = store.begin_sweep(conn, "cmd", "{}", eid)
    spec = RunSpec(workload="allreduce", strategy="comm", device_type="cuda", device_count=2, per_device_batch=0,
                   global_batch=0, image_size=0, steps=0, warmup=0, threads=1, seed=0, scaling="weak", mode="comm")
    record.record_result(conn, sid, eid, spec, "ok", payload={
        "comm": [{"scope": "world", "ranks": 2, "size_bytes": 2**28, "time_ms": 10.0, "algbw_gbps": 22.0, "busbw_gbps": 22.0}],
        "rank_devices": [{"rank": 0, "host": "n1", "device": bus[2]}, {"rank": 1, "host": "n1", "device": bus[3]}]})
    conn.close()
    got = {c: (ok, d) for c, ok, d in selfcheck.checks(path)}
    ok, detail = got["all-reduce busbw on 2"]
    assert ok is False and "NV18 between GPUs 2-3" in detail and "measured 22.0 GB/s" in detail, detail
    assert "NCCL_SHM_DISABLE=1" in detail


def test_a_timed_run_whose_last_loss_is_not_finite_fails_the_check_and_a_recovered_one_passes():
    import json
    from bench.commands import selfcheck
    nan = {"steps": 3, "of": 8, "kind": "measure", "step": 5, "rank": 1, "last": True}
    rows = [{"config_key": "bench/a", "status": "ok", "details_json": json.dumps({"loss_not_finite": nan})},
            {"config_key": "bench/b", "status": "ok", "details_json": json.dumps({"loss_not_finite": dict(nan, last=False)})},
            {"config_key": "bench/c", "status": "ok", "details_json": None}]
    name, ok, why = selfcheck._trained(rows)
    assert not ok and why == "bench/a: loss not finite at 3 of 8 steps (first: measured step 5, rank 1): timed, but not training"
    assert selfcheck._trained(rows[1:])[1:] == (True, "yes")


def test_a_one_step_run_is_said_to_be_a_smoke_test_not_a_speed_in_its_sweep_line_and_its_check(tmp_path):
    # On an H200 the self-check printed 'torch.compile ... ok, 22456.8 samples/s' (2 steps after 1 warm-up) beside
    # DDP's 75,233 from the main sweep's 20 steps, as if compiling were 3.3x slower; its table said the same.
    from bench.commands import selfcheck, selfcheck_sweeps as ss
    from bench.store import store
    from bench.sweep import run as sweep_run
    from bench.sweep.diagnose import Outcome
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    main, own = store.begin_sweep(conn, "cmd", "{}", None), store.begin_sweep(conn, "cmd", "{}", None)

    def ok(sid, steps, **spec):
        from bench.shared.spec import RunSpec
        s = RunSpec(**{**dict(workload="synthetic", strategy="ddp", device_type="cuda", device_count=1,
                              per_device_batch=256, global_batch=256, image_size=0, steps=steps, warmup=0, threads=1,
                              seed=0, scaling="weak"), **spec})
        payload = {"steps": [{"kind": "measure", "rank": 0, "step": i, "step_ms": 6.0 + 10 * (i % 2)} for i in range(steps)],
                   "windows": [{"kind": "measure", "rank": 0, "wall_s": steps * 0.011, "samples": 256 * steps,
                                "steps": steps}], "memory": [], "timing_method": "cuda_window_events"}
        return record.record_result(conn, sid, None, s, "ok", None, payload=payload)
    ok(main, 20)                                    # DDP: the main sweep's 20 measured steps, a speed
    rid = ok(own, 2, compile=True, warmup=1)        # torch.compile: a one-step sweep of its own
    conn.commit()
    line = "[1/1] synthetic ddp cuda x1 [compiled]: " + sweep_run._summary_line(conn, rid, Outcome("ok"))
    conn.close()
    compiled = next(s for s in ss.steps("cuda", 1, True) if s.compile)
    assert "samples/s" in line
    said = []
    selfcheck.smoke_log(compiled, said.append)(line)
    assert said == ["[1/1] synthetic ddp cuda x1 [compiled]: ok, ran 2 steps after 1 warm-up (a smoke test, not a "
                    "speed)"]
    got = {c: d for c, _, d in selfcheck.checks(path, None, tuple(ss.steps("cuda", 1, True))[:1] + (compiled,))}
    assert got["runs one step: torch.compile (ddp x1)"] == "ok, ran 2 steps after 1 warm-up (a smoke test, not a speed)"
    assert got["runs one step: DDP (ddp x1)"].endswith("samples/s over 20 measured step(s)")   # the main sweep's: a speed
