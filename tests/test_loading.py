"""Loading that fits a real node (issue 22, item 4): the loader-alone run beside DDP runs as many loaders at
once as DDP does, each with its own workers; the shared-memory budget is checked before anything runs."""
from __future__ import annotations

import pytest

from bench.config import SweepConfig
from bench.shared.spec import RunSpec
from bench.sweep import launch
from bench.sweep.plan import Machine, plan
from bench.sweep.resolve import resolve
from voc_tree import make_voc_tree

CPU2 = Machine(cuda_devices=0, cpu_cores=2)


def voc_cfg(root, **kw) -> SweepConfig:
    base = dict(workloads=("deeplabv3",), data="voc", voc_root=str(root), image_size=32, per_device_batch=2,
                num_workers=1, gpus=(1, 2), strategies=("single", "ddp"), comm_bench=False, report=False, warmup=1, steps=2)
    base.update(kw)
    return SweepConfig(**base)


def loader_runs(cfg: SweepConfig, machine: Machine) -> dict:
    return {s.device_count: s for s in plan(resolve(cfg, machine), machine) if isinstance(s, RunSpec) and s.mode == "loader"}


def test_the_loader_alone_beside_ddp_runs_one_loader_per_rank_at_once(tmp_path):
    root = make_voc_tree(tmp_path / "voc", n_images=8)
    runs = loader_runs(voc_cfg(root), CPU2)
    assert (runs[2].processes, runs[2].num_workers) == (2, 1)  # 2 loaders of 1 worker, as DDP's 2 ranks
    assert (runs[1].processes, runs[1].num_workers) == (1, 1)
    dp_only = loader_runs(voc_cfg(root, strategies=("dp",), gpus=(1,)), CPU2)
    assert dp_only[1].processes == 1
    out = launch.run_config(runs[2], launch.Limits(fixed_s=120))
    assert out.status == "ok", out.reason
    windows = out.payload["windows"]
    assert sorted(w["rank"] for w in windows) == [0, 1] and all(w["samples"] == 2 * 2 for w in windows)


def test_prefetched_batches_that_do_not_fit_dev_shm_are_refused_with_the_numbers(tmp_path):
    from bench.config import ConfigError
    from bench.sweep import shm
    root = make_voc_tree(tmp_path / "voc", n_images=8)
    cfg = voc_cfg(root, num_workers=4, strategies=("dp", "ddp"), image_size=256)
    batch = 2 * 256 * 256 * 13  # float32 image + uint8 mask, 2 samples: 1.6 MiB
    # ddp x2: 2 processes x 4 workers x 2 prefetched batches = 16 batches in /dev/shm
    fits = dict(CPU2.__dict__, shm_free_bytes=16 * batch)
    resolve(cfg, Machine(**fits))
    small = Machine(**dict(fits, shm_free_bytes=8 * batch))
    with pytest.raises(ConfigError) as e:
        resolve(cfg, small)
    msg = str(e.value)
    assert "--num-workers 4: /dev/shm has 13 MiB free" in msg and "26 MiB" in msg and "2 process(es) x 4 worker(s)" in msg
    assert "use --num-workers 2" in msg  # 2 x 2 x 2 batches = 8 batches: fits
    assert shm.need_bytes(plan(resolve(cfg, Machine(**fits)), CPU2)[0]) == 4 * 2 * batch  # dp x1: 1 process of 4


def test_download_happens_in_the_sweep_process_before_any_rank_starts(tmp_path, monkeypatch):
    from bench.sweep import run
    from bench.sweep.diagnose import Outcome
    from bench.workloads import voc
    root = make_voc_tree(tmp_path / "voc", n_images=8)
    events = []
    monkeypatch.setattr(voc, "download", lambda path: events.append(("download", path)))
    monkeypatch.setattr(run, "run_config", lambda spec, *a, **k: (events.append(("run", spec.strategy)),
                                                                  Outcome("failed", "stand-in"))[1])
    cfg = resolve(voc_cfg(root, download=True, strategies=("ddp",), gpus=(2,), loader_bench=False,
                          store=str(tmp_path / "s.sqlite")), CPU2)
    run.run_sweep(cfg, "test", log=lambda line: None, machine=CPU2)
    assert events[0] == ("download", str(root)) and ("run", "ddp") in events
    assert [e for e in events if e[0] == "download"] == [("download", str(root))]  # once, not per rank or run
