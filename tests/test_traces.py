"""--profile: traces written per rank after the measured window, figures derived from them by HTA's method,
the straggler named, the measured window untouched, bad input refused, a failure kept with its result.

Two small real sweeps (DDP x2, CPU/gloo), started together to save wall time: one with --profile, one without,
both with rank 0 sleeping NAP_MS at the start of every step (the suite's fault injection), so rank 1 waits for it.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import sqlite3
import statistics
import subprocess

import pytest

from bench import cli
from bench.analysis import traces
from bench.store import schema, store
from bench.sweep import record as recording
from conftest import REPO, bench_command

NAP_MS = 40
SWEEP = ["--workloads", "synthetic", "--synthetic-width", "128", "--synthetic-depth", "2", "--per-device-batch", "8",
         "--steps", "4", "--warmup", "1", "--repeats", "1", "--strategies", "ddp", "--gpus", "2", "--no-comm-bench", "--device", "cpu"]


def _start(tmp, profile: bool) -> tuple:
    tmp.mkdir()
    args = [*SWEEP, "--store", str(tmp / "bench.sqlite"), "--plots-dir", str(tmp / "plots"), "--report-dir", str(tmp / "rep")]
    args += ["--profile"] if profile else ["--no-report"]
    env = {**os.environ, "BENCH_FAULT": f"nap@0:{NAP_MS}", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([*bench_command(), *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT), tmp


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> dict:
    """{'on': (output, folder), 'off': (output, folder)}: the same DDP x2 sweep with and without --profile."""
    base = tmp_path_factory.mktemp("traces")
    procs = {"on": _start(base / "on", True), "off": _start(base / "off", False)}
    out = {}
    for k, (p, folder) in procs.items():
        text, _ = p.communicate(timeout=300)
        assert p.returncode == 0, text
        out[k] = (text, folder)
    return out


def _db(folder) -> sqlite3.Connection:
    conn = sqlite3.connect(str(folder / "bench.sqlite"))
    conn.row_factory = sqlite3.Row
    return conn


def _trace_rows(folder) -> list:
    with _db(folder) as conn:
        return [dict(r) for r in conn.execute("SELECT * FROM traces ORDER BY rank")]


def test_ddp_two_ranks_write_two_gzipped_traces_holding_the_gloo_allreduce(sweeps):
    text, folder = sweeps["on"]
    rows = _trace_rows(folder)
    assert [r["rank"] for r in rows] == [0, 1] and all(r["error"] is None for r in rows), rows
    for r in rows:
        path = r["path"]
        assert os.path.dirname(path) == str(folder / "traces" / "sweep1"), path  # next to the store, by sweep
        assert "ddp-cpux2" in os.path.basename(path) and path.endswith(f"rank{r['rank']}.pt.trace.json.gz"), path
        assert os.path.getsize(path) == r["trace_bytes"] > 0
        with gzip.open(path, "rt") as f:
            trace = json.load(f)
        names = [e.get("name", "") for e in trace["traceEvents"]]
        assert "gloo:all_reduce" in names, sorted(set(names))[:40]
        assert trace["distributedInfo"]["rank"] == r["rank"] and trace["distributedInfo"]["world_size"] == 2
        assert sum(n.startswith("ProfilerStep#") for n in names) == r["steps"] == 3  # --profile-steps' default
    assert "profiling: 2 trace(s)" in text and "MB per traced step" in text and "it added" in text, text


def test_the_profiled_steps_follow_the_measured_window_and_leave_its_figures_alone(sweeps):
    """The window's rows are the same with --profile on as off; the traced steps come after every measured and probe
    step, are stored apart, and the measured median moves within noise (both runs are dominated by the same nap)."""
    def steps(folder):
        with _db(folder) as conn:
            return [dict(r) for r in conn.execute("SELECT * FROM steps ORDER BY kind, rank, step")]
    on, off = steps(sweeps["on"][1]), steps(sweeps["off"][1])
    window = lambda rows: [(r["kind"], r["rank"], r["step"]) for r in rows if not r["kind"].startswith("profile")]  # noqa: E731
    assert window(on) == window(off) and any(k == "measure" for k, _, _ in window(on))
    profiled = [r for r in on if r["kind"] == "profile"]
    assert {r["rank"] for r in profiled} == {0, 1} and len(profiled) == 2 * 3
    assert not any(r["kind"].startswith("profile") for r in off)
    assert min(r["step"] for r in profiled) > max(s for _, _, s in window(on))
    first = {r["rank"]: r["first_step"] for r in _trace_rows(sweeps["on"][1])}
    assert first == {0: min(r["step"] for r in profiled), 1: min(r["step"] for r in profiled)}
    median = lambda rows: statistics.median(r["step_ms"] for r in rows if r["kind"] == "measure")  # noqa: E731
    ratio = median(on) / median(off)
    assert 0.67 < ratio < 1.5, (median(on), median(off))  # each step holds a 40 ms nap: a 1.5x move is not noise


def test_a_rank_slowed_on_purpose_is_named_the_straggler(sweeps):
    text, folder = sweeps["on"]
    rows = {r["rank"]: r for r in _trace_rows(folder)}
    per_step = {k: r["wait_ms"] / r["steps"] for k, r in rows.items()}
    assert per_step[1] > NAP_MS / 2 > per_step[0], per_step  # rank 1 waits in every all-reduce for rank 0's nap
    assert traces.straggler(per_step, rows[0]["span_ms"] / rows[0]["steps"]) == 0
    # gloo's operations carry no sequence number (torch 2.15): read from host operations, matched by name and order
    assert [(r["method"], r["wait_match"]) for r in rows.values()] == [("host_ops", "order")] * 2
    report = (folder / "rep" / "report.md").read_text()
    assert "they wait for rank 0, the straggler" in report, report
    assert "this suite's own adaptation of Holistic Trace Analysis's method, which reads kernels only" in report
    assert "by name and order (the trace records no sequence numbers)" in report
    assert "| read from |" in report and report.count("| host ops |") == 2  # the table says it for each rank
    assert "ui.perfetto.dev" in report and "](../traces/sweep1/" in report  # a link to each trace, how to open it
    page = (folder / "rep" / "report.html").read_text()
    assert all(f'href="file://{r["path"]}"' in page for r in rows.values()), [r["path"] for r in rows.values()]
    assert (folder / "plots" / "synthetic_traces.png").stat().st_size > 0
    assert report.index("synthetic_phases.png") < report.index("synthetic_traces.png") < report.index("synthetic_memory.png")


def test_the_report_tells_waiting_for_the_slowed_rank_apart_from_communication(sweeps):
    text, folder = sweeps["on"]
    report = (folder / "rep" / "report.md").read_text()
    rows = {r["rank"]: r for r in _trace_rows(folder)}
    wait = re.search(r"In the traces of DDP x2, rank 1 waits ([0-9.]+) ms a traced step for rank 0 in collectives; the "
                     r"collectives themselves take ([0-9.]+) ms a step, rank 0's time in them: the exposed communication "
                     r"above leaves that wait out", report)
    assert wait, report
    waited, own = float(wait.group(1)), float(wait.group(2))
    assert waited == pytest.approx(rows[1]["wait_ms"] / rows[1]["steps"], abs=0.05) and waited > NAP_MS / 2
    assert own == pytest.approx(rows[0]["comm_ms"] / rows[0]["steps"], abs=0.05) and own < NAP_MS / 2
    recommendation = report[report.index("## Recommendation"):report.index("## synthetic")]
    assert "Held back by a straggler, rank 0: rank 1 waits" in recommendation, recommendation
    assert "| straggler (rank 0) |" in recommendation


def _x(name, ts, dur, tid=1, cat="cpu_op") -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1, "cat": cat}


def test_hand_made_cpu_trace_gives_the_hand_computed_overlap_and_shares():
    trace = {"traceEvents": [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("aten::mm", 0, 40),
        _x("autograd::engine::evaluate_function: AccumulateGrad", 40, 10),   # holds the all-reduce call ...
        _x("c10d::allreduce_", 42, 6),                                          # ... whose 6 us are communication
        _x("aten::add_", 60, 10),
        _x("gloo:all_reduce", 45, 45, tid=2, cat="user_annotation"),          # gloo's thread
        _x("aten::zero_", 120, 5),                                              # after the traced step: not counted
    ]}
    f = traces.figures(trace)
    # computation [0,42] [48,50] [60,70] = 54; communication [42,90] = 48; overlap [48,50] [60,70] = 12
    assert (f.steps, f.span_ms * 1e3, f.compute_ms * 1e3, f.comm_ms * 1e3) == (1, 100, 54, 48)
    assert f.overlap_ms * 1e3 == pytest.approx(12) and f.shares["overlap_share"] == pytest.approx(12 / 48)
    assert f.exposed_comm_ms * 1e3 == pytest.approx(36) and f.idle_ms * 1e3 == pytest.approx(10)
    s = f.shares
    assert (s["compute_share"], s["comm_share"], s["copy_share"], s["idle_share"]) == pytest.approx((0.54, 0.36, 0.0, 0.10))
    assert f.method == "host_ops"
    mark = {"ph": "i", "name": "bench: trace cut here", "pid": 1, "tid": 1}
    two = [*trace["traceEvents"], _x("ProfilerStep#2", 100, 100, cat="user_annotation"), _x("aten::mm", 130, 50)]
    f = traces.figures({"traceEvents": [*two, dict(mark, ts=100)]})  # cut where step 1 ends (bench.rank.tracefile)
    # step 2 began before the cut and was kept in part: not counted, and what lies past the cut is not idle, it is gone
    assert (f.steps, f.span_ms * 1e3, f.compute_ms * 1e3, f.idle_ms * 1e3) == pytest.approx((1, 100, 54, 10))
    f = traces.figures({"traceEvents": [*two, dict(mark, ts=60)]})  # inside step 1: no step kept whole, none counted
    assert (f.steps, f.span_ms, f.compute_ms) == (0, 0.0, 0.0)


def test_hand_made_cuda_trace_classifies_kernels_as_hta_does():
    trace = {"traceEvents": [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("aten::mm", 0, 100),                                        # host ops do not count on a device trace
        _x("sm90_xmma_gemm", 0, 50, tid=7, cat="kernel"),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30, 50, tid=9, cat="kernel"),
        _x("Memcpy DtoH (Device -> Pinned)", 85, 10, tid=7, cat="gpu_memcpy"),
    ]}
    s = traces.figures(trace).shares
    assert (s["compute_share"], s["comm_share"], s["copy_share"], s["idle_share"], s["overlap_share"]) == \
        pytest.approx((0.5, 0.3, 0.1, 0.1, 0.4))
    trace["traceEvents"][0]["dur"] = 60  # the host's step ends first: the device's tail still counts
    f = traces.figures(trace)
    assert (f.span_ms * 1e3, f.idle_ms * 1e3) == pytest.approx((95, 5))


def test_waits_are_matched_per_collective_and_the_rank_that_waits_least_is_the_straggler():
    fast = [("gloo:all_reduce", 5.0), ("gloo:all_reduce", 5.0)]
    waits = traces.waits_ms({0: fast, 1: [("gloo:all_reduce", 25.0), ("gloo:all_reduce", 15.0)], 2: fast})
    assert waits == {0: 0.0, 1: 30.0, 2: 0.0}
    assert traces.straggler({0: 1.0, 1: 30.0, 2: 28.0}, step_ms=100.0) == 0
    assert traces.straggler({0: 25.0, 1: 30.0, 2: 28.0}, step_ms=100.0) is None   # nobody waits markedly less
    assert traces.straggler({0: 0.1, 1: 2.0}, step_ms=100.0) is None              # less, but not 10% of a step


@pytest.mark.parametrize("args, expected", [
    (["--profile", "--profile-steps", "0"], "--profile-steps: 0 is not allowed"),
    (["--profile", "--profile-steps", "two"], "'two' is not a whole number"),
    (["--profile", "--profile-max-mb", "-5"], "--profile-max-mb: -5 is not allowed"),
    (["--profile", "--profile-max-mb", "nan"], "not a finite number"),
    (["--profile", "--profile-max-mb", "lots"], "'lots' is not a number"),
])
def test_bad_profile_input_exits_2_with_nothing_written(args, expected, tmp_path, capsys):
    assert cli.main([*args, "--device", "cpu", "--store", str(tmp_path / "s" / "bench.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err, err
    assert os.listdir(tmp_path) == []


STUB_STEP_US = 20000   # a traced step of the stand-in trace holds 2000 of its 10 us events


class _Prof:
    """Stands in for torch.profiler.profile: exports a trace of n events, laid out as Kineto writes them (an event
    over several lines, the other keys after the array), out of time order."""
    def __init__(self, n: int):
        self.n = n

    def export_chrome_trace(self, path: str) -> None:
        events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
        events += [_x(f"aten::op{i % 97}_{i}", ((i * 7919) % self.n) * 10, 5) for i in range(self.n)]
        events += [_x(f"ProfilerStep#{k + 1}", k * STUB_STEP_US, STUB_STEP_US, cat="user_annotation")
                   for k in range(self.n * 10 // STUB_STEP_US)]
        with open(path, "w") as f:
            f.write('{\n  "schemaVersion": 1,\n  "traceEvents": [\n')
            f.write(",\n".join(json.dumps(e, indent=4) for e in events))
            f.write('\n  ],"traceName": "x.json" }')


@pytest.mark.no_process
def test_a_trace_above_the_limit_is_cut_to_its_earliest_events_with_a_note_and_a_small_one_is_kept_whole(
        tmp_path, monkeypatch):
    from bench.rank import tracefile
    from bench.shared import chrometrace
    monkeypatch.setattr(chrometrace, "CHUNK_CHARS", 4096)  # read the JSON through a small window, as a large one is
    small = tracefile.write(_Prof(50), str(tmp_path / "a.pt.trace.json.gz"), 1e6)
    assert small["note"] is None and small["trace_bytes"] == os.path.getsize(small["path"])
    with gzip.open(small["path"], "rt") as f:
        assert len(json.load(f)["traceEvents"]) == 51
    big = tracefile.write(_Prof(30000), str(tmp_path / "b.pt.trace.json.gz"), 100e3)
    assert big["note"].startswith("cut:") and big["trace_bytes"] <= 100e3, big
    with gzip.open(big["path"], "rt") as f:
        trace = json.load(f)
    assert trace["benchCut"] == big["note"] and trace["traceName"] == "x.json" and "traced steps" in big["note"]
    kept = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"].startswith("aten::")]
    steps = [e for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    assert 0 < len(kept) < 30000 and trace["traceEvents"][0]["name"] == "process_name"  # metadata kept
    assert sorted(e["ts"] for e in kept) == [i * 10 for i in range(len(kept))]  # the earliest ones, none missing
    assert len(kept) == len(steps) * STUB_STEP_US // 10  # whole steps: it ends where a step ends
    assert trace["traceEvents"][-1]["name"] == "bench: trace cut here"
    f = traces.figures(traces.load(big["path"]))
    assert f.steps == len(steps) and f.span_ms * 1e3 == pytest.approx(len(steps) * STUB_STEP_US)
    assert sorted(os.listdir(tmp_path)) == ["a.pt.trace.json.gz", "b.pt.trace.json.gz"]  # no temporary JSON left


@pytest.mark.parametrize("failure", ["start", "folder"])
def test_a_profiler_failure_is_returned_and_stored_with_its_result_not_raised(failure, tmp_path, monkeypatch):
    import torch
    from bench.rank import profile
    from bench.rank.timing import HostClock
    from bench.shared.spec import RunSpec
    from bench.sweep import profiling

    class Trainer:  # what profile.run uses of bench.rank.loop.Trainer
        rank, n, device, clock, distributed = 1, 7, torch.device("cpu"), HostClock, False

        def barrier(self):
            pass

        def beat(self, step, phase):
            pass

        def step(self, it, clock):
            torch.ones(64, 64) @ torch.ones(64, 64)
            clock.step_end()
            self.n += 1
            return torch.zeros(()), 8, 0.0
    (tmp_path / "blocked").write_text("a file where the traces' folder should be")
    spec = RunSpec(workload="synthetic", strategy="ddp", device_type="cpu", device_count=2, per_device_batch=8, global_batch=16,
                   image_size=0, steps=4, warmup=1, threads=1, seed=0, scaling="weak", profile_steps=2, profile_max_mb=1.0,
                   trace_prefix=str(tmp_path / "blocked" / "x"))
    if failure == "start":
        def refuse(self):
            raise RuntimeError("kineto is not available")
        monkeypatch.setattr(torch.profiler.profile, "start", refuse)
    rows, record = profile.run(spec, Trainer(), iter(()))
    assert record["error"] and record["path"] is None, record
    assert [r["kind"] for r in rows] == ([] if failure == "start" else ["profile_warmup", "profile", "profile"])
    conn = store.connect(str(tmp_path / "bench.sqlite"))
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    payload = {"steps": [{"kind": "measure", "rank": 0, "step": 0, "step_ms": 5.0}, *rows], "traces": [record]}
    rid = recording.record_result(conn, sid, None, spec, "ok", payload=payload)
    assert conn.execute("SELECT status FROM results").fetchone()[0] == "ok"
    assert conn.execute("SELECT error FROM traces WHERE result_id = ?", (rid,)).fetchone()[0] == record["error"]
    assert "profiling, rank 1: " in profiling.result_note(conn, rid)
    conn.close()


def test_a_version_2_store_gains_the_traces_table_keeping_its_rows(tmp_path):
    path = str(tmp_path / "v2.sqlite")
    conn = sqlite3.connect(path)
    start = schema.SCHEMA.index("CREATE TABLE IF NOT EXISTS traces")
    conn.executescript(schema.SCHEMA[:start] + schema.SCHEMA[schema.SCHEMA.index(");", start) + 2:])
    conn.execute("INSERT INTO sweeps (sweep_id, started_at, status, command_line, config_json) "
                 "VALUES (1, 't', 'completed', 'c', '{}')")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    conn = store.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION == 6
    assert conn.execute("SELECT COUNT(*) FROM sweeps").fetchone()[0] == 1
    columns = [r[1] for r in conn.execute("PRAGMA table_info(traces)")]
    assert columns[:3] == ["result_id", "rank", "path"] and columns[-5:-3] == ["method", "wait_match"]
    assert 3 in schema.SCHEMA_HISTORY
    conn.close()


def test_a_version_4_stores_traces_gain_how_they_were_read_and_matched_where_that_is_known(tmp_path):
    """Version 4 read a CPU trace from host operations (it has no kernels) and matched collectives by order; a CUDA
    trace's method is not known (kernels where it had them)."""
    path = str(tmp_path / "v4.sqlite")
    conn = sqlite3.connect(path)
    conn.executescript(schema.SCHEMA.replace("    method TEXT, wait_match TEXT,\n", ""))
    conn.execute("INSERT INTO sweeps (sweep_id, started_at, status, command_line, config_json) VALUES (1, 't', 'completed', 'c', '{}')")
    for rid, device in ((1, "cpu"), (2, "cuda")):
        conn.execute("INSERT INTO results (result_id, sweep_id, config_key, mode, workload, strategy, device_type, "
                     "device_count, per_device_batch, global_batch, status, spec_json) VALUES "
                     f"({rid}, 1, 'k{rid}', 'bench', 'synthetic', 'ddp', '{device}', 2, 8, 16, 'ok', '{{}}')")
        conn.execute(f"INSERT INTO traces (result_id, rank, span_ms, wait_ms) VALUES ({rid}, 0, 10.0, 1.5)")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    conn = store.connect(path)
    rows = conn.execute("SELECT result_id, rank, span_ms, wait_ms, method, wait_match FROM traces ORDER BY result_id")
    assert [tuple(r) for r in rows] == [(1, 0, 10.0, 1.5, "host_ops", "order"), (2, 0, 10.0, 1.5, None, "order")]
    conn.close()


@pytest.mark.parametrize("argv", [["--profile-steps", "5"], ["--profile-max-mb", "50"]])
def test_a_profiling_setting_without_profile_is_refused_rather_than_ignored(argv, tmp_path, monkeypatch, capsys):
    from bench import cli
    monkeypatch.chdir(tmp_path)
    assert cli.main([*argv, "--device", "cpu"]) == 2
    assert f"{argv[0]}: takes effect with --profile only" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
