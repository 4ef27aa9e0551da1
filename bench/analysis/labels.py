"""How the report names a configuration: its variant (precision, memory format, compilation, settings, optimizer,
activation checkpointing, DeepLabV3's auxiliary head) and its label ('DDP x2 [bf16, bucket_cap_mb=100.0]'), from its
fields or a stored results row. Moved out of results.py (which re-exports them) when that grew past 400 lines."""
from __future__ import annotations

import json

from bench.shared.spec import STRATEGY_NAMES, default_mesh


def variant(precision: str, channels_last: bool, compiled: bool, options: dict, optimizer: str = "sgd",
            ac: str = "none", aux: str = "false", per_node: int = 0) -> str:
    """'fp32', 'bf16, channels_last, bucket_cap_mb=100, adamw, ac=full, aux=true': a configuration's precision, memory
    format, compilation, strategy settings, optimizer (when not SGD), activation checkpointing (when on) and DeepLabV3's
    auxiliary classifier (when on: --deeplabv3-aux), as its label shows them.

    per_node: the run's devices per node (its count over its nodes). HSDP's shard size equal to it is the default mesh,
    one shard group per node, which the sweep stores with every HSDP run (the ranks build their mesh from it) but which
    changes with the count: named, it made HSDP x1 [shard_size=1] and x2 [shard_size=2] two series of one point each,
    with no efficiency, no line and no forecast check. Only a shard size other than one node's devices is a setting."""
    parts = [precision] + (["channels_last"] if channels_last else []) + (["compiled"] if compiled else [])
    shown = {k: v for k, v in options.items() if not (k == "shard_size" and default_mesh(v, per_node))}
    parts += [f"{k}={v}" for k, v in sorted(shown.items())] + ([optimizer] if optimizer and optimizer != "sgd" else [])
    return ", ".join(parts + ([f"ac={ac}"] if ac and ac != "none" else []) + ([f"aux={aux}"] if aux and aux != "false" else []))


def row_aux(r: dict) -> str:
    """--deeplabv3-aux of a results row (its spec; 'false' where the spec predates it)."""
    return json.loads(r["spec_json"] or "{}").get("deeplabv3_aux") or "false" if "spec_json" in r.keys() else "false"


def label(strategy: str, device_count: int, variant_text: str) -> str:
    """'single device x1', 'single device x1 [fp32, compiled]', 'DDP x2 [bf16, bucket_cap_mb=100.0]': strategy and
    count, then everything else that tells a configuration apart (its variant) unless that is plain 'fp32' (fp32,
    no settings changed, SGD). Every table, sentence and plot of the report names a configuration by it."""
    return f"{STRATEGY_NAMES.get(strategy, strategy)} x{device_count}" + (f" [{variant_text}]" if variant_text != "fp32" else "")


def row_variant(r: dict) -> str:
    """The variant of a results row (one that did not run too)."""
    return variant(r["precision"] or "fp32", bool(r["channels_last"]), bool(r["compiled"]), json.loads(r["options_json"] or "{}"),
                   (r["optimizer"] if "optimizer" in r.keys() else None) or "sgd",
                   (r["activation_checkpointing"] if "activation_checkpointing" in r.keys() else None) or "none", row_aux(r),
                   int(r["device_count"] or 0) // int(r["nodes"] or 1))
