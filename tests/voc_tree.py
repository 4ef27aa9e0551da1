"""Small fake Pascal VOC 2012 trees for tests: `make_voc_tree(tmp_path)` -> a root holding VOCdevkit/VOC2012.

Each image is dark (grey 20) with one bright (grey 235) rectangle; its mask (a palette PNG with
VOC's colours, as the real SegmentationClass files are) holds the rectangle's class (1..20) exactly
where the image is bright, 0 elsewhere, and a ring of 255 ("ignore", as VOC outlines objects) just
outside the rectangle, where the image is dark. So a test can check image/mask alignment after any
geometric transform by comparing brightness with labels. Usable from any test:

    from voc_tree import make_voc_tree, voc_ids
    root = make_voc_tree(tmp_path, n_images=7, sizes=[(40, 48), (36, 52)])
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from PIL import Image

DARK, BRIGHT = 20, 235
BORDER = 2  # width of the 255 ring in pixels


def voc_palette() -> list:
    """VOC's 256-colour palette (label k -> the colour of the bit-interleaved colour map; 255 -> (224, 224, 192))."""
    palette = []
    for k in range(256):
        r = g = b = 0
        c = k
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        palette += [r, g, b]
    return palette


def voc_ids(n: int, start: int = 1) -> list:
    return [f"2007_{i:06d}" for i in range(start, start + n)]


def object_box(height: int, width: int, i: int) -> tuple:
    """(top, left, bottom, right) of image i's bright rectangle: about half the image, shifted per image."""
    top = height // 4 + i % 3
    left = width // 5 + (i * 2) % 5
    return top, left, top + height // 2, left + width // 2


def write_pair(base: Path, image_id: str, height: int, width: int, i: int, label: int, with_border: bool) -> None:
    top, left, bottom, right = object_box(height, width, i)
    pixels = np.full((height, width, 3), DARK, np.uint8)
    pixels[top:bottom, left:right] = BRIGHT
    mask = np.zeros((height, width), np.uint8)
    if with_border:
        mask[max(top - BORDER, 0):bottom + BORDER, max(left - BORDER, 0):right + BORDER] = 255
    mask[top:bottom, left:right] = label
    Image.fromarray(pixels, "RGB").save(base / "JPEGImages" / f"{image_id}.jpg", quality=95)
    png = Image.frombytes("P", (width, height), mask.tobytes())
    png.putpalette(voc_palette())
    png.save(base / "SegmentationClass" / f"{image_id}.png")


def make_voc_tree(root: Path, n_images: int = 6, size: tuple = (40, 48), sizes: Optional[Sequence[tuple]] = None,
                  with_border: bool = True, val_images: int = 2) -> Path:
    """Write root/VOCdevkit/VOC2012 with `n_images` train and `val_images` val pairs; return root.

    size: (height, width) of every image in pixels; sizes: a list of (height, width) used in turn
    instead, for a split of varied sizes as the real VOC has. Image i's label is 1 + i % 20.
    """
    root = Path(root)
    base = root / "VOCdevkit" / "VOC2012"
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    sizes = list(sizes) if sizes else [size]
    ids = voc_ids(n_images + val_images)
    for i, image_id in enumerate(ids):
        height, width = sizes[i % len(sizes)]
        write_pair(base, image_id, height, width, i, 1 + i % 20, with_border)
    (base / "ImageSets/Segmentation/train.txt").write_text("".join(f"{x}\n" for x in ids[:n_images]))
    (base / "ImageSets/Segmentation/val.txt").write_text("".join(f"{x}\n" for x in ids[n_images:]))
    return root
