"""The forecast command on hand-made stores (its table, its check and the check's basis, what it must not read, its
refusals), the report's forecast section, and real sweeps: the session's quick sweep and one held-out pair (x1 with
the machine measured at 2, then x2 measured in a later sweep)."""
from __future__ import annotations

import hashlib
import math
import os
import re
import sqlite3

import pytest

from bench import cli
from bench.store import store
from bench.sweep import record
from conftest import run_bench, script_module
from report_fixtures import spec

BUCKETS = ((4e6, 0.4), (12e6, 1.0))        # bytes, ready as a fraction of backward
ALPHA_MS, BUSBW = 0.1, 1.0                # the all-reduce rows: 100 us per step, 1 GB/s
COMM_SIZES = (2**16, 2**20, 2**22, 2**24)
FRACTIONS = {"data_ms": 0.05, "forward_ms": 0.3, "backward_ms": 0.5, "optimizer_ms": 0.15}


def _steps(count: int, step_ms: float, kind: str = "measure", n: int = 6) -> list:
    return [{"kind": kind, "rank": r, "step": i, "step_ms": step_ms, "loss": 1.0,
             **{k: f * step_ms for k, f in FRACTIONS.items()}} for r in range(count) for i in range(n)]


def _windows(count: int, step_ms: float, per_rank: int = 64, n: int = 6) -> list:
    return [{"kind": "measure", "rank": r, "wall_s": n * step_ms / 1e3, "samples": per_rank * n, "steps": n} for r in range(count)]


def _memory(count: int, peak_over_baseline: float) -> list:
    return [{"rank": r, "device": "cpu", "device_name": "cpu", "peak_rss_mib": 500.0 + peak_over_baseline,
             "baseline_rss_mib": 500.0, "method": "getrusage", "params_mib": 16.0, "grads_mib": 16.0,
             "optimizer_mib": 16.0, "buckets_mib": 16.0} for r in range(count)]


def _buckets(n: int) -> list:
    return [{"kind": "ddp", "rank": r, "step": 0, "bucket": b, "size_bytes": int(s), "ready_ms": f * 10, "backward_ms": 10.0}
            for r in range(n) for b, (s, f) in enumerate(BUCKETS)]


def _machine(ranks: int, slow: float = 1.0) -> dict:
    """A comm run's rows at `ranks`: the all-reduce at ALPHA_MS per step and BUSBW (x slow), and its interference: a
    lone call as long, beside the load 3x as long, the load at half speed meanwhile."""
    t = lambda s: (2 * (ranks - 1) * ALPHA_MS + 2 * (ranks - 1) / ranks * s / (BUSBW * 1e6)) * slow  # noqa: E731
    comm = [{"scope": "world", "ranks": ranks, "size_bytes": s, "time_ms": t(s)} for s in COMM_SIZES]
    inter = [{"scope": "world", "ranks": ranks, "op": "all_reduce", "size_bytes": s, "comm_alone_ms": t(s),
              "comm_contended_ms": 3 * t(s), "comm_slowdown": 3.0, "compute_slowdown": 2.0, "rounds": 5} for s in COMM_SIZES]
    return {"comm": comm, "interference": inter}


def build_store(path: str, single: bool = True, ddp_counts: tuple = (1, 2), machine_counts: tuple = (2,),
                x4_slow: float = 1.0, x4_buckets: float = 1.0, dp: bool = True, x1_sync_ms: float = 0.0,
                ddp_x1_ms: float = 30.0, flops_per_sample: float = None) -> None:
    """single x1 (30 ms), DDP x1 (ddp_x1_ms, 30), x2 (60 ms; 35 under no_sync) [, x4 (90 ms)], DataParallel x2 (40 ms),
    and the machine (all-reduce rows and interference) at machine_counts. x1_sync_ms: DDP x1's probe also has
    synchronised blocks of that step (their backward over its no_sync() blocks' is DDP's own gradient work).
    flops_per_sample: the model FLOPs every configuration counted (none without)."""
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_cores": 2})
    sid = store.begin_sweep(conn, "bench --gpus 1,2", "{}", env_id)
    flops = {"flops": {"flops_per_sample": flops_per_sample, "device": "meta", "batch": 64, "uncounted": []}
             } if flops_per_sample else {}
    rec = lambda sp, payload: record.record_result(conn, sid, env_id, sp, "ok", "",  # noqa: E731
                                                   {"grad_bytes": 16e6, **flops, **payload})
    if single:
        rec(spec("synthetic", "single", 1), {"steps": _steps(1, 30.0), "windows": _windows(1, 30.0)})
    measured = {1: (ddp_x1_ms, 29.0, 200.0), 2: (60.0, 35.0, 220.0), 4: (90.0, 38.0, 230.0)}
    for n in ddp_counts:
        step, no_sync, peak = measured[n]
        buckets = [{**b, "ready_ms": b["ready_ms"] * (x4_buckets if n == 4 else 1.0)} for b in _buckets(n)]
        probe_sync = _steps(n, x1_sync_ms, "probe_sync") if n == 1 and x1_sync_ms else []
        rec(spec("synthetic", "ddp", n), {"steps": _steps(n, step) + _steps(n, no_sync, "probe_no_sync") + probe_sync,
                                          "windows": _windows(n, step), "buckets": buckets, "memory": _memory(n, peak)})
    if dp:
        rec(spec("synthetic", "dp", 2), {"steps": _steps(1, 40.0), "windows": _windows(1, 40.0, 128)})
    for n in machine_counts:
        record.record_result(conn, sid, env_id, spec("allreduce", "comm", n, mode="comm"), "ok", "",
                            _machine(n, x4_slow if n == 4 else 1.0))
    store.end_sweep(conn, sid, "completed")
    conn.close()


@pytest.fixture
def hand_store(tmp_path) -> str:
    path = str(tmp_path / "hand.sqlite")
    build_store(path)
    return path


def _rounds_script():
    return script_module("scripts/forecast_rounds.py")


def forecast(args: list, capsys) -> tuple:
    """./run_bench.sh forecast ARGS in this process (the dispatcher, its exit status): (status, stdout, stderr)."""
    rc = cli.main(["forecast", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _row(out: str, strategy: str, count: int) -> str:
    block = out.split(f"synthetic {strategy}")[1].split("\n\n")[0]
    return next(line for line in block.splitlines() if re.match(rf"\s+{count}\s", line) and "measured" not in line)


# x2 from x1 on the machine measured at x2: x1's phases 1.5 + 9 + 15 + 4.5 ms; bucket 0 (4.2 ms alone) ready at 6 ms
# runs 3x slower (12.6 ms) while backward runs at half speed (6.3 of its remaining 9 ms), backward ends at 21.3 ms,
# bucket 1 (12.2 ms alone) follows: 33.5 ms of backward and communication.
X2_FROM_X1 = 1.5 + 9 + 33.5 + 4.5


def test_the_check_forecasts_x2_from_x1_on_the_machine_measured_at_x2_and_stores_its_basis(hand_store, capsys):
    rc, stdout, stderr = forecast(["--store", hand_store, "--to", "2,4"], capsys)
    assert rc == 0, stderr
    # one process of equal steps, rounds not kept: nothing measured twice, no range (said), so 60 ms is neither
    # inside nor outside one (before: "no range ..., outside the range", and "0 of 1 measured inside the range")
    assert (f"forecast {X2_FROM_X1:.2f} ms from x1 (no range: no input measured twice), measured 60.00 ms: error "
            f"{X2_FROM_X1 / 60 - 1:+.1%} (compute") in stdout
    assert "measured inside the range" not in stdout               # the summary counts ranged rows only: none
    assert "compute -8%" in stdout            # x1's 30 ms against x2's own 35 ms under no_sync, over 60 ms
    assert "basis: machine at x2" in stdout and "nothing of x2's training read" in stdout
    assert "memory 200 MiB (no range: no input measured twice) against 220 measured (-9%" in stdout   # one process
    conn = sqlite3.connect(hand_store)
    (err, frm, basis, judged, mem_err), = conn.execute(
        "SELECT error, from_counts, basis, judged_sweep, mem_error FROM forecasts WHERE strategy = 'ddp'").fetchall()
    assert err == pytest.approx(X2_FROM_X1 / 60 - 1) and frm == "1" and basis.startswith("machine at x2") and judged == 1
    assert mem_err == pytest.approx(200 / 220 - 1)


def test_the_checks_compute_is_held_against_no_sync_like_for_like_without_ddps_own_gradient_work(tmp_path, capsys):
    # x1's probe: synchronised blocks of 35 ms against no_sync() ones of 29, backward 17.5 against 14.5 ms: 3 ms of
    # DDP's own work (bucket copies) inside x1's measured 30 ms, which x2's no_sync() step (35 ms) skips as well.
    # Held like for like: (30 - 3 - 35) / 60 = -13%, where the 30 ms whole read -8% (compute) and hid 5% of the
    # error in it that belongs to communication and waiting.
    path = str(tmp_path / "own.sqlite")
    build_store(path, x1_sync_ms=35.0)
    rc, stdout, stderr = forecast(["--store", path, "--to", "2"], capsys)
    assert rc == 0, stderr
    assert f"error {X2_FROM_X1 / 60 - 1:+.1%}" in stdout                      # the forecast itself is unchanged
    assert "(compute -13%, communication and waiting " in stdout
    assert "less DDP's own gradient work, 3.0 ms of bucket copies from x1's probe" in stdout
    (ce,), = sqlite3.connect(path).execute("SELECT compute_error FROM forecasts WHERE strategy = 'ddp'").fetchall()
    assert ce == pytest.approx((30 - 3 - 35) / 60)


def test_the_forecast_past_the_measured_counts_prices_collectives_beside_backward(hand_store, capsys):
    rc, stdout, stderr = forecast(["--store", hand_store, "--to", "2,4"], capsys)
    assert rc == 0, stderr
    # x4 (2 nodes of 2) from x2's no_sync compute (1.75 + 10.5 + 17.5 + 5.25 ms): the network fitted at x2 prices the
    # buckets at 2*3/4 S / 1 GB/s + 6 steps of 100 us (6.6 and 18.6 ms); x2's slowdowns (3x and 2x): bucket 0 from
    # 7 ms for 19.8 ms, backward's last 10.5 ms at half speed then alone: 27.4 ms; bucket 1: 46.0 ms
    assert f"{1.75 + 10.5 + 46.0 + 5.25:.1f}" in _row(stdout, "DDP", 4)
    assert "interference measured (at 2 ranks)" in stdout and "assumed as fast as the node level" in stdout
    assert "buckets: 2 measured" in stdout and "compute: DDP x2 under no_sync() (measured)" in stdout
    assert "memory:" in stdout and "activations and the rest (measured)" in stdout
    assert "40.0" in _row(stdout, "DataParallel", 2)
    assert "refused: DataParallel is one process" in _row(stdout, "DataParallel", 4)


def test_ddp_at_one_device_prints_its_wrapper_overhead_not_a_scaling_efficiency(tmp_path, capsys):
    # DDP x1 at 40 ms against single's 30: 75% of single's throughput, which is the wrapper's overhead (a step 33% longer)
    # on the same one device, not scaling; x2 against single x1 is scaling (30 ms of single's work in 60 ms: 50%)
    path = str(tmp_path / "x1.sqlite")
    build_store(path, ddp_x1_ms=40.0, dp=False)
    rc, stdout, stderr = forecast(["--store", path, "--to", "2"], capsys)
    assert rc == 0, stderr
    block = stdout.split("synthetic DDP")[1].split("\n\n")[0]
    x1 = next(line for line in block.splitlines() if re.match(r"\s+1\s", line))
    assert x1.split()[2:5] == ["40.0", "1600", "–"], x1         # its step and samples/s; no efficiency
    assert "75%" not in x1 and "wrapper overhead 33.3% (against single device x1" in x1
    x2 = next(line for line in block.splitlines() if re.match(r"\s+2\s", line) and "measured" in line)
    assert x2.split()[4] == "50%"


def _mfu_cells(out: str, strategy: str = "DDP") -> dict:
    """{(devices, 'measured' or 'forecast'): the MFU column} of one setting's table. Its cells are right-aligned under
    their headers, so the MFU cell lies between the end of the header before it and the end of "MFU"."""
    block = out.split(f"synthetic {strategy}")[1].split("\n\n")[0].splitlines()
    header = next(line for line in block if line.split()[:2] == ["devices", "nodes"])
    start, end = header.index("MiB/device") + len("MiB/device"), header.index(" MFU") + len(" MFU")
    return {(int(line.split()[0]), "measured" if "measured" in line[end:] else "forecast"): line[start:end].strip()
            for line in block[block.index(header) + 1:] if re.match(r"\s+\d+\s", line)}


@pytest.mark.no_process
def test_forecast_peak_tflops_gives_the_mfu_column_a_peak_and_an_mfu_over_100_percent_reads_as_an_error(tmp_path,
                                                                                                        capsys):
    # 1 GFLOP per sample; DDP x2 steps 64 samples per rank in 60 ms: 1067 samples/s per device, 1.07 TFLOP/s
    path = str(tmp_path / "flops.sqlite")
    build_store(path, flops_per_sample=1e9, dp=False)
    rc, stdout, stderr = forecast(["--store", path, "--to", "2,4"], capsys)
    assert rc == 0, stderr
    assert set(_mfu_cells(stdout).values()) == {"–"}              # a CPU has no table of peaks
    rc, stdout, stderr = forecast(["--store", path, "--to", "2,4", "--peak-tflops", "10"], capsys)
    assert rc == 0, stderr
    cells = _mfu_cells(stdout)
    assert cells[(2, "measured")] == f"{1067e9 / 1e12 / 10:.0%}" and cells[(1, "measured")] == f"{2133e9 / 1e12 / 10:.0%}"
    assert all(v.endswith("%") and not v.startswith("error") for v in cells.values()), cells
    # a peak of 1.5 TFLOP/s: DDP x1's 2133 samples/s at 1 GFLOP is 142%, which no device reaches: an error in the peak
    # or the count, on its own row with its own figure, never a silent '–'; every other row its own MFU (x2's 1067
    # samples/s per device: 71%), and one line under the table names the row and says the others rest on the same two
    rc, stdout, stderr = forecast(["--store", path, "--to", "2,4", "--peak-tflops", "1.5"], capsys)
    assert rc == 0, stderr
    cells = _mfu_cells(stdout)
    assert cells[(1, "measured")] == "error: 142% > 100%", cells
    assert cells[(2, "measured")] == f"{1067e9 / 1e12 / 1.5:.0%}", cells
    assert all(not v.startswith("error") for k, v in cells.items() if k != (1, "measured")), cells
    assert "measured 142%" not in stdout
    assert ("MFU: past 100% of the peak (cpu, fp32: 1.5 TFLOP/s per process (--peak-tflops)) on x1 (measured: 142%), "
            "which no device reaches: the peak or the FLOP count") in stdout
    assert stdout.count("MFU: past 100%") == 1
    from bench.report import report     # the report's forecast rows alike: each its own MFU, none past 100% here
    out = report.render(path, plots_dir=str(tmp_path / "plots"), report_dir=str(tmp_path / "rep"), peak_tflops="1.5")
    section = open(out["markdown"]).read().split("## Forecast past the measured counts")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| synthetic DDP [fp32] | 16 |"))
    assert "error:" not in section and re.search(r"\| \d+% \| [^|]+ \|$", row), row


def test_a_forecast_points_mfu_past_100_percent_is_an_error_not_a_dash():
    from bench.analysis import utilisation
    u = utilisation.Utilisation(flops=utilisation.Flops(1e12), achieved_tflops=0.5, peak_tflops=1.0, mfu=0.5)
    assert utilisation.at_cell(u, 0.5, 1) == "50%"                  # as measured: 1 TFLOP x 0.5/s against 1 TFLOP/s
    assert utilisation.at_cell(u, 3.0, 2) == "error: 150% > 100%"   # a point at 1.5 TFLOP/s per process
    assert utilisation.at_cell(utilisation.Utilisation(flops=utilisation.Flops(None), achieved_tflops=math.nan),
                               3.0, 2) == "–"


@pytest.mark.no_process
def test_the_check_reads_nothing_of_the_count_it_judges(tmp_path, capsys):
    # x4 judged from x1 and x2 (the machine at x2): x4's own machine rows and bucket times must not move its check
    outs = []
    for slow, late in ((1.0, 1.0), (5.0, 0.2)):
        path = str(tmp_path / f"leak{slow}.sqlite")
        build_store(path, ddp_counts=(1, 2, 4), machine_counts=(2, 4), x4_slow=slow, x4_buckets=late)
        rc, stdout, stderr = forecast(["--store", path, "--to", "8"], capsys)
        assert rc == 0, stderr
        outs.append(re.search(r"x4: forecast [\d.]+ ms from x2.*\n\s+basis: (.*)", stdout))
    assert outs[0] and outs[1] and outs[0].group(0) == outs[1].group(0)
    assert outs[0].group(1).startswith("held out: nothing of x4 or above (the machine from x2)")


def test_a_forecast_judged_by_a_later_sweep_reads_only_its_own(tmp_path, capsys):
    path = str(tmp_path / "heldout.sqlite")
    build_store(path, ddp_counts=(1,), dp=False)                    # sweep 1: x1 and the machine at 2
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "bench --gpus 2", "{}", None)       # sweep 2: x2 measured
    record.record_result(conn, sid, None, spec("synthetic", "ddp", 2), "ok", "",
                        {"grad_bytes": 16e6, "steps": _steps(2, 60.0), "windows": _windows(2, 60.0), "memory": _memory(2, 220.0)})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    rc, stdout, stderr = forecast(["--store", path, "--sweep", "1", "--against", "2", "--to", "2"], capsys)
    assert rc == 0, stderr
    assert "held-out check: sweep 1's forecast against sweep 2's measurement" in stdout
    assert f"forecast {X2_FROM_X1:.2f} ms from x1 (no range: no input measured twice), measured 60.00 ms" in stdout
    assert "basis: later sweep" in stdout
    rounds = _rounds_script()                                      # scripts/forecast_rounds.py reads this very line
    got = rounds.one_round.__globals__["LINE"].search(stdout)
    assert got and float(got.group(1)) == pytest.approx(X2_FROM_X1, abs=0.01) and got.group(6) is None   # no range
    assert rounds.parse(stdout)[5] is False                        # a round with no range is not one inside it
    said = rounds.summary([(48.5, 40.0, 60.0, 50.0, -3.0, True)] * 4 + [(48.5, 40.0, 45.0, 60.0, -19.2, False)])
    assert said == ("5 rounds: mean |error| 6.2%, worst 19.2%, mean error -6.2%; 4 of 5 measured inside the printed range "
                    "(targets: mean <= 10%, worst <= 15%, at least 80% inside: not met)")
    row = sqlite3.connect(path).execute("SELECT sweep_id, judged_sweep, error FROM forecasts").fetchone()
    assert row[:2] == (1, 2) and row[2] == pytest.approx(X2_FROM_X1 / 60 - 1)
    rc, _, err = forecast(["--store", path, "--sweep", "2", "--against", "1"], capsys)
    assert rc == 2 and "--against 1: expected a sweep later than the forecast's (2)" in err


def test_a_price_per_device_hour_says_what_each_forecast_count_costs_and_which_is_cheapest(hand_store, capsys):
    rc, stdout, stderr = forecast(["--store", hand_store, "--to", "2,4", "--price-per-device-hour", "2.5"], capsys)
    assert rc == 0, stderr
    assert "price: 2.5 price units per device-hour (--price-per-device-hour 2.5)" in stdout
    line = next(x for x in stdout.split("synthetic DataParallel")[0].splitlines() if "cost per million samples" in x)
    for n in (2, 4):
        sps = float(_row(stdout, "DDP", n).split()[3])
        assert f"x{n} {2.5 * n * 1e6 / sps / 3600:.3g}" in line     # price x devices x hours for a million samples
    assert "cheapest x2, fastest x4" in line


def test_without_a_single_device_run_no_efficiency_is_claimed(tmp_path, capsys):
    path = str(tmp_path / "nosingle.sqlite")
    build_store(path, single=False, dp=False)
    rc, stdout, stderr = forecast(["--store", path], capsys)
    assert rc == 0, stderr
    assert "efficiency unknown: the sweep has no single-device run" in stdout and "--strategies single,ddp" in stdout
    assert "stays at or above" not in stdout and "scaling stops paying" not in stdout and "nan%" not in stdout


@pytest.mark.no_process
@pytest.mark.parametrize("args, named", [
    (["--network", "infiniband"], "'infiniband'"), (["--network", "net=0@5"], "'0'"),
    (["--network", "node=nan@1"], "'nan'"), (["--to", "16,6.5"], "'6.5'"), (["--to", "0"], "'0'"),
    (["--gpus-per-node", "0"], "'0'"), (["--sweep", "latest"], "'latest'"), (["--against", "x"], "'x'"),
    (["--memory-budget-gib", "0"], "0"), (["--memory-budget-gib", "nan"], "'nan'"),
    (["--price-per-device-hour", "0"], "0"), (["--price-per-device-hour", "nan"], "nan"),
    (["--peak-tflops", "bf16=zero"], "'zero'"), (["--peak-tflops", "0"], "'0'"), (["--peak-tflops", "fp64=9"], "'fp64'")])
def test_bad_flags_exit_2_naming_the_value_before_the_store_is_read(tmp_path, hand_store, args, named, capsys):
    missing = str(tmp_path / "nothing-here.sqlite")
    before = hashlib.sha256(open(hand_store, "rb").read()).hexdigest()
    for path in (missing, hand_store):
        rc, _, err = forecast(["--store", path, *args], capsys)
        assert rc == 2 and named in err, err
        assert "does not exist" not in err          # the flag, not the store, was refused
    assert not os.path.exists(missing)
    assert hashlib.sha256(open(hand_store, "rb").read()).hexdigest() == before


def test_a_store_without_a_network_is_refused_before_anything_is_printed_and_left_unchanged(tmp_path, capsys):
    path = str(tmp_path / "nonet.sqlite")
    build_store(path, machine_counts=())
    before = hashlib.sha256(open(path, "rb").read()).hexdigest()
    rc, out, err = forecast(["--store", path], capsys)
    assert rc == 2 and "no network to forecast on" in err and out == ""
    assert hashlib.sha256(open(path, "rb").read()).hexdigest() == before
    rc, out, err = forecast(["--store", path, "--network", "node=1@100"], capsys)   # a typed network: held out
    assert rc == 0 and "basis: held out: nothing of x2 or above (the network typed" in out


@pytest.mark.no_process
def test_the_report_draws_the_forecast_with_its_range_and_its_check(hand_store, tmp_path):
    from bench.report import report
    out = report.render(hand_store, plots_dir=str(tmp_path / "plots"), report_dir=str(tmp_path / "rep"))
    md = open(out["markdown"]).read()
    section = md.split("## Forecast past the measured counts")[1].split("\n## ")[0]
    err = X2_FROM_X1 / 60 - 1
    assert f"checked at x2 with errors {err:+.0%};" in section and "of 1 inside the range" not in section   # no range
    for name in ("synthetic_forecast.png", "synthetic_forecast_memory.png"):
        assert os.path.isfile(tmp_path / "plots" / name) and name in section
    # "–" for the step's range and both "inside" columns: neither range varied, so neither measurement is inside or
    # outside one (the step's read "48.50-48.50 ... no" before, beside the terminal's "no range")
    assert (f"| synthetic DDP [fp32] | 2 | 1 | {X2_FROM_X1:.2f} | – | 60.00 | {err:+.1%} | "
            "– | 200 / 220 | -9% | – | machine at x2") in section
    assert "| synthetic DDP [fp32] | 1024 | 512 |" in section and "| setting | devices | nodes | step ms |" in section
    assert ("| synthetic DataParallel [fp32] | 1024 | 512 | – | – | – | – | – | refused: DataParallel is one process driving"
            in section)
    assert "range (5%-95% of 400 draws, seed 0)" in section and "one process" in section


# ---------------------------------------------------------------- real sweeps

def test_a_real_two_process_sweep_stores_bucket_times_and_the_forecast_checks_itself(quick_sweep, tmp_path):
    proc, shared = quick_sweep  # the session's real sweep (conftest): DDP x1 and x2 among its configurations
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = str(tmp_path / "real.sqlite")
    with sqlite3.connect(shared) as src, sqlite3.connect(path) as dst:
        src.backup(dst)  # the forecast writes its check into the store: into a copy, not the shared one
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT r.device_count, b.rank, b.step, b.bucket, b.size_bytes, b.ready_ms, b.backward_ms, r.params "
                        "FROM buckets b JOIN results r USING (result_id) WHERE r.strategy = 'ddp' "
                        "AND r.workload = 'synthetic'").fetchall()
    state = conn.execute("SELECT m.params_mib, m.optimizer_mib, m.baseline_rss_mib, m.peak_rss_mib, r.params FROM memory m "
                         "JOIN results r USING (result_id) WHERE r.strategy = 'ddp' AND r.workload = 'synthetic'").fetchall()
    conn.close()
    assert {(n, rank) for n, rank, *_ in rows} == {(1, 0), (2, 0), (2, 1)}      # every rank of every DDP run
    for n, rank, step in {(n, rank, step) for n, rank, step, *_ in rows}:
        mine = [r for r in rows if r[:3] == (n, rank, step)]
        assert sum(r[4] for r in mine) == mine[0][7] * 4                       # the buckets hold every gradient
        assert all(0 <= r[5] <= r[6] * 1.001 for r in mine)                    # ready inside that backward
    assert all(p == pytest.approx(n * 4 / 2**20) and o == p and 0 < b < peak for p, o, b, peak, n in state)
    f = run_bench(["forecast", "--store", path, "--to", "4,16"])
    assert f.returncode == 0, f.stderr
    m = re.search(r"synthetic ddp \[fp32\] x2: forecast ([\d.]+) ms from x1 \(.*?\), measured ([\d.]+) ms: error "
                  r"([+-][\d.]+)%, (inside|outside) the range", f.stdout)
    assert m, f.stdout
    forecast_ms, measured_ms, err = map(float, m.groups()[:3])
    rounding = 100 * forecast_ms / measured_ms * (0.005 / forecast_ms + 0.005 / measured_ms)  # both printed to 0.01 ms
    assert err == pytest.approx((forecast_ms / measured_ms - 1) * 100, abs=0.1 + rounding)
    assert "basis: machine at x2" in f.stdout and "interference measured (at 2 ranks)" in f.stdout
    conn = sqlite3.connect(path)
    stored = conn.execute("SELECT error FROM forecasts WHERE workload = 'synthetic' AND strategy = 'ddp' AND device_count = 2"
                          ).fetchone()[0]
    assert math.isfinite(stored) and stored * 100 == pytest.approx(err, abs=0.1)
    print(f"\nin-sweep check on this machine: DDP x2 forecast {forecast_ms} ms, measured {measured_ms} ms, error {err:+.1f}%")


def test_the_held_out_procedure_on_real_sweeps_prints_its_error(held_out_pair):
    p, path = held_out_pair     # x1 with the machine at 2, then x2 (conftest.HELD_OUT_SWEEPS, in the background)
    assert p.returncode == 0, p.stdout + p.stderr
    f = run_bench(["forecast", "--store", path, "--sweep", "1", "--against", "2", "--to", "2"])
    assert f.returncode == 0, f.stderr
    m = re.search(r"x2: forecast ([\d.]+) ms from x1 \(range ([\d.]+)-([\d.]+) ms\), measured ([\d.]+) ms: error "
                  r"([+-][\d.]+)%, (inside|outside) the range.*\n\s+basis: later sweep", f.stdout)
    assert m, f.stdout
    forecast_ms, low, high, measured_ms = map(float, m.groups()[:4])
    assert low <= forecast_ms <= high and (m.group(6) == "inside") == (low <= measured_ms <= high)
    assert "interference measured (at 2 ranks)" in f.stdout
    # v6 keeps the interference's rounds: the range rests on them (the x1 run's 3 steps tell no spread)
    assert re.search(r"interference's spread: each size's [\d-]+ rounds resampled", f.stdout)
    print(f"\nheld-out on this machine (x1 + the machine at 2, judged by a later x2): {m.group(0).splitlines()[0].strip()}")


def test_the_rounds_script_interleaves_another_checkout_round_by_round_and_sums_each_side_apart(tmp_path, capsys):
    # Sets of rounds an hour apart on this machine differed more than two versions of the forecast did: a change is
    # judged round by round against the other checkout, on the same minutes of the machine.
    rounds = _rounds_script()
    other = tmp_path / "before"
    (other / "bench").mkdir(parents=True)
    (other / "bench" / "__main__.py").write_text("")
    calls = []

    def one_round(store, flags, slurm, root=rounds.ROOT):
        calls.append((os.path.basename(store), root, tuple(flags)))
        return (45.0, 40.0, 50.0, 50.0, -10.0, False) if root == rounds.ROOT else (49.0, 45.0, 55.0, 50.0, -2.0, True)
    rounds.one_round = one_round                               # main() reads it from its module: this copy's own
    main = rounds.main
    assert main(["--rounds", "2", "--folder", str(tmp_path), "--interleave-with", str(other), "--",
                 "--workloads", "synthetic"]) == 0
    assert [(s, r == rounds.ROOT) for s, r, _ in calls] == [("round1.sqlite", True), ("round1-1.sqlite", False),
                                                             ("round2.sqlite", True), ("round2-1.sqlite", False)]
    assert all(f == ("--workloads", "synthetic") for _, _, f in calls)
    out = capsys.readouterr().out
    assert "this checkout: 2 rounds: mean |error| 10.0%" in out and "0 of 2 measured inside" in out
    assert f"{other}: 2 rounds: mean |error| 2.0%" in out and "2 of 2 measured inside" in out
    with pytest.raises(SystemExit) as refused:
        main(["--interleave-with", str(tmp_path / "nowhere")])
    assert refused.value.code == 2
    assert "expected a checkout of this suite" in capsys.readouterr().err
