"""Each strategy's settings as axes of the sweep: the combinations a configuration runs with, and HSDP's mesh.

    strategy_options(cfg, "ddp", n)  -> [(), (("bucket_cap_mb", 100.0),), ...]   sorted (name, value) pairs, defaults left out
    option_skip(cfg, "fsdp", {"offload": "cpu"})  -> why these settings cannot run here (None: they can)
    check_hsdp(cfg)                  ConfigError (exit 2) where a count does not split into HSDP's shard groups
    check_torch(cfg)                 ConfigError (exit 2) where the installed torch is older than a strategy needs
    hsdp_lines(cfg)                  HSDP's mesh at each count, printed at the start of the sweep

ddp and zero share DDP's settings (zero is DDP whose optimizer state ZeroRedundancyOptimizer shards) and zero adds
parameters_as_bucket_view; fsdp and hsdp share FSDP's, and hsdp adds its shard group size, always stored (the ranks
build their mesh from it): by default the devices per node, or the count where it is below one node. That default is
no setting of the configuration: a report names a shard size only where it differs from the run's devices per node
(bench.analysis.results.variant), so HSDP x1, x2, ... of the default mesh stay one series.
"""
from __future__ import annotations

import itertools
import re
from typing import Optional

from bench.config import ConfigError, SweepConfig
from bench.shared.spec import DDP_BASED, ONE_SHARD_GROUP

DDP_DEFAULTS = {"bucket_cap_mb": None, "gradient_as_bucket_view": False, "static_graph": False, "sync_buffers": True,
                "comm_hook": "none", "find_unused_parameters": False}
FSDP_DEFAULTS = {"reshard": True, "mixed_precision": "none", "offload": "none"}


def hsdp_shard_sizes(cfg: SweepConfig, n: int) -> tuple:
    """HSDP's shard group sizes at count n: --hsdp-shard-size, else one node's devices (the count, below a node)."""
    return tuple(cfg.hsdp_shard_size or (min(cfg.gpus_per_node or n, n),))


def strategy_options(cfg: SweepConfig, strategy: str, n: int = 1) -> list:
    """Every combination of the strategy's settings asked for at count n, as sorted (name, value) tuples."""
    if strategy in ("ddp", "zero"):
        axes = {"bucket_cap_mb": cfg.bucket_cap_mb or (None,), "gradient_as_bucket_view": cfg.gradient_as_bucket_view,
                "static_graph": cfg.static_graph, "sync_buffers": cfg.sync_buffers, "comm_hook": cfg.comm_hook,
                "find_unused_parameters": cfg.find_unused_parameters}
        defaults = dict(DDP_DEFAULTS)
        if strategy == "zero":
            axes["parameters_as_bucket_view"], defaults["parameters_as_bucket_view"] = cfg.zero_bucket_view, False
    elif strategy in ("fsdp", "hsdp"):
        axes = {"reshard": cfg.fsdp_reshard, "mixed_precision": cfg.fsdp_mixed_precision, "offload": cfg.fsdp_offload}
        defaults = dict(FSDP_DEFAULTS)
        if strategy == "hsdp":
            axes["shard_size"], defaults["shard_size"] = hsdp_shard_sizes(cfg, n), None  # always stored
    else:
        return [()]
    out = []
    for combo in itertools.product(*axes.values()):
        out.append(tuple(sorted((k, v) for k, v in zip(axes, combo) if v != defaults[k])))
    return out


def check_hsdp(cfg: SweepConfig) -> None:
    """Every count a whole number of HSDP shard groups (a resolved config: counts and devices per node known)."""
    if "hsdp" not in cfg.strategies:
        return
    for n in cfg.gpus:
        for shard in hsdp_shard_sizes(cfg, n):
            if n % shard:
                raise ConfigError(f"--hsdp-shard-size {shard}: {n} device(s) do not split into HSDP shard groups of {shard} "
                                  f"(the count must be a multiple of the shard size); choose --gpus that are multiples of "
                                  f"{shard}, or leave --hsdp-shard-size out (one node's devices)")


# The oldest torch a strategy's rank code runs on, where it is above pyproject's floor (torch>=2.3, every other
# strategy and lever): FSDP2's fully_shard, MixedPrecisionPolicy and CPUOffloadPolicy became public in
# torch.distributed.fsdp in 2.6 (bench.rank.fsdp imports them there; read in torch 2.3.1, 2.6.0, 2.7.1 and 2.8.0).
TORCH_FLOOR = {"fsdp": (2, 6), "hsdp": (2, 6)}


def torch_release(version: str) -> tuple:
    """(major, minor) of a torch version string: '2.5.1+cu121' -> (2, 5); a pre-release counts as its release."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def check_torch(cfg: SweepConfig, version: Optional[str] = None) -> None:
    """ConfigError where the installed torch (or `version`) is older than a strategy asked for needs: every one of its
    configurations would fail inside its ranks, after the processes had started."""
    if version is None:
        import torch
        version = torch.__version__
    have = torch_release(version)
    for strategy in cfg.strategies:
        need = TORCH_FLOOR.get(strategy)
        if need and have < need:
            want = ".".join(map(str, need))
            raise ConfigError(f"--strategies {strategy}: needs torch>={want} (FSDP2's fully_shard in torch.distributed.fsdp), "
                              f"but this is torch {version}: every {strategy} configuration would fail in its ranks with "
                              f"an ImportError. Install torch>={want}, or leave {strategy} out")


def hsdp_lines(cfg: SweepConfig) -> list:
    """'hsdp mesh: x1 replicate 1 x shard 1 (one shard group: ...), x4 replicate 2 x shard 2' for the sweep's start:
    what one shard group still runs said at the first count that has one, 'as at x1' at the others. No figure: another
    machine's (one H100's 53% slower than FSDP) was quoted in every sweep's header, and the sweep has none yet."""
    if "hsdp" not in cfg.strategies:
        return []
    parts, first = [], None
    for n in cfg.gpus:
        for shard in hsdp_shard_sizes(cfg, n):
            note = ""
            if n == shard:
                note = (f" (one shard group, as at x{first})" if first else
                        f" ({ONE_SHARD_GROUP}; HSDP replicates across groups, e.g. nodes)")
                first = first or n
            parts.append(f"x{n} replicate {n // shard} x shard {shard}{note}")
    how = "as --hsdp-shard-size gave it" if cfg.hsdp_shard_size else "one node's devices, the default; --hsdp-shard-size sets it"
    return [f"hsdp mesh: {', '.join(parts)}; shard size: {how}"]


# ---------------------------------------------------------------- settings that cannot run here

def unused_parameters(cfg: SweepConfig, wl: str, aux: str = "false", info=None) -> tuple:
    """The parameters of a (resolved) workload that get no gradient: deeplabv3's auxiliary classifier when unused,
    a user model's unused head (found by its dry run: registry.info, or the `info` planning has already)."""
    from bench.workloads import deeplabv3, registry
    if wl == "deeplabv3":
        return deeplabv3.unused_parameters(aux)
    return (info or registry.info(wl, cfg)).unused


def needs_unused(strategy: str, options: dict, unused: tuple) -> bool:
    """A DDP configuration that cannot run: parameters get no gradient and find_unused_parameters is off, or static_graph
    is on (it fails with unused parameters, with or without find_unused_parameters: tried on torch 2.14)."""
    return bool(unused) and strategy in DDP_BASED and (not options.get("find_unused_parameters") or options.get("static_graph"))


def unused_refusal(wl: str, unused: tuple, aux: str) -> str:
    """What a DDP configuration of a model whose parameters get no gradient needs, naming them and the flag."""
    what = f"{wl} (--deeplabv3-aux {aux})" if wl == "deeplabv3" else wl
    names = ", ".join(unused[:6]) + (f" and {len(unused) - 6} more" if len(unused) > 6 else "")
    return (f"{what}: {len(unused)} parameter(s) get no gradient ({names}); DDP (ddp, zero) waits for every parameter's "
            "gradient and fails on its second step without --find-unused-parameters true (and with --static-graph true, "
            "which does not allow unused parameters: tried on torch 2.14)")


def option_skip(cfg: SweepConfig, strategy: str, options: dict, unused: tuple = (), wl: str = "",
                aux: str = "false") -> Optional[str]:
    """Why a configuration with these settings cannot run here (recorded as skipped), or None."""
    if options.get("offload", "none") != "none" and cfg.device != "cuda":
        return ("FSDP2's CPU offload (CPUOffloadPolicy) keeps the shards, their gradients and the optimizer step in host "
                "memory to free the GPU's; on CPU there is no device memory to free (it runs on CUDA only)")
    if needs_unused(strategy, options, unused):
        return unused_refusal(wl, unused, aux)
    return None
