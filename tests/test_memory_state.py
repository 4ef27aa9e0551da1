"""The training state each rank holds, counted from its tensors (bench.rank.memory.state_mib): in one process, in the
sharded sweep of every per-device strategy (conftest.sharded_sweep), and for a ~60M model under AdamW."""
import sqlite3

import pytest
import torch
import torch.distributed as dist
from torch import nn

from bench.rank import memory


def _trained(model: nn.Module, opt) -> None:
    model(torch.randn(4, 256)).sum().backward()
    opt.step()


def test_sgd_momentum_holds_one_buffer_per_parameter_and_adamw_two():
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 8))
    params_mib = sum(p.numel() * 4 for p in model.parameters()) / 2**20
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _trained(model, sgd)
    got = memory.state_mib(model, sgd)
    assert got == pytest.approx({"params_mib": params_mib, "grads_mib": params_mib, "optimizer_mib": params_mib,
                                 "buckets_mib": 0.0})
    adamw = torch.optim.AdamW(model.parameters())
    _trained(model, adamw)
    assert memory.state_mib(model, adamw)["optimizer_mib"] == pytest.approx(2 * params_mib)  # exp_avg, exp_avg_sq


@pytest.mark.parametrize("as_view", [False, True])
def test_ddp_buckets_hold_the_gradients_again_unless_they_are_views(tmp_path, as_view):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 8)),
                                                    gradient_as_bucket_view=as_view)
        params_mib = sum(p.numel() * 4 for p in model.parameters()) / 2**20
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _trained(model, opt)
        got = memory.state_mib(model, opt)
        assert got["buckets_mib"] == pytest.approx(params_mib)
        assert got["grads_mib"] == pytest.approx(0.0 if as_view else params_mib)
        assert got["optimizer_mib"] == 0.0  # plain SGD keeps no state
    finally:
        dist.destroy_process_group()


def _state_rows(store_path: str) -> dict:
    """{strategy: [its memory rows, by rank]} of a sweep's benchmark results."""
    conn = sqlite3.connect(store_path)
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute("SELECT r.strategy, m.* FROM memory m JOIN results r USING (result_id) "
                            "WHERE r.mode = 'bench' ORDER BY m.rank").fetchall()
    finally:
        conn.close()
    out: dict = {}
    for r in rows:
        out.setdefault(r["strategy"], []).append(dict(r))
    return out


def test_zero_counts_each_ranks_share_of_the_state_and_fsdp_and_hsdp_their_shards(sharded_sweep):
    p, store_path, _ = sharded_sweep
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _state_rows(store_path)
    full = rows["ddp"][0]["params_mib"]  # the MLP 128 x 2 in fp32, whole on every DDP rank
    for r in rows["ddp"]:
        assert (r["params_mib"], r["grads_mib"], r["buckets_mib"]) == pytest.approx((full, full, full))
        assert r["optimizer_mib"] == pytest.approx(2 * full)  # AdamW: exp_avg and exp_avg_sq
    zero = rows["zero"]
    assert len(zero) == 2 and sum(r["optimizer_mib"] for r in zero) == pytest.approx(2 * full)  # shares, together whole
    assert all(0 < r["optimizer_mib"] < 2 * full for r in zero)  # whole parameters to each rank: close to, not exactly, half
    assert all((r["params_mib"], r["buckets_mib"]) == pytest.approx((full, full)) for r in zero)  # DDP underneath
    for strategy in ("fsdp", "hsdp"):  # one node of 2: HSDP is replicate 1 x shard 2, FSDP's sharding
        assert len(rows[strategy]) == 2
        for r in rows[strategy]:
            assert (r["params_mib"], r["grads_mib"], r["optimizer_mib"], r["buckets_mib"]) == pytest.approx(
                (full / 2, full / 2, full, 0.0)), strategy


@pytest.mark.timeout(300)
def test_zero_halves_the_adamw_state_of_a_60m_model_per_rank_and_the_peak_rss_shows_it(adamw_60m):
    # ~60M parameters under AdamW at 2 processes (conftest.ADAMW_60M_ARGS, run in the background from earlier modules)
    p, path = adamw_60m
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _state_rows(path)
    ddp, zero = rows["ddp"], rows["zero"]
    assert ddp[0]["params_mib"] * 2**20 / 4 == pytest.approx(60e6, rel=0.01)
    ddp_state = max(r["optimizer_mib"] for r in ddp)
    zero_state = max(r["optimizer_mib"] for r in zero)
    assert zero_state == pytest.approx(ddp_state / 2, rel=0.01)
    saved = ddp_state - zero_state
    lower_by = max(r["peak_rss_mib"] for r in ddp) - max(r["peak_rss_mib"] for r in zero)
    assert lower_by >= saved / 3, (lower_by, saved)
