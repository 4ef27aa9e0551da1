"""Workloads and strategies: per-rank data, identical samples across strategies, local weights, CUDA timing logic."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from bench.rank.context import Ctx
from bench.rank.strategies import STRATEGIES, unwrap
from bench.sweep.plan import RunSpec
from bench.workloads.deeplabv3 import build_model as build_deeplabv3
from bench.workloads.registry import WORKLOADS, gradient_bytes

CPU = torch.device("cpu")


def spec(strategy, n, **kw) -> RunSpec:
    base = dict(workload="synthetic", strategy=strategy, device_type="cpu", device_count=n, per_device_batch=4,
                global_batch=4 * n, image_size=0, steps=2, warmup=0, threads=1, seed=7, scaling="weak",
                synthetic_width=32, synthetic_depth=2)
    base.update(kw)
    return RunSpec(**base)


def first_batch(s: RunSpec, rank: int = 0):
    wl = WORKLOADS[s.workload](s, rank, CPU)
    return next(iter(wl.batches(0)))


def test_ddp_ranks_get_different_data_that_together_is_dataparallels_global_batch():
    x0, y0 = first_batch(spec("ddp", 2), rank=0)
    x1, y1 = first_batch(spec("ddp", 2), rank=1)
    assert not torch.equal(x0, x1)
    xg, yg = first_batch(spec("dp", 2))
    assert torch.equal(torch.cat([x0, x1]), xg) and torch.equal(torch.cat([y0, y1]), yg)
    xs, _ = first_batch(spec("single", 1, per_device_batch=4, global_batch=8, emulate_ranks=2))
    assert torch.equal(xs, xg)


def test_synthetic_parameters_follow_width_and_depth_and_repeats_add_compute_only():
    s = spec("single", 1, synthetic_width=64, synthetic_depth=3)
    assert gradient_bytes(s) == 4 * (3 * (64 * 64 + 64) + 64 * 10 + 10)
    model = WORKLOADS["synthetic"](dataclasses.replace(s, synthetic_repeats=3), 0, CPU).model
    assert sum(p.numel() for p in model.parameters()) * 4 == gradient_bytes(s)


@pytest.mark.parametrize("aux", ["false", "true", "unused"])
def test_deeplabv3s_counted_gradient_is_what_the_built_model_trains_with_each_aux(aux):
    with torch.device("meta"):
        built = build_deeplabv3(aux=aux)[0]
    counted = gradient_bytes(spec("single", 1, workload="deeplabv3", deeplabv3_aux=aux))
    assert counted == 4 * sum(p.numel() for p in built.parameters() if p.requires_grad)
    assert (counted > gradient_bytes(spec("single", 1, workload="deeplabv3"))) == (aux != "false")  # the head's own


def test_dataparallel_on_cpu_is_a_pass_through_wrapper():
    model = torch.nn.Linear(4, 2)
    wrapped = STRATEGIES["dp"](model, Ctx(CPU, 1))
    x = torch.randn(3, 4)
    assert isinstance(wrapped, torch.nn.DataParallel) and wrapped.device_ids == []
    assert torch.equal(wrapped(x), model(x)) and unwrap(wrapped) is model


@pytest.mark.no_process
def test_deeplabv3_loads_a_local_weights_file_without_downloading(tmp_path):
    torch.manual_seed(1)
    model, _ = build_deeplabv3()
    path = tmp_path / "w.pt"
    torch.save(model.state_dict(), path)
    loaded, details = build_deeplabv3(str(path))
    assert details["missing_keys"] == 0 and details["unexpected_keys"] == 0
    name, p = next(iter(model.state_dict().items()))
    assert torch.equal(loaded.state_dict()[name], p)


@pytest.mark.no_process
def test_deeplabv3_synthetic_masks_have_voc_classes_and_batch_shape():
    s = spec("single", 1, workload="deeplabv3", image_size=32, per_device_batch=2, global_batch=2)
    x, y = first_batch(s)
    assert x.shape == (2, 3, 32, 32) and y.shape == (2, 32, 32) and y.dtype == torch.int64
    assert 0 <= int(y.min()) and int(y.max()) < 21


def test_pregenerated_batches_on_a_gpu_are_reported_as_an_artefact_and_on_cpu_they_are_not():
    from bench.workloads.workload import SYNTHETIC_POOL, synthetic_pool
    make = lambda g, b: (torch.randn(b, 4, generator=g), torch.zeros(b, dtype=torch.int64))
    s = spec("dp", 2)
    _, cpu_artefact = synthetic_pool(s, 0, CPU, make)
    assert cpu_artefact == 0
    pool, _ = synthetic_pool(s, 0, CPU, make)
    one = sum(t.numel() * t.element_size() for t in pool[0])
    assert one == 8 * (4 * 4 + 8) and len(pool) == SYNTHETIC_POOL


def test_micro_batches_keep_each_replicas_samples_together():
    from bench.rank.loop import micro_batches
    # 2 replicas x 4 samples, accumulated in 2 micro-batches of 2: micro k = sample 2k..2k+1 of every replica
    x = torch.arange(8).reshape(8, 1)
    y = torch.arange(8)
    pieces = micro_batches(x, y, replicas=2, accum=2, split_replicas=False)
    assert [p[1].tolist() for p in pieces] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    pieces = micro_batches(x, y, replicas=2, accum=2, split_replicas=True)
    assert [p[1].tolist() for p in pieces] == [[0, 1], [4, 5], [2, 3], [6, 7]]
    assert [p[1].tolist() for p in micro_batches(x, y, 2, 1, False)] == [list(range(8))]


@pytest.mark.parametrize("knobs", [
    {"bucket_cap_mb": 100.0, "gradient_as_bucket_view": True, "static_graph": True, "sync_buffers": False},
    {"comm_hook": "bf16"}, {"comm_hook": "fp16"}, {"comm_hook": "powersgd:2"},
])
def test_each_ddp_setting_reaches_the_wrapped_model(knobs, tmp_path):
    import torch.distributed as dist
    from bench.rank.strategies import ddp_settings
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        model = STRATEGIES["ddp"](torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)),
                                  Ctx(CPU, 1, options=knobs, warmup=3))
        got = ddp_settings(model)
        for k in ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "sync_buffers"):
            if k in knobs:
                assert got[k] == knobs[k], (k, got)
        if "comm_hook" in knobs:
            data = model._get_ddp_logging_data()
            assert knobs["comm_hook"].split(":")[0].replace("powersgd", "powerSGD") in str(data.get("comm_hook")), data
            model(torch.randn(2, 4)).sum().backward()  # the hook runs on gloo
    finally:
        dist.destroy_process_group()


def test_dataparallel_replica_threads_keep_the_callers_autocast_dtype():
    # torch's parallel_apply re-enters autocast in each replica thread with only the enabled flag, so the
    # dtype falls back to fp16 there: bf16 DataParallel on 2+ GPUs would run fp16. The wrapper restores it.
    import threading
    import warnings
    from bench.rank.strategies import _InAutocast
    seen = {}

    def replica():
        seen["wrapped"] = torch.get_autocast_dtype("cuda")

    def thread():  # what parallel_apply does in each replica's thread
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no CUDA here: autocast warns, the dtype bookkeeping is the same
            with torch.amp.autocast("cuda", enabled=True):
                seen["torch"] = torch.get_autocast_dtype("cuda")
                _InAutocast(replica, torch.bfloat16)()
    t = threading.Thread(target=thread)
    t.start()
    t.join()
    assert seen == {"torch": torch.float16, "wrapped": torch.bfloat16}


@pytest.mark.timeout(300)
def test_powersgd_over_several_buckets_on_gloo_trains_through_its_compressed_steps(tmp_path):
    # Unwrapped, PowerSGD's callback-issued all-reduces of several buckets interleave differently per rank on gloo:
    # this very configuration hung on its first compressed step every time.
    import sqlite3
    from conftest import run_bench
    path = str(tmp_path / "p.sqlite")
    # The shipped DDP-settings study (sweeps/ddp-settings.toml) in its CPU form: PowerSGD in 1 MiB buckets, once.
    p = run_bench(["--config", "sweeps/ddp-settings.toml", "--device", "cpu", "--synthetic-width", "512", "--synthetic-depth", "3",
                   "--per-device-batch", "16", "--gpus", "2", "--comm-hook", "powersgd:2", "--repeats", "1",
                   "--bucket-cap-mb", "1", "--steps", "4", "--warmup", "2", "--no-report",
                   "--pg-timeout", "60", "--no-comm-bench", "--store", path], timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    (status, settings), = sqlite3.connect(path).execute("SELECT status, details_json FROM results").fetchall()
    assert status == "ok" and '"start_powerSGD_iter": 2' in settings and "waited for inside its hook" in settings, settings
