"""The transformer workload (bench.workloads.transformer), in this process: its presets' parameter counts against the
documented table, its FLOPs per token against FlopCounterMode, its batches, its shape flags, tokens/s."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from bench.config import ConfigError
from bench.workloads import transformer as T

DOC = Path(__file__).resolve().parents[1] / "docs" / "transformer.md"


def test_every_preset_has_the_parameter_count_the_docs_table_gives_and_its_name_says():
    documented = {m.group(1): int(m.group(2).replace(",", ""))
                  for m in re.finditer(r"^\| `([\w.]+)` \|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\| ([\d,]+) \|", DOC.read_text(), re.M)}
    assert set(documented) == set(T.PRESETS), documented
    for name, shape in T.PRESETS.items():
        with torch.device("meta"):
            counted = sum(p.numel() for p in T.Transformer(shape).parameters())
        assert counted == T.parameters(shape) == documented[name], name
        if name != "tiny":  # '134m', '1.4b': the name is the count, rounded
            value, unit = float(name[:-1]), name[-1]
            assert round(counted / (1e6 if unit == "m" else 1e9), 0 if unit == "m" else 1) == value, (name, counted)


def test_flops_per_token_is_6n_plus_12lhqt_as_flop_counter_mode_counts_a_training_step(monkeypatch):
    from torch.utils.flop_counter import FlopCounterMode
    shape = T.Shape(layers=2, width=64, heads=4, seq_len=48, vocab=128)
    model = T.Transformer(shape)
    x, y = T.make_batch(shape, torch.Generator().manual_seed(0), 3)
    tokens = x.numel()

    def step() -> int:
        with FlopCounterMode(display=False) as counter:
            T.lm_loss(model(x), y).backward()
        return counter.get_total_flops()

    fused = step()  # causal SDPA on the CPU counts 0 FLOPs (FlopCounterMode on torch 2.14): the matmuls alone, 6 per parameter per token
    norms = shape.layers * 2 * shape.width + shape.width  # RMSNorm's weights multiply element-wise: no matmul
    assert fused == 6 * (T.parameters(shape) - shape.vocab * shape.width - norms) * tokens

    def matrix_attention(q, k, v):  # the T x T scores in full, as PaLM's and nanoGPT's count takes them
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
    monkeypatch.setattr(T, "attention", matrix_attention)
    counted = step()
    assert counted - fused == 12 * shape.layers * shape.heads * shape.head_dim * shape.seq_len * tokens  # 12 L H Q T
    assert abs(counted - T.flops_per_token(shape) * tokens) / counted < 0.01  # the norms' 6 x 320 per token apart
    d = T.details(shape, global_batch=3)
    assert d["flops_per_sample"] == T.flops_per_token(shape) * shape.seq_len and d["tokens_per_sample"] == shape.seq_len
    assert d["unit_forward_flops_per_sample"] * 3 * shape.layers < d["flops_per_sample"]  # forward is a third, less the head


def test_batches_are_random_tokens_whose_targets_are_the_inputs_shifted_by_one():
    shape = T.PRESETS["tiny"]
    x, y = T.make_batch(shape, torch.Generator().manual_seed(3), 4)
    assert x.shape == y.shape == (4, shape.seq_len) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1]) and int(x.max()) < shape.vocab
    x2, _ = T.make_batch(shape, torch.Generator().manual_seed(3), 4)
    assert torch.equal(x, x2)
    loss = T.lm_loss(T.Transformer(shape)(x), y)
    assert abs(loss.item() - math.log(shape.vocab)) < 0.5  # a random model predicts about uniformly


def test_the_model_is_causal_a_later_token_never_changes_an_earlier_prediction():
    shape = T.PRESETS["tiny"]
    model = T.Transformer(shape).eval()
    x, _ = T.make_batch(shape, torch.Generator().manual_seed(0), 1)
    changed = x.clone()
    changed[0, -1] = (x[0, -1] + 1) % shape.vocab
    with torch.no_grad():
        a, b = model(x), model(changed)
    assert torch.allclose(a[:, :-1], b[:, :-1], atol=1e-6) and not torch.allclose(a[:, -1], b[:, -1])


def _prepare(args: list):
    from bench import options
    from bench.sweep import plan
    machine = plan.Machine(cuda_devices=0, cpu_cores=2)
    return options.prepare([*args, "--device", "cpu"], machine=machine)


@pytest.mark.parametrize("flags, says", [
    (["--transformer-width", "100", "--transformer-heads", "3"], "--transformer-width 100 is not a multiple of --transformer-heads 3"),
    (["--transformer-width", "60", "--transformer-heads", "4"], "head dimension 15 .* is odd"),
    (["--transformer-preset", "7b"], "--transformer-preset '7b': not a preset; expected one of tiny, 134m"),
])
def test_a_shape_that_cannot_be_built_is_refused_naming_the_flags(flags, says, tmp_path):
    with pytest.raises(ConfigError, match=says):
        _prepare(["--workloads", "transformer", *flags, "--store", str(tmp_path / "s.sqlite")])


def test_shape_flags_without_the_transformer_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="--seq-len: sets the transformer workload, which --workloads does not name"):
        _prepare(["--workloads", "synthetic", "--seq-len", "64", "--store", str(tmp_path / "s.sqlite")])


def test_the_preset_and_its_overrides_reach_every_configuration_and_its_key(tmp_path):
    from bench.sweep import plan
    cfg, _, machine = _prepare(["--workloads", "transformer", "--transformer-preset", "134m", "--transformer-layers", "2",
                                "--seq-len", "64", "--strategies", "ddp", "--gpus", "2", "--store", str(tmp_path / "s.sqlite")])
    assert (cfg.transformer_preset, cfg.transformer_layers, cfg.transformer_width, cfg.seq_len) == ("134m", 2, 768, 64)
    runs = [s for s in plan.plan(cfg, machine) if isinstance(s, plan.RunSpec) and s.mode == "bench"]
    assert runs and all((s.transformer_layers, s.transformer_width, s.transformer_heads, s.transformer_vocab, s.seq_len)
                        == (2, 768, 12, 32000, 64) for s in runs)
    assert runs[0].key.endswith("/L2d768h12v32000t64")


def test_tokens_per_second_is_samples_times_the_sequence_global_and_per_device():
    from bench.analysis.results import Config
    from bench.stats import summarize
    c = Config(key="k", workload="transformer", strategy="ddp", device_type="cuda", device_count=4, global_batch=32,
               scaling="weak", data="synthetic", step_ms=[1.0], summary=summarize([1.0]), samples_per_s=10.0,
               process_sps=[10.0], phases_ms={}, exposed_comm_ms=math.nan, grad_mib=None, comm_method=None,
               memory_mib={}, epoch_wall_s=[], tokens_per_sample=2048)
    assert c.tokens_per_s == 20480.0 and c.tokens_per_s_per_device == 5120.0


def test_the_workload_builds_on_meta_and_the_strategy_draws_the_same_weights_in_any_order_and_under_any_wrapper():
    """A 6.7 B preset's 27 GB never pass through host memory: the workload's model holds no storage until the strategy
    makes it real on the run's device (bench.workloads.materialize), and the weights drawn depend neither on the order
    units are made real in (FSDP: block by block, the root last) nor on wrappers put around them first (activation
    checkpointing renames the blocks) nor on the global random state; the run's seed changes them."""
    from bench.rank import activations
    from bench.rank.context import Ctx
    from bench.rank.worker import prepare
    from bench.shared.spec import RunSpec
    from bench.workloads import materialize
    shape = T.Shape(layers=3, width=32, heads=4, seq_len=8, vocab=64)
    spec = RunSpec(workload="transformer", strategy="single", device_type="cpu", device_count=1, per_device_batch=2,
                   global_batch=2, image_size=0, steps=1, warmup=0, threads=1, seed=5, scaling="weak",
                   **T.spec_fields(shape))
    wl = T.workload(spec, 0, torch.device("cpu"))
    assert all(p.is_meta for p in wl.model.parameters())
    want = {n: p.detach().clone() for n, p in T.Transformer(shape, seed=5).named_parameters()}
    torch.manual_seed(123)  # the global stream is not what draws them
    got = prepare(wl.model, spec, Ctx(torch.device("cpu"), 1, 0, 1))
    assert not any(p.is_meta for p in got.parameters())
    assert all(torch.equal(p, want[n]) for n, p in got.named_parameters())
    with torch.device("meta"):
        wrapped = T.Transformer(shape, seed=5)
    activations.apply(wrapped, "full")
    for block in reversed(list(wrapped.layers)):
        assert materialize.make_real(block, torch.device("cpu")) > 0
    assert materialize.make_real(wrapped, torch.device("cpu")) == 3  # embedding, norm, head: the root's own
    assert materialize.make_real(wrapped, torch.device("cpu")) == 0  # nothing twice
    names = {n.replace("_checkpoint_wrapped_module.", ""): p for n, p in wrapped.named_parameters()}
    assert names.keys() == want.keys() and all(torch.equal(names[n], want[n]) for n in want)
    assert not torch.equal(T.Transformer(shape, seed=6).head.weight, want["head.weight"])


def test_a_module_built_on_meta_with_no_way_to_draw_its_weights_is_named():
    from torch import nn
    from bench.workloads import materialize
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(2, 2))
    assert materialize.make_real(model, torch.device("cpu")) == 0  # untagged: another builder's meta model, left alone
    materialize.tag(model, 0)
    with pytest.raises(RuntimeError, match="Linear holds tensors of its own but has no init_weights"):
        materialize.make_real(model, torch.device("cpu"))


def test_the_flop_count_on_the_meta_built_model_leaves_no_gradient_for_the_first_step_to_add_to():
    """The worker counts FLOPs on the workload's model before the strategy makes it real: a meta .grad left on it
    became uninitialised memory under to_empty (a gradient of 1e36, the loss NaN after one step)."""
    from bench.rank.context import Ctx
    from bench.rank.worker import prepare
    from bench.shared.spec import RunSpec
    from bench.workloads.flops import count_workload
    shape = T.Shape(layers=2, width=32, heads=4, seq_len=8, vocab=64)
    spec = RunSpec(workload="transformer", strategy="single", device_type="cpu", device_count=1, per_device_batch=2,
                   global_batch=2, image_size=0, steps=1, warmup=0, threads=1, seed=0, scaling="weak",
                   **T.spec_fields(shape))
    wl = T.workload(spec, 0, torch.device("cpu"))
    assert count_workload(wl, spec)["flops_per_sample"] > 0
    assert all(p.grad is None for p in wl.model.parameters())
    model = prepare(wl.model, spec, Ctx(torch.device("cpu"), 1, 0, 1))
    assert all(p.grad is None for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = T.make_batch(shape, torch.Generator().manual_seed(0), 2)
    for _ in range(2):
        T.lm_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    assert torch.isfinite(T.lm_loss(model(x), y)) and all(torch.isfinite(p).all() for p in model.parameters())
