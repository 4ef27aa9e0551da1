"""The equivalence gate's gather of FSDP2's shards (bench.rank.equivalence.gathered) under NCCL, through a stand-in
DTensor: with --fsdp-offload cpu the shards live in host memory, and NCCL gathers device tensors only."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from bench.rank import equivalence


class Shard:
    """A DTensor as FSDP2 leaves it: its local shard on `local`'s device, its mesh on `mesh_type`; full_tensor records
    the device its collective would run on."""
    gathers: list = []

    def __init__(self, local: torch.Tensor, mesh_type: str):
        self.local, self.device_mesh = local, SimpleNamespace(device_type=mesh_type, shape=(1,), mesh_dim_names=None)
        self.placements, self.shape = ("Shard(0)",), local.shape

    def stride(self):
        return self.local.stride()

    def to_local(self) -> torch.Tensor:
        return self.local

    @classmethod
    def from_local(cls, local, mesh, placements, run_check=False, shape=None, stride=None):
        return cls(local, mesh.device_type)

    def full_tensor(self) -> torch.Tensor:
        Shard.gathers.append(self.local.device.type)
        return self.local


def test_over_nccl_offloaded_shards_are_gathered_on_the_meshs_device(monkeypatch):
    # the mesh's device is 'meta' here (a CUDA one on a GPU): a host shard must be moved there before its gather
    monkeypatch.setattr(equivalence.dist, "get_backend", lambda *a: "nccl")
    Shard.gathers = []
    got = equivalence.gathered(Shard(torch.arange(4.0), "meta"))
    assert Shard.gathers == ["meta"] and got.device.type == "meta" and got.shape == (4,)
    Shard.gathers = []
    equivalence.gathered(Shard(torch.arange(4.0), "cpu"))      # already on the mesh's device: gathered as it is
    assert Shard.gathers == ["cpu"]
