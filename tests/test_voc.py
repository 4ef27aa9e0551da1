"""The VOC data path on small fake trees: layout, up-front checks, named errors, image/mask alignment under the
shared transform, and which images each rank consumes per epoch (the loader's worker processes: test_voc_workers.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset

from bench.config import ConfigError
from bench.workloads.voc import (IGNORE_INDEX, IMAGENET_MEAN, IMAGENET_STD, DataError, StepSampler, VOCTrain, check_tree, coverage,
                       epoch_indices, make_loader, voc_dir)
from voc_tree import make_voc_tree

S = 32  # image side after the transform


@pytest.fixture
def root(tmp_path) -> Path:
    return make_voc_tree(tmp_path, n_images=6, sizes=[(40, 48), (36, 52), (44, 40)])


def base(root: Path) -> Path:
    return root / "VOCdevkit" / "VOC2012"


def brightness(image: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    return (image * std + mean).mean(0)


def interior(mask: torch.Tensor) -> torch.Tensor:
    """Pixels whose 3x3 neighbourhood holds one label: away from edges blurred by the image's interpolation."""
    m = mask[None, None].float()
    same = (torch.nn.functional.max_pool2d(m, 3, 1, 1) == -torch.nn.functional.max_pool2d(-m, 3, 1, 1))[0, 0]
    same[0, :] = same[-1, :] = same[:, 0] = same[:, -1] = False
    return same


# ---------------------------------------------------------------- layout and up-front checks

def test_voc_dir_accepts_root_voc2012_itself_or_its_parent(root, tmp_path):
    expected = str(base(root))
    assert voc_dir(str(root)) == expected
    assert voc_dir(expected) == expected
    assert voc_dir(str(base(root).parent)) == expected
    check_tree(expected)


def test_missing_root_is_a_config_error_naming_it(tmp_path):
    missing = tmp_path / "no-such-voc"
    with pytest.raises(ConfigError, match="no-such-voc"):
        check_tree(str(missing))
    with pytest.raises(DataError, match="holds no VOC 2012 tree"):
        voc_dir(str(tmp_path))


def test_missing_or_empty_split_file_is_named(root):
    split = base(root) / "ImageSets" / "Segmentation" / "val.txt"
    split.unlink()
    with pytest.raises(DataError, match=r"val\.txt.* is missing"):
        check_tree(str(root), "val")
    split.write_text("\n")
    with pytest.raises(DataError, match=r"val\.txt.* lists no image ids"):
        check_tree(str(root), "val")


def test_check_tree_names_the_first_missing_file_and_its_index(root):
    (base(root) / "SegmentationClass" / "2007_000004.png").unlink()
    (base(root) / "JPEGImages" / "2007_000005.jpg").unlink()
    with pytest.raises(DataError, match=r"2007_000004\.png.* is missing \(sample 3 "):
        check_tree(str(root))


# ---------------------------------------------------------------- errors while loading

def test_missing_image_is_named_with_its_index(root):
    ds = VOCTrain(str(root), image_size=S)
    (base(root) / "JPEGImages" / "2007_000003.jpg").unlink()
    with pytest.raises(DataError, match=r"2007_000003\.jpg.* is missing \(sample 2\)"):
        ds[2]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_unreadable_jpeg_is_named_with_its_index(root, damage):
    path = base(root) / "JPEGImages" / "2007_000002.jpg"
    data = path.read_bytes()
    path.write_bytes(b"this is not a jpeg" * 10 if damage == "garbage" else data[: len(data) // 2])
    ds = VOCTrain(str(root), image_size=S)
    with pytest.raises(DataError, match=r"2007_000002\.jpg.* cannot be read \(sample 1\)"):
        ds[1]


def test_mask_of_another_size_names_both_files_and_sizes(root):
    mask_path = base(root) / "SegmentationClass" / "2007_000001.png"
    Image.open(mask_path).resize((20, 10)).save(mask_path)
    with pytest.raises(DataError, match=r"2007_000001\.jpg.* is 48x40 but its mask .*2007_000001\.png.* is 20x10"):
        VOCTrain(str(root), image_size=S)[0]


# ---------------------------------------------------------------- the shared transform

def test_image_and_mask_stay_aligned_under_crop_resize_and_flip(root):
    torch.manual_seed(0)
    ds = VOCTrain(str(root), image_size=S)
    checked = 0
    for draw in range(30):
        image, mask = ds[draw % len(ds)]
        assert image.shape == (3, S, S) and image.dtype == torch.float32
        assert mask.shape == (S, S) and mask.dtype == torch.uint8  # widened only on the device, by the loss
        light, inner = brightness(image), interior(mask)
        obj = inner & (mask > 0) & (mask < IGNORE_INDEX)
        rest = inner & ((mask == 0) | (mask == IGNORE_INDEX))
        assert obj.any() and rest.any()
        assert light[obj].min() > 0.75, f"draw {draw}: object pixels in the mask are dark in the image"
        assert light[rest].max() < 0.25, f"draw {draw}: background pixels in the mask are bright in the image"
        checked += 1
    assert checked == 30


def test_a_uint8_mask_gives_the_loss_an_int64_one_gives():
    from bench.workloads.deeplabv3 import segmentation_loss
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 21, 4, 4, generator=g)
    mask = torch.randint(0, 21, (2, 4, 4), generator=g)
    mask[0, 0, 0] = IGNORE_INDEX
    assert segmentation_loss({"out": logits}, mask.to(torch.uint8)) == segmentation_loss({"out": logits}, mask)


def test_mask_keeps_only_its_original_labels_including_255(root):
    torch.manual_seed(1)
    for size in (S, 96):  # down- and up-sampling: bilinear would invent values in both
        ds = VOCTrain(str(root), image_size=size)
        seen_ignore = False
        for draw in range(18):
            index = draw % len(ds)
            original = set(np.unique(np.array(Image.open(ds.masks[index]))).tolist())
            assert original == {0, 1 + index, IGNORE_INDEX}
            _, mask = ds[index]
            assert set(mask.unique().tolist()) <= original
            seen_ignore |= bool((mask == IGNORE_INDEX).any())
        assert seen_ignore


# ---------------------------------------------------------------- epochs: which images each rank consumes

class Indices(Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, item) -> int:
        return item[0]


def loaders(n_images: int, replicas: int, batch: int, seed: int = 3, fed=None) -> list:
    """One loader per DDP rank (fed=None), or one loader feeding `fed` replicas (single/DataParallel)."""
    feeds = [[r] for r in range(replicas)] if fed is None else [fed]
    return [make_loader(Indices(n_images), StepSampler(n_images, replicas, f, batch, seed), num_workers=0,
                        pin_memory=False, persistent_workers=True) for f in feeds]


@pytest.mark.parametrize("world_size,batch", [(1, 2), (1, 4), (2, 1), (2, 2), (3, 2)])
def test_each_image_at_most_once_per_epoch_full_equal_steps_and_only_the_remainder_dropped(world_size, batch):
    n = 7
    global_batch = world_size * batch
    for epoch in range(3):
        per_rank = []
        for loader in loaders(n, world_size, batch):
            loader.sampler.set_epoch(epoch)
            batches = [b.tolist() for b in loader]
            assert len(batches) == n // global_batch  # the same step count on every rank: no hang
            assert all(len(b) == batch for b in batches)  # no partial batch
            consumed = [i for b in batches for i in b]
            assert consumed == epoch_indices(loader, epoch)
            per_rank.append(consumed)
        assert coverage(per_rank, n) == {"images": n, "images_seen": n - n % global_batch,
                                         "images_repeated": 0, "images_dropped": n % global_batch}


@pytest.mark.parametrize("world_size,batch", [(2, 1), (2, 2), (3, 2)])
def test_dataparallel_replica_r_gets_exactly_what_ddp_rank_r_takes(world_size, batch):
    n = 13
    (one,) = loaders(n, world_size, batch, fed=list(range(world_size)))  # single / DataParallel: replica order
    ranks = loaders(n, world_size, batch)
    for epoch in range(2):
        for loader in [one, *ranks]:
            loader.sampler.set_epoch(epoch)
        steps = list(zip(*ranks))
        assert len(steps) == len(one)
        for step, whole in zip(steps, one):
            # DataParallel scatters the global batch in contiguous chunks: chunk r must be rank r's batch.
            assert list(whole.chunk(world_size)) and all(torch.equal(c, b) for c, b in zip(whole.chunk(world_size), step))


def test_ddp_ranks_take_distributed_samplers_strided_split_of_the_shared_permutation():
    from torch.utils.data import DistributedSampler
    n, world, batch = 11, 2, 2
    ranks = loaders(n, world, batch, seed=5)
    for r, loader in enumerate(ranks):
        ds = DistributedSampler(Indices(n), num_replicas=world, rank=r, shuffle=True, seed=5, drop_last=True)
        ds.set_epoch(1)
        expected = list(ds)[: n // (world * batch) * batch]
        assert epoch_indices(loader, 1) == expected


def test_set_epoch_reshuffles_and_a_seed_repeats_the_order():
    (loader,) = loaders(7, 1, 2)
    (again,) = loaders(7, 1, 2)
    (other_seed,) = loaders(7, 1, 2, seed=4)
    orders = [epoch_indices(loader, e) for e in range(4)]
    assert len({tuple(o) for o in orders}) == 4
    assert [epoch_indices(again, e) for e in range(4)] == orders
    assert epoch_indices(other_seed, 0) != orders[0]
    loader.sampler.set_epoch(2)
    assert [i for b in loader for i in b.tolist()] == orders[2]


def test_augmentation_is_seeded_by_sample_and_epoch_whoever_loads_it(root):
    a = VOCTrain(str(root), image_size=S, seed=7)
    b = VOCTrain(str(root), image_size=S, seed=7)
    torch.manual_seed(123)  # the global RNG state must not matter
    x1, m1 = a[(3, 1)]
    torch.manual_seed(999)
    _ = b[(0, 1)]  # another sample loaded first, as another worker or rank would
    x2, m2 = b[(3, 1)]
    assert torch.equal(x1, x2) and torch.equal(m1, m2)
    x3, _ = a[(3, 2)]
    assert not torch.equal(x1, x3)  # another epoch, another crop


def test_tree_with_a_voc2012_folder_but_no_vocdevkit_loads(root, tmp_path):
    flat = tmp_path / "flat" / "VOC2012"
    shutil.copytree(base(root), flat)
    ds = VOCTrain(str(flat.parent), image_size=S)
    assert len(ds) == 6 and ds[0][1].shape == (S, S)


def test_download_leaves_a_complete_tree_alone_without_network(tmp_path, monkeypatch):
    import torchvision.datasets
    root = make_voc_tree(tmp_path / "voc", n_images=3)

    def no_network(*a, **k):
        raise AssertionError("download attempted although the tree is complete")
    monkeypatch.setattr(torchvision.datasets, "VOCSegmentation", no_network)
    from bench.workloads.voc import download
    download(str(root))
