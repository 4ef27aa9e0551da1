"""The process noise a sweep's verdicts rest on is stated, and found where it was measured (examples/h200-2026-11-27-pm,
one H200): its DeepLabV3 sweep ran fp32 and bf16 in 3 processes each to measure that noise and never said it (report
or terminal); its compile sweep, one process each, was held against selfcheck's MLP figure while the same store's
sweep two minutes earlier had measured DeepLabV3 bf16's own; and the self-check read DataParallel x1 [bf16], 11%
faster inside single's own 15% spread, 'not resolved: one unstable process'."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from bench import stats
from bench.analysis import noise_source
from bench.stats.noise import not_carried
from bench.report import recommend
from bench.sweep import run
from conftest import example_stores, read_sweep

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27-pm"
FP32 = "0.1% (75.09-75.18 samples/s, 3 processes of single device x1, this sweep)"
BF16 = "17% (140.3-166.0 samples/s, 3 processes of single device x1 [bf16], all 3 with steps spread over 10% of their median each, this sweep)"


def _paragraphs(sweep) -> list:
    return [b[1] for b in recommend.blocks(sweep) if b[0] == "p"]


def _lead(sweep, workload: str, precision: str) -> str:
    row, _ = recommend.answer(sweep, workload, sweep.bench[workload], precision)
    return row[recommend.SUMMARY_HEADERS.index("lead over runner-up")]


def test_the_noise_sweep_states_each_precisions_noise_under_the_verdicts_and_at_its_end(tmp_path, monkeypatch):
    load = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)
    said = _paragraphs(load("gpu.sqlite", 1))
    assert f"Process noise on this GPU, fp32: {FP32}." in said
    assert f"Process noise on this GPU, bf16: {BF16}." in said
    assert said.index(f"Process noise on this GPU, fp32: {FP32}.") < said.index(f"Process noise on this GPU, bf16: {BF16}.")
    assert run._noise_line(str(load.path / "gpu.sqlite"), 1) == f"process noise on this GPU: fp32 {FP32}; bf16 {BF16}"
    assert run._noise_line(str(load.path / "gpu.sqlite"), 2) == ""   # one process each: it measured none itself


def test_a_precision_without_a_figure_says_so_and_selfchecks_names_its_workload_and_date():
    assert noise_source.lines({"bf16": stats.NOT_MEASURED}, "cuda") == [
        "Process noise on this GPU, bf16: not measured at bf16 on this GPU"]
    # where another precision's figure was measured, the line says why it does not stand in, as the verdicts do
    fp32 = stats.Noise(0.001, "sweep", "the spread between 3 processes", "deeplabv3", low=75.09, high=75.18, processes=3,
                       configuration="single device x1")
    (line,) = noise_source.lines({"bf16": not_carried("bf16", {"fp32": fp32})}, "cuda")
    assert line.startswith("Process noise on this GPU, bf16: not measured at bf16 on this GPU: no bf16 configuration ran")
    assert "fp32's 0.1%" in line and "does not carry over" in line, line
    entry = next(e for e in json.loads((EXAMPLE / "host-noise.json").read_text())["entries"] if e["precision"] == "bf16")
    assert noise_source.lines({"bf16": stats.host_noise(entry)}, "cuda") == [
        "Process noise on this GPU, bf16: 15% (89,484-103,891 samples/s, 3 processes of single device x1 [bf16] on the "
        "synthetic MLP, 1 of 3 with steps spread over 10% of their median each, selfcheck's host file: the synthetic MLP, 2026-11-27)"]


def test_the_compile_sweep_is_held_against_the_same_stores_deeplabv3_bf16_figure_not_selfchecks_mlp(tmp_path, monkeypatch):
    load = example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)
    sweep = load("gpu.sqlite", 2)
    bf16 = sweep.noise_by_precision["bf16"]
    assert bf16.source == "earlier" and abs(bf16.fraction - (166.05 - 140.33) / 153.32) < 0.002, bf16
    assert bf16.source_words() == "sweep 1 of this store"
    assert ("Process noise on this GPU, bf16: 17% (140.3-166.0 samples/s, 3 processes of single device x1 [bf16], all 3 "
            "with steps spread over 10% of their median each, sweep 1 of this store, 2026-11-27).") in _paragraphs(sweep)
    # eager 6% faster than compiled, one unstable process each, inside DeepLabV3 bf16's own 17%: a tie
    assert _lead(sweep, "deeplabv3", "bf16") == "6% (within 17% noise, sweep 1 of this store)"


def test_a_figure_of_another_gpu_or_host_or_of_a_cpu_is_never_taken_from_the_store(tmp_path, monkeypatch):
    example_stores(EXAMPLE, ("gpu.sqlite",), tmp_path, monkeypatch)
    for change in ("UPDATE environments SET gpu_names = 'NVIDIA H100 80GB HBM3' WHERE env_id = 1",
                   "UPDATE environments SET hostname = 'other' WHERE env_id = 1",
                   "UPDATE results SET device_type = 'cpu' WHERE sweep_id = 1"):
        path = tmp_path / "changed.sqlite"
        path.write_bytes((tmp_path / "gpu.sqlite").read_bytes())
        with sqlite3.connect(path) as conn:
            conn.execute(change)
        bf16 = read_sweep(str(path), 2).noise_by_precision["bf16"]
        assert bf16.source == "host" and bf16.workload == "the synthetic MLP", (change, bf16)


def test_a_lead_inside_the_measured_noise_is_a_tie_though_one_side_ran_one_unstable_process(tmp_path, monkeypatch):
    load = example_stores(EXAMPLE, ("selfcheck.sqlite",), tmp_path, monkeypatch)
    sweep = load("selfcheck.sqlite", 1)
    # DataParallel x1 [bf16]: one unstable process, 11% above single's median, inside single's own 3 processes' 15%
    assert _lead(sweep, "synthetic", "bf16") == "tie: DataParallel x1 [bf16] 11% faster (within 15% noise, this sweep)"
