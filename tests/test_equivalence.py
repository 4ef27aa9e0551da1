"""Correctness gate: the strategies compute the same training step as one process with the global batch."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3

import pytest
import torch

from bench.sweep import equivalence
from bench.sweep.launch import Limits, run_config
from bench.sweep.plan import RunSpec
from conftest import FAST, run_bench

LIMITS = Limits(fixed_s=240.0, stall_s=60.0)


def spec(strategy, n, **kw) -> RunSpec:
    return RunSpec(workload="synthetic", strategy=strategy, device_type="cpu", device_count=n, per_device_batch=8,
                   global_batch=8 * n, image_size=0, steps=3, warmup=0, threads=1, seed=0, scaling="weak",
                   synthetic_width=64, synthetic_depth=2, **kw)


@pytest.mark.timeout(300)
def test_ddp_and_fsdp_two_ranks_match_single_process_with_the_global_batch(store_path, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = run_bench(FAST + ["--strategies", "ddp,fsdp", "--gpus", "2", "--check-equivalence", "--no-comm-bench", "--store", store_path],
                  env={"TMPDIR": str(tmp)})
    assert p.returncode == 0, p.stdout + p.stderr
    # Each configuration runs in a folder of its own (spec, heartbeats, result; the gate's parameters: 224 MiB
    # for DeepLabV3) and torchrun makes a log folder per launch: none outlives the sweep (a failed configuration's
    # neither: tests/test_faults.py).
    left = sorted(n for n in os.listdir(tmp) if n.startswith(("bench-run-", "torchelastic_")))
    assert left == [], left
    conn = sqlite3.connect(store_path)
    conn.row_factory = sqlite3.Row
    rows = conn.execute("SELECT * FROM results WHERE mode = 'equivalence'").fetchall()
    assert {(r["strategy"], r["device_count"]) for r in rows} == {("ddp", 2), ("fsdp", 2)}
    for r in rows:
        d = json.loads(r["details_json"])
        assert r["status"] == "ok" and d["passed"] and d["max_abs_diff"] <= 1e-5, d
        assert d["reference_losses"] == pytest.approx(d["candidate_losses"], rel=1e-4)
    assert "parameters match" in p.stdout


@pytest.mark.timeout(300)
def test_gate_fails_when_replicas_do_not_see_the_global_batch(tmp_path):
    # A reference that sees only rank 0's samples is a different step: the gate must say so.
    ref = dataclasses.replace(spec("single", 1), mode="equivalence", emulate_ranks=1)
    cand = dataclasses.replace(spec("ddp", 2), mode="equivalence")
    a, b = run_config(ref, LIMITS, keep=True), run_config(cand, LIMITS, keep=True)
    try:
        assert a.status == b.status == "ok", (a.reason, b.reason)
        verdict = equivalence.compare_params(os.path.join(a.out_dir, "params.pt"), os.path.join(b.out_dir, "params.pt"))
    finally:
        for done in (a, b):
            shutil.rmtree(done.out_dir, ignore_errors=True)
    assert not verdict["passed"] and verdict["max_abs_diff"] > 1e-4


def test_compare_params_reports_the_worst_tensor(tmp_path):
    a = {"w": torch.zeros(3), "b": torch.ones(2), "n": torch.tensor(3)}
    b = {"w": torch.tensor([0.0, 0.5, 0.0]), "b": torch.ones(2), "n": torch.tensor(3)}
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    v = equivalence.compare_params(str(tmp_path / "a.pt"), str(tmp_path / "b.pt"))
    assert v["worst_tensor"] == "w" and v["max_abs_diff"] == 0.5 and not v["passed"]
    torch.save(a, tmp_path / "c.pt")
    assert equivalence.compare_params(str(tmp_path / "a.pt"), str(tmp_path / "c.pt"))["passed"]


def test_tolerance_follows_the_precision_and_is_stated(tmp_path):
    a = {"w": torch.zeros(4)}
    b = {"w": torch.full((4,), 1e-3)}
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    fp32 = equivalence.compare_params(str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "fp32")
    bf16 = equivalence.compare_params(str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "bf16")
    assert not fp32["passed"] and bf16["passed"]
    assert "for bf16" in bf16["tolerance"] and bf16["atol"] > fp32["atol"]


@pytest.mark.timeout(300)
def test_accumulated_micro_batches_and_bf16_autocast_pass_the_gate_under_ddp():
    s = dataclasses.replace(spec("ddp", 2), per_device_batch=8, global_batch=16, micro_batch=4, precision="bf16")
    out = equivalence.run(s, LIMITS)
    assert out.status == "ok", out.reason
    assert out.payload["passed"] and out.payload["precision"] == "bf16"
