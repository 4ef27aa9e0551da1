"""Where a rank runs and what its strategy was asked for: `Ctx`, the one argument every strategy
function takes besides the model (bench.rank.strategies, bench.rank.fsdp)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Ctx:
    """Where this process runs: its device, its place among the processes, and the strategy's settings."""
    device: torch.device
    count: int            # devices used by the configuration
    rank: int = 0
    world_size: int = 1
    sync_bn: bool = False
    options: dict = field(default_factory=dict)
    warmup: int = 0       # warm-up steps of the run (PowerSGD starts compressing after them)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"
