"""What a page calls things: a model given by path by its short name (`shown_names`, `relabel`: the store keeps the
absolute path its processes import), and an image workload's sample by its size (`image_line`).

    names = shown_names(workloads); blocks = relabel(blocks, names); line = image_line(workload, configs)

and the device, its unit and a duration as the report's pages write them (`device_title`, `units`, `hms`).
"""
from __future__ import annotations

import math
import re
from collections import Counter

from bench.workloads.usermodel import display_name


def shown_names(workloads) -> dict:
    """stored name -> the name a page shows, for the workloads whose differ: a model given by path is stored by its
    absolute path (what its processes import and part of each configuration's key), which trial B's report printed in
    every heading, table and plot file name; the page shows `my_model:build` (usermodel.display_name)."""
    ws = list(dict.fromkeys(workloads))
    return {w: display_name(w, ws) for w in ws if display_name(w, ws) != w}


def relabel(bl: list, names: dict) -> list:
    """The blocks with each stored name of `names` replaced by its shown name in their words (headings, paragraphs,
    table cells, image captions; not the images' paths). The code that writes them keeps the stored name, which it
    matches against stored rows; only the page's words change."""
    if not names:
        return bl
    pattern = re.compile("|".join(re.escape(w) for w in sorted(names, key=len, reverse=True)) + r"(?!\w)")
    sub = lambda x: pattern.sub(lambda m: names[m.group(0)], x) if isinstance(x, str) else x  # noqa: E731
    out = []
    for blk in bl:
        if blk[0] == "table":
            blk = ("table", [sub(h) for h in blk[1]], [[sub(x) for x in row] for row in blk[2]])
        elif blk[0] == "img":
            blk = ("img", blk[1], sub(blk[2]))
        elif blk[0] == "imgs":
            blk = ("imgs", [(path, sub(alt)) for path, alt in blk[1]])
        else:
            blk = (*blk[:-1], sub(blk[-1]))
        out.append(blk)
    return out


def image_size(c) -> tuple:
    """('32x32', 3) for a configuration of an image workload: its input (C, H, W) as the dry step saw it (torchvision's
    and a user's model), else the side the run used (deeplabv3) and no channel count; ('', None) where no image."""
    if len(c.input_shape) == 3:
        return f"{c.input_shape[1]}x{c.input_shape[2]}", c.input_shape[0]
    return (f"{c.image_size}x{c.image_size}", None) if c.image_size else ("", None)


def image_line(workload: str, configs: list) -> str:
    """'A sample is one 32x32 image (3 channels; resnet18's natural size is 224x224, --image-size sets it).' under an
    image workload's heading: trial B's resnet18 ran at --image-size 32, which its report said nowhere but in the
    command line, and samples/s at 32 and 224 px differ 50-fold. '' for a workload whose samples are no images."""
    found = [x for x in dict.fromkeys(image_size(c) for c in configs) if x[0]]
    if not found:
        return ""
    natural = configs[0].natural_image_size
    extra = [f"{found[0][1]} channel{'s' if found[0][1] != 1 else ''}"] if len(found) == 1 and found[0][1] else []
    if natural and {c.image_size for c in configs} != {natural}:
        extra.append(f"{workload}'s natural size is {natural}x{natural}, --image-size sets it")
    return (f"A sample is one {' or '.join(size for size, _ in found)} image"
            + (f" ({'; '.join(extra)})" if extra else "") + ".")


def device_title(sweep, device_type: str) -> str:
    """'cuda, 4x NVIDIA A100' or 'cpu, AMD EPYC (2 cores)' from a sweep's (bench.analysis.results.Sweep) environments."""
    env = sweep.envs[0] if sweep.envs else {}
    if device_type == "cuda" and env.get("gpu_names"):
        names = Counter(n.strip() for n in str(env["gpu_names"]).split(","))
        return "cuda, " + ", ".join(f"{k}x {n}" if k > 1 else n for n, k in names.items())
    cores = f" ({env['cpu_cores']} cores)" if env.get("cpu_cores") else ""
    return f"{device_type}, {env.get('cpu_model') or 'unknown CPU'}{cores}"


def units(device_type: str) -> str:
    return "GPUs" if device_type == "cuda" else "processes"


def hms(seconds: float) -> str:
    if seconds is None or math.isnan(seconds):
        return "–"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
