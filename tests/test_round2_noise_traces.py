"""A GPU user's second read of the committed examples (trial C, findings 5, 8 and 10).

5: every bf16 'noise not measured' paragraph, on every device, printed 'on one H200, three fp32 processes of DeepLabV3
   single x1 ran 0.5% apart, two host-bound bf16 ones 144 and 200 samples/s': another run's figures (and 0.5% where
   that store's spread is 0.606%). The reason stays; the figures do not.
8: the traces table's shares are of the traced steps, which on the H100 transformer ran 97.8 ms against a 42.9 ms
   measured median, beside 'GPU busy 94%' of the measured step ('idle 59%' in the same row).
10: power's 'at least 5 readings from 1 s into a window' was met in the H100 rehearsal by 3 readings of its one GPU
   (cuda:0) counted once for each of the two ranks that sampled it.
"""
from __future__ import annotations

import math

from bench.analysis import gpustate as state
from bench.stats.noise import Noise, not_carried


def test_the_bf16_noise_paragraph_gives_the_reason_and_no_figure_of_another_run():
    fp32 = Noise(0.0098, "host", "selfcheck's spread between 3 processes", workload="the synthetic MLP")
    detail = not_carried("bf16", {"fp32": fp32}).detail
    assert detail.endswith("fp32's 1.0% (selfcheck on the synthetic MLP) does not carry over, since processes of one "
                           "precision can differ far more than another's")
    for other_run in ("H200", "DeepLabV3", "144", "200 samples/s", "0.5%"):
        assert other_run not in detail, other_run


# --- finding 8: the traced steps' own duration beside their shares -----------------------------------------------

def _config(median_ms: float, traced_ms: float):
    """A Config as bench.analysis.results reads it: one rank's traced steps (3, read from kernels, 40.4 ms of work a
    step, 41% computation and 59% idle of the traced step) whose own wall time is traced_ms, beside a measured median."""
    from bench import stats
    from bench.analysis.results import Config
    steps = [median_ms] * 5
    row = {"rank": 0, "repeat": 0, "method": "device_kernels", "steps": 3, "span_ms": 3 * traced_ms,
           "compute_share": 0.41, "comm_share": 0.0, "copy_share": 0.01, "idle_share": 0.58, "work_ms": 3 * 40.4,
           "exposed_comm_ms": 0.0, "traced_step_ms": traced_ms}
    return Config(key="k", workload="w", strategy="single", device_type="cuda", device_count=1, global_batch=8,
                  scaling="weak", data="synthetic", step_ms=steps, summary=stats.summarize(steps), samples_per_s=1.0,
                  process_sps=[1.0], phases_ms={}, exposed_comm_ms=math.nan, grad_mib=None, comm_method=None,
                  memory_mib={}, epoch_wall_s=[], traces=[row])


def _table_and_lines(configs: list):
    from bench.report import traces as trace_report
    blocks = trace_report.blocks(configs, "w")
    header, rows = next((b[1], b[2]) for b in blocks if b[0] == "table")
    return [dict(zip(header, r)) for r in rows], [b[1] for b in blocks if b[0] == "p"]


def test_a_trace_whose_steps_ran_far_longer_than_the_measured_ones_says_its_shares_are_of_the_profiled_step():
    (row,), lines = _table_and_lines([_config(42.93, 97.75)])
    assert row["GPU busy (of a measured step)"] == "94%" and row["idle"] == "58%"
    assert row["traced step ms"] == "97.8 (measured 42.9: +128%)"
    note = [x for x in lines if x.startswith("The traced steps of ")]
    assert note == ["The traced steps of single device x1 ran more than 20% longer than the measured median ('traced "
                    "step ms': the profiler's own work slowed them), so their computation, communication, copies and "
                    "idle shares describe the profiled step, not the measured one; GPU busy holds their kernels against "
                    "the measured step."]


def test_a_trace_whose_steps_ran_as_long_as_the_measured_ones_gives_its_duration_and_no_warning():
    (row,), lines = _table_and_lines([_config(108.0, 108.4)])   # the H100 DeepLabV3 fp32: 108.4 ms traced, 108.0 measured
    assert row["traced step ms"] == "108.4"
    assert not any(x.startswith("The traced steps of ") for x in lines)


# --- finding 10: power readings per physical GPU, not per rank ----------------------------------------------------

def _samples(result: int, rank: int, device: str, times_ms: list, watts: list) -> list:
    return [{"result_id": result, "rank": rank, "device": device, "sample": i, "t_ms": t, "sm_clock_mhz": 1980,
             "sm_clock_max_mhz": 1980, "power_w": w, "power_limit_w": 700, "temperature_c": 40, "reasons": 0}
            for i, (t, w) in enumerate(zip(times_ms, watts))]


# The H100 rehearsal's FSDP x2 (result 3): before 1 s the draw climbs; from 1 s in, 3 samples per rank, both ranks
# reading cuda:0.
EARLY = [50.0 * i for i in range(20)]
LATE = [1006.0, 1056.3, 1087.0]


def _rank(rank: int, device: str, result: int = 3) -> list:
    return _samples(result, rank, device, EARLY + LATE, [120.0 + i for i in range(20)] + [131.838, 131.838, 131.670])


def test_two_ranks_on_one_gpu_count_its_readings_once():
    both = _rank(0, "cuda:0") + _rank(1, "cuda:0")      # 6 readings from 1 s in, of one GPU: 3
    s = state.summarise(both)
    assert s.power_w is None and s.power_text() == "not updated in the window (1087 ms)"


def test_two_gpus_each_count_their_own_readings():
    s = state.summarise(_rank(0, "cuda:0") + _rank(1, "cuda:1"))   # 3 readings of each of 2 GPUs: 6
    assert s.power_w is not None and round(s.power_w) == 132


def test_two_nodes_gpus_of_one_device_index_are_two_gpus(tmp_path):
    # DDP x2 over 2 nodes, one GPU each: both ranks sample their node's cuda:0, two physical GPUs. results.load tells
    # the nodes apart (rank // ranks per node); one node's view would count one GPU and give no power.
    from dataclasses import replace
    from test_utilisation import MLP_FLOPS, build, payload, rspec
    samples = _rank(0, "cuda:0", result=1) + _rank(1, "cuda:0", result=1)
    assert state.summarise(samples).power_w is None                      # as if one node: one GPU
    assert state.summarise(samples, ranks_per_node=1).power_w is not None
    sw = build(str(tmp_path / "s.sqlite"), [(replace(rspec("ddp", 2), nodes=2),
                                             payload(2, 3.3, MLP_FLOPS, gpu_samples=samples))])
    (c,) = [c for c in sw.bench["synthetic"] if c.strategy == "ddp"]
    assert c.nodes == 2 and c.gpu.power_w is not None and round(c.gpu.power_w) == 132
