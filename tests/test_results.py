"""Results as DataFrames (bench.results) and as files (`./run_bench.sh export`), read from the session's quick CPU sweep:
the report's figures per configuration, the raw steps behind them, the collectives, and the refusals."""
from __future__ import annotations

import dataclasses
import re
import sqlite3

import pandas as pd
import pytest

from bench import cli, results
from bench.analysis import results as analysis
from bench.analysis.results import Config
from bench.config import ConfigError
from bench.report import forecastrows, recommend, tables
from bench.store import read
from bench.store.store import StoreError
from report_fixtures import build_sweep_store, downgrade_to_v4


@pytest.fixture(scope="module")
def quick(quick_sweep):
    proc, path = quick_sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path, results.load(path)


def test_configurations_hold_the_figures_the_report_shows(quick):
    path, r = quick
    conn = read.connect(path)
    sweep = analysis.load(conn, read.pick_sweep(conn, None))
    ok = r.configurations[r.configurations.status == "ok"].set_index("config_key")
    assert len(ok) == sum(len(cs) for cs in sweep.bench.values())
    for workload, configs in sweep.bench.items():
        for precision in {c.precision for c in configs}:
            row, _ = recommend.answer(sweep, workload, configs, precision)   # the report's first table, as printed
            picked = ok[(ok.workload == workload) & (ok.precision == precision) & ok.recommended]
            assert len(picked) == 1
            label = f"{picked.strategy_name.iloc[0]} x{picked.device_count.iloc[0]}"   # no settings in this sweep
            if not picked.recommendation_resolved.iloc[0]:   # an unstable pick on an unresolved lead: no answer yet
                assert row[2] == picked.recommendation_note.iloc[0] and row[2].startswith(f"not resolved: --repeats 3 ({label}, ")
                continue
            assert row[2] == label and pd.isna(picked.recommendation_note.iloc[0])
            figure, _, flag = row[3].partition(" (unstable: ")   # the first screen marks an unstable pick, by its flag
            assert f"{picked.samples_per_s.iloc[0]:.1f}" == figure and picked.bound_detail.iloc[0] == row[7]
            assert bool(flag) == bool(picked.unstable.iloc[0]), (row[3], picked.unstable.iloc[0])
        for c in configs:
            got = ok.loc[c.key]
            assert got.samples_per_s == c.samples_per_s and got.step_median_ms == c.summary.median_ms
            assert (got.step_p10_ms, got.step_p90_ms) == (c.summary.p10_ms, c.summary.p90_ms)
    base = ok[(ok.strategy == "single") & (ok.device_count == 1)].set_index("workload").samples_per_s
    weak = ok.samples_per_s / (ok.workload.map(base) * ok.device_count)   # efficiency, derived here independently
    assert ((ok.efficiency - weak).abs() < 1e-9).all()
    assert (ok.peak_mib > 0).all() and ok.bound.isin(["compute", "communication", "contention", "data", "host", "straggler", "cpu", "not measured"]).all()
    assert ok.loc[ok.workload == "deeplabv3", "reference_train_s"].gt(0).all()
    ddp2 = ok[(ok.strategy == "ddp") & (ok.device_count == 2)]
    # compute: the probe's no_sync() steps as measured, each step at its slowest rank, their median (derived here)
    nosync = r.steps[r.steps.kind == "probe_no_sync"].groupby(["config_key", "repeat", "step"]).step_ms.max()
    assert ((ddp2.compute_ms - nosync.groupby("config_key").median().reindex(ddp2.index)).abs() < 1e-9).all()
    assert ddp2.allreduce_grads_ms.gt(0).all() and ok[ok.strategy != "ddp"].compute_ms.isna().all()


def test_a_skipped_configuration_is_a_row_with_its_reason(quick):
    _, r = quick
    dp2 = r.configurations[(r.configurations.strategy == "dp") & (r.configurations.device_count == 2)]
    assert len(dp2) == 2 and (dp2.status == "skipped").all() and not dp2.recommended.any()
    assert dp2.reason.str.contains("DataParallel parallelises over GPUs only").all() and dp2.samples_per_s.isna().all()


def test_steps_are_the_raw_rows_behind_each_step_percentile(quick):
    path, r = quick
    with sqlite3.connect(path) as conn:
        stored = conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
    assert len(r.steps) == stored
    measured = r.steps[r.steps.kind == "measure"]
    slowest = measured.groupby(["config_key", "repeat", "step"]).step_ms.max()   # a step ends when every rank is done
    median = slowest.groupby(level="config_key").median()
    ok = r.configurations[r.configurations.status == "ok"].set_index("config_key")
    assert ((median - ok.step_median_ms).abs() < 1e-9).all() and set(median.index) == set(ok.index)


def test_collectives_carry_nccl_tests_bandwidths(quick):
    path, r = quick
    with sqlite3.connect(path) as conn:
        assert len(r.collectives) == conn.execute("SELECT COUNT(*) FROM comm").fetchone()[0] > 0
    c = r.collectives
    assert ((c.algbw_gbps - c.size_bytes / c.time_ms / 1e6).abs() < 1e-9).all()
    ar = c[c.op == "all_reduce"]
    assert ((ar.busbw_gbps - ar.algbw_gbps * 2 * (ar.ranks - 1) / ar.ranks).abs() < 1e-9).all()


def test_a_field_config_gains_later_becomes_a_column(quick):
    path, _ = quick
    later = dataclasses.make_dataclass("Later", [("tokens_per_s", float, dataclasses.field(default=123.0))], bases=(Config,))
    later.goodput = property(lambda c: 0.25)   # (mfu is a column of its own now: bench.analysis.utilisation)
    conn = read.connect(path)
    sweep = analysis.load(conn, read.pick_sweep(conn, None))
    sweep.bench = {w: [later(**{f.name: getattr(c, f.name) for f in dataclasses.fields(c)}) for c in cs]
                   for w, cs in sweep.bench.items()}
    rows = [row for row in tables.configurations(sweep) if row["status"] == "ok"]
    assert rows and all(row["tokens_per_s"] == 123.0 and row["goodput"] == 0.25 for row in rows)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_writes_the_same_tables(quick, fmt, tmp_path, capsys):
    path, r = quick
    assert cli.main(["export", "--store", path, "--format", fmt, "--out", str(tmp_path / "out")]) == 0
    assert "configurations" in capsys.readouterr().out
    assert len(r.forecast) and r.checks.empty   # the shared store: no `./run_bench.sh forecast` stored its check
    for name in results.TABLES:
        file = tmp_path / "out" / f"{name}.{fmt}"
        back = pd.read_csv(file) if fmt == "csv" else pd.read_json(file, orient="records")
        frame = getattr(r, name)
        if fmt == "json" and frame.empty:   # a list of records names no column without a record: `[]`
            assert back.empty
            continue
        assert list(back.columns) == list(frame.columns) and len(back) == len(frame)
    back = pd.read_csv(tmp_path / "out" / f"configurations.{fmt}") if fmt == "csv" else \
        pd.read_json(tmp_path / "out" / f"configurations.{fmt}", orient="records")
    assert back.samples_per_s.fillna(-1).tolist() == pytest.approx(r.configurations.samples_per_s.fillna(-1).tolist(), rel=1e-12)


@pytest.mark.parametrize("args, named", [
    (["--format", "xml"], "--format 'xml': expected csv or json"),
    (["--sweep", "banana"], "--sweep 'banana'"),
    (["--sweep", "99"], "sweep 99 is not in the store"),
    (["--price-per-device-hour", "-3"], "--price-per-device-hour '-3'"),
    (["--out", "FILE"], "is a file; expected a folder"),
])
def test_export_refuses_bad_input_before_writing(quick, args, named, tmp_path, capsys):
    path, _ = quick
    (tmp_path / "FILE").write_text("")
    args = [str(tmp_path / "FILE") if a == "FILE" else a for a in args]
    out = [] if "--out" in args else ["--out", str(tmp_path / "out")]
    assert cli.main(["export", "--store", path, *args, *out]) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_export_of_a_missing_store_exits_2(tmp_path, capsys):
    assert cli.main(["export", "--store", str(tmp_path / "none.sqlite"), "--out", str(tmp_path / "out")]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_load_takes_last_all_or_an_id(quick):
    path, r = quick
    assert r.sweeps == (1,) and (r.configurations.sweep_id == 1).all()
    assert results.load(path, sweep="all").sweeps == (1,) and len(results.load(path, sweep=1).steps) == len(r.steps)
    with pytest.raises(ConfigError, match="'latest'"):
        results.load(path, sweep="latest")
    with pytest.raises(StoreError, match="sweep 7 is not in the store"):
        results.load(path, sweep=7)


def test_a_stored_sweep_reads_as_its_report_does_also_from_an_older_store(tmp_path):
    path = str(tmp_path / "bench.sqlite")
    build_sweep_store(path, device="cpu")   # the report's own fixture: tests/test_report.py reads the same numbers
    c = results.load(path).configurations
    ddp2 = c[(c.workload == "synthetic") & (c.strategy == "ddp") & (c.device_count == 2)].iloc[0]
    assert ddp2.status == "ok" and pd.isna(ddp2.reason)       # failed, then resumed: the result that counts
    got = ddp2[["exposed_comm_ms", "allreduce_grads_ms", "compute_ms", "no_overlap_bound_ms", "full_overlap_bound_ms"]]
    assert got.tolist() == pytest.approx([45.0, 13.0, 101.0, 114.0, 101.0], rel=0.01)
    status = {(r.workload, r.strategy, r.device_count): r.status for r in c.itertuples()}
    assert status[("deeplabv3", "dp", 1)] == "failed" and status[("deeplabv3", "ddp", 1)] == "interrupted"
    assert status[("synthetic", "dp", 2)] == "skipped"
    downgrade_to_v4(path)
    before = open(path, "rb").read()
    old = results.load(path).configurations
    assert open(path, "rb").read() == before                  # read in a migrated copy, the file as it was
    keep = ["config_key", "status", "samples_per_s", "step_median_ms", "efficiency", "bound", "recommended"]
    pd.testing.assert_frame_equal(old[keep], c[keep])
    assert (old.optimizer == "sgd").all() and old.state_params_mib.isna().all()


def test_a_cuda_sweep_carries_device_memory_and_measured_epochs(tmp_path):
    path = str(tmp_path / "bench.sqlite")
    build_sweep_store(path, device="cuda", data="voc", epochs=True)
    c = results.load(path).configurations
    ok = c[c.status == "ok"]
    assert ok.peak_reserved_mib.notna().all() and (ok.peak_mib == ok.peak_reserved_mib).all()   # the budget's figure
    single = ok[(ok.workload == "deeplabv3") & (ok.strategy == "single")].iloc[0]
    assert single.epochs == 3 and single.reference_train_s == pytest.approx(610.0 * 20)   # median epoch x 20 epochs
    assert ok[(ok.strategy == "dp") & (ok.device_count == 2)].status.tolist() == ["ok"]


def test_the_gpus_busy_share_behind_the_bound_is_a_number_column(tmp_path):
    # the bound's evidence on CUDA, as a number a notebook can sort and plot, not only inside bound_detail's words
    from report_fixtures import build_h100_store
    path = str(tmp_path / "h100.sqlite")
    build_h100_store(path)
    c = results.load(path).configurations.set_index("label")
    ddp = c.loc["DDP x1 [bf16]"]
    assert 0 < ddp.gpu_busy_share < 1 and ddp.gpu_busy_device
    assert f"GPU busy {ddp.gpu_busy_share:.0%}" in ddp.bound_detail


def test_steps_carry_the_configurations_identity_so_a_filter_on_them_cannot_pool_two_configurations(tmp_path):
    """`r.steps[(r.steps.strategy == "ddp") & (r.steps.device_count == 2)]`, the docs' filter, once pooled ac=none with
    ac=full and one comm hook with another: steps lacked options, activation_checkpointing and variant. They carry the
    identity columns the configurations frame has, with the same values, and a label names one configuration."""
    from bench.store import store
    from bench.sweep import record
    from report_fixtures import measured, spec
    path = str(tmp_path / "s.sqlite")
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "bench", "{}", None)
    for ms, kw in ((50.0, {}), (60.0, {"options": (("comm_hook", "bf16"),)}), (70.0, {"activation_checkpointing": "full"})):
        record.record_result(conn, sid, None, dataclasses.replace(spec("synthetic", "ddp", 2), **kw), "ok",
                             payload=measured(2, [ms] * 10, 64))
    record.record_result(conn, sid, None, dataclasses.replace(spec("synthetic", "ddp", 2), options=(("comm_hook", "fp16"),)),
                         "failed", "rank 1: out of memory")
    store.end_sweep(conn, sid, "completed")
    conn.close()
    r = results.load(path)
    identity = ["config_key", "workload", "strategy", "strategy_name", "device_count", "precision", "optimizer", "options",
                "activation_checkpointing", "aux", "variant", "label"]
    steps = r.steps[identity].drop_duplicates().set_index("config_key").sort_index()
    configs = r.configurations[identity].set_index("config_key").sort_index()
    assert len(steps) == 3 and steps.equals(configs.loc[steps.index]), (steps, configs)
    assert sorted(steps.label) == ["DDP x2", "DDP x2 [fp32, ac=full]", "DDP x2 [fp32, comm_hook=bf16]"]
    plain = r.steps[(r.steps.kind == "measure") & (r.steps.label == "DDP x2")]
    assert set(plain.step_ms) == {50.0, 51.0}   # rank 0 and rank 1 of the plain configuration alone
    failed = r.configurations.set_index("status").loc["failed"]
    assert failed.label == "DDP x2 [fp32, comm_hook=fp16]" and failed.variant == "fp32, comm_hook=fp16"


def _single_x1_store(path: str) -> None:
    """A store of one sweep with a single device x1 result and no collectives (a one-GPU sweep, the usual first one)."""
    from bench.store import store
    from bench.sweep import record
    from report_fixtures import measured, spec
    conn = store.connect(path)
    sid = store.begin_sweep(conn, "bench", "{}", None)
    record.record_result(conn, sid, None, spec("synthetic", "single", 1), "ok", payload=measured(1, [50.0] * 10, 64))
    store.end_sweep(conn, sid, "completed")
    conn.close()


def test_an_empty_table_keeps_its_columns_so_a_query_gives_no_row_and_the_csv_reads_back(tmp_path, capsys):
    # The docs' `r.collectives.query("op == 'all_reduce'")` raised "name 'op' is not defined" on a one-GPU sweep (no
    # comm rows: a frame without columns), and its collectives.csv was one byte that pd.read_csv refused.
    path = str(tmp_path / "one.sqlite")
    _single_x1_store(path)
    r = results.load(path)
    assert len(r.steps) and len(r.collectives) == 0
    assert len(r.collectives.query("op == 'all_reduce'")) == 0
    assert list(r.collectives.columns) == ["sweep_id", *tables.COLLECTIVES_COLUMNS]
    assert cli.main(["export", "--store", path, "--out", str(tmp_path / "csv")]) == 0
    back = pd.read_csv(tmp_path / "csv" / "collectives.csv")
    assert list(back.columns) == list(r.collectives.columns) and len(back) == 0
    assert cli.main(["export", "--store", path, "--format", "json", "--out", str(tmp_path / "json")]) == 0
    capsys.readouterr()
    assert pd.read_json(tmp_path / "json" / "collectives.json", orient="records").empty   # records: `[]`, no columns
    none = results.load(_store_of_an_empty_sweep(tmp_path / "none.sqlite"))
    for name, columns in {**tables.COLUMNS, **forecastrows.COLUMNS}.items():
        frame = getattr(none, name)
        assert frame.empty and list(frame.columns) == ["sweep_id", *columns], name
    assert len(none.configurations.query("status == 'ok' and device_count == 2")) == 0


def _store_of_an_empty_sweep(path) -> str:
    """A store whose one sweep recorded nothing (it died before its first configuration)."""
    from bench.store import store
    conn = store.connect(str(path))
    sid = store.begin_sweep(conn, "bench", "{}", None)
    store.end_sweep(conn, sid, "completed")
    conn.close()
    return str(path)


def test_the_empty_tables_columns_are_those_a_real_sweeps_rows_have(quick):
    _, r = quick
    assert list(r.steps.columns) == ["sweep_id", *tables.STEPS_COLUMNS]
    assert list(r.collectives.columns) == ["sweep_id", *tables.COLLECTIVES_COLUMNS]
    assert set(tables.CONFIGURATION_COLUMNS) <= set(r.configurations.columns)   # and more: the Config's own fields


def _ranged(row, name: str, spec: str) -> str:
    """'66.4 (39.9-121.0)': the frame's figure and its range, written by the forecast table's own rule
    (outlook.ranged) from the frame's numbers alone."""
    from bench.forecast import outlook
    from bench.forecast import settings as fs
    point = fs.Point(count=int(row.name), nodes=int(row.nodes), ranges={name: (row[f"{name}_low"], row[f"{name}_high"])})
    return outlook.ranged(point, name, row[name], spec)


def test_the_forecast_frame_is_what_the_forecast_command_prints_and_outlook_returns(quick, tmp_path, capsys):
    # The forecast was in no frame and no export: its ranges (issue 43) were the one thing a notebook could not get
    # without reading the terminal, and its check only by SQL.
    from bench.analysis import forecastable
    from bench.forecast import outlook
    from bench.forecast import settings as fs
    path, _ = quick
    copy = str(tmp_path / "forecast.sqlite")
    with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)   # `forecast` stores its check: into a copy, not the shared store
    assert cli.main(["forecast", "--store", copy]) == 0
    printed = capsys.readouterr().out
    r = results.load(copy)
    f = r.forecast
    assert list(f.columns) == ["sweep_id", *forecastrows.FORECAST_ROW_COLUMNS] and (f.sweep_id == 1).all()
    conn = read.connect(copy)
    shown = forecastable.load(conn, 1)
    conn.close()
    m = outlook.machine(shown.sweep, shown.runs)
    figures = ("step_ms", "samples_per_s", "efficiency", "memory_mib")
    forecast = [(s, inp) for s, inp in ((s, fs.inputs(s, m)) for s in shown.sets) if not isinstance(inp, str)]
    assert sorted(f.setting.unique()) == sorted(s.label for s, _ in forecast) == ["deeplabv3 DDP [fp32]", "synthetic DDP [fp32]"]
    for s, inp in forecast:
        rows = f[f.setting == s.label].set_index("device_count")
        points = outlook.what_ifs(s, inp, m, outlook.DOUBLING)[0][1]
        assert list(rows.index) == [p.count for p in points] == list(outlook.DOUBLING)
        block = printed.split(f"\n{s.label}\n")[1].split("\n\n")[0]
        for p in points:
            row = rows.loc[p.count]
            central = (p.step_ms, p.samples_per_s, p.efficiency, p.memory.device_mib)
            assert [row[name] for name in figures] == pytest.approx(central, rel=0, abs=0)   # outlook's, exactly
            ends = [e for name in figures for e in p.range_of(name)]
            assert [row[f"{name}{end}"] for name in figures for end in ("_low", "_high")] == pytest.approx(ends, rel=0, abs=0, nan_ok=True)
            step, rate, mem = (_ranged(row, n, spec)
                               for n, spec in (("step_ms", ".1f"), ("samples_per_s", ".0f"), ("memory_mib", ".0f")))
            line = re.search(rf"^ +{p.count} +{row.nodes} +{re.escape(step)} +{re.escape(rate)} .*$", block, re.M)
            assert line, (s.label, p.count, step, rate, block)   # the terminal's row: its step and samples/s ranged
            efficiency = _ranged(row, "efficiency", ".0%")
            assert efficiency in line.group(0) and re.search(rf" {re.escape(mem)} +– +{re.escape(row.bound)}$", line.group(0))
        said = rows.iloc[0]
        for head, words in (("", said.recommendation), ("rests on: ", said.rests_on), ("", said.range_rests_on),
                            ("", said.assumed), ("efficiency under 75% from: ", said.under_75_from),
                            ("memory: ", said.memory_fits)):
            assert pd.isna(words) or f"  {head}{words}" in block, (words, block)   # empty: nothing to say
        assert not pd.isna(said.recommendation) and not pd.isna(said.assumed)
        assert f"({said.network_node})\n" in printed and f"({said.network_net})\n" in printed
        assert f"  {said.interference}\n" in printed and said.gpus_per_node == m.gpus_per_node
    with sqlite3.connect(copy) as conn:
        conn.row_factory = sqlite3.Row
        stored = [dict(x) for x in conn.execute("SELECT * FROM forecasts ORDER BY workload")]
    assert len(stored) == len(r.checks) == 2
    for want, (_, got) in zip(stored, r.checks.sort_values("workload").iterrows()):
        # numbers through approx (nan equal to nan), the rest as they are: pytest 9.2's approx refuses a text value
        numbers = {k for k, v in want.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert {k: got[k] for k in numbers} == pytest.approx({k: want[k] for k in numbers}, rel=0, abs=0, nan_ok=True)
        assert {k: (None if pd.isna(got[k]) else got[k]) for k in set(want) - numbers} == \
            {k: want[k] for k in set(want) - numbers}
        assert f"x2: forecast {want['forecast_step_ms']:.2f} ms from x1 (range {want['forecast_step_ms_low']:.2f}-" in printed
    assert cli.main(["export", "--store", copy, "--out", str(tmp_path / "csv")]) == 0
    for name in ("forecast", "checks"):
        back = pd.read_csv(tmp_path / "csv" / f"{name}.csv")
        assert list(back.columns) == list(getattr(r, name).columns) and len(back) == len(getattr(r, name))
    assert pd.read_csv(tmp_path / "csv" / "forecast.csv").step_ms_high.tolist() == pytest.approx(f.step_ms_high.tolist(), rel=1e-12)


def test_a_store_the_forecast_cannot_read_gives_empty_forecast_frames_with_their_columns(tmp_path, capsys):
    # DDP x1 and x2 but no collective measured and no preset for a CPU: `forecast` refuses it ('no network to forecast
    # on'); the frames are empty, with their columns, and so is the export
    from test_forecast import build_store
    path = str(tmp_path / "nonet.sqlite")
    build_store(path, machine_counts=())
    r = results.load(path)
    assert len(r.configurations) and r.forecast.empty and r.checks.empty
    assert list(r.forecast.columns) == ["sweep_id", *forecastrows.FORECAST_ROW_COLUMNS]
    assert list(r.checks.columns) == ["sweep_id", *forecastrows.CHECK_COLUMNS]
    assert len(r.forecast.query("device_count == 16")) == 0
    assert cli.main(["export", "--store", path, "--out", str(tmp_path / "csv")]) == 0
    capsys.readouterr()
    assert list(pd.read_csv(tmp_path / "csv" / "forecast.csv").columns) == list(r.forecast.columns)


def test_a_pick_the_summary_calls_not_resolved_says_so_in_the_dataframe(tmp_path, monkeypatch):
    # The H100 self-check's bf16 pick, DDP x1 (one unstable process), stands only on DataParallel x1's unresolved 69%
    # lead: the report's cell reads 'not resolved: --repeats 3 (...)', while the DataFrame said recommended and nothing else.
    from pathlib import Path
    from conftest import example_stores
    folder = Path(__file__).resolve().parents[1] / "examples" / "h100-2026-11-26"
    load = example_stores(folder, ("selfcheck.sqlite",), tmp_path, monkeypatch)
    c = results.load(str(load.path / "selfcheck.sqlite"), 1).configurations
    picked = c[c.recommended.fillna(False).astype(bool)].set_index("precision")
    assert not picked.loc["bf16", "recommendation_resolved"]
    assert picked.loc["bf16", "recommendation_note"] == (
        "not resolved: --repeats 3 (DDP x1 [bf16], unstable, or DataParallel x1 [bf16])")
    assert picked.loc["fp32", "recommendation_resolved"] and pd.isna(picked.loc["fp32", "recommendation_note"])
