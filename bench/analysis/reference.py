"""The reference experiment (ANCHORS.md): DeepLabV3-ResNet101 on Pascal VOC 2012 train (1464 images), 20 epochs,
batch 8 per GPU, 256x256, and the times published for it on V100s; and how long a configuration would take to train
it, measured (its epochs' wall times) or estimated from its throughput.

    bars, how = train_times(configs)        # [(label, seconds for REFERENCE_EPOCHS epochs)], and how they were obtained
    epoch_s = seconds / REFERENCE_EPOCHS    # one epoch (bench.analysis.cost prices it)
"""
from __future__ import annotations

from bench import stats

REFERENCE_IMAGES = 1464
REFERENCE_EPOCHS = 20
REFERENCE_V100_S = (("1x V100", 32 * 60 + 58), ("4x V100, DP", 14 * 60 + 40), ("4x V100, DDP", 11 * 60 + 21),
                    ("8x V100, DP", 9 * 60 + 40), ("8x V100, DDP", 9 * 60 + 8))


def train_times(configs: list) -> tuple:
    """[(label, seconds)] for the reference experiment's 20 epochs, and how they were obtained."""
    measured = all(c.epoch_wall_s for c in configs)
    if measured:
        bars = [(c.label, stats.median(c.epoch_wall_s) * REFERENCE_EPOCHS) for c in configs]
        return bars, f"measured: median epoch wall time x {REFERENCE_EPOCHS}"
    data = configs[0].data if configs else "synthetic"
    bars = [(c.label, stats.train_time_s(c.samples_per_s, REFERENCE_IMAGES, REFERENCE_EPOCHS)) for c in configs]
    return bars, f"estimate from {data}-data throughput: {REFERENCE_EPOCHS} x {REFERENCE_IMAGES} images / samples/s"
