"""Your model, your precision: torchvision models by name and the user's own through the contract, under the
precision, memory-format and compilation axes, each a configuration of its own (CPU, gloo, tiny sizes)."""
from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import REPO, finished_ok, run_bench, sweep_in_background

SMALL = ["--steps", "2", "--warmup", "1", "--repeats", "1", "--per-device-batch", "2", "--no-comm-bench", "--no-report"]


def results(path: str) -> dict:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    return {(r["workload"], r["strategy"], r["device_count"], r["precision"], r["channels_last"], r["compiled"]): dict(r)
            for r in conn.execute("SELECT * FROM results WHERE mode = 'bench'")}


@pytest.mark.timeout(600)
def test_the_users_model_runs_through_the_contract_under_each_precision_and_memory_format(tmp_path):
    path = str(tmp_path / "s.sqlite")
    p = run_bench(["--workloads", "examples/my_model.py:build", "--strategies", "single", "--precision", "fp32,bf16,fp16",
                   "--channels-last", "false,true", *SMALL, "--store", path], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    got = results(path)
    user = str(REPO / "examples" / "my_model.py") + ":build"
    for prec in ("fp32", "bf16"):
        for cl in (0, 1):
            r = got[(user, "single", 1, prec, cl, 0)]
            assert r["status"] == "ok" and r["samples_per_s"] > 0, r["reason"]
            assert json.loads(r["numerics_json"])["autocast_dtype"] == ("bfloat16" if prec == "bf16" else None)
    fp16 = got[(user, "single", 1, "fp16", 0, 0)]
    assert fp16["status"] == "skipped" and "GPU precision" in fp16["reason"]
    assert "plan: 4 benchmark configuration(s)" in p.stdout and "2 skipped" in p.stdout


@pytest.mark.timeout(600)
def test_compile_is_timed_outside_the_measured_steps_and_a_failure_stays_with_its_configuration(tmp_path):
    path = str(tmp_path / "s.sqlite")
    p = run_bench(["--workloads", "synthetic", "--synthetic-width", "32", "--synthetic-depth", "1", "--strategies",
                   "single,dp", "--gpus", "1", "--compile", *SMALL, "--store", path], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    got = results(path)
    single = got[("synthetic", "single", 1, "fp32", 0, 1)]
    assert single["status"] == "ok" and single["compile_s"] > 0
    conn = sqlite3.connect(path)
    first = conn.execute("SELECT kind FROM steps WHERE result_id = ? ORDER BY step LIMIT 1", (single["result_id"],)).fetchone()
    assert first[0] == "warmup"  # compilation happened in the warm-up, outside the measured steps
    dp = got[("synthetic", "dp", 1, "fp32", 0, 1)]
    assert dp["status"] == "skipped" and "DataParallel" in dp["reason"]


def test_compile_wraps_ddp_first_as_pytorch_recommends(monkeypatch):
    import torch
    from bench.rank import worker
    from bench.rank.context import Ctx
    from bench.sweep.plan import RunSpec
    seen = []
    monkeypatch.setattr(torch, "compile", lambda m: seen.append(type(m).__name__) or m)
    monkeypatch.setitem(worker.STRATEGIES, "ddp", lambda m, ctx: torch.nn.parallel.DistributedDataParallel.__new__(
        torch.nn.parallel.DistributedDataParallel))
    spec = RunSpec(workload="synthetic", strategy="ddp", device_type="cpu", device_count=2, per_device_batch=2,
                   global_batch=4, image_size=0, steps=2, warmup=1, threads=1, seed=0, scaling="weak", compile=True)
    worker.prepare(torch.nn.Linear(2, 2), spec, Ctx(torch.device("cpu"), 2))
    assert seen == ["DistributedDataParallel"]


@pytest.mark.parametrize("args, expected", [
    (["--workloads", "resnet5"], "unknown model 'resnet5'; did you mean resnet50"),
    (["--workloads", "r3d_18"], "video models"),
    (["--workloads", "vit_b_16", "--image-size", "40"], "vit_b_16 cannot take 40 px"),
    (["--workloads", "no_such_module_xyz:build"], "no_such_module_xyz"),
    (["--workloads", "synthetic", "--channels-last", "false,true", "--strategies", "single"], None),  # a skip, not an error
])
def test_unknown_names_and_impossible_sizes_exit_2_naming_them(args, expected, tmp_path, capsys, monkeypatch):
    from bench import cli
    from bench.sweep import plan
    monkeypatch.setattr(plan, "detect_machine", lambda: plan.Machine(0, 2))
    from bench.sweep import run as sweep_run
    monkeypatch.setattr(sweep_run, "run_sweep", lambda *a, **k: 0)
    code = cli.main(args + ["--store", str(tmp_path / "s.sqlite"), "--device", "cpu"])
    err = capsys.readouterr().err
    if expected is None:
        assert code == 0, err
    else:
        assert code == 2 and expected in err, err


@pytest.mark.parametrize("body, expected", [
    ("def build():\n    return {'model': 1}\n", "the returned dict lacks make_batch, loss_fn"),
    ("import torch\ndef build():\n    m = torch.nn.Linear(2, 2)\n    return {'model': m, 'make_batch': lambda g, b: [1, 2], "
     "'loss_fn': lambda o, y: o.sum()}\n", "make_batch(generator, 2) returned a list"),
    ("import torch\ndef build():\n    m = torch.nn.Linear(2, 2)\n    return {'model': m, 'make_batch': lambda g, b: "
     "(torch.randn(b, 2, generator=g), torch.zeros(b)), 'loss_fn': lambda o, y: o}\n", "expected a scalar"),
    ("def other():\n    pass\n", "build"),
])
def test_a_broken_user_contract_is_refused_before_the_sweep(body, expected, tmp_path, capsys, monkeypatch):
    from bench import cli
    from bench.sweep import plan, run as sweep_run
    monkeypatch.setattr(plan, "detect_machine", lambda: plan.Machine(0, 2))
    monkeypatch.setattr(sweep_run, "run_sweep", lambda *a, **k: (_ for _ in ()).throw(AssertionError("sweep started")))
    f = tmp_path / "mine.py"
    f.write_text(body)
    code = cli.main(["--workloads", f"{f}:build", "--device", "cpu", "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and str(f) in err, err
    assert not (tmp_path / "s.sqlite").exists()


@pytest.fixture(scope="module", autouse=True)
def torchvision_sweep(tmp_path_factory):
    """resnet18 by name under single and DDP x2, started when this file's tests start and read by its last test, so
    that it overlaps the others (they time nothing)."""
    with sweep_in_background(tmp_path_factory.mktemp("resnet18"), ["--workloads", "resnet18", "--image-size", "32",
                             "--strategies", "single,ddp", "--gpus", "2", *SMALL, "--device", "cpu"]) as background:
        yield background


@pytest.mark.timeout(600)
def test_a_torchvision_model_by_name_trains_under_single_and_ddp_x2(torchvision_sweep):
    got = results(finished_ok(torchvision_sweep))
    for strategy, n in (("single", 1), ("ddp", 2)):
        r = got[("resnet18", strategy, n, "fp32", 0, 0)]
        assert r["status"] == "ok" and r["samples_per_s"] > 0, r["reason"]
    r18 = got[("resnet18", "single", 1, "fp32", 0, 0)]
    assert r18["params"] == 11_689_512 and r18["image_size"] == 32  # torchvision's resnet18, 1000 classes, random init
    assert json.loads(r18["details_json"])["workload_details"]["weights"] == "random init"
