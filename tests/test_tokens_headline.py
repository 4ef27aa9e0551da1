"""A language model's headline figures in tokens/s beside samples/s (trial B: the first screen read 'Fastest: single
device x1, 609.0 samples/s' for sequences of 32 tokens, the overview's axis 'samples/s', the export's cost per million
samples only), from the same figures as its configurations table's tokens/s columns."""
from __future__ import annotations

import pytest

from bench import results
from bench.analysis import cost as analysis_cost
from conftest import read_sweep
from bench.report import cost, plots, recommend
from bench.store import store
from bench.sweep import record
from report_fixtures import measured, memory, spec

SEQ = 32


def _store(path: str, workload: str = "transformer") -> str:
    conn = store.connect(path)
    env_id = store.insert_environment(conn, {"hostname": "h", "cpu_model": "Test CPU", "cpu_cores": 2})
    sid = store.begin_sweep(conn, "bench sweep --gpus 1,2", "{}", env_id)
    details = {"tokens_per_sample": SEQ, "input_shape": [SEQ]} if workload == "transformer" else {}
    for strategy, count, ms in (("single", 1, 100.0), ("ddp", 2, 130.0)):
        record.record_result(conn, sid, env_id, spec(workload, strategy, count), "ok", "",
                             {**measured(count, [ms * j for j in (1.0, 1.02, 0.98, 1.0)], 64),
                              "memory": memory("cpu", strategy, count, 400.0), "workload_details": details})
    store.end_sweep(conn, sid, "completed")
    conn.close()
    return path


def _sweep(path: str):
    return read_sweep(path)


def test_the_first_screen_gives_tokens_per_second_beside_samples(tmp_path):
    s = _sweep(_store(str(tmp_path / "t.sqlite")))
    cs = s.bench["transformer"]
    row, text = recommend.answer(s, "transformer", cs, "fp32")
    best = next(c for c in cs if c.label == row[2])
    clause = f" ({best.samples_per_s * SEQ:.0f} tokens/s, {best.samples_per_s * SEQ / best.device_count:.0f} per process)"
    assert row[3] == f"{best.samples_per_s:.1f}{clause}"
    assert f"{best.samples_per_s:.1f} samples/s{clause}" in text[0]


def test_other_workloads_keep_samples_alone(tmp_path):
    s = _sweep(_store(str(tmp_path / "s.sqlite"), "synthetic"))
    row, text = recommend.answer(s, "synthetic", s.bench["synthetic"], "fp32")
    assert "tokens" not in row[3] and "tokens" not in text[0]
    assert plots.throughput_axis(s.bench["synthetic"]) == (1, "samples/s")


def test_the_throughput_plots_are_in_tokens_per_second(tmp_path):
    cs = _sweep(_store(str(tmp_path / "t.sqlite"))).bench["transformer"]
    for fig in (plots.overview_figure(cs, "transformer", "cpu"), plots.throughput_figure(cs, "transformer", "cpu")):
        ax = fig.axes[0]
        assert ax.get_ylabel().startswith("tokens/s")
        single = next(c for c in cs if c.strategy == "single")
        assert max(ax.lines[0].get_ydata()) == pytest.approx(single.samples_per_s * SEQ)


def test_cost_per_million_tokens_in_the_report_and_the_export(tmp_path):
    path = _store(str(tmp_path / "t.sqlite"))
    frame = results.load(path, prices="2.5").configurations
    assert (frame.cost_per_million_tokens * SEQ - frame.cost_per_million_samples).abs().max() < 1e-9
    table = next(b for b in cost.blocks(_sweep(path), analysis_cost.parse_price("2.5")) if b[0] == "table")
    assert "cost per million tokens (price units)" in table[1]
