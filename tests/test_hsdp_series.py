"""HSDP's default shard size (one node's devices, so the count on one node) is no setting: HSDP x1 and x2 of the default
mesh are one series with an efficiency, while a shard size other than one node's devices stays in the name. Stored
sweeps built here (test_recommend's helpers), the shard size stored with every HSDP run as the sweep stores it."""
from __future__ import annotations

import dataclasses
import math
import sqlite3

from test_recommend import build, payload, spec

from bench.analysis import results


def hsdp(n: int, shard: int, nodes: int = 1):
    return dataclasses.replace(spec("hsdp", n, options=(("shard_size", shard),)), nodes=nodes)


def test_the_default_shard_size_does_not_split_hsdp_into_a_series_per_count(tmp_path):
    # A CPU transformer sweep's report: 'HSDP | fp32, shard_size=1 | 1' and 'HSDP | fp32, shard_size=2 | 2', two
    # series of one point each, HSDP x2 without an efficiency and missing from the efficiency plot.
    sw = build(str(tmp_path / "own.sqlite"), [(hsdp(1, 1), payload(1, 10.0)), (hsdp(2, 2), payload(2, 12.5))])
    x1, x2 = sw.bench["synthetic"]
    assert (x1.label, x2.label) == ("HSDP x1", "HSDP x2") and x1.series == x2.series
    assert x2.baseline == "HSDP x1" and math.isclose(x2.efficiency, 10.0 / 12.5)
    assert x2.options == {"shard_size": 2}          # the mesh stays with the configuration (the training-state table)


def test_a_shard_size_other_than_one_nodes_devices_is_a_setting_and_named(tmp_path):
    sw = build(str(tmp_path / "s.sqlite"), [(spec("single", 1), payload(1, 10.0)), (hsdp(2, 2), payload(2, 12.0)),
                                            (hsdp(2, 1), payload(2, 11.0)), (hsdp(16, 8, nodes=2), payload(16, 20.0))])
    by = {c.label: c for c in sw.bench["synthetic"]}
    # replicate 2 x shard 1 on one node: not the default mesh, so a setting; 8 per node on 2 nodes is the default
    assert set(by) == {"single device x1", "HSDP x2", "HSDP x2 [fp32, shard_size=1]", "HSDP x16"}
    assert by["HSDP x2"].series == by["HSDP x16"].series != by["HSDP x2 [fp32, shard_size=1]"].series


def test_a_stored_row_reads_the_same_variant_as_its_configuration(tmp_path):
    # The configurations frame and side-by-side compare name a row by row_variant: the same rule as the report's
    path = str(tmp_path / "r.sqlite")
    build(path, [(hsdp(1, 1), payload(1, 10.0)), (hsdp(2, 1), payload(2, 11.0))])
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    rows = conn.execute("SELECT * FROM results WHERE mode = 'bench' ORDER BY device_count").fetchall()
    assert [results.row_variant(r) for r in rows] == ["fp32", "fp32, shard_size=1"]


def test_the_training_state_says_what_one_shard_group_runs_once_for_all_hsdp_configurations(tmp_path):
    # A CPU transformer report repeated the whole one-shard-group note (then with another run's 53%) for each of four HSDP
    # configurations on one line.
    from bench.report import training_state
    sw = build(str(tmp_path / "m.sqlite"), [(hsdp(1, 1), payload(1, 10.0)), (hsdp(2, 2), payload(2, 12.5)),
                                            (hsdp(2, 1), payload(2, 11.0))])
    for c in sw.bench["synthetic"]:   # the stand-in payload counts no state: the table is built from the meshes alone
        c.state_mib = {0: {"params_mib": 1.0}}
    line = next(b[1] for b in training_state.blocks("synthetic", sw.bench["synthetic"]) if b[0] == "p" and "mesh" in b[1])
    assert line.count("all-reduces every gradient shard") == 1 and "%" not in line and "H100" not in line, line
    assert "HSDP x2: replicate 1 x shard 2 (one shard group, as above)" in line
    assert "HSDP x2 [fp32, shard_size=1]: replicate 2 x shard 1;" in line or line.endswith("replicate 2 x shard 1.")


def test_the_forecast_takes_hsdps_default_mesh_at_each_count_and_keeps_a_chosen_one():
    # HSDP x1 [shard 1] and x2 [shard 2] are one series now: priced at x1's shard of 1 at every count, its x2 check
    # erred -48%
    from types import SimpleNamespace
    from bench.forecast import settings as fs
    default = SimpleNamespace(strategy="hsdp", any=SimpleNamespace(options={"shard_size": 1}, device_count=1, nodes=1))
    assert [fs.options_at(default, n, 8)["shard_size"] for n in (1, 2, 8, 16)] == [1, 2, 8, 8]
    chosen = SimpleNamespace(strategy="hsdp", any=SimpleNamespace(options={"shard_size": 2}, device_count=8, nodes=1))
    assert [fs.options_at(chosen, n, 8)["shard_size"] for n in (2, 8, 16)] == [2, 2, 2]
