"""The lines a sweep starts with: every value that was filled in for the user, and the choices made for them.

    for line in describe_resolved(resolved_cfg, given_flag_names): print(line)
"""
from __future__ import annotations

from bench.config import SweepConfig
from bench.shared import rehearsal
from bench.sweep import settings
from bench.sweep.plan import noise_probes
from bench.workloads import registry


def describe_resolved(cfg: SweepConfig, given: set) -> list:
    """Lines for the start of a sweep: every value that was filled in for the user, and the choices made for them."""
    from dataclasses import fields
    lines = []
    shown = ("strategies", "gpus", "repeats", "noise_repeats", "steps", "min_window_s", "warmup", "per_device_batch", "image_size", "pg_timeout", "threads_per_process",
             "synthetic_width", "synthetic_depth", "num_workers", "gpus_per_node", "memory_budget_gib", "transformer_preset",
             "transformer_layers", "transformer_width", "transformer_heads", "seq_len")
    filled = [f"--{f.name.replace('_', '-')} {_text(getattr(cfg, f.name))}" for f in fields(cfg)
              if f.name in shown and f.name not in given and getattr(cfg, f.name) is not None and applies(cfg, f.name)]
    if filled:
        lines.append("defaults for this device: " + ", ".join(filled))
    if "strategies" not in given and "dp" not in cfg.strategies:
        lines.append("DataParallel: left out on CPU, where nn.DataParallel has no GPU to replicate to and its forward "
                     "calls the model itself (it would time single again); --strategies single,dp,ddp runs it anyway")
    if cfg.profile and "profile" not in given:
        lines.append(f"traces: {cfg.profile_steps} steps under torch.profiler after every measured window, the GPU's busy "
                     "share behind the report's bound (their cost is printed at the end; --no-profile skips them)")
    if cfg.noise_repeats and cfg.noise_repeats > cfg.repeats:
        lines.append(_noise_line(cfg))
    if cfg.fresh_interpreters is False and "fresh_interpreters" not in given:
        lines.append("processes: forked from a server that has imported torch once (~1.5 s of CPU less each; "
                     "--fresh-interpreters starts each as a new interpreter)")
    if cfg.timeout is None:
        lines.append("per-configuration limit: follows the work (start-up allowance, then 3x the time the first "
                     "measured steps project); --timeout S sets a fixed one")
    if cfg.weights:
        lines += registry.check_weights(cfg.weights, [w for w in cfg.workloads if w != "synthetic"])
    lines += settings.hsdp_lines(cfg)
    if cfg.device == "cuda" and rehearsal.active():
        lines.append(rehearsal.START_LINE)
    if cfg.scaling == "strong":
        lines.append(f"strong scaling: global batch {cfg.global_batch or 'per-device batch x ' + str(max(cfg.gpus))}; "
                     "a replica holding more than --per-device-batch samples accumulates gradients over micro-batches")
    return lines


def applies(cfg: SweepConfig, name: str) -> bool:
    """Whether a filled-in default acts on this sweep: a transformer-only sweep's header listed --synthetic-width 1024,
    and an --epochs sweep's --steps 6 and --min-window-s 1, values that decide nothing there."""
    if name.startswith("synthetic_"):
        return "synthetic" in cfg.workloads
    if name.startswith("transformer_") or name == "seq_len":
        return "transformer" in cfg.workloads
    if name in ("steps", "min_window_s"):
        return not cfg.epochs          # epochs run whole passes over the data, not a window of steps
    if name == "num_workers":          # DataLoader workers feed the VOC loader only; synthetic batches are pre-generated
        return cfg.data == "voc" and "deeplabv3" in cfg.workloads
    return True


def _noise_line(cfg: SweepConfig) -> str:
    """'process noise: synthetic single [fp32] and [bf16] each run in 3 processes, ...': the probe of every precision
    (bench.sweep.plan.noise_probes), since a figure measured at one precision does not speak for another."""
    probes = noise_probes(cfg)
    wl, strategy = probes[0][:2]
    several = len(probes) > 1
    return (f"process noise: {wl} {strategy} {' and '.join(f'[{p[2]}]' for p in probes)} "
            f"{'each run' if several else 'runs'} in {cfg.noise_repeats} processes, the spread every single-process "
            f"comparison {'at that precision ' if several else ''}of this device is held against "
            "(--noise-repeats sets how many)")


def _text(v) -> str:
    return ",".join(map(str, v)) if isinstance(v, tuple) else f"{v:g}" if isinstance(v, float) else str(v)
