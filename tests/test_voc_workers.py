"""The VOC loader's worker processes (DataLoader's num_workers, forked): an error in a worker reaches the main process
named, and persistent workers serve every epoch. Apart from test_voc.py because they start processes (tests/parts.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from bench.workloads.voc import IGNORE_INDEX, DataError, StepSampler, VOCTrain, epoch_indices, make_loader
from voc_tree import make_voc_tree

S = 32  # image side after the transform, as in test_voc.py


@pytest.fixture
def root(tmp_path) -> Path:
    """test_voc.py's small tree: 6 images of three sizes."""
    return make_voc_tree(tmp_path, n_images=6, sizes=[(40, 48), (36, 52), (44, 40)])


def test_error_in_a_dataloader_worker_reaches_the_main_process_named(root):
    ds = VOCTrain(str(root), image_size=S)
    (root / "VOCdevkit" / "VOC2012" / "JPEGImages" / "2007_000003.jpg").unlink()
    loader = DataLoader(ds, batch_size=1, num_workers=1)
    with pytest.raises(DataError, match=r"(?s)DataLoader worker.*2007_000003\.jpg.* is missing \(sample 2\)"):
        for _ in loader:
            pass


def test_persistent_workers_serve_voc_batches_across_epochs(root):
    ds = VOCTrain(str(root), image_size=S)
    loader = make_loader(ds, StepSampler(len(ds), 1, [0], 2, 0), num_workers=2, pin_memory=False, persistent_workers=True)
    assert loader.persistent_workers
    workers = None
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        labels = []
        for image, mask in loader:
            assert image.shape == (2, 3, S, S) and mask.shape == (2, S, S)
            # image i's object has label 1 + i, so the masks say which images were loaded
            labels += [int(m[(m > 0) & (m < IGNORE_INDEX)].unique().item()) - 1 for m in mask]
        assert labels == epoch_indices(loader, epoch)
        if workers is None:
            workers = loader._iterator._workers
        assert loader._iterator._workers is workers  # the same worker processes in epoch 2
