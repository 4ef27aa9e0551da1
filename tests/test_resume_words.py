"""What a sweep says about resuming: the interrupt's line names run_bench.sh as the user invoked it (trial B ran
/work/main/run_bench.sh from another folder and was told to run ./run_bench.sh, which was not there), and a resume of
a completed sweep says so instead of 'plan: 0 benchmark configuration(s) (left of 12)' (trial B, finding 11)."""
from __future__ import annotations

import dataclasses
import os

from bench import options
from bench.store import store
from bench.sweep import plan, record, run
from bench.sweep.diagnose import Outcome
from bench.sweep.plan import Machine

CPU2 = Machine(cuda_devices=0, cpu_cores=2)


def _one_config(tmp_path):
    cfg, _, _ = options.prepare(["--workloads", "synthetic", "--strategies", "single", "--gpus", "1", "--repeats", "1",
                                 "--noise-repeats", "1", "--no-comm-bench", "--store", str(tmp_path / "s.sqlite")],
                                machine=CPU2)
    return cfg


def test_the_interrupt_names_run_bench_as_the_user_invoked_it(tmp_path, monkeypatch):
    def ctrl_c(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(run, "run_config", ctrl_c)
    monkeypatch.setenv("BENCH_INVOKED_AS", "/work/main/run_bench.sh")
    lines = []
    assert run.run_sweep(_one_config(tmp_path), "./run_bench.sh x", log=lines.append, machine=CPU2) == 130
    assert f"resume with /work/main/run_bench.sh --resume 1 --store {tmp_path / 's.sqlite'}" in lines[-1], lines[-1]
    monkeypatch.delenv("BENCH_INVOKED_AS")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert run.resume_command(2, "a b.sqlite").startswith(os.path.join(here, "run_bench.sh") + " --resume 2 --store 'a b")
    monkeypatch.setenv("BENCH_INVOKED_AS", "run_bench.sh")  # `bash run_bench.sh`
    assert run.resume_command(2, "s.sqlite") == "./run_bench.sh --resume 2 --store s.sqlite"


def test_resuming_a_completed_sweep_says_so_renders_its_report_and_counts_no_resume(tmp_path, monkeypatch):
    cfg = _one_config(tmp_path)
    conn = store.connect(cfg.store)
    sid = store.begin_sweep(conn, "./run_bench.sh --workloads synthetic", cfg.to_json(), None)
    for item in plan.plan(cfg, CPU2):  # every configuration done (skipped counts as done for a resume)
        record.record_result(conn, sid, None, item.spec if hasattr(item, "spec") else item, "skipped", "stand-in")
    store.end_sweep(conn, sid, "completed")
    conn.close()
    rendered, lines = [], []
    monkeypatch.setattr(run, "render_report", lambda c, s, log: rendered.append(s) or 0)
    monkeypatch.setattr(run, "run_config", lambda *a, **k: Outcome("failed", "must not run"))
    assert run.run_sweep(dataclasses.replace(cfg, resume="last"), "x", log=lines.append, machine=CPU2) == 0
    assert lines == [f"sweep {sid} is already complete: nothing left to run; re-rendering its report"], lines
    assert rendered == [sid]
    conn = store.connect(cfg.store)
    row = conn.execute("SELECT status, resumed FROM sweeps WHERE sweep_id = ?", (sid,)).fetchone()
    assert tuple(row) == ("completed", 0)
