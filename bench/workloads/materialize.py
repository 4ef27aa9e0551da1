"""Models built on the meta device (no memory, no work) and made real where they train, module by module.

The transformer's presets reach 6.7 B parameters, 27 GB of fp32 weights: built on the CPU, every rank of an 8-GPU node
would hold them in host memory (216 GB together) and draw them on its one or two threads before copying them over. Built
on meta instead (`torch.device("meta")`), each module's tensors are allocated on the run's device and drawn there when a
strategy needs them: all at once for single, DDP, ZeRO and DataParallel (bench.rank.worker.prepare), unit by unit for
FSDP and HSDP just before each unit is sharded (bench.rank.fsdp.apply_fsdp), so a GPU holds one unsharded block at a
time beside the shards and the host none of it. CPU runs take the same path, so the tests run it.

The weights must not depend on which strategy made them real, or in what order, or on which wrapper (activation
checkpointing) renamed the modules since: `tag` gives every module its own seed, from the run's seed and the module's
name in the bare model, when the model is built; `make_real` draws each module's tensors from a generator of that seed,
by the module's own `init_weights(generator)`. A model built elsewhere on meta carries no tags and is left as it is.
Each module's tensors are allocated apart: a model that ties weights across modules (an embedding shared with its head)
would come out untied, so such a model must tie them again after make_real (the suite's transformer ties none).
"""
from __future__ import annotations

import zlib

import torch
from torch import nn

SEED_ATTR = "_bench_init_seed"


def module_seed(seed: int, name: str) -> int:
    """The seed of the module called `name` in a model of run seed `seed`."""
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % 2 ** 62


def tag(model: nn.Module, seed: int) -> None:
    """Gives every module of the bare model its seed (a plain attribute: not a parameter, buffer or state entry)."""
    for name, m in model.named_modules():
        m.__dict__[SEED_ATTR] = module_seed(seed, name)


def _own(m: nn.Module) -> list:
    return [t for t in list(m._parameters.values()) + list(m._buffers.values()) if t is not None]


def pending(m: nn.Module) -> bool:
    """A tagged module with tensors of its own still on meta."""
    return SEED_ATTR in m.__dict__ and any(t.is_meta for t in _own(m))


def initialise(m: nn.Module) -> None:
    """Draws a (tagged) module's own tensors where they are, from its own generator."""
    init = getattr(m, "init_weights", None)
    if init is None:
        raise RuntimeError(f"{type(m).__name__} holds tensors of its own but has no init_weights(generator): a model built "
                           f"through bench.workloads.materialize gives each such module one")
    device = next(iter(_own(m))).device
    with torch.no_grad():
        init(torch.Generator(device=device).manual_seed(m.__dict__[SEED_ATTR]))


def make_real(module: nn.Module, device: torch.device) -> int:
    """Allocates on `device` and initialises every tagged submodule of `module` still on meta; how many it made real.
    What is already real (or a DTensor shard) and what carries no tag is left as it is."""
    n = 0
    for m in module.modules():
        if pending(m):
            for p in m._parameters.values():  # to_empty would turn a grad left on meta into uninitialised memory
                if p is not None:
                    p.grad = None
            m.to_empty(device=device, recurse=False)
            initialise(m)
            n += 1
    return n


def initialise_all(model: nn.Module) -> None:
    """Draws every tagged module's tensors where they already are (a model built off meta, as the tests build one)."""
    for m in model.modules():
        if SEED_ATTR in m.__dict__ and _own(m):
            initialise(m)
