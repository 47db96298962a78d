"""Tiny ImageNet 200 from the official ``tiny-imagenet-200.zip`` layout, as uint8 tensors.

Expected layout under ``<root>/tiny-imagenet-200``:

- ``wnids.txt``: the 200 wnids, one per line; a class id is the wnid's index in sorted
  order (as torchvision's ``ImageFolder`` numbers the ``train/<wnid>`` folders, and so the
  paper's reference: seed k's class order is the reference's).
- ``words.txt`` (optional): ``wnid<TAB>human-readable names``; used for ``class_names``.
- ``train/<wnid>/images/<wnid>_<k>.JPEG``: 64x64 training images (some grayscale).
- ``val/images/val_<k>.JPEG`` with labels in ``val/val_annotations.txt``
  (``filename<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1``).

The official val split is returned as the test split. Decoding the 110k JPEGs is slow, so the
decoded arrays are cached, uncompressed (about 1.4 GB), in
``tiny-imagenet-200/pall_cache_sorted.npz``;
the cache is reused while it is newer than ``wnids.txt`` and ``val/val_annotations.txt``.
Files under the data root are read without executing code: the cache is read with
``allow_pickle=False`` (a cache holding pickled objects is ignored and rebuilt), the rest is
plain text and JPEG.
"""

from __future__ import annotations

import os
import tempfile
import warnings
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from pall_avalanche.data.cifar import ImageArrays, _ensure_extracted

__all__ = ["load_tinyimagenet"]

_FOLDER = "tiny-imagenet-200"
_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
_SIZE = 64
#: (the ``_sorted`` name: a cache of the earlier file-order class ids is never read)
_CACHE_NAME = "pall_cache_sorted.npz"
_ARRAY_KEYS = ("train_x", "train_y", "test_x", "test_y")


def _read_wnids(path: Path) -> list[str]:
    """The wnids of ``wnids.txt`` in file order.

    :param path: ``wnids.txt``.
    :raises ValueError: the file is empty or lists a wnid twice.
    """
    wnids = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not wnids or len(set(wnids)) != len(wnids):
        raise ValueError(f"{path}: expected one distinct wnid per line")
    return wnids


def _class_names(words: Path, wnids: Sequence[str]) -> tuple[str, ...]:
    """Human-readable names from ``words.txt``, falling back to the wnid itself.

    :param words: ``words.txt`` (may be absent).
    :param wnids: wnids in class-id order.
    """
    if not words.is_file():
        return tuple(wnids)
    names = {}
    for line in words.read_text(encoding="utf-8").splitlines():
        wnid, _, text = line.partition("\t")
        names[wnid.strip()] = text.strip()
    return tuple(names.get(wnid) or wnid for wnid in wnids)


def _train_entries(train: Path, wnids: Sequence[str]) -> list[tuple[Path, int]]:
    """``(image path, class id)`` of every training image, by class id then file name.

    :param train: the ``train`` folder.
    :param wnids: wnids in class-id order.
    :raises ValueError: a wnid has no training images.
    """
    entries = []
    for label, wnid in enumerate(wnids):
        folder = train / wnid / "images"
        files = sorted(folder.glob("*.JPEG"))
        if not files:
            raise ValueError(f"{folder}: no .JPEG training images for wnid {wnid!r}")
        entries += [(file, label) for file in files]
    return entries


def _val_entries(annotations: Path, images: Path,
                 index: dict[str, int]) -> list[tuple[Path, int]]:
    """``(image path, class id)`` of every val image listed in ``annotations``, by file name.

    :param annotations: ``val/val_annotations.txt``.
    :param images: the flat ``val/images`` folder.
    :param index: wnid -> class id.
    :raises ValueError: a malformed line, an unknown wnid or a file listed twice.
    """
    labels: dict[str, int] = {}
    for lineno, line in enumerate(annotations.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in index:
            raise ValueError(f"{annotations}, line {lineno}: expected 'filename<TAB>wnid<TAB>...' "
                             f"with a wnid from wnids.txt, got {line!r}")
        if fields[0] in labels:
            raise ValueError(f"{annotations}, line {lineno}: {fields[0]!r} is listed twice")
        labels[fields[0]] = index[fields[1]]
    if not labels:
        raise ValueError(f"{annotations}: no annotations")
    return [(images / name, labels[name]) for name in sorted(labels)]


def _read_image(path: Path) -> np.ndarray:
    """One image as uint8 ``(3, 64, 64)`` RGB (grayscale images are converted).

    :param path: JPEG file.
    :raises ValueError: the file is missing, undecodable or not 64x64.
    """
    try:
        with Image.open(path) as img:
            pixels = np.asarray(img.convert("RGB"))
    except OSError as err:
        raise ValueError(f"{path}: cannot read image ({err})") from err
    if pixels.shape != (_SIZE, _SIZE, 3):
        raise ValueError(f"{path}: expected a {_SIZE}x{_SIZE} image, got {pixels.shape[1::-1]}")
    return pixels.transpose(2, 0, 1)


def _decode(entries: Sequence[tuple[Path, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, 3, 64, 64)`` uint8 and labels ``(N,)`` int64 of ``entries``, decoded in
    parallel threads (PIL releases the GIL while decoding).

    :param entries: ``(image path, class id)`` pairs.
    """
    images = np.empty((len(entries), 3, _SIZE, _SIZE), dtype=np.uint8)
    with ThreadPoolExecutor() as pool:
        for i, pixels in enumerate(pool.map(_read_image, [path for path, _ in entries])):
            images[i] = pixels
    return images, np.array([label for _, label in entries], dtype=np.int64)


def _load_cache(path: Path, newer_than_ns: int) -> dict[str, np.ndarray] | None:
    """The cached arrays, or ``None`` if the cache is absent, stale or unreadable; read with
    ``allow_pickle=False``, so without executing code (a pickled object array is unreadable).

    :param path: cache file.
    :param newer_than_ns: the cache is stale unless its mtime (ns) is greater than this.
    """
    if not path.is_file() or path.stat().st_mtime_ns <= newer_than_ns:
        return None
    try:
        with np.load(path, allow_pickle=False) as cache:
            return {key: cache[key] for key in _ARRAY_KEYS}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None


def _write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically (temp file in the same folder, then replace).

    :param path: cache file.
    :param arrays: the arrays to store, by name.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_tinyimagenet(root: str | Path, download: bool = True) -> ImageArrays:
    """Load Tiny ImageNet 200 as uint8 ``(N, 3, 64, 64)`` tensors; test = the official val split.

    :param root: directory holding the extracted ``tiny-imagenet-200`` folder.
    :param download: download and extract the official zip into ``root`` if the folder is
        missing.
    :raises FileNotFoundError: the dataset folder (or one of its index files) is missing.
    :raises ValueError: a corrupt or mismatched file (named in the message).
    """
    base = _ensure_extracted(Path(root), _FOLDER, _URL, _MD5, download)
    wnids_path = base / "wnids.txt"
    annotations = base / "val" / "val_annotations.txt"
    for path in (wnids_path, annotations):
        if not path.is_file():
            raise FileNotFoundError(f"Tiny ImageNet file {path} is missing; re-extract {_URL} "
                                    f"under --data-root")
    wnids = sorted(_read_wnids(wnids_path))
    cache = base / _CACHE_NAME
    arrays = _load_cache(cache, max(p.stat().st_mtime_ns for p in (wnids_path, annotations)))
    if arrays is None:
        index = {wnid: label for label, wnid in enumerate(wnids)}
        train_x, train_y = _decode(_train_entries(base / "train", wnids))
        test_x, test_y = _decode(_val_entries(annotations, base / "val" / "images", index))
        arrays = {"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y}
        try:
            _write_cache(cache, arrays)
        except OSError as err:
            warnings.warn(f"could not write the Tiny ImageNet cache {cache}: {err}", stacklevel=2)
    return ImageArrays(
        **{key: torch.from_numpy(value) for key, value in arrays.items()},
        class_names=_class_names(base / "words.txt", wnids),
    )
