"""FSDP2 (bench.rank.fsdp) on CPU/gloo with 2 processes: the equivalence gate, sharding, mixed precision, and the
collectives FSDP runs, measured by the microbenchmark (bench.rank.commbench) as a sweep's comm run measures them.

Two ranks are started once for the whole file (imports dominate a start); each scenario runs in them
and leaves its result behind, and each test asserts on one scenario. The single-process references
run here, in the test process.
"""
from __future__ import annotations

import contextlib
import os
import traceback
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from bench.rank import fsdp
from bench.rank.equivalence import full_parameters
from bench.rank.context import Ctx
from bench.workloads.synthetic import MLP

WORLD = 2
STEPS = 3
LR, MOMENTUM = 0.01, 0.9
RTOL, ATOL = 1e-4, 1e-5     # the gate's tolerances (bench.sweep.run.compare_params)
COLLECTIVE_TIMEOUT_S = 60   # a broken scenario fails in a minute instead of hanging
COMM_MAX_BYTES = 2**16      # the collectives scenario: 4 KiB, 16 KiB and 64 KiB messages


# ---- shared by the ranks and the reference -------------------------------------------------------

def make_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return MLP(64, 3)


def make_resnet(seed: int = 0) -> nn.Module:
    from torchvision.models import resnet18
    torch.manual_seed(seed)
    return resnet18(num_classes=10)


def batch(kind: str, chunk: int, step: int) -> tuple:
    """Replica chunk `chunk` of step `step`: every rank and the reference draw the same samples."""
    g = torch.Generator().manual_seed(1000 * chunk + step)
    x = torch.randn(8, 64, generator=g) if kind == "mlp" else torch.randn(2, 3, 32, 32, generator=g)
    return x, torch.randint(0, 10, (x.shape[0],), generator=g)


def train(model: nn.Module, micro_batches, no_sync_first: bool = False) -> list:
    """STEPS SGD steps; step i averages the gradients of micro_batches(i). With no_sync_first, every
    micro-batch but the last runs under fsdp.no_sync (gradient accumulation)."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    model.train()
    losses = []
    for i in range(STEPS):
        mbs = micro_batches(i)
        for j, (x, y) in enumerate(mbs):
            quiet = no_sync_first and j < len(mbs) - 1
            with fsdp.no_sync(model) if quiet else contextlib.nullcontext():
                loss = nn.functional.cross_entropy(model(x), y) / len(mbs)
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


# ---- the ranks ---------------------------------------------------------------------------------

def _scenarios(rank: int, ctx: Ctx) -> dict:
    def equivalence(kind, make, **kw):
        model = fsdp.apply_fsdp(make(), ctx, **kw)
        train(model, lambda i: [batch(kind, rank, i)])
        return {"params": full_parameters(model)}

    def mlp():
        model = fsdp.apply_fsdp(make_mlp(seed=rank), ctx)  # rank 1 starts from other weights: broadcast
        out = {"initial": full_parameters(model), "full_bytes": sum(p.numel() * 4 for p in make_mlp().parameters()),
               "local_bytes": fsdp.sharded_parameter_bytes(model)}
        train(model, lambda i: [batch("mlp", rank, i)])
        return {**out, "params": full_parameters(model)}

    def accumulate():
        probe = fsdp.apply_fsdp(make_mlp(), ctx)
        x, y = batch("mlp", rank, 0)
        with fsdp.no_sync(probe):
            nn.functional.cross_entropy(probe(x), y).backward()
        reduced_inside = [p.grad is not None for p in probe.parameters()]
        nn.functional.cross_entropy(probe(x), y).backward()
        reduced_after = [isinstance(p.grad, DTensor) for p in probe.parameters()]
        model = fsdp.apply_fsdp(make_mlp(), ctx)
        train(model, lambda i: [batch("mlp", 2 * rank, i), batch("mlp", 2 * rank + 1, i)], no_sync_first=True)
        return {"params": full_parameters(model), "reduced_inside": reduced_inside, "reduced_after": reduced_after}

    def resharded_after_forward(flag: bool):
        model = fsdp.apply_fsdp(make_mlp(), ctx, reshard_after_forward=flag)
        x, y = batch("mlp", rank, 0)
        out = model(x)
        sharded = [isinstance(layer.weight, DTensor) for layer in model.layers]
        root_sharded = isinstance(model.head.weight, DTensor)  # the head belongs to the root's unit
        nn.functional.cross_entropy(out, y).backward()
        from bench.rank.strategies import STRATEGIES, ddp_settings
        stored = ddp_settings(STRATEGIES["fsdp"](make_mlp(), Ctx(ctx.device, WORLD, rank, WORLD, options={"reshard": flag})))
        return {"sharded_between_forward_and_backward": sharded, "root_sharded_between": root_sharded, "stored": stored,
                **equivalence("mlp", make_mlp, reshard_after_forward=flag)}

    def checkpoint():
        import tempfile
        from bench.rank.checkpoint import save_full
        model = fsdp.apply_fsdp(make_mlp(), ctx)
        out = {}
        with tempfile.TemporaryDirectory() as d:
            fsdp_path, whole_path = os.path.join(d, "checkpoint.pt"), os.path.join(d, "whole", "checkpoint.pt")
            os.makedirs(os.path.dirname(whole_path))  # torch.save's archive names its entries after the file
            save_full(model, fsdp_path, rank)
            save_full(make_mlp(), whole_path, rank)  # what DDP's rank 0 writes
            if rank == 0:
                out = {"state": torch.load(fsdp_path), "bytes": os.path.getsize(fsdp_path),
                       "whole_bytes": os.path.getsize(whole_path)}
        return out

    def mixed(reduce_dtype):
        model = fsdp.apply_fsdp(make_mlp(), ctx, param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
        # The dtype is read from training's own forwards: a forward with no backward after it leaves FSDP2's root
        # (not resharded after forward, its own rule) gathered, and later steps then computed with stale parameters.
        seen = []
        hook = model.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
        losses = train(model, lambda i: [batch("mlp", rank, i)])
        hook.remove()
        out_dtype = seen[0]
        return {"output_dtype": out_dtype, "losses": losses, "params": full_parameters(model),
                "master_dtypes": {p.dtype for p in model.parameters()}}

    def on_meta(build):
        with torch.device("meta"):
            model = build()
        full = sum(p.numel() * p.element_size() for p in model.parameters())
        model = fsdp.apply_fsdp(model, ctx)
        units = sum(isinstance(m, FSDPModule) for m in model.modules())
        return {"units": units, "full_bytes": full, "local_bytes": fsdp.sharded_parameter_bytes(model)}

    def collectives():
        from bench.rank import commbench
        return {"rows": commbench.collective_sweep(ctx.device, COMM_MAX_BYTES, ops=commbench.OPS)}

    from torchvision.models import vit_b_16
    from torchvision.models.segmentation import deeplabv3_resnet101
    scenarios = {
        "mlp": mlp,
        "resnet": lambda: equivalence("resnet", make_resnet),
        "accumulate": accumulate,
        "reshard_true": lambda: resharded_after_forward(True),
        "reshard_false": lambda: resharded_after_forward(False),
        "checkpoint": checkpoint,
        "collectives": collectives,
        "bf16_reduce_fp32": lambda: mixed(torch.float32),
        "bf16_reduce_bf16": lambda: mixed(torch.bfloat16),
        "vit_meta": lambda: on_meta(lambda: vit_b_16(weights=None, image_size=32)),
        "deeplabv3_meta": lambda: on_meta(lambda: deeplabv3_resnet101(weights=None, weights_backbone=None,
                                                                      num_classes=21, aux_loss=False)),
    }
    results = {}
    for name, run in scenarios.items():
        try:
            results[name] = run()
        except Exception:
            results[name] = {"error": traceback.format_exc()}
            break  # the other rank may be stuck in a collective: stop rather than desynchronise
    return results


def _rank_main(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        ctx = Ctx(device=torch.device("cpu"), count=WORLD, rank=rank, world_size=WORLD)
        torch.save(_scenarios(rank, ctx), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list:
    d = tmp_path_factory.mktemp("fsdp")
    mp.start_processes(_rank_main, args=(str(d / "init"), str(d)), nprocs=WORLD, start_method="spawn")
    return [torch.load(d / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def scenario(ranks: list, name: str) -> list:
    for r, res in enumerate(ranks):
        assert name in res, f"rank {r} did not reach {name!r} (an earlier scenario failed: {list(res)})"
        assert "error" not in res[name], f"rank {r}, {name}:\n{res[name]['error']}"
    return [res[name] for res in ranks]


def reference(make, kind: str, chunks: int) -> dict:
    """One process, one thread: the global batch as `chunks` replica micro-batches, gradients averaged."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = make()
        train(model, lambda i: [batch(kind, c, i) for c in range(chunks)])
        return {k: v.detach() for k, v in model.named_parameters()}
    finally:
        torch.set_num_threads(threads)


def assert_same_parameters(got: dict, want: dict, rtol: float = RTOL, atol: float = ATOL) -> None:
    assert got.keys() == want.keys()
    bad = [k for k in want if not torch.allclose(got[k], want[k], rtol=rtol, atol=atol)]
    worst = max(want, key=lambda k: (got[k] - want[k]).abs().max().item())
    assert not bad, f"{len(bad)} tensors differ; worst {worst}: max abs diff {(got[worst] - want[worst]).abs().max().item():.3g}"


# ---- the tests ----------------------------------------------------------------------------------

@pytest.mark.timeout(180)
def test_fsdp_two_ranks_match_single_process_with_the_global_batch(ranks):
    want = reference(make_mlp, "mlp", WORLD)
    for res in scenario(ranks, "mlp"):
        assert_same_parameters(res["params"], want)


def test_fsdp_starts_every_rank_from_rank0_weights(ranks):
    want = {k: v.detach() for k, v in make_mlp(seed=0).named_parameters()}
    for res in scenario(ranks, "mlp"):
        assert_same_parameters(res["initial"], want, rtol=0, atol=0)


def test_fsdp_resnet_with_batchnorm_per_replica_matches_micro_batched_reference(ranks):
    want = reference(make_resnet, "resnet", WORLD)
    for res in scenario(ranks, "resnet"):
        assert_same_parameters(res["params"], want)


def test_fsdp_no_sync_accumulation_equals_the_four_micro_batch_step(ranks):
    # 2 ranks x 2 micro-batches (the first without reduce-scatter) == one process, 4 micro-batches.
    want = reference(make_mlp, "mlp", 2 * WORLD)
    for res in scenario(ranks, "accumulate"):
        assert not any(res["reduced_inside"])  # no sharded gradient yet: the reduce-scatter was skipped
        assert all(res["reduced_after"])       # the next synchronised backward reduced what accumulated
        assert_same_parameters(res["params"], want)


def test_each_rank_holds_half_the_parameter_bytes(ranks):
    for name in ("mlp", "deeplabv3_meta"):
        res = scenario(ranks, name)
        full = res[0]["full_bytes"]
        local = [r["local_bytes"] for r in res]
        assert sum(local) == full, (name, local, full)  # every byte on exactly one rank
        assert all(abs(b - full / WORLD) <= 0.01 * full for b in local), (name, local, full)


@pytest.mark.parametrize("flag", [True, False])
def test_reshard_after_forward_decides_whether_blocks_stay_gathered_until_backward(ranks, flag):
    want = reference(make_mlp, "mlp", WORLD)
    for res in scenario(ranks, f"reshard_{str(flag).lower()}"):
        assert res["sharded_between_forward_and_backward"] == [flag] * 3
        assert res["root_sharded_between"] is False  # FSDP2's rule for the root: never resharded after forward
        assert res["stored"]["blocks_reshard_after_forward"] is flag and res["stored"]["root_reshard_after_forward"] is False
        assert_same_parameters(res["params"], want)


def test_fsdp_checkpoint_is_the_whole_model_in_the_bytes_ddp_writes(ranks):
    rank0 = scenario(ranks, "checkpoint")[0]
    whole = make_mlp()
    whole.load_state_dict(rank0["state"])  # loadable as is, every tensor at its full shape
    assert_same_parameters(rank0["state"], whole.state_dict(), rtol=0, atol=0)
    assert_same_parameters(rank0["state"], make_mlp().state_dict(), rtol=0, atol=0)
    assert rank0["bytes"] == rank0["whole_bytes"]


@pytest.mark.parametrize("reduce_dtype", ["fp32", "bf16"])
def test_bf16_parameters_compute_in_bf16_and_train_close_to_fp32(ranks, reduce_dtype):
    want = reference(make_mlp, "mlp", WORLD)
    for res in scenario(ranks, f"bf16_reduce_{reduce_dtype}"):
        assert res["output_dtype"] == torch.bfloat16
        assert res["master_dtypes"] == {torch.float32}  # the optimizer updates fp32 shards
        assert all(torch.isfinite(torch.tensor(res["losses"])))
        assert_same_parameters(res["params"], want, rtol=0, atol=4e-4)  # bf16 rounding: 1.1e-4 here; summed gradients: 1e-3


def test_two_ranks_measure_all_reduce_all_gather_and_reduce_scatter_as_nccl_tests_does(ranks):
    from bench.rank import commbench
    rows = scenario(ranks, "collectives")[0]["rows"]          # rank 0's: every rank holds the same, the slowest's time
    assert [(r["op"], r["size_bytes"]) for r in rows] == [(op, s) for op in commbench.OPS for s in (4096, 16384, 65536)]
    for r in rows:
        assert r["scope"] == "world" and r["ranks"] == WORLD and r["timing"] == "host_clock"
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / (r["time_ms"] / 1e3) / 1e9)
        factor = 2 * (WORLD - 1) / WORLD if r["op"] == "all_reduce" else (WORLD - 1) / WORLD   # doc/PERFORMANCE.md
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * factor)
    assert all(r["iters"] >= commbench.MIN_ITERS for r in rows if r["size_bytes"] == 4096), rows  # nccl-tests' 20 at least
    assert scenario(ranks, "collectives")[1]["rows"] == rows


def test_shard_blocks_picks_resnet_vit_deeplabv3_transformer_and_mlp_blocks():
    from torchvision.models import resnet18, vit_b_16
    from torchvision.models.resnet import BasicBlock, Bottleneck
    from torchvision.models.segmentation import deeplabv3_resnet101
    from torchvision.models.vision_transformer import EncoderBlock
    from bench.workloads import synthetic, transformer
    with torch.device("meta"):
        cases = [(resnet18(num_classes=10), BasicBlock, 8),
                 (vit_b_16(weights=None, image_size=32), EncoderBlock, 12),
                 (deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=21, aux_loss=False), Bottleneck, 3 + 4 + 23 + 3),
                 (transformer.Transformer(transformer.PRESETS["134m"]), transformer.Block, 12),
                 (MLP(64, 3), synthetic.Layer, 3)]
    for model, cls, n in cases:
        blocks = fsdp.shard_blocks(model)
        assert len(blocks) == n and all(type(b) is cls for b in blocks), (type(model).__name__, len(blocks))
    mlp = cases[-1][0]
    assert fsdp.shard_blocks(mlp) == list(mlp.layers)  # not the head


def test_shard_blocks_falls_back_to_repeated_layers_of_an_unknown_model():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(4, 8)
            self.body = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(5)), nn.ReLU())
            self.head = nn.Linear(8, 2)
    model = Stack()
    assert fsdp.shard_blocks(model) == list(model.body)[:5]


def test_fully_shard_accepts_the_units_chosen_for_vit_and_deeplabv3(ranks):
    assert [r["units"] for r in scenario(ranks, "vit_meta")] == [12 + 1] * WORLD
    assert [r["units"] for r in scenario(ranks, "deeplabv3_meta")] == [33 + 1] * WORLD


def test_hsdp_at_one_shard_group_says_what_it_still_runs_and_is_not_called_fsdp():
    from bench.rank import fsdp
    note = fsdp.mesh_words(1, 2)["note"]
    assert note.startswith("replicate 1: one shard group") and "all-reduces every gradient shard" in note
    assert "not FSDP" in note and "%" not in note and "this is FSDP" not in note   # no other run's figure
    assert "note" not in fsdp.mesh_words(2, 1)   # replicated across groups: HSDP proper


def test_each_unit_is_moved_to_the_device_just_before_it_is_sharded_never_the_whole_model_first(tmp_path, monkeypatch):
    # The GPU must hold one block unsharded at a time beside the shards (FSDP's whole-run peak, and what fits), not the
    # whole model: each unit's tensors go onto the device and are broadcast from rank 0 right before its fully_shard.
    events = []
    onto, shard = fsdp._onto_device, fsdp.fully_shard
    monkeypatch.setattr(fsdp, "_onto_device", lambda m, d, done: (events.append(("onto", m)), onto(m, d, done))[1])
    monkeypatch.setattr(fsdp, "fully_shard", lambda m, **kw: (events.append(("shard", m)), shard(m, **kw))[1])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        model = make_mlp()
        units = [*fsdp.shard_blocks(model), model]
        fsdp.apply_fsdp(model, Ctx(torch.device("cpu"), 1))
        moved_again = [p for p in model.parameters() if not isinstance(p, DTensor)]
    finally:
        dist.destroy_process_group()
    assert events == [(kind, u) for u in units for kind in ("onto", "shard")]
    assert not moved_again  # the root's pass left the blocks' shards alone
