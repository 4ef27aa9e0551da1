"""Pascal VOC 2012 segmentation data: find and check the tree, load (image, mask) pairs, shard epochs.

Used by the worker for `--data voc`; `bench.config` calls `check_tree` once, up front, before any
process starts. The pieces, in the order a run uses them:

    check_tree(root)                        # cheap: folders, split file, every .jpg/.png exists
    ds = VOCTrain(root, "train", image_size=256)
    loader, sampler = make_loader(ds, per_rank_batch, rank=r, world_size=n, distributed=True, ...)
    for epoch in range(epochs):
        set_epoch(loader, epoch)            # a new permutation each epoch, the same on every rank
        for image, mask in loader: ...      # float32 [B,3,S,S] normalised, int64 [B,S,S] with 255 = ignore

Epochs and the last uneven batch (the design, see `make_loader`): every strategy walks the same
seeded permutation of the split in blocks of the global batch G; DDP rank r takes every n-th sample
of each block, single/DataParallel takes the whole block. Only whole blocks are used, so within an
epoch each image is consumed at most once, by one rank, every rank takes the same number of steps
(no collective waits on a rank that has run out) and every batch is full (DeepLabV3's BatchNorm
fails on a replica batch of 1). The N mod G images left over are dropped; they are a fresh random
choice each epoch. `epoch_indices` and `coverage` let the worker record and check exactly which
images each rank consumed.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Union

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from bench.config import ConfigError

IGNORE_INDEX = 255  # VOC's object outlines and "difficult" pixels; the loss skips them
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DataError(ConfigError):
    """A problem with the data set; the message names the file (and the sample index where there is one).

    Constructed from the message alone, so a DataLoader worker can re-raise it in the main process
    (its ExceptionWrapper calls `DataError(text)` with the original message inside the text).
    """


# ---------------------------------------------------------------- the tree on disk

def voc_dir(root: str) -> str:
    """The VOC2012 folder for `root`: root/VOCdevkit/VOC2012, root itself, or root/VOC2012."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise DataError(f"VOC root {root!r} does not exist or is not a folder; expected the folder holding VOCdevkit/VOC2012 "
                        "(or pass --download to fetch VOC 2012 into it)")
    candidates = (os.path.join(root, "VOCdevkit", "VOC2012"), root, os.path.join(root, "VOC2012"))
    for path in candidates:
        if os.path.isdir(os.path.join(path, "JPEGImages")) or os.path.isdir(os.path.join(path, "ImageSets")):
            return path
    raise DataError(f"VOC root {root!r} holds no VOC 2012 tree; looked for JPEGImages/ or ImageSets/ in "
                    f"{', '.join(repr(c) for c in candidates)}")


def split_file(root: str, image_set: str = "train") -> str:
    return os.path.join(voc_dir(root), "ImageSets", "Segmentation", f"{image_set}.txt")


def split_files(root: str, image_set: str = "train") -> tuple:
    """(images, masks): the .jpg and .png paths of every id in the split, in file order."""
    base = voc_dir(root)
    path = split_file(root, image_set)
    if not os.path.isfile(path):
        raise DataError(f"VOC split file {path!r} is missing; expected one image id per line "
                        f"(image_set {image_set!r} under {base!r})")
    try:
        with open(path) as f:
            ids = [line.strip() for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"VOC split file {path!r} cannot be read: {e}") from None
    if not ids:
        raise DataError(f"VOC split file {path!r} lists no image ids; expected one id per line")
    images = [os.path.join(base, "JPEGImages", i + ".jpg") for i in ids]
    masks = [os.path.join(base, "SegmentationClass", i + ".png") for i in ids]
    return images, masks


def check_tree(root: str, image_set: str = "train") -> None:
    """Fast up-front check: the tree, the split file, and that every listed .jpg and .png exists (none opened)."""
    images, masks = split_files(root, image_set)
    for index, (image, mask) in enumerate(zip(images, masks)):
        for path in (image, mask):
            if not os.path.isfile(path):
                raise DataError(f"VOC file {path!r} is missing (sample {index} of {split_file(root, image_set)!r})")


def download(root: str) -> None:
    """Fetch and unpack VOC 2012 trainval (about 2 GB) into root/VOCdevkit/VOC2012. Rank 0 only, on --download."""
    from torchvision.datasets import VOCSegmentation
    try:
        check_tree(root)
        return  # already there (an earlier configuration of the sweep fetched it): no second 2 GB unpack
    except DataError:
        pass
    os.makedirs(root, exist_ok=True)
    try:
        VOCSegmentation(root, year="2012", image_set="train", download=True)
    except Exception as e:  # network, disk or checksum: all end the run with the same named error
        raise DataError(f"downloading VOC 2012 into {root!r} failed: {type(e).__name__}: {e}") from e


# ---------------------------------------------------------------- the dataset

def train_transforms(image_size: int):
    """The same geometric transforms for image and mask (the mask, a tv_tensors.Mask, is resized with
    nearest neighbour, so it only ever holds its original labels); dtype and normalisation on the image only."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2
    return v2.Compose([
        v2.ToImage(),
        v2.RandomResizedCrop((image_size, image_size), scale=(0.5, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64}, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def _open(path: str, index: int, kind: str) -> Image.Image:
    if not os.path.isfile(path):
        raise DataError(f"VOC {kind} {path!r} is missing (sample {index})")
    try:
        img = Image.open(path)
        img.load()  # decode now: a truncated file fails here, not inside a transform
    except (OSError, SyntaxError, ValueError) as e:
        raise DataError(f"VOC {kind} {path!r} cannot be read (sample {index}): {type(e).__name__}: {e}") from None
    return img


class VOCTrain(Dataset):
    """VOC 2012 segmentation pairs, augmented: (image float32 [3,S,S] normalised, mask int64 [S,S]).

    Reads the layout of torchvision's VOCSegmentation (which `download` uses) from `split_files`, so
    the VOC2012 folder itself is accepted too. Augmentation draws from torch's global RNG: in a
    DataLoader worker that is seeded from the loader's generator (see `make_loader`), so a run is
    repeatable for a given seed, rank and num_workers, but the crop of one image is not tied to
    (seed, epoch, index).
    """

    def __init__(self, root: str, image_set: str = "train", image_size: int = 256):
        self.images, self.masks = split_files(root, image_set)
        self.image_size = image_size
        self.transforms = train_transforms(image_size)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple:
        from torchvision import tv_tensors
        image_path, mask_path = self.images[index], self.masks[index]
        image = _open(image_path, index, "image").convert("RGB")
        mask = _open(mask_path, index, "mask")
        if mask.mode not in ("P", "L"):
            raise DataError(f"VOC mask {mask_path!r} (sample {index}) has PIL mode {mask.mode!r}; "
                            "expected one class index per pixel (palette 'P' or 'L')")
        if image.size != mask.size:
            raise DataError(f"VOC image {image_path!r} is {image.size[0]}x{image.size[1]} but its mask {mask_path!r} "
                            f"is {mask.size[0]}x{mask.size[1]} (width x height, sample {index}); expected the same size")
        image, mask = self.transforms(image, tv_tensors.Mask(mask))
        return image.as_subclass(torch.Tensor), mask.as_subclass(torch.Tensor).squeeze(0)


# ---------------------------------------------------------------- loaders and epochs

def make_loader(dataset: Dataset, batch_size: int, *, rank: int, world_size: int, distributed: bool,
                num_workers: int, pin_memory: bool, persistent_workers: bool, seed: int,
                drop_last: bool = True) -> tuple:
    """(loader, sampler). DDP: batch_size is the per-rank batch; single/DataParallel: the global batch.

    Both use a DistributedSampler seeded with `seed` (single/DataParallel as its only replica, no
    process group needed), so every strategy walks the same permutation, reshuffled by `set_epoch`:
    DDP step k's ranks together consume exactly the samples of single's step k at the same global batch.

    drop_last=True (the default, the design): the sampler drops the N mod world_size tail so no rank
    gets padded repeats, and the DataLoader drops each rank's partial last batch. Each image is used at
    most once per epoch, every rank takes floor(N / G) full steps (G = the global batch), the
    N mod G dropped images change every epoch. drop_last=False keeps every image instead, at the price
    of up to world_size - 1 repeated images (the sampler pads with them so ranks take the same number of
    steps) and a partial last batch, which can be 1 sample and break BatchNorm.
    """
    replicas, r = (world_size, rank) if distributed else (1, 0)
    sampler = DistributedSampler(dataset, num_replicas=replicas, rank=r, shuffle=True, seed=seed, drop_last=drop_last)
    generator = torch.Generator()
    generator.manual_seed(seed * 1000 + rank)  # seeds each worker's RNG, hence the augmentation
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                        pin_memory=pin_memory, drop_last=drop_last, generator=generator,
                        persistent_workers=persistent_workers and num_workers > 0)
    return loader, sampler


def _sampler(loader_or_sampler: Union[DataLoader, DistributedSampler]):
    return loader_or_sampler.sampler if isinstance(loader_or_sampler, DataLoader) else loader_or_sampler


def set_epoch(loader_or_sampler: Union[DataLoader, DistributedSampler], epoch: int) -> None:
    """Call before each epoch: a new permutation, the same on every rank (DistributedSampler seeds it with seed + epoch)."""
    sampler = _sampler(loader_or_sampler)
    if not hasattr(sampler, "set_epoch"):
        raise TypeError(f"set_epoch: {type(sampler).__name__} has no set_epoch; use a loader from make_loader")
    sampler.set_epoch(epoch)


def epoch_indices(loader: DataLoader, epoch: int) -> list:
    """The dataset indices this rank's loader consumes in `epoch`, in order (whole batches only when it drops the last).

    Computed from the sampler without loading anything; the sampler's own epoch is left as it was.
    """
    sampler = loader.sampler
    before = getattr(sampler, "epoch", 0)
    sampler.set_epoch(epoch)
    try:
        indices = list(iter(sampler))
    finally:
        sampler.set_epoch(before)
    if loader.drop_last and loader.batch_size:
        indices = indices[:len(indices) // loader.batch_size * loader.batch_size]
    return indices


def coverage(per_rank: list, n_images: int) -> dict:
    """How an epoch covered the split, from every rank's `epoch_indices`: counts of images seen, repeated, dropped."""
    counts = Counter(i for rank in per_rank for i in rank)
    return {"images": n_images,
            "images_seen": len(counts),
            "images_repeated": sum(1 for c in counts.values() if c > 1),
            "images_dropped": n_images - len(counts)}
