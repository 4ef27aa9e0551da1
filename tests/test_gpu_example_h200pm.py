"""Verdicts held on the stores one H200 wrote on the afternoon of 2026-11-27 (examples/h200-2026-11-27-pm: DeepLabV3 at
fp32 and bf16 in three processes each, its bf16 eager against torch.compile, fit of the 134m transformer on the whole
GPU, the self-check's main sweep). Read on the CPU, from the committed stores alone: what the GPU measured is the
evidence, and each test fails if the analysis of it regresses."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.analysis import reference
from bench.report import recommend
from conftest import example_stores

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200-2026-11-27-pm"
STORES = ("gpu.sqlite", "selfcheck.sqlite")
NOISE, COMPILE, FIT = 1, 2, 3   # the sweeps of gpu.sqlite


@pytest.fixture
def example(tmp_path, monkeypatch):
    return example_stores(EXAMPLE, STORES, tmp_path, monkeypatch)


def by_label(configs: list) -> dict:
    return {c.label: c for c in configs}


def test_each_precisions_noise_is_its_own_three_processes_fp32_a_tenth_of_a_percent_bf16_a_sixth(example):
    # DeepLabV3 fp32: 75.09, 75.18, 75.14 samples/s; bf16: 140.3, 166.0, 153.3 (host-bound, every process unstable).
    # The self-check's MLP the same way: fp32 0.2%, bf16 15%. Neither precision's figure may stand in for the other's.
    for name, sweep_id, fp32_below, bf16_above in (("gpu.sqlite", NOISE, 0.005, 0.12), ("selfcheck.sqlite", 1, 0.005, 0.10)):
        noise = example(name, sweep_id).noise_by_precision
        fp32, bf16 = noise["fp32"], noise["bf16"]
        assert fp32.source == bf16.source == "sweep", (fp32, bf16)
        assert 0.0 < fp32.fraction < fp32_below and bf16.fraction > bf16_above, (name, fp32, bf16)


def test_the_bound_and_mfu_from_this_gpus_kernels_and_peaks(example):
    sweep = example("gpu.sqlite", NOISE)
    rows = {(r[0], r[1]): dict(zip(recommend.SUMMARY_HEADERS, r)) for r in recommend.blocks(sweep)[1][2]}
    assert rows[("deeplabv3", "fp32")]["bound"] == "GPU-bound (GPU busy 91%, MFU 40.5%)"   # MFU under 50%
    assert rows[("deeplabv3", "bf16")]["bound"].startswith("host-bound (GPU busy")      # 41%
    dl = by_label(sweep.bench["deeplabv3"])
    assert 0.35 < dl["single device x1"].utilisation.mfu < 0.46          # 27.2 of 67 TFLOP/s (FP32, TF32 off)
    assert 0.03 < dl["single device x1 [bf16]"].utilisation.mfu < 0.10   # 55 of 989 (host-bound)


def test_compilation_is_in_the_time_to_train_and_never_pays_where_the_compiled_step_is_no_faster(example):
    # Compiled: 74.4 s in its first step, then 148.3 samples/s against eager's 157.4: the job takes longer compiled.
    configs = by_label(example("gpu.sqlite", COMPILE).bench["deeplabv3"])
    eager, compiled = configs["single device x1 [bf16]"], configs["single device x1 [bf16, compiled]"]
    assert compiled.compile_s > 60 and compiled.warmup_s > eager.warmup_s + 60, (compiled.compile_s, compiled.warmup_s)
    steps, twin = reference.break_even(compiled, [eager, compiled])
    assert twin is eager and math.isnan(steps)
    times = dict(reference.train_times([eager, compiled])[0])
    assert times[compiled.label] > times[eager.label] + 60


def test_fit_on_the_whole_gpu_reaches_its_cap_and_says_so(example):
    # 64 took 63.95 GiB, 128 took 124.30 GiB of the 139.80: every batch tried fit; no out-of-memory error was met.
    sweep = example("gpu.sqlite", FIT)
    assert {s.name: s.largest for s in sweep.fit} == {"DDP x1": 128}
    from bench.report import fit as fit_report
    said = " ".join(str(b[1:]) for b in fit_report.blocks(sweep))   # as rendered today (tests/test_fit_cap_flat.py)
    assert "at least 128 (the search's cap, --max-batch 128" in said and "fits 128 a GPU" not in said, said
