"""Benchmark builders: task splits, relabelling, subsampling, real CIFAR files, bad input."""

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from test_datasets_files import _dump, _flat

from pall_avalanche.data import build_benchmark, class_order_for_seed


def _targets(exp) -> list[int]:
    return list(exp.dataset.targets)


def test_digits_split_and_relabelling():
    bm = build_benchmark("digits", seed=3)
    split = bm.split
    assert split.n_tasks == 5 and split.classes_per_task == 2
    assert split.class_order == tuple(class_order_for_seed(10, 3))
    assert sum(split.train_sizes) == 1437 and sum(split.test_sizes) == 360
    counts = np.bincount(load_digits().target)
    for t, (train, test) in enumerate(zip(bm.train_stream, bm.test_stream, strict=True)):
        assert train.task_label == t and test.task_label == t
        assert set(_targets(train)) == {0, 1} and set(_targets(test)) == {0, 1}
        x, _, task = train.dataset[0]
        assert x.shape == (1, 8, 8) and task == t
        # label c of task t is original class class_order[2t + c]; the split is stratified 80/20
        for label in (0, 1):
            original = split.class_order[2 * t + label]
            n_train = _targets(train).count(label)
            assert n_train + _targets(test).count(label) == counts[original]
            assert n_train == pytest.approx(0.8 * counts[original], abs=1)


def _pixel_sum(stream) -> float:
    return sum(float(e.dataset.eval()[i][0].sum()) for e in stream for i in range(len(e.dataset)))


def test_class_allocation_changes_with_seed_and_split_is_fixed():
    a, b = build_benchmark("digits", seed=0), build_benchmark("digits", seed=1)
    assert a.split.class_order != b.split.class_order
    # the train/test split does not depend on the seed: the same test images overall
    assert _pixel_sum(a.test_stream) == pytest.approx(_pixel_sum(b.test_stream), rel=1e-5)


def test_train_per_task_subsamples_class_balanced():
    bm = build_benchmark("digits", seed=0, train_per_task=21)
    for exp in bm.train_stream:
        counts = np.bincount(_targets(exp))
        assert sorted(counts) == [10, 11]
    assert bm.split.train_per_task == 21
    assert len(bm.test_stream[0].dataset) > 21     # test sets are never subsampled


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "mnist"}, r"unknown benchmark 'mnist'; valid benchmarks are \["),
    ({"name": "digits", "n_tasks": 3}, r"n_tasks=3 is not valid for digits .* \[2, 5, 10\]"),
    ({"name": "digits", "train_per_task": 1}, r"train_per_task=1 is smaller than the 2 classes"),
])
def test_bad_benchmark_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_benchmark(seed=0, **kwargs)


def test_missing_cifar_without_download_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        build_benchmark("cifar10", seed=0, data_root=tmp_path, download=False)


def _write_cifar10_all_classes(root: Path) -> tuple[np.ndarray, list[int]]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    _dump(folder / "batches.meta", {b"label_names": [f"c{i}".encode() for i in range(10)]})
    rng = np.random.default_rng(0)
    train_images, train_labels = [], []
    for b in range(1, 6):
        images = rng.integers(0, 256, size=(4, 3, 32, 32), dtype=np.uint8)
        labels = [(2 * (b - 1) + k) % 10 for k in range(4)]
        _dump(folder / f"data_batch_{b}", {b"batch_label": b"x", b"labels": labels,
                                           b"data": _flat(images), b"filenames": [b"f"] * 4})
        train_images.append(images)
        train_labels += labels
    test = rng.integers(0, 256, size=(10, 3, 32, 32), dtype=np.uint8)
    _dump(folder / "test_batch", {b"batch_label": b"t", b"labels": list(range(10)),
                                  b"data": _flat(test), b"filenames": [b"f"] * 10})
    return test, list(range(10))


def test_cifar10_benchmark_from_official_files(tmp_path):
    test_images, test_labels = _write_cifar10_all_classes(tmp_path)
    bm = build_benchmark("cifar10", seed=5, data_root=tmp_path, download=False)
    order = class_order_for_seed(10, 5)
    mean = torch.tensor((0.4914, 0.4822, 0.4465)).view(3, 1, 1)
    std = torch.tensor((0.2470, 0.2435, 0.2615)).view(3, 1, 1)
    for t, exp in enumerate(bm.test_stream):
        assert len(exp.dataset) == 2
        for i in range(2):
            x, y, task = exp.dataset.eval()[i]
            original = order[2 * t + y]          # the class this relabelled sample came from
            expected = (torch.from_numpy(test_images[original]).float() / 255 - mean) / std
            assert task == t
            assert torch.allclose(x, expected, atol=1e-5)
    x, _, _ = bm.train_stream[0].dataset.train()[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32     # augmented, normalised


def test_a_shadow_benchmark_trains_one_task_on_a_class_balanced_half():
    whole = build_benchmark("digits", seed=0)
    halved = build_benchmark("digits", seed=0, shadow=(1, 5))
    members = halved.split.shadow["members"]
    full = whole.train_stream[1].dataset.eval()
    half = halved.train_stream[1].dataset.eval()
    # the kept examples are exactly the recorded positions of the whole set, in order
    assert len(half) == len(members) and members == sorted(set(members))
    for i, position in enumerate(members):
        assert torch.equal(half[i][0], full[position][0]) and half[i][1] == full[position][1]
    labels = np.array([int(full[i][1]) for i in range(len(full))])
    kept = np.array([int(half[i][1]) for i in range(len(half))])
    for cls in (0, 1):                       # each class halved (odd sizes: ⌈n/2⌉ or ⌊n/2⌋)
        assert abs(2 * (kept == cls).sum() - (labels == cls).sum()) <= 1
    # the attack's targets are the whole set; every other task and every test set untouched
    assert len(halved.audit_targets) == len(full)
    for t in (0, 2, 3, 4):
        assert len(halved.train_stream[t].dataset) == len(whole.train_stream[t].dataset)
    for t in range(5):
        assert len(halved.test_stream[t].dataset) == len(whole.test_stream[t].dataset)
        assert halved.train_stream[t].task_label == t
    assert halved.split.train_sizes[1] == len(members)
    assert halved.split.to_dict()["shadow"] == {"task": 1, "seed": 5, "members": members}
    assert "shadow" not in whole.split.to_dict()           # plain records keep their layout
    other = build_benchmark("digits", seed=0, shadow=(1, 6)).split.shadow["members"]
    assert other != members                                # another seed, another half
    assert build_benchmark("digits", seed=0, shadow=(1, 5)).split.shadow["members"] == members
