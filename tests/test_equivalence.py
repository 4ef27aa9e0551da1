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
from conftest import forkserver_env

LIMITS = Limits(fixed_s=240.0, stall_s=60.0)


def spec(strategy, n, **kw) -> RunSpec:
    # Ranks forked from the session's fork server, as a CPU sweep's are (~0.3-0.7 s a launch instead of ~3 s for fresh
    # interpreters); the fresh path has its own test (test_forkserver.py). forkserver_env() puts the session server's
    # socket in os.environ before the first launch, or this process would start a server of its own.
    forkserver_env()
    return RunSpec(workload="synthetic", strategy=strategy, device_type="cpu", device_count=n, per_device_batch=8,
                   global_batch=8 * n, image_size=0, steps=3, warmup=0, threads=1, seed=0, scaling="weak",
                   synthetic_width=64, synthetic_depth=2, process_start="forked", **kw)


@pytest.mark.timeout(300)
def test_ddp_zero_fsdp_and_hsdp_under_adamw_end_with_the_parameters_and_state_of_one_process(sharded_sweep):
    p, store_path, tmp = sharded_sweep
    assert p.returncode == 0, p.stdout + p.stderr
    # Each configuration runs in a folder of its own (spec, heartbeats, result; the gate's parameters: 224 MiB
    # for DeepLabV3) and torchrun makes a log folder per launch: none outlives the sweep (a failed configuration's
    # neither: tests/test_faults.py), the shared reference's included.
    left = sorted(n for n in os.listdir(tmp) if n.startswith(("bench-run-", "torchelastic_")))
    assert left == [], left
    conn = sqlite3.connect(store_path)
    conn.row_factory = sqlite3.Row
    rows = conn.execute("SELECT * FROM results WHERE mode = 'equivalence'").fetchall()
    assert {(r["strategy"], r["device_count"], r["optimizer"]) for r in rows} == {
        (s, 2, "adamw") for s in ("ddp", "zero", "fsdp", "hsdp")}
    for r in rows:
        d = json.loads(r["details_json"])
        assert r["status"] == "ok" and d["passed"] and d["max_abs_diff"] <= 1e-5, d
        # the MLP's 3 layers: weight and bias each, exp_avg and exp_avg_sq each, gathered whole from every shard
        assert d["state_tensors"] == 12 and d["state_passed"] and d["state_max_rel_diff"] <= 1e-4, d
        assert d["reference_losses"] == pytest.approx(d["candidate_losses"], rel=1e-4)
    assert p.stdout.count("parameters match") == 4 and p.stdout.count("optimizer state matches too") == 4


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


def _saved(path, **tensors) -> str:
    torch.save(tensors, path)
    return str(path)


def test_gate_fails_on_optimizer_state_off_by_a_factor_that_adamw_parameters_hide(tmp_path):
    # AdamW's update divides exp_avg by sqrt(exp_avg_sq): gradients summed instead of averaged (2x) leave the parameters
    # as they were but not the state, which is ~1e-7 for exp_avg_sq, so it is compared relative to its own size.
    w = torch.randn(8, 8)
    m, v = torch.randn(8, 8) * 1e-3, torch.rand(8, 8) * 1e-7
    state = equivalence.STATE_PREFIX
    ref = _saved(tmp_path / "ref.pt", w=w, **{f"{state}w.exp_avg": m, f"{state}w.exp_avg_sq": v})
    doubled = _saved(tmp_path / "bad.pt", w=w.clone(), **{f"{state}w.exp_avg": 2 * m, f"{state}w.exp_avg_sq": 4 * v})
    same = _saved(tmp_path / "good.pt", w=w.clone(), **{f"{state}w.exp_avg": m * (1 + 1e-7), f"{state}w.exp_avg_sq": v.clone()})
    bad = equivalence.compare_params(ref, doubled)
    assert bad["params_passed"] and not bad["passed"] and not bad["state_passed"]
    assert bad["state_worst_tensor"] == f"{state}w.exp_avg_sq" and bad["state_max_rel_diff"] > 2
    good = equivalence.compare_params(ref, same)
    assert good["passed"] and good["state_tensors"] == 2
    missing = equivalence.compare_params(ref, _saved(tmp_path / "none.pt", w=w.clone()))
    assert not missing["passed"] and missing["state_max_rel_diff"] == float("inf")


def test_strategies_at_one_count_share_one_reference_run(monkeypatch):
    from bench.sweep import launch
    from bench.sweep.diagnose import Outcome
    launched = []

    def fake_run_config(s, limits, shared_dir=None, keep=False, **kw):
        launched.append(s.strategy)
        return Outcome("failed", reason="stopped here", out_dir="")

    monkeypatch.setattr(launch, "run_config", fake_run_config)
    gate = [dataclasses.replace(spec(s, 2), mode="equivalence") for s in ("dp", "ddp", "zero", "fsdp", "hsdp")]
    gate.append(dataclasses.replace(spec("ddp", 2), mode="equivalence", optimizer="adamw"))  # another recipe
    refs = equivalence.References(gate)
    outcomes = [equivalence.run(s, LIMITS, refs=refs) for s in gate]
    assert launched == ["single", "single"]  # one reference per optimizer, shared by the 5 strategies
    assert all(o.reason == "reference (single process, global batch) failed: stopped here" for o in outcomes)
    assert not refs.done  # each released after its last check


def test_fsdp_bf16_mixed_precision_at_fp32_is_held_to_bf16s_tolerance_not_fp32s(monkeypatch, tmp_path):
    # FSDP's bf16 policy computes in bf16 parameters whatever --precision says: its reference computes through the same
    # policy (FSDP2 on one rank, feeding both replicas), and a candidate a bf16 rounding away passes; fp32 FSDP does not
    from bench.sweep import launch
    from bench.sweep.diagnose import Outcome
    w = torch.linspace(-1, 1, 64)

    def fake_run_config(s, limits, shared_dir=None, keep=False, **kw):
        out = tmp_path / f"{s.strategy}-{len(os.listdir(tmp_path))}"
        out.mkdir()
        torch.save({"w": w if s.emulate_ranks > 1 else w + 1e-3}, out / "params.pt")  # the reference: w
        return Outcome("ok", payload={"losses": [1.0]}, out_dir=str(out))

    monkeypatch.setattr(launch, "run_config", fake_run_config)
    mixed = dataclasses.replace(spec("fsdp", 2), mode="equivalence", options=(("mixed_precision", "bf16"),))
    assert equivalence.gate_precision(mixed) == ("bf16", "FSDP's bf16 mixed-precision policy at --precision fp32")
    ref, _ = equivalence.specs(mixed)
    assert (ref.strategy, ref.device_count, ref.emulate_ranks, ref.options) == ("fsdp", 1, 2, (("mixed_precision", "bf16"),))
    assert equivalence.specs(dataclasses.replace(mixed, options=()))[0].strategy == "single"
    out = equivalence.run(mixed, LIMITS)
    assert out.status == "ok", out.reason
    assert out.payload["precision"] == "bf16" and "FSDP's bf16 mixed-precision policy" in out.payload["tolerance"]
    plain = dataclasses.replace(mixed, options=(("mixed_precision", "none"),))
    assert equivalence.gate_precision(plain) == ("fp32", "")
    out = equivalence.run(plain, LIMITS)
    assert out.status == "failed" and "for fp32" in out.reason
