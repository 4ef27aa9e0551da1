"""A rehearsal of several ranks on one GPU: a test-only mode for a machine with fewer GPUs than ranks.

NCCL refuses two ranks on one device, but gloo carries CUDA tensors (copied through the host). With
BENCH_REHEARSE_ON_ONE_GPU=1 in the environment, a CUDA sweep may ask for more ranks than GPUs: DDP, ZeRO, FSDP
and HSDP (and the collectives' run) start their ranks as usual, every rank drives GPU local_rank % GPUs, and the
process group is gloo. That runs every per-rank CUDA path a real multi-GPU node meets (CUDA events per rank,
memory per rank, the heartbeat, traces, the equivalence gate with CUDA tensors, the sweep's supervision of several
CUDA processes), on a machine that has one GPU.

Its figures are not scaling figures (the ranks share one GPU's SMs and memory, and gloo goes through the host), and
the mode says so where a configuration is named: the plan adds the strategy setting `rehearsal` to each
configuration it shares (`option`), so every label reads 'DDP x2 [fp32, rehearsal=2 ranks on 1 GPU, gloo]' and the
store keeps it in options_json. DataParallel, one process driving several devices, has nothing to rehearse: the
plan skips it there with the reason (`DP_SKIP`).

    rehearsal.active()                  is the environment variable set (the sweep reads it once, at planning)
    rehearsal.applies("cuda", 2, 1)     does a count of 2 share this machine's 1 GPU (cuda, asked for, above its GPUs)
    rehearsal.options("cuda", 2, 1)     (('rehearsal', '2 ranks on 1 GPU, gloo'),): the setting the plan adds, else ()
    rehearsal.shares(options)           does a configuration's settings say its ranks share a GPU (the worker reads it)
    rehearsal.device_index(3, 1)        the GPU a rank drives: local_rank % GPUs
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

ENV = "BENCH_REHEARSE_ON_ONE_GPU"
OPTION = "rehearsal"
DP_SKIP = ("DataParallel drives one device per replica from one process; a rehearsal shares one GPU between ranks "
           f"(processes), which it has none of ({ENV})")
START_LINE = (f"rehearsal ({ENV}): counts above this machine's GPUs run their ranks on shared GPUs over gloo; the "
              "per-rank CUDA paths are exercised, and the figures are not scaling figures (each such configuration "
              "is labelled rehearsal=...)")


def active(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the rehearsal is asked for (the variable set to anything but '', '0' or 'false')."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return value.strip().lower() not in ("", "0", "false", "no")


def option(ranks: int, gpus: int) -> tuple:
    """The strategy setting a shared configuration carries: its label says how many ranks share how many GPUs."""
    return (OPTION, f"{ranks} ranks on {gpus} GPU{'s' if gpus != 1 else ''}, gloo")


def applies(device: str, ranks: int, gpus: int) -> bool:
    """Whether a configuration of `ranks` runs them on shared GPUs: asked for, on CUDA, above the machine's gpus."""
    return device == "cuda" and ranks > gpus >= 1 and active()


def options(device: str, ranks: int, gpus: int) -> tuple:
    """The settings the plan adds to a configuration of `ranks`: (option(...),) where the rehearsal applies, else ()."""
    return (option(ranks, gpus),) if applies(device, ranks, gpus) else ()


def shares(options: Mapping) -> bool:
    """Whether a configuration's settings (RunSpec.options as a dict) say its ranks share GPUs."""
    return OPTION in options


def device_index(local_rank: int, gpus: int) -> int:
    """The GPU rank local_rank drives when ranks share gpus GPUs (round robin)."""
    if gpus < 1:
        raise ValueError(f"a rehearsal needs at least one GPU; {gpus} visible")
    return local_rank % gpus
