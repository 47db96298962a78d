"""Small datasets of random images in the official file layouts (CIFAR-10's python pickles,
Tiny ImageNet's JPEG folders), for checks on a machine that cannot download the real ones:
the loaders read them exactly as they read the real files (``benchmarks/gpu_check.py``, the
tests)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["cifar_rows", "write_cifar10", "write_tinyimagenet"]


def cifar_rows(images: np.ndarray) -> np.ndarray:
    """The official row layout of (n, 3, 32, 32) uint8 images: 1024 red, then 1024 green,
    then 1024 blue values, row-major."""
    return np.ascontiguousarray(images.reshape(len(images), 3 * 32 * 32))


def _dump(path: Path, obj: dict) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f)


def write_cifar10(root: str | Path, *, train_per_class: int, test_per_class: int,
                  seed: int = 0) -> Path:
    """CIFAR-10 in the official layout, ``root/cifar-10-batches-py``: random images,
    ``train_per_class`` per class spread over ``data_batch_1..5`` and ``test_per_class`` per
    class in ``test_batch``, plus ``batches.meta``; returns the folder."""
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    _dump(folder / "batches.meta", {b"num_cases_per_batch": 10 * train_per_class // 5,
                                    b"num_vis": 3072,
                                    b"label_names": [f"c{i}".encode() for i in range(10)]})
    rng = np.random.default_rng(seed)
    train = rng.permutation(np.repeat(np.arange(10), train_per_class))
    batches = [(f"data_batch_{i + 1}", labels)
               for i, labels in enumerate(np.array_split(train, 5))]
    for name, labels in [*batches, ("test_batch", np.repeat(np.arange(10), test_per_class))]:
        images = rng.integers(0, 256, size=(len(labels), 3, 32, 32), dtype=np.uint8)
        _dump(folder / name, {b"batch_label": name.encode(),
                              b"labels": [int(label) for label in labels],
                              b"data": cifar_rows(images),
                              b"filenames": [f"{name}_{k}.png".encode()
                                             for k in range(len(labels))]})
    return folder


def write_tinyimagenet(root: str | Path, *, train_per_class: int, val_per_class: int,
                       seed: int = 0) -> Path:
    """Tiny ImageNet in the official layout, ``root/tiny-imagenet-200``: 200 wnids, random
    64x64 RGB JPEGs, ``train_per_class`` per class under ``train/<wnid>/images`` and
    ``val_per_class`` per class under ``val/images`` with ``val/val_annotations.txt``;
    returns the folder."""
    folder = Path(root) / "tiny-imagenet-200"
    rng = np.random.default_rng(seed)
    wnids = [f"n{index:08d}" for index in rng.choice(10**8, 200, replace=False)]
    (folder / "val" / "images").mkdir(parents=True)
    (folder / "wnids.txt").write_text("".join(f"{w}\n" for w in wnids))

    def save(path: Path) -> None:
        pixels = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path, quality=90)

    for wnid in wnids:
        images = folder / "train" / wnid / "images"
        images.mkdir(parents=True)
        for k in range(train_per_class):
            save(images / f"{wnid}_{k}.JPEG")
    lines = []
    for k in range(200 * val_per_class):
        name = f"val_{k}.JPEG"
        save(folder / "val" / "images" / name)
        lines.append(f"{name}\t{wnids[k % 200]}\t0\t0\t63\t63\n")
    (folder / "val" / "val_annotations.txt").write_text("".join(lines))
    return folder
