"""A configuration's memory rows (bench.store's memory table, one per rank, device and repeat) as the report reads them:
the peaks per device label, net of the suite's pre-generated batches, the training state each rank held, the GPUs used.

    alloc, reserved, level, run_level = per_device(rows, "cuda", per_node)
    run_reserved(rows, "cuda", per_node) -> {device: the whole run's allocator peak reserved}
    state(rows) -> {rank: {params_mib, grads_mib, ...}}     device_names(rows) -> ("NVIDIA H100 ...", ...)
"""
from __future__ import annotations

STATE_KEYS = ("params_mib", "grads_mib", "optimizer_mib", "buckets_mib")


def per_device(rows: list, device_type: str, per_node: int = 0) -> tuple:
    """(allocated, reserved, device level, whole run's device level) per device label, net of artefacts, max over
    repeats. CPU: RSS per rank. The whole run's: read at the warm-up's end, before the post-warm-up reset (compilation's memory still held,
    cuDNN's benchmark workspaces already given back: `run_reserved` keeps what the allocator held during the warm-up).
    per_node: ranks per node of a multi-node run (0: one node). Every node numbers its GPUs cuda:0.., so there a label
    is 'node K cuda:i', node K holding ranks K*per_node.. (torchrun numbers ranks node by node): never one node's
    cuda:0 merged with another's."""
    alloc: dict = {}
    reserved: dict = {}
    level: dict = {}
    run_level: dict = {}
    for m in rows:
        net = float(m.get("artefact_mib") or 0.0)
        if device_type == "cuda" and str(m["device"]).startswith("cuda") and m["peak_allocated_mib"] is not None:
            d = f"node {int(m['rank']) // per_node} {m['device']}" if per_node else str(m["device"])
            alloc[d] = max(alloc.get(d, 0.0), float(m["peak_allocated_mib"]) - net)
            if m.get("peak_reserved_mib") is not None:
                reserved[d] = max(reserved.get(d, 0.0), float(m["peak_reserved_mib"]) - net)
            if m.get("device_used_mib") is not None:
                level[d] = max(level.get(d, 0.0), float(m["device_used_mib"]) - net)
            if m.get("run_device_used_mib") is not None:
                run_level[d] = max(run_level.get(d, 0.0), float(m["run_device_used_mib"]) - net)
        elif device_type != "cuda" and m["peak_rss_mib"] is not None:
            label = f"rank {m['rank']}"
            alloc[label] = max(alloc.get(label, 0.0), float(m["peak_rss_mib"]))
    return alloc, reserved, level, run_level


def run_reserved(rows: list, device_type: str, per_node: int = 0) -> dict:
    """device label (as `per_device` labels it) -> the allocator's peak reserved over the whole run (warm-up, cuDNN's
    benchmark search, compilation), net of artefacts, max over repeats; {} on CPU or where none was stored. What the
    warm-up held and gave back before the device level was read (DeepLabV3 fp32 on an H200: 21234 MiB reserved in the
    warm-up, the device level 5609 MiB after it): bench.analysis.fit.warmup_held reads it."""
    out: dict = {}
    for m in rows if device_type == "cuda" else ():
        if str(m.get("device", "")).startswith("cuda") and m.get("run_peak_reserved_mib") is not None:
            d = f"node {int(m['rank']) // per_node} {m['device']}" if per_node else str(m["device"])
            mib = float(m["run_peak_reserved_mib"]) - float(m.get("artefact_mib") or 0.0)
            out[d] = max(out.get(d, mib), mib)
    return out


def state(rows: list) -> dict:
    """rank -> the training state it held (bench.rank.memory.state_mib) and its RSS before the model; max over repeats."""
    out: dict = {}
    for m in rows:
        if m.get("params_mib") is None:
            continue
        got = out.setdefault(int(m["rank"]), {})
        for k in STATE_KEYS + ("baseline_rss_mib",):
            if m.get(k) is not None:
                got[k] = max(got.get(k, 0.0), float(m[k]))
    return out


def device_names(rows: list) -> tuple:
    """The GPU name of each device the configuration used (one per rank and device), from its memory rows."""
    names = {(m["rank"], str(m["device"])): m.get("device_name") for m in rows
             if str(m["device"]).startswith("cuda") and m.get("device_name")}
    return tuple(names[k] for k in sorted(names))
