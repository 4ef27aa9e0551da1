"""What a run costs at a price per device-hour: the arithmetic against hand-computed cases, the price as a number or a
TOML table (nothing fetched), every bad price refused with exit 2 before anything is written, and the report's cheapest
run beside its fastest."""
from __future__ import annotations

import math

import pytest

from bench import cli
from bench.analysis import cost
from bench.config import ConfigError
from bench.report import report
from bench.store import store
from bench.sweep import record
from report_fixtures import build_sweep_store, measured, spec
from test_report import md_table


def test_a_million_samples_and_an_epoch_cost_devices_times_hours_times_price():
    # 8 devices at 1000 samples/s: a million samples take 1000 s, 8 x 1000 / 3600 = 2.222 device-hours, at 2.0: 4.444
    assert cost.per_million_samples(2.0, 8, 1000.0) == pytest.approx(8 * 1000 / 3600 * 2.0)
    assert cost.per_million_samples(2.0, 8, 1000.0) == pytest.approx(4.4444, abs=1e-4)
    assert cost.per_epoch(3.0, 4, 600.0) == pytest.approx(2.0)           # 4 devices x 10 min = 40 device-min = 2/3 h x 3
    assert cost.device_hours(8, 450.0) == pytest.approx(1.0)
    assert math.isnan(cost.per_million_samples(2.0, 8, float("nan"))) and math.isnan(cost.per_epoch(2.0, 1, float("nan")))


def test_ddp_on_half_the_devices_and_ten_percent_slower_is_the_cheaper_run():
    x8 = cost.per_million_samples(4.0, 8, 1000.0)
    x4 = cost.per_million_samples(4.0, 4, 900.0)
    assert x4 / x8 == pytest.approx(4 / (8 * 0.9))                        # 0.556: cheaper by 44%
    assert x4 < x8


@pytest.mark.parametrize("text", ["0", "-2", "nan", "inf", "-inf", "1e999", "two", "0x10"])
def test_a_price_that_is_not_a_positive_finite_number_is_refused(text):
    with pytest.raises(ConfigError, match="price-per-device-hour"):
        cost.parse_price(text)


def test_a_table_of_prices_matches_label_then_host_then_gpu_model_then_default_regardless_of_case(tmp_path):
    f = tmp_path / "prices.toml"
    f.write_text('currency = "EUR"\ndefault = 1.5\n"NVIDIA H100 80GB HBM3" = 4.1\n"gpu-node-7" = 3.0\n"p5.48xlarge" = 5.5\n')
    prices = cost.parse_price(str(f))
    gpu = ["NVIDIA H100 80GB HBM3"]
    assert prices.lookup("P5.48XLARGE", "gpu-node-7", gpu).per_device_hour == 5.5
    assert prices.lookup(None, "gpu-node-7", gpu).per_device_hour == 3.0
    assert prices.lookup(None, "elsewhere", ["nvidia h100 80gb hbm3"]).per_device_hour == 4.1
    assert prices.lookup(None, "elsewhere", ["Some CPU"]).per_device_hour == 1.5
    assert prices.unit() == "EUR" and "'NVIDIA H100 80GB HBM3'" in prices.lookup(None, None, gpu).source
    f.write_text('"NVIDIA H100 80GB HBM3" = 4.1\n')
    assert cost.parse_price(str(f)).lookup(None, "elsewhere", ["Some CPU"]) is None   # no default: no price


@pytest.mark.parametrize("body, expected", [
    ('default = 0\n', "'default': 0 is not allowed"),
    ('default = -1.0\n', "'default': -1.0 is not allowed"),
    ('default = nan\n', "'default': nan is not allowed"),
    ('default = inf\n', "'default': inf is not allowed"),
    ('default = "2"\n', "'default': '2' is not a number"),
    ('default = true\n', "'default': True is not a number"),
    ('"H100" = 1\n"h100" = 2\n', "names a machine twice"),
    ('currency = "USD"\n', "names no price"),
    ('default = \n', "cannot be read as TOML"),
])
def test_a_bad_table_of_prices_names_the_file_and_the_key(tmp_path, body, expected):
    f = tmp_path / "prices.toml"
    f.write_text(body)
    with pytest.raises(ConfigError, match="price-per-device-hour") as e:
        cost.parse_price(str(f))
    assert expected in str(e.value) and str(f) in str(e.value)


@pytest.mark.parametrize("command", [["report"], ["history"]])
@pytest.mark.parametrize("price", ["0", "nan", "-3", "missing.toml"])
def test_report_and_history_refuse_a_bad_price_with_exit_2_writing_nothing(command, price, tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    build_sweep_store(path)
    out = tmp_path / "out"
    code = cli.main([*command, "--store", path, "--price-per-device-hour", price, "--report-dir", str(out),
                     "--plots-dir", str(out)])
    captured = capsys.readouterr()
    assert code == 2 and "--price-per-device-hour" in captured.out + captured.err
    assert not out.exists()


@pytest.fixture(scope="module")
def x4_x8(tmp_path_factory):
    """CUDA: single x1 at 100 samples/s, DDP x4 at 360 (90%) and DDP x8 at 400 (50%)."""
    path = str(tmp_path_factory.mktemp("cost") / "s.sqlite")
    conn = store.connect(path)
    env = store.insert_environment(conn, {"hostname": "gpu-node-7", "gpu_names": ["NVIDIA H100 80GB HBM3"] * 8,
                                          "torch": "2.14.1"})
    sid = store.begin_sweep(conn, "bench", "{}", env)
    for strategy, n, sps in (("single", 1, 100.0), ("ddp", 4, 360.0), ("ddp", 8, 400.0)):
        per_rank = 64
        step_ms = [per_rank * n / sps * 1000.0] * 10   # each step: every rank's samples at that throughput
        payload = measured(n, step_ms, per_rank)
        for w in payload["windows"]:
            w["wall_s"] = sum(step_ms) / 1e3            # every rank's window the same: throughput exactly sps
        record.record_result(conn, sid, env, spec("synthetic", strategy, n, device="cuda"), "ok", payload=payload)
    store.end_sweep(conn, sid, "completed")
    conn.close()
    return path


def test_the_report_costs_each_configuration_and_names_the_cheapest_beside_the_fastest(x4_x8, tmp_path):
    out = report.render(x4_x8, plots_dir=str(tmp_path / "p"), report_dir=str(tmp_path / "r"), prices=cost.parse_price("2.0"))
    md = open(out["markdown"]).read()
    rows = {r["configuration"]: r for r in md_table(md, "### synthetic: cost")}
    for what, n, sps in (("single device x1", 1, 100.0), ("DDP x4", 4, 360.0), ("DDP x8", 8, 400.0)):
        assert float(rows[what]["cost per million samples (price units)"]) == pytest.approx(2.0 * n * 1e6 / sps / 3600, rel=1e-3)
    assert ("synthetic: Cheapest: single device x1" in md)   # one device at 100/s beats them all per sample
    assert md.index("## What a run costs") < md.index("## synthetic: all configurations")  # right after the answer


def test_among_the_multi_device_runs_the_cheaper_ddp_x4_is_said_to_be_slower_on_half_the_devices(x4_x8):
    from bench.analysis import results
    from bench.report import cost as cost_report
    conn = store.connect(x4_x8, readonly=True)
    every = results.load(conn, 1).bench["synthetic"]
    conn.close()
    configs = [c for c in every if c.device_count > 1]
    line = cost_report.cheapest_sentence(configs, cost.of_configs(configs, 2.0), "USD")
    # 360 against 400 samples/s is 10% slower (1 - 360/400); 400/360 - 1 = 11% is how much faster DDP x8 is
    assert line.startswith("Cheapest: DDP x4, 6.173 USD per million samples (on 4 devices instead of 8, 10% slower than "
                           "the fastest); fastest: DDP x8, 11.11 USD per million samples"), line
    line = cost_report.cheapest_sentence(every, cost.of_configs(every, 2.0), "USD")   # 100 against 400: both readings
    assert "(on 1 device instead of 8, 75% slower than the fastest, which is 4.00x as fast); fastest: DDP x8" in line, line
