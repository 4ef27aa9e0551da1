"""The FLOPs of a training step, counted by FlopCounterMode on the meta device (bench.workloads.flops), against counts by
hand: the synthetic MLP's exact formula, DeepLabV3's convolutions read off its layers, grouped and depthwise
convolutions' backward (twice their forward), causal attention's 12·H·Q·T per token; what the counter misses on the
CPU; the count changes nothing of the model it counts."""
from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from bench.shared.spec import RunSpec
from bench.workloads import flops, synthetic
from bench.workloads.workload import Workload, cycle


def spec(workload: str = "synthetic", batch: int = 4, **kw) -> RunSpec:
    return RunSpec(workload=workload, strategy="single", device_type="cpu", device_count=1, per_device_batch=batch,
                   global_batch=batch, image_size=kw.pop("image_size", 0), steps=1, warmup=0, threads=1, seed=0,
                   scaling="weak", **kw)


def hand_mlp(width: int, depth: int, repeats: int) -> float:
    """Per sample: 2 FLOPs per multiply-accumulate forward; backward 2 for the weight's gradient and 2 for the input's,
    except the very first matmul, whose input (the batch) needs no gradient."""
    macs = depth * repeats * width * width + width * synthetic.NUM_CLASSES
    return 2 * macs + 4 * macs - 2 * width * width


@pytest.mark.parametrize("width,depth,repeats", [(128, 2, 1), (64, 3, 2)])
def test_the_mlps_count_is_its_hand_count_and_its_analytic_figure(width, depth, repeats):
    s = spec(synthetic_width=width, synthetic_depth=depth, synthetic_repeats=repeats)
    wl = synthetic.workload(s, 0, torch.device("cpu"))
    got = flops.count_workload(wl, s)
    assert got["flops_per_sample"] == hand_mlp(width, depth, repeats) == synthetic.flops_per_sample(width, depth, repeats)
    assert got["analytic_per_sample"] == got["flops_per_sample"] and got["device"] == "meta" and got["uncounted"] == []
    assert got["forward_per_sample"] == 2 * (depth * repeats * width * width + width * synthetic.NUM_CLASSES)


@pytest.mark.no_process
def test_deeplabv3_counts_every_convolution_forward_and_backward():
    from bench.workloads import deeplabv3
    s = spec("deeplabv3", batch=2, image_size=64)
    with torch.device("meta"):
        model = deeplabv3.build_model()[0]
    wl = Workload(model=model, loss_fn=deeplabv3.segmentation_loss, batches=cycle([]), on_device=False,
                  example=deeplabv3.batch_maker(64))
    got = flops.count_workload(wl, s)
    convs = []  # by hand: 2 * N * Cout * Hout * Wout * Cin/groups * kh * kw per convolution, read off the layers
    hooks = [m.register_forward_hook(lambda m, i, o: convs.append(
        2 * o.shape[0] * o.shape[1] * o.shape[2] * o.shape[3] * m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]))
        for m in model.modules() if isinstance(m, nn.Conv2d)]
    model(torch.empty(2, 3, 64, 64, device="meta"))
    for h in hooks:
        h.remove()
    # backward: each convolution's input and weight gradients, twice its forward, but the first has no input gradient
    assert got["flops_per_sample"] * 2 == 3 * sum(convs) - convs[0]
    assert got["flops_per_sample"] * 2 == 45_184_647_168  # torch 2.14.1's FlopCounterMode: 45.2 GFLOP at 64 px, batch 2


def conv_by_hand(n: int, c_in: int, c_out: int, groups: int, k: int, out_side: int) -> int:
    """A convolution's forward FLOPs: 2 per multiply-accumulate, each output element over Cin/groups x k x k inputs."""
    return 2 * n * c_out * out_side * out_side * (c_in // groups) * k * k


@pytest.mark.parametrize("c_in,c_out,groups", [(32, 32, 32), (32, 64, 4), (16, 16, 1)],
                         ids=["depthwise", "grouped", "dense"])
def test_a_grouped_or_depthwise_convolutions_backward_is_twice_its_forward(c_in, c_out, groups):
    model = nn.Conv2d(c_in, c_out, 3, padding=1, groups=groups, bias=False)
    x = torch.empty(2, c_in, 32, 32, device="meta", requires_grad=True)  # so backward computes the input's gradient
    got = flops.count_step(model, x, torch.empty(2, c_out, 32, 32, device="meta"), F.mse_loss)
    forward = conv_by_hand(2, c_in, c_out, groups, 3, 32)
    assert got.by_op["aten.convolution"] == got.forward == forward
    # the input's gradient and the weight's each do the forward's multiply-accumulates, whatever the groups
    assert got.by_op["aten.convolution_backward"] == 2 * forward and got.total == 3 * forward


def test_a_grouped_transposed_convolutions_backward_is_twice_its_forward():
    model = nn.ConvTranspose2d(32, 64, 2, stride=2, groups=4, bias=False)
    x = torch.empty(2, 32, 16, 16, device="meta", requires_grad=True)
    got = flops.count_step(model, x, torch.empty(2, 64, 32, 32, device="meta"), F.mse_loss)
    forward = 2 * 2 * 16 * 16 * 32 * (64 // 4) * 2 * 2  # each input element meets Cout/groups x k x k weights
    assert got.forward == forward and got.by_op["aten.convolution_backward"] == 2 * forward


@pytest.mark.no_process
def test_mobilenet_v3_small_trains_at_three_times_its_forward_not_thirty():
    import torchvision
    with torch.device("meta"):
        model = torchvision.models.mobilenet_v3_small()  # depthwise blocks throughout
    x, y = torch.empty(2, 3, 64, 64, device="meta"), torch.zeros(2, dtype=torch.long, device="meta")
    got = flops.count_step(model, x, y, F.cross_entropy)
    # every matmul and convolution costs its forward again for each gradient, except the stem's input gradient (the
    # image needs none): a 3 -> 16 convolution, 3 x 3, stride 2, 32 x 32 out
    assert got.total == 3 * got.forward - conv_by_hand(2, 3, 16, 1, 3, 32)
    assert 2.8 < got.total / got.forward <= 3


class CausalAttention(nn.Module):
    """One attention layer: a fused q/k/v projection, causal scaled_dot_product_attention, an output projection."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, t, d))


def attention_by_hand(d: int, t: int) -> float:
    """Per sequence: 6N per token for the projections (N = 4d^2), less the q/k/v projection's input gradient (the input
    needs none), plus 12·H·Q·T per token for attention (H·Q = d; the whole T x T product, the PaLM/nanoGPT convention)."""
    return 6 * 4 * d * d * t - 2 * 3 * d * d * t + 12 * d * t * t


def test_attention_on_meta_counts_the_matmuls_it_does_and_on_the_cpu_the_flash_kernel_is_named_missed():
    model, x, y = CausalAttention(), torch.randn(2, 64, 32), torch.randn(2, 64, 32)
    loss = lambda out, target: (out - target).pow(2).mean()  # noqa: E731
    meta = flops.count_step(model, x.to("meta"), y.to("meta"), loss)
    assert meta.total / 2 == attention_by_hand(32, 64) and meta.uncounted == ()
    cpu = flops.count_step(copy.deepcopy(model), x, y, loss)  # causal SDPA on CPU: a flash kernel without a formula
    assert "aten._scaled_dot_product_flash_attention_for_cpu" in cpu.uncounted
    assert cpu.total / 2 == attention_by_hand(32, 64) - 12 * 32 * 64 * 64  # the attention term is what it missed


class Checkpointed(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return checkpoint(self.inner, x, use_reentrant=False)


def test_recomputation_is_counted_apart_model_flops_stay_the_models():
    model = synthetic.MLP(64, 3)
    x, y = torch.randn(4, 64), torch.randint(0, 10, (4,))
    got = flops.count_step(model, x.to("meta"), y.to("meta"), synthetic.loss, recompute=Checkpointed)
    assert got.total / 4 == synthetic.flops_per_sample(64, 3)
    # the hardware runs the forward again in backward, up to the last tensor backward needs (the head's output is not)
    assert got.total < got.recomputed <= got.total + got.forward
    assert got.per_sample()["hw_flops_per_sample"] == got.recomputed / 4


def test_counting_leaves_the_model_its_batchnorm_statistics_gradients_and_the_random_state_as_they_were():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.5),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    pool = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))]
    wl = Workload(model=model, loss_fn=F.cross_entropy, batches=cycle(pool), on_device=True)
    before, rng = copy.deepcopy(model.state_dict()), torch.get_rng_state()
    got = flops.count_workload(wl, spec(batch=4))
    assert got["flops_per_sample"] > 0 and got["device"] == "meta"
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)   # running_mean/var, num_batches_tracked included
    assert all(p.grad is None for p in model.parameters()) and torch.equal(torch.get_rng_state(), rng)
    assert all(not t.is_meta for t in after.values())
    cpu = flops.count_step(copy.deepcopy(model), *pool[0], F.cross_entropy)  # the same count as a real CPU step
    assert cpu.total / 4 == got["flops_per_sample"]


def test_a_model_the_counter_cannot_run_is_an_error_in_the_count_not_a_failed_run():
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            raise RuntimeError("no meta for me")
    wl = Workload(model=Broken(), loss_fn=F.mse_loss, batches=cycle([(torch.ones(2, 3), torch.ones(2, 3))]),
                  on_device=True, details={"flops_per_sample": 12.0})
    got = flops.count_workload(wl, spec(batch=2))
    assert got == {"analytic_per_sample": 12.0, "error": "RuntimeError: no meta for me"}


@pytest.mark.no_process
def test_a_user_models_count_on_meta_is_its_hand_count():
    # examples/my_model.py at 64 px: a 3 -> 16 3x3 convolution (padded), BatchNorm, pooling, a 16 -> 10 head. Per sample,
    # 2 FLOPs a multiply-accumulate forward; backward, the convolution's weight gradient only (its input is the batch,
    # which needs none) and the head's weight and input gradients.
    from pathlib import Path
    from bench.workloads import registry
    text = f"{Path(__file__).resolve().parents[1] / 'examples' / 'my_model.py'}:build"
    s = spec(text, batch=4, image_size=64)
    wl = registry.builder(s.workload)(s, 0, torch.device("cpu"))
    got = flops.count_workload(wl, s)
    conv, head = 16 * 3 * 9 * 64 * 64, 16 * 10
    assert got["device"] == "meta" and got["uncounted"] == [] and got["batch"] == 4, got
    assert got["flops_per_sample"] == 2 * (conv + head) + 2 * conv + 4 * head


@pytest.mark.no_process
def test_a_detection_model_is_counted_on_a_cpu_copy_and_its_own_model_is_left_as_it_was():
    # Detection's proposals depend on the data, so meta cannot run it: a CPU copy runs CPU_BATCH images instead, and
    # the model the run trains keeps its weights, BatchNorm statistics, gradients and the random state.
    from bench.workloads import registry
    s = spec("ssdlite320_mobilenet_v3_large", batch=4, image_size=320)
    wl = registry.builder(s.workload)(s, 0, torch.device("cpu"))
    before = {k: v.clone() for k, v in wl.model.state_dict().items()}
    rng = torch.get_rng_state()
    got = flops.count_workload(wl, s)
    assert "error" not in got and got["device"] == "cpu" and got["batch"] == flops.CPU_BATCH, got
    assert got["flops_per_sample"] > 1e9 and any("convolution" in op for op in got["by_op"]), got
    after = wl.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in wl.model.parameters()) and torch.equal(torch.get_rng_state(), rng)


def test_a_real_sweep_stores_each_configurations_count_from_its_first_rank(quick_sweep):
    import sqlite3
    proc, path = quick_sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT workload, strategy, device_count, flops_per_sample, flops_json FROM results "
                        "WHERE mode = 'bench' AND status = 'ok'").fetchall()
    samples = conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0]
    conn.close()
    assert rows and samples == 0  # on the CPU nothing samples a GPU
    for workload, strategy, n, per_sample, how in rows:
        how = json.loads(how)
        assert how["device"] == "meta" and how["uncounted"] == [] and how["batch"] == 2, (workload, strategy, n)
        if workload == "synthetic":  # sweeps/quick-cpu.toml: 2 x 128 at batch 2 per replica
            assert per_sample == how["analytic_per_sample"] == hand_mlp(128, 2, 1)
    deeplab = {r[3] for r in rows if r[0] == "deeplabv3"}  # at 32 px: one count, whatever the strategy and count
    assert len(deeplab) == 1 and deeplab.pop() > 1e9
