"""End to end: one command sweeps strategies x workloads x counts on CPU/gloo into the store."""
from __future__ import annotations

import json
import os
import sqlite3

import pytest

from bench import stats
from conftest import run_bench

@pytest.fixture(scope="module")
def sweep(quick_sweep):
    """The shipped quick CPU sweep (sweeps/quick-cpu.toml, conftest.quick_sweep): synthetic and deeplabv3 at 32 px."""
    proc, path = quick_sweep
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    return proc, conn


def results(conn, **where):
    q = "SELECT * FROM results" + (" WHERE " + " AND ".join(f"{k} = ?" for k in where) if where else "")
    return conn.execute(q, tuple(where.values())).fetchall()


@pytest.mark.timeout(600)
def test_default_style_sweep_stores_ok_rows_for_everything_the_cpu_can_run(sweep):
    proc, conn = sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {(r["workload"], r["strategy"], r["device_count"]): r["status"] for r in results(conn, mode="bench")}
    for w in ("synthetic", "deeplabv3"):
        assert got[(w, "single", 1)] == got[(w, "dp", 1)] == got[(w, "ddp", 1)] == got[(w, "ddp", 2)] == "ok"
        assert got[(w, "dp", 2)] == "skipped"
    skipped = results(conn, status="skipped")
    assert all("GPUs only" in r["reason"] for r in skipped) and len(skipped) == 2
    assert "plan: 8 benchmark configuration(s), 1 comm, 2 skipped" in proc.stdout
    assert [r["status"] for r in results(conn, mode="comm")] == ["ok"]
    assert "peak busbw: all_reduce " in proc.stdout and "all_gather" not in proc.stdout  # no FSDP: all-reduce alone
    s = conn.execute("SELECT * FROM sweeps").fetchone()
    assert s["status"] == "completed" and "--config sweeps/quick-cpu.toml" in s["command_line"]
    assert json.loads(s["config_json"])["workloads"] == ["synthetic", "deeplabv3"]  # the resolved sweep, stored
    env = conn.execute("SELECT * FROM environments WHERE env_id = ?", (s["env_id"],)).fetchone()
    assert env["torch"] and env["cpu_cores"] >= 2 and json.loads(env["json"])["git_commit"]
    assert {r["threads_per_process"] for r in results(conn, mode="bench", status="ok")} == {1}


@pytest.mark.timeout(600)
def test_ddp_rows_keep_every_rank_and_the_result_uses_the_slowest(sweep):
    _, conn = sweep
    for r in results(conn, strategy="ddp", device_count=2, mode="bench"):
        rows = [dict(x) for x in conn.execute("SELECT * FROM steps WHERE result_id = ?", (r["result_id"],))]
        kinds = {(x["kind"], x["rank"]) for x in rows}
        assert kinds == {(k, rank) for k in ("warmup", "measure", "probe_sync", "probe_no_sync") for rank in (0, 1)}
        measured = [x for x in rows if x["kind"] == "measure"]
        assert len(measured) == 2 * 3
        assert r["step_ms_median"] == pytest.approx(stats.summarize(stats.step_times_ms(measured)).median_ms)
        windows = [dict(w) for w in conn.execute("SELECT * FROM windows WHERE result_id = ? AND kind = 'measure'", (r["result_id"],))]
        assert sorted(w["rank"] for w in windows) == [0, 1] and all(w["samples"] == 2 * 3 for w in windows)
        # throughput: both ranks' samples over the slower rank's window
        assert r["samples_per_s"] == pytest.approx(12 / max(w["wall_s"] for w in windows))
        assert r["global_batch"] == 4 and r["per_device_batch"] == 2
        assert r["exposed_comm_ms"] is not None and r["comm_method"].startswith("probe")
        logging = json.loads(r["details_json"])["ddp_logging"]
        assert logging["sampled_iterations"].startswith("1-")  # DDP's own timings, labelled with their iterations
        mem = conn.execute("SELECT rank, peak_rss_mib FROM memory WHERE result_id = ?", (r["result_id"],)).fetchall()
        assert sorted(m["rank"] for m in mem) == [0, 1] and all(m["peak_rss_mib"] > 0 for m in mem)


@pytest.mark.timeout(600)
def test_phases_account_for_the_whole_step(sweep):
    _, conn = sweep
    rows = conn.execute("SELECT * FROM steps WHERE kind = 'measure'").fetchall()
    assert rows
    for x in rows:
        phases = x["data_ms"] + x["h2d_ms"] + x["forward_ms"] + x["backward_ms"] + x["optimizer_ms"]
        assert 0 < phases <= x["step_ms"] + 1e-6
        assert phases + x["other_ms"] == pytest.approx(x["step_ms"])  # a step is its phases and the gap to the next
        assert x["other_ms"] < 1.0 + 0.05 * x["step_ms"], dict(x)


@pytest.mark.timeout(600)
def test_allreduce_baseline_reaches_the_largest_gradient_size(sweep):
    _, conn = sweep
    r = results(conn, mode="comm")[0]
    rows = conn.execute("SELECT * FROM comm WHERE result_id = ? ORDER BY size_bytes", (r["result_id"],)).fetchall()
    deeplab_grad_bytes = max(x["grad_mib"] for x in results(conn, workload="deeplabv3", status="ok")) * 2**20
    assert rows[-1]["size_bytes"] == pytest.approx(deeplab_grad_bytes)
    assert {25 * 2**20, 2**20} <= {x["size_bytes"] for x in rows}  # DDP's own bucket sizes are measured too
    assert {(x["op"], x["timing"]) for x in rows} == {("all_reduce", "host_clock")}
    # nccl-tests' 20 iterations at least where the budget holds them (the rule: tests/test_commbench.py); this sweep
    # runs beside other tests, so a slow probe may rightly have bounded the count: here only that every row was timed
    assert all(x["iters"] >= 1 for x in rows)
    for x in rows:  # nccl-tests' definitions, n = 2
        assert x["algbw_gbps"] == pytest.approx(x["size_bytes"] / (x["time_ms"] / 1e3) / 1e9)
        assert x["busbw_gbps"] == pytest.approx(x["algbw_gbps"] * 2 * (2 - 1) / 2)


@pytest.mark.timeout(600)
def test_deeplabv3_is_the_torchvision_model_at_the_asked_size(sweep):
    _, conn = sweep
    r = results(conn, workload="deeplabv3", strategy="single")[0]
    assert r["params"] == 58_630_997 and r["image_size"] == 32


@pytest.mark.timeout(300)
def test_repeats_run_in_fresh_processes_and_stray_launcher_variables_never_reach_a_single_process_worker(store_path):
    # RANK=3 in the user's shell once made a single-process worker believe it was rank 3 of 8: the stored rank
    # proves where the values came from.
    from conftest import FAST
    p = run_bench(FAST + ["--strategies", "single", "--repeats", "2", "--store", store_path],
                  env={"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "10.9.9.9", "LOCAL_RANK": "5"})
    assert p.returncode == 0, p.stdout + p.stderr
    conn = sqlite3.connect(store_path)
    rows = conn.execute("SELECT repeat, status, json_extract(details_json, '$.pid') FROM results ORDER BY repeat").fetchall()
    assert [(r[0], r[1]) for r in rows] == [(0, "ok"), (1, "ok")]
    assert rows[0][2] != rows[1][2], "both repeats ran in the same process"
    assert {r[0] for r in conn.execute("SELECT DISTINCT rank FROM steps")} == {0}


def test_run_bench_sh_takes_paths_and_modules_from_the_folder_it_is_run_from(tmp_path):
    # `~/suite/run_bench.sh --store mine.sqlite --workloads my_model:build` from the user's project folder:
    # the store, plots and report land there, and the module is imported from there (sweep and workers).
    import subprocess
    import sys
    from conftest import REPO
    if not os.path.isfile(os.path.join(sys.prefix, ".bench-installed")):
        pytest.skip("needs the project's venv as ./run_tests.sh makes it (run_bench.sh would install one)")
    (tmp_path / "my_tiny_model.py").write_text(
        "import torch\nfrom torch import nn\n\n\ndef build():\n"
        "    return {'model': nn.Linear(8, 2), 'loss_fn': nn.functional.cross_entropy,\n"
        "            'make_batch': lambda g, b: (torch.randn(b, 8, generator=g), torch.randint(0, 2, (b,), generator=g))}\n")
    env = {**os.environ, "BENCH_VENV": sys.prefix}
    cmd = [os.path.join(REPO, "run_bench.sh"), "--device", "cpu", "--workloads", "my_tiny_model:build", "--strategies",
           "single,ddp", "--gpus", "1", "--steps", "2", "--warmup", "1", "--repeats", "1", "--no-comm-bench", "--store", "mine.sqlite",
           "--plots-dir", "figs", "--report-dir", "out"]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    conn = sqlite3.connect(tmp_path / "mine.sqlite")
    assert [tuple(r) for r in conn.execute("SELECT strategy, status FROM results WHERE mode = 'bench' ORDER BY strategy")] == \
        [("ddp", "ok"), ("single", "ok")]
    conn.close()
    assert (tmp_path / "out" / "report.md").is_file() and any((tmp_path / "figs").glob("my_tiny_model_build_*.png"))
    (tmp_path / "bench").mkdir()   # a folder whose own `bench` package would be imported in the suite's place
    (tmp_path / "bench" / "__init__.py").write_text("")
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2 and "would be imported instead of this suite's bench package" in p.stderr, p.stdout + p.stderr


def test_a_resume_keeps_the_sweeps_output_choices_and_says_whose_report_it_replaces(tmp_path, monkeypatch):
    """A sweep started with --no-report into another store, resumed with `--resume last --store` alone, writes no
    report into the folder it is resumed from; a resume that names --report and a folder holding another sweep's
    report says it replaces it. In process, nothing spawned: the configuration that runs is recorded as done before the
    resumes (a sweep whose every configuration is a skip is refused at planning), DataParallel x2 is a skip on CPU."""
    from bench import options
    from bench.machine import env as env_mod
    from bench.report import report
    from bench.store import store
    from bench.sweep import plan, record, run
    from report_fixtures import steps, windows
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "elsewhere.sqlite")
    cfg, _, machine = options.prepare(["--workloads", "synthetic", "--strategies", "single,dp", "--gpus", "2", "--device",
                                       "cpu", "--repeats", "1", "--noise-repeats", "1", "--no-comm-bench", "--no-report",
                                       "--store", path])
    conn = store.connect(path)   # as run_sweep starts it; then interrupted after its configurations that run
    sid = store.begin_sweep(conn, "./run_bench.sh --no-report ...", cfg.to_json(), store.insert_environment(conn, env_mod.capture()))
    ran = [s for s in plan.plan(cfg, machine) if isinstance(s, plan.RunSpec)]
    assert ran and all(s.strategy == "single" for s in ran), ran
    for s in ran:
        ms = [50.0] * 4
        record.record_result(conn, sid, None, s, "ok", payload={"steps": steps(1, ms), "windows": windows(1, ms, s.global_batch)})
    store.end_sweep(conn, sid, "interrupted")
    conn.close()

    def resume(*flags: str) -> str:
        lines: list = []
        cfg, given, machine = options.prepare(["--resume", "last", "--store", path, *flags])
        assert run.run_sweep(cfg, "./run_bench.sh --resume last", lines.append, given, machine) == 0, lines
        return "\n".join(lines)

    out = resume()
    assert "keeps its own output choices: --no-report" in out and "report:" not in out, out
    assert not (tmp_path / "results").exists() and not (tmp_path / "plots").exists()
    other = str(tmp_path / "other.sqlite")   # a user's report of another sweep, in the folder the next resume names
    conn = store.connect(other)
    store.end_sweep(conn, store.begin_sweep(conn, "another sweep", "{}", None), "completed")
    conn.close()
    report.render(other, plots_dir=str(tmp_path / "theirs"), report_dir=str(tmp_path / "theirs"))
    out = resume("--report", "--report-dir", "theirs")
    assert f"they replace the report of sweep 1 of {other} that was there" in out, out
    md = (tmp_path / "theirs" / "report.md").read_text()
    assert f"bench report of sweep {sid} of {path}" in md and "## Failed, skipped and interrupted" in md
    assert md[md.index("## Environment"):].count("\n|---") == 1   # the start and two resumes: one environment table


def test_a_cpu_sweep_that_runs_more_threads_than_cores_says_so_before_it_runs():
    # --threads-per-process 2 at 2 processes on 2 cores: DDP x2 stepped 14.7 ms against 4.8 at one thread, silently
    from types import SimpleNamespace
    from bench.sweep import describe
    machine = SimpleNamespace(cpu_cores=2)
    cfg = SimpleNamespace(device="cpu", gpus=(1, 2), gpus_per_node=None, threads_per_process=2)
    note = describe.oversubscribed(cfg, machine)
    assert note.startswith("note: at 2 processes x 2 torch thread(s) the sweep runs 4 threads on 2 core(s)"), note
    assert "--threads-per-process 1 fits" in note
    assert describe.oversubscribed(SimpleNamespace(**(cfg.__dict__ | {"threads_per_process": 1})), machine) == ""
    assert describe.oversubscribed(SimpleNamespace(**(cfg.__dict__ | {"device": "cuda"})), machine) == ""
