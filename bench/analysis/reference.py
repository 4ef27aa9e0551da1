"""The reference experiment (docs/reference.md): DeepLabV3-ResNet101 on Pascal VOC 2012 train (1464 images), 20 epochs,
batch 8 per GPU, 256x256, and the times published for it on V100s; and how long a configuration would take to train
it, measured (its epochs' wall times) or estimated from its throughput.

    bars, how = train_times(configs)        # [(label, seconds for REFERENCE_EPOCHS epochs)], and how they were obtained
    epoch_s = seconds / REFERENCE_EPOCHS    # one epoch (bench.analysis.cost prices it)
    steps, eager = break_even(c, configs)   # steps after which compiling c has paid for its warm-up
    extra_s, eager = compile_cost(c, configs)  # the warm-up compiling adds; payback_words(c, eager, extra_s) what pays it
    low_s, high_s = process_range(c)        # the reference job per process: its own warm-up, then its own speed
"""
from __future__ import annotations

import math
from typing import Optional

from bench import stats

REFERENCE_IMAGES = 1464
REFERENCE_EPOCHS = 20
REFERENCE_IMAGE_PX = 256     # the published runs' crop, and their per-GPU batch
REFERENCE_BATCH = 8
REFERENCE_V100_S = (("1x V100", 32 * 60 + 58), ("4x V100, DP", 14 * 60 + 40), ("4x V100, DDP", 11 * 60 + 21),
                    ("8x V100, DP", 9 * 60 + 40), ("8x V100, DDP", 9 * 60 + 8))


def train_times(configs: list) -> tuple:
    """[(label, seconds)] for the reference experiment's 20 epochs, and how they were obtained. Compilation and the
    warm-up are part of a job's time: measured epochs add the compilation before the first one; an estimate takes the
    measured warm-up steps as they ran (compilation and cuDNN's autotuning in them) and the rest of the images at the
    measured throughput (bf16 compiled on one H100: 3m00s at its throughput, 84 s of compilation on top)."""
    compiled = any(c.compiled for c in configs)
    smaller = _smaller_epochs(configs)
    if not estimated(configs):
        bars = [(c.label, stats.median(c.epoch_wall_s) * REFERENCE_EPOCHS
                 + (c.compile_s if c.compile_s is not None and not math.isnan(c.compile_s) else 0.0)) for c in configs]
        return bars, (f"measured: median epoch wall time x {REFERENCE_EPOCHS}"
                      + (", plus compilation before the first epoch" if compiled else ""))
    data = configs[0].data if configs else "synthetic"
    bars = [(c.label, job_s(c, REFERENCE_IMAGES * REFERENCE_EPOCHS)) for c in configs]
    # epochs of another size than VOC train's are not its epochs: 8 images x 20 read '0m36s' beside the V100s' 33 min
    held = (f"the measured epochs held {'/'.join(map(str, smaller))} images, not VOC 2012 train's {REFERENCE_IMAGES}: "
            if smaller else "")
    cuda = any(c.device_type == "cuda" for c in configs)
    in_warmup = (" (compilation and autotuning in them)" if compiled else " (cuDNN's autotuning in them)" if cuda else "")
    return bars, (f"estimate: {held}the measured warm-up steps{in_warmup}"
                  + f", then the rest of {REFERENCE_EPOCHS} x {REFERENCE_IMAGES} images at the {data}-data samples/s")


def _smaller_epochs(configs: list) -> list:
    return sorted({c.epoch_images for c in configs if getattr(c, "epoch_images", None)} - {REFERENCE_IMAGES})


def estimated(configs: list) -> bool:
    """Whether train_times estimates (warm-up, then the rest at the throughput) rather than times measured epochs."""
    return not (all(c.epoch_wall_s for c in configs) and not _smaller_epochs(configs))


def shape_note(configs: list) -> str:
    """'' where every configuration trained the published shape (256x256 crops, batch 8 per device); else what differs,
    so the times are not read beside the published ones as like for like (a 32 px CPU sweep printed 1h45m54s above the
    V100s' 256 px times, naming its size nowhere)."""
    sizes = sorted({c.image_size for c in configs if getattr(c, "image_size", None)})
    batches = sorted({c.global_batch // max(1, c.device_count) for c in configs})
    off = []
    if sizes and sizes != [REFERENCE_IMAGE_PX]:
        off.append(f"{'/'.join(f'{s}x{s}' for s in sizes)} px images (the published runs: {REFERENCE_IMAGE_PX}x{REFERENCE_IMAGE_PX})")
    if batches and batches != [REFERENCE_BATCH]:
        off.append(f"per-device batch {'/'.join(map(str, batches))} (published: {REFERENCE_BATCH})")
    if not off:
        return ""
    return (f"This sweep trained {' and '.join(off)}: its times are this shape's, not comparable with the published "
            f"ones below; --image-size {REFERENCE_IMAGE_PX} --per-device-batch {REFERENCE_BATCH} measures the published shape.")


def job_s(c, samples: int) -> float:
    """Seconds to train `samples` samples: the warm-up as measured (its steps, compilation included), then the rest at
    the measured throughput; the throughput alone where no warm-up was recorded (older stores)."""
    return _job_s(c, c.warmup_s, c.samples_per_s, samples)


def _job_s(c, warmup_s: float, samples_per_s: float, samples: int) -> float:
    warm = warmup_s if not math.isnan(warmup_s) else 0.0
    rest = max(0, samples - c.warmup_steps * c.global_batch) if not math.isnan(warmup_s) else samples
    return warm + stats.train_time_s(samples_per_s, rest, 1)


def process_range(c, samples: int = REFERENCE_IMAGES * REFERENCE_EPOCHS) -> tuple:
    """(fastest, slowest) seconds to train `samples` over c's processes, each its own warm-up and then the rest at its
    own throughput: one H200's DeepLabV3 [bf16] ran 140.3-166.0 samples/s in 3 processes (3m02s-3m44s each) and the
    report gave 3m17s alone. Each process's warm-up where the configuration carries them (`process_warmup_s`, in the
    order of process_sps), else the median warm-up for each. (nan, nan) under two processes."""
    if len(c.process_sps) < 2:
        return math.nan, math.nan
    warms = list(getattr(c, "process_warmup_s", None) or ())
    if len(warms) != len(c.process_sps):
        warms = [c.warmup_s] * len(c.process_sps)
    times = [_job_s(c, w, sps, samples) for w, sps in zip(warms, c.process_sps)]
    return min(times), max(times)


def uncompiled_key(key: str) -> str:
    """The configuration key (bench.shared.spec.RunSpec.key) of the same configuration uncompiled: every field but
    `compiled` (precision, format, settings, optimizer, activation checkpointing, shape, batch, count, nodes) kept."""
    return "/".join(part for part in key.split("/") if part != "compiled")


def break_even(c, configs: list) -> Optional[tuple]:
    """(steps, eager twin) after which compiling `c` has paid for its longer warm-up: the warm-up it adds over the
    same configuration uncompiled (its key but for `compiled`: a compiled ac=full run is never held against an eager
    ac=none one), over the time it saves a step; steps nan where it saves nothing. None where `c` is not compiled or
    has no measured eager twin."""
    cost = compile_cost(c, configs)
    if cost is None:
        return None
    extra_s, twin = cost
    saved_s = c.global_batch / twin.samples_per_s - c.global_batch / c.samples_per_s
    return (max(0.0, extra_s) / saved_s if saved_s > 0 else math.nan), twin


def compile_cost(c, configs: list) -> Optional[tuple]:
    """(seconds, eager twin): the warm-up compiling `c` adds over the same configuration uncompiled (`break_even`'s twin),
    compilation net of eager's own warm-up (cuDNN's autotuning is in both: 74.93 s against 4.45 s on one H200 is 70.5 s
    of compilation, not 74.9). None where `c` is not compiled or has no measured eager twin."""
    if not c.compiled:
        return None
    twin = next((e for e in configs if not e.compiled and uncompiled_key(c.key) == e.key), None)
    if twin is None or math.isnan(c.warmup_s) or math.isnan(twin.warmup_s):
        return None
    return c.warmup_s - twin.warmup_s, twin


GAIN = 0.10   # the step gain payback_words prices: what a user would hope compiling buys


def reference_steps(c) -> int:
    """The reference job's steps at c's global batch: 20 epochs x 1464 images / 8 = 3,660."""
    return math.ceil(REFERENCE_EPOCHS * REFERENCE_IMAGES / c.global_batch)


def payback_words(c, twin, extra_s: float) -> str:
    """What compiling would have to buy to pay for `extra_s` more warm-up than `twin` (eager), where the two throughputs
    are not told apart, so no break-even can be read off them: 'compilation costs 70.5 s more warm-up (74.9 s against
    4.5 s): to pay it back within the reference job (20 epochs x 1464 images / batch 8 = 3,660 steps) the compiled step
    would have to be at least 1.6x faster than eager's; a step 10% shorter pays after ~13,900 steps (76 epochs of VOC 2012
    train)'. One H200's compile table read 'never' on one unstable process each, 6% apart, inside the noise."""
    warm = f" ({c.warmup_s:.1f} s against {twin.warmup_s:.1f} s)"
    if extra_s <= 0:
        return f"compilation costs no more warm-up than eager's here{warm}: any speed-up pays from the first step"
    step_s = c.global_batch / twin.samples_per_s   # eager's step at its throughput, as break_even's
    gain_steps = extra_s / (GAIN * step_s)
    shown = f"{round(gain_steps, -2):,.0f}" if gain_steps >= 1000 else f"{math.ceil(gain_steps)}"
    per_epoch = REFERENCE_IMAGES / c.global_batch
    at_gain = (f"a step {GAIN:.0%} shorter pays after ~{shown} steps"
               + (f" ({gain_steps / per_epoch:.0f} epochs of VOC 2012 train)" if c.workload == "deeplabv3" else ""))
    head = f"compilation costs {extra_s:.1f} s more warm-up{warm}"
    if c.workload != "deeplabv3":
        return f"{head}: {at_gain}"
    steps = reference_steps(c)
    job = (f"the reference job ({REFERENCE_EPOCHS} epochs x {REFERENCE_IMAGES} images / batch {c.global_batch} = "
           f"{steps:,} steps)")
    left_s = step_s - extra_s / steps   # the compiled step that pays it back by the job's end
    ratio = step_s / left_s if left_s > 0 else math.inf
    need = (f"no compiled step pays it back within {job}" if left_s <= 0 else
            f"to pay it back within {job} the compiled step would have to be at least {ratio:.{2 if ratio < 1.1 else 1}f}x "
            f"faster than eager's")
    return f"{head}: {need}; {at_gain}"

