"""The memory levers on CPU/gloo: activation checkpointing (bench.rank.activations) under every strategy,
find_unused_parameters for a model whose parameters get no gradient, FSDP's CPU offload (CUDA only: skipped here, with
its reason), DeepLabV3's auxiliary classifier; and one real sweep that stores and reports them.

Two ranks are started once for the file (imports dominate a start); each scenario runs in them, and the one-process
references run here."""
from __future__ import annotations

import json
import os
import sqlite3
import traceback
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from bench.config import ConfigError
from bench.rank import activations, precision
from bench.rank.context import Ctx
from bench.shared.spec import RunSpec
from bench.workloads import synthetic
from bench.workloads import transformer as T
from conftest import early_sweep

WORLD, STEPS = 2, 3
SHAPE = T.Shape(layers=4, width=32, heads=4, seq_len=16, vocab=64)
# each strategy, each mode; and FSDP2's CPUOffloadPolicy, which planning runs on CUDA only, built here without pinning
CASES = (("ddp", "selective:2", ()), ("zero", "full", ()), ("fsdp", "full", ()), ("hsdp", "selective:2", ()),
         ("fsdp", "none", (("offload", "cpu"),)))


def spec(strategy: str, ac: str = "none", **options) -> RunSpec:
    return RunSpec(workload="transformer", strategy=strategy, device_type="cpu", device_count=WORLD, per_device_batch=2,
                   global_batch=4, image_size=0, steps=STEPS, warmup=0, threads=1, seed=0, scaling="weak",
                   activation_checkpointing=ac, options=tuple(sorted(options.items())), optimizer="adamw")


def batch(chunk: int, step: int) -> tuple:
    return T.make_batch(SHAPE, torch.Generator().manual_seed(100 * chunk + step), 2)


def train(model: nn.Module, opt, chunks: list) -> None:
    for i in range(STEPS):
        xs, ys = zip(*(batch(c, i) for c in chunks))
        T.lm_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


class UnusedHead(nn.Module):
    """A model with a head its loss never reads (the reference experiment's Torch Hub DeepLabV3 with its aux head)."""

    def __init__(self):
        super().__init__()
        self.body, self.aux = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        return {"out": self.body(x), "aux": self.aux(x)}


# ---- the ranks ---------------------------------------------------------------------------------

def _scenarios(rank: int) -> dict:
    from bench.rank.equivalence import full_optimizer_state, full_parameters
    from bench.rank.optimizer import make_optimizer
    from bench.rank.strategies import ddp_settings
    from bench.rank.worker import prepare
    out = {}
    for strategy, ac, options in CASES:
        s = spec(strategy, ac, **dict(options))
        torch.manual_seed(0)
        details = T.details(SHAPE, s.global_batch)
        with torch.device("meta"):  # as the workload builds it: made real by prepare, or unit by unit by FSDP and HSDP
            built = T.Transformer(SHAPE)
        model = prepare(built, s, Ctx(torch.device("cpu"), WORLD, rank, WORLD, options=dict(options)), details)
        opt = make_optimizer(model, False, "adamw")
        train(model, opt, [rank])
        out[(strategy, ac, options)] = {"params": full_parameters(model), "state": full_optimizer_state(model, opt, rank),
                                        "ac": details.get("activation_checkpointing", {"mode": "none"}),
                                        "settings": ddp_settings(model)}
    for find_unused in (True, False):  # the model that needs it, with it and then without it (DDP's raw error)
        try:
            from bench.rank.strategies import apply_ddp
            model = apply_ddp(UnusedHead(), Ctx(torch.device("cpu"), WORLD, rank, WORLD,
                                                options={"find_unused_parameters": find_unused}))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(STEPS):
                model(torch.randn(2, 8))["out"].sum().backward()
                opt.step()
                opt.zero_grad()
            out[("unused", find_unused)] = {"trained": True, "settings": ddp_settings(model)}
        except RuntimeError as e:
            out[("unused", find_unused)] = {"trained": False, "error": str(e)}
    return out


def _rank_main(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=60))
    try:
        try:
            got = _scenarios(rank)
        except Exception:
            got = {"error": traceback.format_exc()}
        torch.save(got, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list:
    d = tmp_path_factory.mktemp("levers")
    mp.start_processes(_rank_main, args=(str(d / "init"), str(d)), nprocs=WORLD, start_method="spawn")
    got = [torch.load(d / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    assert "error" not in got[0], got[0].get("error")
    return got


# ---- activation checkpointing ------------------------------------------------------------------

@pytest.mark.timeout(240)
def test_every_strategy_under_checkpointing_or_offload_reaches_the_parameters_and_adamw_state_of_one_process(ranks):
    from bench.rank.equivalence import full_optimizer_state
    from bench.rank.optimizer import make_optimizer
    torch.manual_seed(0)
    reference = T.Transformer(SHAPE)  # no checkpointing, the global batch in one process
    opt = make_optimizer(reference, False, "adamw")
    train(reference, opt, list(range(WORLD)))
    want = {n: p.detach() for n, p in reference.named_parameters()}
    want_state = full_optimizer_state(reference, opt)
    for strategy, ac, options in CASES:
        got = ranks[0][(strategy, ac, options)]
        assert got["params"].keys() == want.keys(), (strategy, ac)  # the wrappers' names taken out
        bad = [n for n in want if not torch.allclose(got["params"][n], want[n], rtol=1e-4, atol=1e-5)]
        assert not bad, (strategy, ac, bad[:3])
        assert got["state"].keys() == want_state.keys()
        # the gate's own rule for state (bench.sweep.equivalence): fp32's tolerance, atol relative to each tensor's
        # largest element. Stricter (atol 1e-6 of it) failed on torch 2.14.1 for every strategy alike: one exp_avg
        # element of 8192 near zero, where the two reduction orders of a cancelling sum differ by ~1e-9
        rtol, atol = precision.tolerance("fp32")
        bad = [k for k in want_state if not torch.allclose(got["state"][k], want_state[k], rtol=rtol,
                                                           atol=atol * want_state[k].abs().max())]
        assert not bad, (strategy, ac, bad[:3])
        every = activations.mode_every(ac)
        if every:
            assert (got["ac"]["checkpointed_units"], got["ac"]["units"]) == (SHAPE.layers // every, SHAPE.layers)
    assert "CPUOffloadPolicy" in ranks[0][("fsdp", "none", (("offload", "cpu"),))]["settings"]["offload"]


def saved_bytes(model: nn.Module, x, y) -> int:
    """Bytes autograd keeps for backward outside checkpointed regions (inside one, checkpointing keeps only the input)."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = T.lm_loss(model(x), y)
    loss.backward()
    return total[0]


def test_checkpointing_keeps_less_for_backward_and_computes_the_same_gradients():
    shape = T.Shape(layers=4, width=32, heads=4, seq_len=64, vocab=64)
    x, y = T.make_batch(shape, torch.Generator().manual_seed(0), 4)
    kept, grads = {}, {}
    for mode in ("none", "selective:2", "full"):
        torch.manual_seed(0)
        model = T.Transformer(shape)
        details = activations.apply(model, mode)
        kept[mode] = saved_bytes(model, x, y)
        grads[mode] = {activations.public_name(n): p.grad for n, p in model.named_parameters()}
        if mode != "none":
            assert details["recomputes"].startswith(f"the forward of {4 // activations.mode_every(mode)} of 4 Block")
    assert kept["full"] < kept["selective:2"] < kept["none"]
    assert all(torch.allclose(grads["full"][n], g, atol=1e-6) and torch.allclose(grads["selective:2"][n], g, atol=1e-6)
               for n, g in grads["none"].items())


def test_the_units_are_the_blocks_fsdp_shards_every_kth_for_selective():
    from torchvision.models.resnet import Bottleneck
    from bench.workloads.deeplabv3 import build_model
    with torch.device("meta"):
        deeplab = build_model()[0]
    mlp = synthetic.MLP(16, 6, repeats=2)
    assert activations.apply(deeplab, "full")["checkpointed_units"] == 33
    assert sum(isinstance(getattr(m, "_checkpoint_wrapped_module", None), Bottleneck) for m in deeplab.modules()) == 33
    got = activations.apply(mlp, "selective:3")
    assert (got["checkpointed_units"], got["units"], got["unit"]) == (2, 6, "Layer")
    wrapped = [i for i, layer in enumerate(mlp.layers) if hasattr(layer, "_checkpoint_wrapped_module")]
    assert wrapped == [2, 5]  # the 3rd and the 6th: every K-th, counting from 1 (torchtitan's selective layer AC)
    extra = activations.recompute_flops(got, {"flops_per_sample": 1000.0, "unit_forward_flops_per_sample": 2 * 2 * 16 * 16})
    assert extra == {"recomputed_flops_per_sample": 2048.0, "hardware_flops_per_sample": 3048.0}


@pytest.mark.parametrize("text, says", [("selective:0", "K is '0'"), ("partial", "not one of none, full, selective"),
                                        ("full:2", "not one of none, full, selective")])
def test_a_bad_checkpointing_mode_is_refused_naming_it(text, says):
    from bench import config, options
    with pytest.raises(ConfigError, match=says):
        config.from_args(options.run_parser().parse_args(["--activation-checkpointing", text]))


# ---- find_unused_parameters, the auxiliary classifier, offload ----------------------------------

def test_ddp_trains_a_model_with_an_unused_head_only_with_find_unused_parameters(ranks):
    with_flag, without = ranks[0][("unused", True)], ranks[0][("unused", False)]
    assert with_flag["trained"] and with_flag["settings"]["find_unused_parameters"] is True
    assert not without["trained"] and "find_unused_parameters=True" in without["error"]


def _plan(args: list, tmp_path):
    from bench import options
    from bench.sweep import plan
    cfg, _, machine = options.prepare([*args, "--device", "cpu", "--store", str(tmp_path / "s.sqlite")],
                                      machine=plan.Machine(cuda_devices=0, cpu_cores=2))
    return plan.plan(cfg, machine)


@pytest.mark.no_process
def test_ddp_without_find_unused_parameters_is_refused_naming_the_parameters_and_the_flag(tmp_path):
    args = ["--workloads", "deeplabv3", "--deeplabv3-aux", "unused", "--strategies", "single,ddp", "--gpus", "2"]
    with pytest.raises(ConfigError, match=r"deeplabv3 \(--deeplabv3-aux unused\): 5 parameter\(s\) get no gradient "
                                          r"\(aux_classifier.0.weight, .*--find-unused-parameters true"):
        _plan(args, tmp_path)
    items = _plan([*args, "--find-unused-parameters", "false,true"], tmp_path)  # both asked for: the one that cannot run
    skipped = [i for i in items if not isinstance(i, RunSpec)]                    # is recorded with the same reason
    assert [(i.spec.strategy, i.spec.option("find_unused_parameters")) for i in skipped] == [("ddp", None)]
    assert "aux_classifier.4.bias" in skipped[0].reason
    ran = {(i.strategy, i.option("find_unused_parameters")) for i in items if isinstance(i, RunSpec) and i.mode == "bench"}
    assert ran == {("single", None), ("ddp", True)}


def test_deeplabv3_aux_true_adds_its_loss_at_half_weight_and_every_parameter_gets_a_gradient():
    from bench.workloads import deeplabv3
    assert deeplabv3.unused_parameters("true") == () and len(deeplabv3.unused_parameters("unused")) == 5
    out = {"out": torch.zeros(1, 21, 4, 4), "aux": torch.zeros(1, 21, 4, 4)}
    out["aux"][:, 3] = 5.0
    y = torch.zeros(1, 4, 4, dtype=torch.long)
    assert torch.isclose(deeplabv3.loss_with_aux(out, y), deeplabv3.segmentation_loss(out, y)
                         + 0.5 * deeplabv3.segmentation_loss({"out": out["aux"]}, y))


def test_fsdp_cpu_offload_on_cpu_is_recorded_as_skipped_with_its_reason(tmp_path):
    items = _plan(["--workloads", "transformer", "--strategies", "fsdp", "--gpus", "2", "--fsdp-offload", "none,cpu"], tmp_path)
    skipped = [i for i in items if not isinstance(i, RunSpec)]
    assert [i.spec.option("offload") for i in skipped] == ["cpu"]
    assert "CPUOffloadPolicy" in skipped[0].reason and "CUDA only" in skipped[0].reason


@pytest.mark.parametrize("flags, says", [
    (["--strategies", "ddp", "--fsdp-offload", "cpu"], "--fsdp-offload: takes effect with --strategies fsdp or hsdp only"),
    (["--strategies", "fsdp", "--find-unused-parameters", "true"], "--find-unused-parameters: takes effect with --strategies ddp or zero"),
    (["--workloads", "synthetic", "--deeplabv3-aux", "true"], "--deeplabv3-aux: sets the deeplabv3 workload"),
])
def test_a_lever_its_strategy_or_workload_would_ignore_is_refused(flags, says):
    from bench import config, options
    with pytest.raises(ConfigError, match=says):
        config.from_args(options.run_parser().parse_args(flags))


# ---- a real sweep: stored per result, reported -------------------------------------------------

def test_the_equivalence_gate_holds_a_checkpointed_run_against_a_reference_that_keeps_every_activation():
    from bench.sweep import equivalence
    ref, cand = equivalence.specs(spec("fsdp", "full"))
    assert (ref.strategy, ref.activation_checkpointing, cand.activation_checkpointing) == ("single", "none", "full")
    assert ref == equivalence.specs(spec("ddp", "selective:2"))[0]  # one reference for every mode and strategy


def test_the_report_sets_each_lever_beside_its_twin_without_it(tmp_path):
    from bench.analysis.results import load
    from bench.report import levers
    from bench.store import store
    from bench.sweep import record
    from report_fixtures import measured
    conn = store.connect(str(tmp_path / "s.sqlite"))
    sid = store.begin_sweep(conn, "cmd", "{}", None)
    base = dict(workload="transformer", device_type="cpu", device_count=2, per_device_batch=8, global_batch=16, image_size=0,
                steps=3, warmup=1, threads=1, seed=0, scaling="weak")
    for strategy, ac, options, step_ms, rss in (("ddp", "none", (), 100.0, 1500.0), ("ddp", "full", (), 125.0, 1000.0),
                                                  ("ddp", "none", (("find_unused_parameters", True),), 110.0, 1500.0),
                                                  ("fsdp", "full", (), 200.0, 800.0)):  # no twin: not paired
        s = RunSpec(strategy=strategy, activation_checkpointing=ac, options=options, **base)
        record.record_result(conn, sid, None, s, "ok", payload={**measured(2, [step_ms] * 3, 8),
                             "memory": [{"rank": r, "device": "cpu", "peak_rss_mib": rss} for r in range(2)]})
    sweep = load(conn, sid)
    text = [b[1] for b in levers.blocks(sweep) if b[0] == "p"][1:]
    assert len(text) == 2, text
    assert text[0].startswith("transformer, DDP x2: activation checkpointing full saves 500 MiB of peak memory per "
                              "process (1.46 GiB to 1000 MiB, 33%) and makes a step 1.25x as long"), text[0]
    assert "find_unused_parameters costs" not in text[1] and "makes a step 1.10x as long" in text[1], text[1]


@pytest.mark.timeout(600)
def test_a_sweep_stores_checkpointing_and_find_unused_per_result_and_reports_tokens_per_second(tmp_path_factory, tmp_path):
    p, path, _ = early_sweep("levers_sweep", tmp_path_factory)
    assert p.returncode == 0, p.stdout + p.stderr
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    r = conn.execute("SELECT * FROM results WHERE mode = 'bench'").fetchone()
    assert (r["strategy"], r["activation_checkpointing"], r["status"]) == ("ddp", "full", "ok")
    details = json.loads(r["details_json"])
    ac = details["workload_details"]["activation_checkpointing"]
    assert (ac["checkpointed_units"], ac["units"], ac["unit"]) == (2, 2, "Block")
    assert details["workload_details"]["hardware_flops_per_sample"] > details["workload_details"]["flops_per_sample"]
    assert details["strategy_settings"]["find_unused_parameters"] is True  # read back from DDP itself
    # the sweep's own --check-equivalence on the transformer, checkpointing and find_unused_parameters on: DDP x2's
    # parameters and AdamW state against one process
    gate = conn.execute("SELECT * FROM results WHERE mode = 'equivalence'").fetchall()
    assert [(g["workload"], g["strategy"], g["device_count"], g["status"]) for g in gate] == [("transformer", "ddp", 2, "ok")]
    d = json.loads(gate[0]["details_json"])
    assert d["passed"] and d["state_passed"] and d["state_tensors"] > 0, d
    from bench.report import report
    out = report.render(path, plots_dir=str(tmp_path), report_dir=str(tmp_path))
    text = open(out["markdown"]).read()
    assert "tokens/s (all devices)" in text and "tokens/s per process" in text and "ac=full" in text
