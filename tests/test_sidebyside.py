"""Several sweeps in one report: a column per sweep titled by its --label or its host and devices, every configuration
shown (one some sweeps did not run says so, with the reason), only the environment that differs, one plot line per
sweep and strategy, the cheapest machine beside the fastest at a price; refused with exit 2 where the flags do not fit
or the sweeps share nothing; stores of older suites read as they are."""
from __future__ import annotations

import hashlib
import os

import pytest

from bench import cli
from bench.report import sidebyside
from bench.store import store
from bench.sweep import record
from report_fixtures import build_compare_store, build_sweep_store, downgrade_to_v4, measured, spec
from test_report import md_table

CPU_TITLE = "bench-host, Test CPU <i>9000</i> (2 cores)"
GPU_TITLE = "bench-host, 2x NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    """A CPU sweep on synthetic data and a CUDA sweep on VOC with measured epochs: two machines, other settings."""
    d = tmp_path_factory.mktemp("machines")
    cpu, cuda = str(d / "cpu.sqlite"), str(d / "cuda.sqlite")
    build_sweep_store(cpu, device="cpu")
    build_sweep_store(cuda, device="cuda", data="voc", epochs=True)
    return cpu, cuda


def rendered(tmp_path, *args) -> str:
    code = cli.main(["report", *args, "--report-dir", str(tmp_path / "r"), "--plots-dir", str(tmp_path / "p")])
    assert code == 0
    return open(tmp_path / "r" / "report.md", encoding="utf-8").read()


def test_two_machines_side_by_side_show_every_configuration_with_a_column_each(machines, tmp_path):
    md = rendered(tmp_path, "--store", machines[0], "--store", machines[1])
    assert md.split(" -->\n", 1)[1].lstrip().startswith("# Side by side: bench-host, Test CPU &lt;i&gt;9000&lt;/i&gt; (2 cores) \\| bench-host, 2x NVIDIA H100")
    rows = md_table(md, "## Every configuration, side by side")
    by = {(r["workload"], r["configuration"]): r for r in rows}
    cpu_col, gpu_col = CPU_TITLE.replace("<", "&lt;").replace(">", "&gt;"), GPU_TITLE
    dp2 = by[("synthetic", "DataParallel x2")]
    assert dp2[cpu_col] == "skipped: DataParallel parallelises over GPUs only" and dp2[gpu_col].startswith("1600.0 (")
    assert dp2["ran in"] == f"only {GPU_TITLE}"
    assert by[("deeplabv3", "DDP x1")][gpu_col] == "interrupted: interrupted by SIGINT"
    assert by[("synthetic", "DDP x2")]["ran in"] == "all" and "1.00x the first" in by[("synthetic", "DDP x2")][gpu_col]
    rec = md_table(md, "## What to run, per sweep")
    assert [r["workload"] for r in rec] == ["deeplabv3", "synthetic"]
    syn = rec[1]
    assert syn[f"fastest: {cpu_col}"].startswith("DDP x2: 876.7 samples/s")
    # one process of each: nothing measures the noise, so the faster machine is not called the winner on it
    assert syn["fastest of them"].startswith(f"not told apart: {gpu_col}, ") and "not measured" in syn["fastest of them"]
    assert "![synthetic side by side](../p/synthetic_sidebyside.png)" in md


def test_the_environment_table_shows_only_what_differs(machines, tmp_path):
    md = rendered(tmp_path, "--store", machines[0], "--store", machines[1])
    names = [r[""] for r in md_table(md, "## Environment: what differs")]
    assert {"devices", "cuda", "nccl", "gpu_driver"} <= set(names)
    assert "torch" not in names and "python" not in names and "git_commit" not in names
    assert "torch 2.14.1" in md[md.index("The same in every sweep:"):]


def test_the_plot_has_a_line_per_sweep_and_strategy(machines):
    cols = sidebyside.load_targets(sidebyside.targets(list(machines), None))
    fig = sidebyside.figure(cols, "synthetic")
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert f"{CPU_TITLE}: DDP" in labels and f"{GPU_TITLE}: DDP" in labels and f"{GPU_TITLE}: DataParallel" in labels
    assert len(labels) == 6   # CPU: single, DataParallel (x1), DDP; CUDA: the same three


def test_sweeps_are_titled_by_their_label_and_told_apart_when_titles_clash(tmp_path):
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    for label in ("p4d-a100", "p5-h100", None, None):
        sid = store.begin_sweep(conn, "bench", "{}", None, label=label)
        record.record_result(conn, sid, None, spec("synthetic", "single", 1), "ok", payload=measured(1, [10.0] * 5, 64))
        store.end_sweep(conn, sid, "completed")
    conn.close()
    cols = sidebyside.load_targets(sidebyside.targets([path], "1,2,3,4"))
    host = cols[2].sweep.sweep["hostname"]
    assert [c.title for c in cols] == ["p4d-a100", "p5-h100", f"{host}, unknown CPU (sweep 3)", f"{host}, unknown CPU (sweep 4)"]


def test_a_table_of_prices_names_the_cheapest_machine_beside_the_fastest(machines, tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "USD"\n"NVIDIA H100 80GB HBM3" = 4.0\n"Test CPU <i>9000</i>" = 0.05\n')
    md = rendered(tmp_path, "--store", machines[0], "--store", machines[1], "--price-per-device-hour", str(prices))
    cheap = md_table(md, "At the price per device-hour of each machine")
    syn = next(r for r in cheap if r["workload"] == "synthetic")
    cpu_col = CPU_TITLE.replace("<", "&lt;").replace(">", "&gt;")
    # same throughputs on both (the same fixture numbers): the machine 80x cheaper per device-hour is the cheaper one
    assert syn["cheapest of them"].startswith(f"not told apart: {cpu_col}, 0.0156x {GPU_TITLE}'s cost")
    assert syn[f"cheapest: {cpu_col}"] == f"single device x1: {0.05 * 1e6 / 640.0 / 3600:.4g} per million samples"
    costs = {(r["workload"], r["configuration"]): r for r in md_table(md, "### Cost per million samples (USD)")}
    assert costs[("synthetic", "DDP x2")][GPU_TITLE] == f"{4.0 * 2 * 1e6 / costs_sps(md) / 3600:.4g}"


def costs_sps(md: str) -> float:
    row = next(r for r in md_table(md, "## Every configuration, side by side") if r["configuration"] == "DDP x2"
               and r["workload"] == "synthetic")
    return float(row[GPU_TITLE].split(" ")[0])


def test_a_store_written_by_an_older_suite_is_read_as_it_is(machines, tmp_path):
    old = str(tmp_path / "old.sqlite")
    build_sweep_store(old, device="cuda")
    downgrade_to_v4(old)
    digest = hashlib.sha256(open(old, "rb").read()).hexdigest()
    md = rendered(tmp_path, "--store", machines[0], "--store", old)
    assert "## Every configuration, side by side" in md
    assert hashlib.sha256(open(old, "rb").read()).hexdigest() == digest
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("old")) == ["old.sqlite"]


def test_flags_that_do_not_fit_and_sweeps_that_share_nothing_are_refused_with_exit_2(machines, tmp_path, capsys):
    cpu, cuda = machines
    only_synthetic = str(tmp_path / "syn.sqlite")
    build_compare_store(only_synthetic, (1.0,))
    only_deeplab = str(tmp_path / "dl.sqlite")
    conn = store.connect(only_deeplab)
    sid = store.begin_sweep(conn, "bench", "{}", None)
    record.record_result(conn, sid, None, spec("deeplabv3", "single", 1), "ok", payload=measured(1, [300.0] * 5, 2))
    store.end_sweep(conn, sid, "completed")
    conn.close()
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a store")
    out = tmp_path / "out"
    for args, expected in (
            (["--store", cpu, "--store", cuda, "--store", only_synthetic, "--sweep", "1,1"], "names 2 sweep(s) for 3 stores"),
            (["--store", cpu, "--sweep", "1,1"], "name the same sweep twice"),
            (["--store", cpu, "--store", cpu], "name the same sweep twice"),
            (["--store", cpu, "--sweep", "1,x"], "--sweep '1,x': 'x' is not a sweep id"),
            (["--store", cpu, "--sweep", "1,9"], "sweep 9 is not in the store"),
            (["--store", cpu, "--store", str(tmp_path / "missing.sqlite")], "does not exist"),
            (["--store", cpu, "--store", str(junk)], "is not a SQLite results store"),
            (["--store", only_synthetic, "--store", only_deeplab], "share no configuration to compare"),
            (["--store", cpu, "--store", cuda, "--price-per-device-hour", "-1"], "--price-per-device-hour '-1'")):
        code = cli.main(["report", *args, "--report-dir", str(out), "--plots-dir", str(out)])
        text = capsys.readouterr()
        assert code == 2 and expected in text.out + text.err, (args, text)
        assert not out.exists(), args


def test_a_sweeps_fastest_cell_passes_over_a_run_that_did_not_train(tmp_path):
    import sqlite3
    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    for path in (a, b):
        build_compare_store(path, (1.0,))   # single x1 and DDP x2, DDP x2 the faster (twice the samples a step)
    conn = sqlite3.connect(a)
    conn.execute("UPDATE results SET details_json = json_set(coalesce(details_json, '{}'), '$.loss_not_finite', json(?)) "
                 "WHERE strategy = 'ddp'", ('{"steps": 60, "of": 60, "kind": "measure", "step": 0, "rank": 0, "last": true}',))
    conn.commit()
    conn.close()
    md = rendered(tmp_path, "--store", a, "--store", b)
    row = next(line for line in md.splitlines() if line.startswith("| synthetic") and "samples/s" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert any(c.startswith("single device x1:") for c in cells) and any(c.startswith("DDP x2:") for c in cells), row


def three_process_store(path: str, speeds: tuple) -> None:
    """One sweep per speed-up factor: single x1 in 3 processes stepping 46, 50 and 54 ms / factor (their spread 16%)
    and DDP x1 in one process stepping 80 ms / factor (a wrapper 60% slower than single)."""
    conn = store.connect(path)
    for f in speeds:
        sid = store.begin_sweep(conn, "bench", "{}", None)
        for r, ms in enumerate((46.0, 50.0, 54.0)):
            record.record_result(conn, sid, None, spec("synthetic", "single", 1, repeat=r), "ok",
                                 payload=measured(1, [ms / f] * 10, 64))
        record.record_result(conn, sid, None, spec("synthetic", "ddp", 1), "ok", payload=measured(1, [80.0 / f] * 10, 64))
        store.end_sweep(conn, sid, "completed")
    conn.close()


def test_the_fastest_of_them_is_named_only_beyond_the_noise_of_their_processes(tmp_path):
    """A CPU trial named 'beta' fastest 6% ahead of 'alpha' where beta's own noise was 7.8%: inside the noise the
    columns are not told apart; a 2x lead beyond the same noise names its sweep."""
    path = str(tmp_path / "s.sqlite")
    three_process_store(path, (1.0, 1.06, 2.0))
    close = md_table(rendered(tmp_path / "a", "--store", path, "--sweep", "1,2"), "## What to run, per sweep")[0]
    assert close["fastest of them"].startswith("not told apart: "), close
    assert "1.06x" in close["fastest of them"] and "within the 16% noise" in close["fastest of them"]
    far = md_table(rendered(tmp_path / "b", "--store", path, "--sweep", "1,3"), "## What to run, per sweep")[0]
    slow, fast = (c.title for c in sidebyside.load_targets(sidebyside.targets([path], "1,3")))
    assert far["fastest of them"] == f"{fast}, 2.00x {slow}'s samples/s: beyond the 16% noise", far


def test_a_wrapper_at_one_device_shows_its_overhead_in_its_sweeps_words_not_a_scaling_efficiency(tmp_path):
    """DDP x1 against single device x1 is the wrapper's overhead: the side-by-side read '31443.1 (73%)' under 'scaling
    efficiency' where the sweep's own report said 'wrapper overhead 38.7%'."""
    from bench.report import report
    path = str(tmp_path / "s.sqlite")
    three_process_store(path, (1.0, 2.0))
    cols = sidebyside.load_targets(sidebyside.targets([path], "1,2"))
    md = rendered(tmp_path, "--store", path, "--sweep", "1,2")
    row = next(r for r in md_table(md, "## Every configuration, side by side") if r["configuration"] == "DDP x1")
    for col in cols:
        configs = [c for cs in col.sweep.bench.values() for c in cs]
        ddp = next(c for c in configs if c.strategy == "ddp")
        own = report.efficiency_text(ddp, ".0%", configs)
        assert own.startswith("wrapper overhead") and own in row[col.title], (own, row)
        assert f"({ddp.efficiency:.0%}" not in row[col.title]
