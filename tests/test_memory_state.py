"""The training state each rank holds, counted from its tensors (bench.rank.memory.state_mib)."""
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
