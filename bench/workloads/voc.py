"""Pascal VOC 2012 segmentation data: find and check the tree, load (image, mask) pairs, shard epochs.

Used by the worker for `--data voc`; `bench.sweep.plan` calls `check_tree` once, up front, before any
process starts. The pieces, in the order a run uses them:

    check_tree(root)                        # cheap: folders, split file, every .jpg/.png exists
    ds = VOCTrain(root, "train", image_size=256, seed=0)
    sampler = StepSampler(len(ds), replicas=n, fed=[rank], batch=per_replica_batch, seed=0)
    loader = make_loader(ds, sampler, num_workers=2, pin_memory=True, persistent_workers=True)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)            # a new permutation each epoch, the same for every process
        for image, mask in loader: ...      # float32 [B,3,S,S] normalised, uint8 [B,S,S] with 255 = ignore

Epochs and the last uneven batch: see `StepSampler`. `epoch_indices` and `coverage` let the worker
record and check exactly which images each rank consumed.
"""
from __future__ import annotations

import os
from collections import Counter

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler

from bench.config import ConfigError

PREFETCH_FACTOR = 2  # batches each loader worker keeps ready in /dev/shm (torch's default; bench.sweep.shm budgets it)
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
    """Fetch and unpack VOC 2012 trainval (about 2 GB) into root/VOCdevkit/VOC2012. The sweep process, on --download."""
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


def download_before_runs(cfg, log=print) -> None:
    """--download, in the process that launches the runs (sweep, ab, tune), before any rank starts: no rank
    waits in a collective while another fetches 2 GB (NCCL would time out)."""
    if cfg.data == "voc" and cfg.download:
        log(f"--download: VOC 2012 into {cfg.voc_root} (about 2 GB, once; a complete tree is left alone)")
        download(cfg.voc_root)


# ---------------------------------------------------------------- the dataset

def train_transforms(image_size: int):
    """The same geometric transforms for image and mask (the mask, a tv_tensors.Mask, is resized with
    nearest neighbour, so it only ever holds its original labels); dtype and normalisation on the image only.
    The mask stays uint8 (labels 0-20 and 255) through workers, shared memory and the host-to-device copy:
    int64 would move 8x the bytes it holds; the loss widens it on the device."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2
    return v2.Compose([
        v2.ToImage(),
        v2.RandomResizedCrop((image_size, image_size), scale=(0.5, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.uint8}, scale=True),
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
    """VOC 2012 segmentation pairs, augmented: (image float32 [3,S,S] normalised, mask uint8 [S,S]).

    Reads the layout of torchvision's VOCSegmentation (which `download` uses) from `split_files`, so
    the VOC2012 folder itself is accepted too. Given (index, epoch), as StepSampler yields them, the
    random crop and flip of a sample are seeded by (seed, epoch, index): every strategy, rank and
    DataLoader worker produces the same augmented sample, which the equivalence gate relies on.
    """

    def __init__(self, root: str, image_set: str = "train", image_size: int = 256, seed: int = 0):
        self.images, self.masks = split_files(root, image_set)
        self.image_size, self.seed = image_size, seed
        self.transforms = train_transforms(image_size)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, item) -> tuple:
        """item: an index, or (index, epoch) from StepSampler: then the augmentation is seeded by (seed, epoch, index)."""
        from torchvision import tv_tensors
        index, epoch = item if isinstance(item, tuple) else (item, None)
        image_path, mask_path = self.images[index], self.masks[index]
        image = _open(image_path, index, "image").convert("RGB")
        mask = _open(mask_path, index, "mask")
        if mask.mode not in ("P", "L"):
            raise DataError(f"VOC mask {mask_path!r} (sample {index}) has PIL mode {mask.mode!r}; "
                            "expected one class index per pixel (palette 'P' or 'L')")
        if image.size != mask.size:
            raise DataError(f"VOC image {image_path!r} is {image.size[0]}x{image.size[1]} but its mask {mask_path!r} "
                            f"is {mask.size[0]}x{mask.size[1]} (width x height, sample {index}); expected the same size")
        with torch.random.fork_rng(devices=[]):
            if epoch is not None:
                torch.manual_seed((self.seed * 1_000_003 + epoch) * 1_000_003 + index)
            image, mask = self.transforms(image, tv_tensors.Mask(mask))
        return image.as_subclass(torch.Tensor), mask.as_subclass(torch.Tensor).squeeze(0)


# ---------------------------------------------------------------- samplers, loaders and epochs

class StepSampler(Sampler):
    """The samples one process consumes in an epoch, in step order, as (index, epoch) pairs.

    Every strategy walks the same seeded permutation of the split (torch.randperm seeded with
    seed + epoch, as DistributedSampler does) in blocks of the global batch G = R x B (R replicas,
    B samples each). Replica r's share of block k is DistributedSampler's strided split,
    p[kG + j*R + r] for j < B. A process feeds the replicas in `fed`: a DDP rank its own, single and
    DataParallel all of them, concatenated in replica order, so DataParallel's scatter hands replica
    r exactly what DDP rank r takes. Only whole blocks are used: within an epoch each image is used
    at most once, every replica takes floor(N / G) full steps (no rank waits in a collective for a
    batch that never comes), no replica gets a batch of 1 (BatchNorm), and the N mod G images left
    over are a fresh random choice each epoch. The epoch travels with each index so that the
    dataset seeds each sample's augmentation with (seed, epoch, index): the same crop and flip
    whichever process, worker or strategy loads it.
    """

    def __init__(self, n: int, replicas: int, fed: list, batch: int, seed: int):
        self.n, self.replicas, self.fed, self.batch, self.seed = n, replicas, list(fed), batch, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def steps(self) -> int:
        return self.n // (self.replicas * self.batch)

    def order(self, epoch: int) -> list:
        g = torch.Generator()
        g.manual_seed(self.seed + epoch)
        p = torch.randperm(self.n, generator=g).tolist()
        G, R = self.replicas * self.batch, self.replicas
        return [p[k * G + j * R + r] for k in range(self.steps()) for r in self.fed for j in range(self.batch)]

    def __iter__(self):
        return iter([(i, self.epoch) for i in self.order(self.epoch)])

    def __len__(self) -> int:
        return self.steps() * len(self.fed) * self.batch


def make_loader(dataset: Dataset, sampler: StepSampler, *, num_workers: int, pin_memory: bool,
                persistent_workers: bool) -> DataLoader:
    """A DataLoader over `sampler`'s order in batches of the replicas it feeds (every batch is full)."""
    return DataLoader(dataset, batch_size=len(sampler.fed) * sampler.batch, sampler=sampler, num_workers=num_workers,
                      pin_memory=pin_memory, drop_last=True, persistent_workers=persistent_workers and num_workers > 0,
                      prefetch_factor=PREFETCH_FACTOR if num_workers > 0 else None)


def epoch_indices(loader: DataLoader, epoch: int) -> list:
    """The dataset indices this process's loader consumes in `epoch`, in order, without loading anything."""
    return loader.sampler.order(epoch)


def coverage(per_rank: list, n_images: int) -> dict:
    """How an epoch covered the split, from every rank's `epoch_indices`: counts of images seen, repeated, dropped."""
    counts = Counter(i for rank in per_rank for i in rank)
    return {"images": n_images,
            "images_seen": len(counts),
            "images_repeated": sum(1 for c in counts.values() if c > 1),
            "images_dropped": n_images - len(counts)}


def workload(spec, rank: int, model, loss_fn, details: dict):
    """The deeplabv3 workload on VOC 2012 train for this process (bench.workloads.registry calls it)."""
    from bench.workloads.workload import Workload, chunks_fed
    dataset = VOCTrain(spec.voc_root, image_set="train", image_size=spec.image_size, seed=spec.seed)
    replicas = spec.emulate_ranks if spec.emulate_ranks > 1 else spec.device_count
    sampler = StepSampler(len(dataset), replicas, chunks_fed(spec, rank), spec.per_device_batch, spec.seed)
    loader = make_loader(dataset, sampler, num_workers=spec.num_workers, pin_memory=spec.pin_memory,
                         persistent_workers=spec.persistent_workers)

    def batches(epoch: int):
        sampler.set_epoch(epoch)
        return iter(loader)
    return Workload(model=model, loss_fn=loss_fn, batches=batches, details={**details, "loader_workers": spec.num_workers},
                    n_images=len(dataset), steps_per_epoch=sampler.steps(), epoch_indices=sampler.order)
