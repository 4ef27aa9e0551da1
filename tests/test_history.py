"""A configuration's history over the sweeps of a store: every step that compare's rule calls a regression or an
improvement is marked with what changed in the environment there, nothing else is; the plot, the pages and the
terminal say the same; bad filters and stores are refused with exit 2; a store an older suite wrote is read as it is.
Two real sweeps (the second slowed by BENCH_FAULT) run in the background while the stored-row tests run."""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess

import pytest

from bench import cli
from bench.analysis import compare
from bench.analysis import history as hist
from bench.report import history as page
from bench.store import read, store
from conftest import REPO, bench_command
from report_fixtures import build_compare_store, build_sweep_store, downgrade_to_v4

SINGLE = "bench/synthetic/single/cpux1/b64/g64/i0/synthetic/fp32"
DDP2 = "bench/synthetic/ddp/cpux2/b64/g128/i0/synthetic/fp32"
REAL = ["--strategies", "single", "--workloads", "synthetic", "--synthetic-width", "128", "--synthetic-depth", "2",
        "--per-device-batch", "8", "--gpus", "1", "--repeats", "3", "--warmup", "3", "--min-window-s", "0.2",
        "--threads-per-process", "1", "--no-report", "--device", "cpu"]


@pytest.fixture(scope="module")
def real_sweeps(tmp_path_factory):
    """Two real sweeps into one store, run when the first test that reads them starts (not beside this file's other
    tests: with ranks forked from the session's fork server the sweeps take ~4 s, and measured beside a test rendering
    plots the first sweep read a median of 24.7k samples/s against 33k alone, and the slowdown was within its spread),
    single x1 in 3 processes each, labelled 'before' and 'after slow', the
    second with every step of rank 0 sleeping 3 ms first (bench.shared.faults' nap: a slowdown of a fixed size, some 3-4x
    a step of about 1 ms: with 1 ms, about 2x, a run of 2026-11-28 judged it within the noise when one process of
    'before' read 4,493 samples/s against 9,341 and 8,285; 3
    warm-up steps, since with 1 the first process of a sweep ran up to 70x slow here). One torch thread: at two, beside
    one busy process on the 2 cores, the MLP read 452 samples/s (OpenMP's two threads waiting on each other across
    time slices) and the 1 ms nap was lost inside that."""
    path = str(tmp_path_factory.mktemp("real") / "bench.sqlite")
    bench = f"{shlex.join(bench_command())} {shlex.join(REAL)} --store {shlex.quote(path)}"
    proc = subprocess.Popen(["sh", "-c", f"{bench} --label before && BENCH_FAULT=nap@0:3 {bench} --label 'after slow'"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        proc.wait(timeout=300)
        yield proc, path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def with_envs(path: str, torch_by_sweep: dict) -> None:
    """Give each sweep of a store an environment: torch as given, the rest the same."""
    conn = store.connect(path)
    for sid, torch in torch_by_sweep.items():
        env = store.insert_environment(conn, {"hostname": "node-1", "torch": torch, "git_commit": "0123456789abcdef",
                                              "cpu_model": "Test CPU", "cpu_cores": 2})
        conn.execute("UPDATE sweeps SET env_id = ? WHERE sweep_id = ?", (env, sid))
    conn.close()


def built(path: str, factors: tuple, torch: tuple, **kw) -> hist.History:
    ids = build_compare_store(path, factors, repeats=3, process_cv=0.02, sweep_cv=0.02, seed=1, **kw)
    with_envs(path, dict(zip(ids, torch)))
    conn = read.connect(path)
    try:
        return hist.build(conn)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory):
    """8 sweeps; from sweep 7 on every step 1.3x slower, and torch 2.15.0 instead of 2.14.1."""
    path = str(tmp_path_factory.mktemp("h") / "s.sqlite")
    return path, built(path, (1.0,) * 6 + (1.3,) * 2, ("2.14.1",) * 6 + ("2.15.0",) * 2)


def marks(h: hist.History) -> dict:
    return {(s.key, p.sweep_id): p.marked for s in h.series for p in s.points if p.marked}


def test_a_slowdown_is_marked_at_its_sweep_with_what_changed_there_and_nothing_else_is(upgraded):
    path, h = upgraded
    assert marks(h) == {(SINGLE, 7): "regression", (DDP2, 7): "regression"}
    lines = hist.summary_lines(h)
    assert any(re.fullmatch(r"single x1 synthetic: 3\d% slower since sweep 7 \(torch 2\.14\.1 -> 2\.15\.0\), "
                            r"p=[0-9.e-]+ \(REGRESSION\)", line) for line in lines), lines
    # the same call as compare on the same two sweeps: one rule, not two
    text, code = compare.compare(path, None, 6, 7)
    assert code == 1 and all(f"{k}: " in text and "(REGRESSION)" in next(x for x in text.splitlines() if x.startswith(k + ":"))
                             for k in (SINGLE, DDP2)), text
    assert compare.compare(path, None, 7, 8)[1] == 0 and not any(p.marked for s in h.series for p in s.points[7:])


def test_sweeps_of_identical_code_mark_nothing_and_a_speedup_is_marked_as_an_improvement(tmp_path):
    same = built(str(tmp_path / "same.sqlite"), (1.0,) * 8, ("2.14.1",) * 8)
    assert marks(same) == {}
    assert all(re.fullmatch(r".*: no step beyond the noise over 8 sweeps \(.* samples/s\)", line)
               for line in hist.summary_lines(same)), hist.summary_lines(same)
    faster = built(str(tmp_path / "faster.sqlite"), (1.0,) * 6 + (0.7,), ("2.14.1",) * 7)
    assert marks(faster) == {(SINGLE, 7): "improvement", (DDP2, 7): "improvement"}
    assert any(re.fullmatch(r"single x1 synthetic: 4\d% faster since sweep 7 \(nothing in the environment changed\), "
                            r"p=[0-9.e-]+ \(IMPROVEMENT\)", line) for line in hist.summary_lines(faster)), hist.summary_lines(faster)


def test_filters_show_fewer_configurations_but_judge_each_step_over_all_the_sweeps_share(upgraded):
    path, h = upgraded
    conn = read.connect(path)
    try:
        only = hist.build(conn, hist.Filters(strategies=("ddp",)))
        late = hist.build(conn, hist.Filters(since="2000-01-01"))
    finally:
        conn.close()
    assert [s.key for s in only.series] == [DDP2]
    full = next(s for s in h.series if s.key == DDP2)
    assert [p.call.comparison.p_slower for p in only.series[0].points[1:]] == [p.call.comparison.p_slower for p in full.points[1:]]
    assert len(late.sweeps) == 8


def test_the_plot_draws_each_configuration_with_its_band_the_marks_and_the_torch_upgrade(upgraded):
    _, h = upgraded
    fig = page.figure(h, "synthetic", h.series, "cpu, Test CPU")
    ax_t, ax_e = fig.axes[:2]
    labels = [line.get_label() for line in ax_t.lines]
    assert "single x1 synthetic" in labels and "ddp x2 synthetic" in labels and "regression (compare's rule)" in labels
    down = [line for line in ax_t.lines if line.get_marker() == "v"]
    assert len(down) == 2 and all(list(line.get_xdata()) == [6] for line in down)   # sweep 7 is the 7th position
    assert len(ax_t.collections) == 2                                               # one process band per configuration
    assert any("torch 2.15.0" in t.get_text() for t in ax_t.texts)
    assert ax_t.get_yscale() == "log" and [line.get_label() for line in ax_e.lines][:2] == ["single x1 synthetic", "ddp x2 synthetic"]


def test_the_pages_hold_the_summary_the_sweeps_environments_the_plot_and_a_table_per_configuration(upgraded, tmp_path):
    path, h = upgraded
    out = page.render(h, path, str(tmp_path / "plots"), str(tmp_path / "results"))
    md, html = open(out["markdown"]).read(), open(out["html"]).read()
    for line in hist.summary_lines(h):
        assert line.replace("->", "-&gt;") in md and line.replace("->", "-&gt;") in html
    assert "![synthetic history](../plots/synthetic_history.png)" in md and os.path.isfile(out["plots"][0])
    assert "data:image/png;base64," in html and "### single x1 synthetic" in md
    row = next(x for x in md.splitlines() if x.startswith("| sweep 7 (") and "REGRESSION" in x)
    assert "torch 2.14.1 -&gt; 2.15.0" in row


def test_at_a_price_each_sweep_of_the_history_says_what_a_million_samples_cost(upgraded, tmp_path):
    from bench.analysis import cost
    from test_report import md_table
    path, h = upgraded
    out = page.render(h, path, str(tmp_path / "p"), str(tmp_path / "r"), prices=cost.parse_price("3.0"))
    md = open(out["markdown"]).read()
    rows = md_table(md, "### ddp x2 synthetic")
    assert len(rows) == 8
    for row in rows:
        sps = float(row["samples/s"])
        assert float(row["cost per million samples (price units)"]) == pytest.approx(3.0 * 2 * 1e6 / sps / 3600, rel=2e-3)


@pytest.mark.parametrize("args, expected", [
    (["--workloads", "resnet50"], "--workloads resnet50: 'resnet50' is not in the store; it holds synthetic"),
    (["--strategies", "ddp,fsdp"], "'fsdp' is not in the store; it holds ddp, single"),
    (["--gpus", "8"], "--gpus 8: 8 is not in the store; it holds 1, 2"),
    (["--gpus", "two"], "--gpus: 'two' is not a whole number"),
    (["--precision", "bf16"], "'bf16' is not in the store; it holds fp32"),
    (["--since", "yesterday"], "--since 'yesterday': expected a date such as 2025-06-01"),
    (["--since", "2999-01-01"], "0 of its 8 sweeps are since 2999-01-01; a history needs two"),
    (["--threshold", "nan"], "--threshold: 'nan' is not a finite number"),
])
def test_a_bad_filter_is_refused_with_exit_2_naming_it(upgraded, args, expected, tmp_path, capsys):
    code = cli.main(["history", "--store", upgraded[0], *args, "--report-dir", str(tmp_path / "r"), "--plots-dir", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert code == 2 and expected in err, err
    assert not (tmp_path / "r").exists()


def test_a_file_that_is_not_a_store_and_a_store_with_one_sweep_are_refused(tmp_path, capsys):
    junk = tmp_path / "notes.sqlite"
    junk.write_text("not a database at all")
    assert cli.main(["history", "--store", str(junk)]) == 2
    assert "is not a SQLite results store" in capsys.readouterr().err
    assert cli.main(["history", "--store", str(tmp_path / "missing.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().err
    one = str(tmp_path / "one.sqlite")
    build_sweep_store(one)
    assert cli.main(["history", "--store", one, "--report-dir", str(tmp_path / "r")]) == 2
    assert "was measured in more than one of its 1 sweep(s); a history needs two" in capsys.readouterr().err


def test_a_store_written_by_an_older_suite_is_read_as_it_is_and_left_untouched(upgraded, tmp_path, capsys):
    old = str(tmp_path / "v4.sqlite")
    shutil.copy(upgraded[0], old)
    downgrade_to_v4(old)
    before = hashlib.sha256(open(old, "rb").read()).hexdigest()
    with pytest.raises(store.StoreError, match="migrate"):
        store.connect(old, readonly=True)      # the plain reader still refuses it (and says how to upgrade)
    code = cli.main(["history", "--store", old, "--report-dir", str(tmp_path / "r"), "--plots-dir", str(tmp_path / "p")])
    out = capsys.readouterr().out
    assert code == 0 and "single x1 synthetic: 3" in out and "since sweep 7 (torch 2.14.1 -> 2.15.0)" in out, out
    assert hashlib.sha256(open(old, "rb").read()).hexdigest() == before
    assert sqlite3.connect(old).execute("PRAGMA user_version").fetchone()[0] == 4
    assert sorted(os.listdir(tmp_path)) == ["p", "r", "v4.sqlite"]       # no -wal, -shm or journal left beside it


def test_labelled_sweeps_belong_to_the_history_and_to_compares_evidence_but_ab_and_tune_sides_do_not(upgraded, tmp_path):
    path = str(tmp_path / "labels.sqlite")
    shutil.copy(upgraded[0], path)
    conn = sqlite3.connect(path)
    for sid, label in ((2, "nightly a100"), (3, "b: --bucket-cap-mb 100"), (4, "tune: screening"), (5, "a")):
        conn.execute("UPDATE sweeps SET label = ? WHERE sweep_id = ?", (label, sid))
    conn.commit()
    conn.close()
    conn = read.connect(path)
    try:
        h = hist.build(conn)
        earlier = read.earlier_sweeps(conn, 7, conn.execute("SELECT hostname FROM sweeps WHERE sweep_id = 7").fetchone()[0], 10)
    finally:
        conn.close()
    assert [int(s["sweep_id"]) for s in h.sweeps] == [1, 2, 5, 6, 7, 8] and earlier == [1, 2, 5, 6]
    assert marks(h) == {(SINGLE, 7): "regression", (DDP2, 7): "regression"}


@pytest.mark.parametrize("label, expected", [("b", "name the sweeps of ab and tune"), ("B: other code", "name the sweeps"),
                                             ("tune: mine", "name the sweeps"), ("", "--label: '' is empty"),
                                             ("x" * 81, "1 to 80 printable"), ("two\nlines", "1 to 80 printable")])
def test_a_label_ab_or_tune_would_give_or_that_is_not_a_short_name_is_refused_before_the_sweep(label, expected, tmp_path, capsys):
    code = cli.main(["--label", label, "--device", "cpu", "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and re.search(rf"--label:? {re.escape(repr(label))}", err) and expected in err, err
    assert not (tmp_path / "s.sqlite").exists()


# ---------------------------------------------------------------- two real sweeps (the background fixture)

def real_store(real_sweeps) -> str:
    proc, path = real_sweeps
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return path


def test_real_sweeps_with_an_injected_slowdown_mark_it_on_the_terminal_and_the_pages(real_sweeps, tmp_path, capsys):
    path = real_store(real_sweeps)
    code = cli.main(["history", "--store", path, "--report-dir", str(tmp_path / "r"), "--plots-dir", str(tmp_path / "p")])
    out = capsys.readouterr().out
    assert code == 0 and re.search(r"single x1 synthetic: \d+% slower since sweep 2 \(nothing in the environment "
                                   r"changed\), p=[0-9.e-]+ \(REGRESSION\)", out), out
    page = open(tmp_path / "r" / "history.md").read()
    assert "(REGRESSION)" in page
    # which 'slower' it is: the step's time (compare's threshold), not the report's share of samples/s
    assert "X% slower: the training step X% longer" in out and "X% slower: the training step X% longer" in page


def test_two_real_sweeps_side_by_side_are_titled_by_their_labels(real_sweeps, tmp_path):
    path = real_store(real_sweeps)
    assert cli.main(["report", "--store", path, "--sweep", "1,2", "--report-dir", str(tmp_path / "r"),
                     "--plots-dir", str(tmp_path / "p")]) == 0
    md = open(tmp_path / "r" / "report.md").read()
    assert md.split(" -->\n", 1)[1].lstrip().startswith("# Side by side: before \\| after slow")
    row = next(x for x in md.splitlines() if x.startswith("| synthetic | single device x1 | fp32 |"))
    assert row.endswith("| all |") and "x the first" in row


CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_history_and_side_by_side_pages_open_in_headless_chromium_with_every_plot_decoded(real_sweeps, tmp_path):
    path = real_store(real_sweeps)
    assert cli.main(["history", "--store", path, "--report-dir", str(tmp_path / "h"), "--plots-dir", str(tmp_path / "p")]) == 0
    assert cli.main(["report", "--store", path, "--sweep", "1,2", "--report-dir", str(tmp_path / "s"),
                     "--plots-dir", str(tmp_path / "p")]) == 0
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--dump-dom"]
    for page_path, heading, tables in ((tmp_path / "h" / "history.html", "History: 2 sweeps", 2),
                                       (tmp_path / "s" / "report.html", "Side by side: before | after slow", 4)):
        dom = subprocess.run(flags + ["file://" + str(page_path)], capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0 and "Uncaught" not in dom.stderr, dom.stderr[-2000:]
        assert 'data-images-ok="true"' in dom.stdout and heading in dom.stdout and dom.stdout.count("<table>") >= tables


def wrapper_history(path: str, sweeps: int = 2) -> hist.History:
    """`sweeps` sweeps of single x1 (50 ms a step) and DDP x1 (80 ms: a wrapper 60% slower), one process each."""
    from report_fixtures import measured, spec
    from bench.sweep import record
    conn = store.connect(path)
    for _ in range(sweeps):
        sid = store.begin_sweep(conn, "bench", "{}", None)
        for strategy, ms in (("single", 50.0), ("ddp", 80.0)):
            record.record_result(conn, sid, None, spec("synthetic", strategy, 1), "ok", payload=measured(1, [ms] * 10, 64))
        store.end_sweep(conn, sid, "completed")
    conn.close()
    conn = read.connect(path)
    try:
        return hist.build(conn)
    finally:
        conn.close()


def test_a_wrapper_at_one_device_shows_its_overhead_not_a_scaling_efficiency(tmp_path):
    """The history showed DDP x1 at 'efficiency 73.2%' where its sweep's report said 'wrapper overhead 38.7%': one
    device is no scaling. The table gives the report's words; the efficiency panel draws no line for it."""
    from bench.report import report
    h = wrapper_history(str(tmp_path / "s.sqlite"))
    ddp = next(s for s in h.series if s.strategy == "ddp")
    head, rows = page.series_table(ddp, None)
    col = next(i for i, name in enumerate(head) if name.startswith("efficiency"))
    for p, row in zip(ddp.points, rows):
        assert row[col] == report.efficiency_text(p.config, ".1%", [p.base]) and row[col].startswith("wrapper overhead 60.0%")
    ax_e = page.figure(h, "synthetic", h.series, "cpu").axes[1]
    assert [line.get_label() for line in ax_e.lines if not line.get_label().startswith("_")] == ["single x1 synthetic"]


def test_a_configuration_whose_steps_nothing_could_decide_is_not_said_to_be_within_the_noise(tmp_path):
    """The history read 'no step beyond the noise over 2 sweeps (16885.9 -> 28182.1 samples/s); 1 step(s) could not be
    decided' of a 1.67x move whose noise nothing measured: undecided is said as such."""
    h = wrapper_history(str(tmp_path / "s.sqlite"))   # one process a side, no earlier sweep: nothing measures the noise
    lines = hist.summary_lines(h)
    assert lines and all(re.fullmatch(r".*: not decided over 2 sweeps \(.* samples/s\): no evidence of the noise for its "
                                      r"step", line) for line in lines), lines
    assert not any("beyond the noise" in line for line in lines)


def test_a_clean_and_a_dirty_commit_show_at_one_length():
    """A clean commit showed at 12 characters beside a dirty one at 40."""
    clean, dirty = "8fa18bd7276bdba4ee3137e76394a46f904dd796", "aa4e69b3b45780aab96ee4c7de01b8571919ac0e-dirty"
    assert hist.env_value({"git_commit": clean}, "git_commit") == "8fa18bd7276b"
    assert hist.env_value({"git_commit": dirty}, "git_commit") == "aa4e69b3b457-dirty"
    assert hist.changes({"git_commit": dirty}, {"git_commit": clean}) == ["commit aa4e69b3b457-dirty -> 8fa18bd7276b"]
