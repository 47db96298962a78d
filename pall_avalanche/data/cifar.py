"""CIFAR-10 / CIFAR-100 from the official python-pickle distribution, as uint8 tensors.

The folders are the ones extracted from the official archives:

- ``<root>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}``
- ``<root>/cifar-100-python/{train, test, meta}`` (fine labels are used)

Each pickle is a dict with bytes keys; ``b"data"`` is a uint8 ``(N, 3072)`` array holding the
red, green and blue 32x32 planes in row-major order, so it reshapes to ``(N, 3, 32, 32)``.
Files under the data root are read without executing code: the pickles go through the
restricted unpickler of :mod:`pall_avalanche.data.safe_pickle`, which admits only dicts, lists,
strings, bytes, numbers and numeric numpy arrays.
This module also defines :class:`ImageArrays`, the in-memory form shared by the image loaders,
and the download-or-explain helper they use when a dataset folder is missing.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchvision.datasets.utils import download_and_extract_archive

from pall_avalanche.data import safe_pickle

__all__ = ["ImageArrays", "load_cifar"]


@dataclass(frozen=True)
class ImageArrays:
    """A labelled image dataset held in memory.

    ``train_x``/``test_x`` are contiguous uint8 tensors of shape ``(N, 3, H, W)``,
    ``train_y``/``test_y`` int64 tensors of shape ``(N,)`` with class ids indexing
    ``class_names``.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    class_names: tuple[str, ...]


@dataclass(frozen=True)
class _CifarSpec:
    folder: str
    url: str
    md5: str
    train_files: tuple[str, ...]
    test_file: str
    meta_file: str
    label_key: bytes
    names_key: bytes


_CIFAR = {
    "cifar10": _CifarSpec(
        folder="cifar-10-batches-py",
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        md5="c58f30108f718f92721af3b95e74349a",
        train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test_file="test_batch",
        meta_file="batches.meta",
        label_key=b"labels",
        names_key=b"label_names",
    ),
    "cifar100": _CifarSpec(
        folder="cifar-100-python",
        url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        md5="eb9058c3a382ffc7106e4002c42a8d85",
        train_files=("train",),
        test_file="test",
        meta_file="meta",
        label_key=b"fine_labels",
        names_key=b"fine_label_names",
    ),
}


def _ensure_extracted(root: Path, folder: str, url: str, md5: str, download: bool) -> Path:
    """Return ``root / folder``, downloading and extracting ``url`` there first if it is missing.

    :param root: directory that holds (or receives) the extracted dataset folder.
    :param folder: name of the folder the official archive extracts to.
    :param url: official archive URL.
    :param md5: md5 of the archive, checked by torchvision after downloading.
    :param download: whether a missing folder may be downloaded.
    :raises FileNotFoundError: the folder is missing and could not be (or may not be) downloaded.
    """
    path = root / folder
    if path.is_dir():
        return path
    if not download:
        reason = "download=False"
    else:
        try:
            download_and_extract_archive(url, download_root=str(root), md5=md5)
        # Network, HTTP, checksum and archive errors share no base class narrower than this.
        except Exception as err:
            reason = f"downloading it failed ({type(err).__name__}: {err})"
        else:
            if path.is_dir():
                return path
            reason = f"the downloaded archive did not contain '{folder}'"
    raise FileNotFoundError(
        f"dataset folder {path} not found and {reason}. Download {url} yourself and place the "
        f"extracted '{folder}' folder under --data-root (here {root})."
    )


_CIFAR_CONTENT = ("CIFAR files hold only dicts, lists, strings, bytes, numbers and numeric numpy "
                  "arrays")


def _read_pickle(path: Path) -> dict[bytes, Any]:
    """Load one CIFAR pickle (a dict with bytes keys) without executing code from the file.

    :param path: pickle file.
    :raises FileNotFoundError: the file is missing.
    :raises ValueError: the file is not a pickled dict, or refers to anything but plain data and
        numeric numpy arrays (a code-running payload included; nothing of it is run).
    """
    if not path.is_file():
        raise FileNotFoundError(f"CIFAR file {path} is missing")
    with path.open("rb") as f:
        try:
            obj = safe_pickle.load(f, encoding="bytes")
        except safe_pickle.RefusedPickleError as err:
            raise ValueError(f"{path}: {err} ({_CIFAR_CONTENT})") from err
        # A malformed stream can fail in any of these; none of them runs code from the file.
        except (pickle.UnpicklingError, EOFError, AttributeError, IndexError, KeyError, TypeError,
                ValueError, OverflowError, MemoryError) as err:
            raise ValueError(f"{path}: not a valid CIFAR pickle ({err})") from err
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    return obj


def _read_batch(path: Path, label_key: bytes, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, 3, 32, 32)`` uint8 and labels ``(N,)`` int64 of one data batch.

    :param path: batch pickle.
    :param label_key: key of the label list (``b"labels"`` or ``b"fine_labels"``).
    :param n_classes: number of classes; labels must lie in ``[0, n_classes)``.
    :raises ValueError: missing keys, wrong shapes/dtypes, length mismatch or bad labels.
    """
    batch = _read_pickle(path)
    missing = [key for key in (b"data", label_key) if key not in batch]
    if missing:
        raise ValueError(f"{path}: missing keys {missing}")
    data = np.asarray(batch[b"data"])
    labels = np.asarray(batch[label_key])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: b'data' must be uint8 of shape (N, 3072), got "
                         f"{data.dtype} {data.shape}")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{path}: {label_key!r} must be a list of integers")
    if len(labels) != len(data):
        raise ValueError(f"{path}: {len(data)} images but {len(labels)} labels")
    if len(labels) and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"{path}: labels must lie in [0, {n_classes})")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def load_cifar(root: str | Path, name: str, download: bool = True) -> ImageArrays:
    """Load CIFAR-10 or CIFAR-100 (fine labels) as uint8 ``(N, 3, 32, 32)`` tensors.

    :param root: directory holding ``cifar-10-batches-py`` / ``cifar-100-python``.
    :param name: ``"cifar10"`` or ``"cifar100"``.
    :param download: download and extract the official archive into ``root`` if the folder is
        missing.
    :raises ValueError: unknown ``name``, or a corrupt/mismatched file (named in the message).
    :raises FileNotFoundError: the dataset folder is missing and could not be downloaded.
    """
    if name not in _CIFAR:
        raise ValueError(f"unknown CIFAR dataset {name!r}; expected one of {list(_CIFAR)}")
    spec = _CIFAR[name]
    folder = _ensure_extracted(Path(root), spec.folder, spec.url, spec.md5, download)

    meta_path = folder / spec.meta_file
    meta = _read_pickle(meta_path)
    names = meta.get(spec.names_key)
    if not isinstance(names, list) or not names:
        raise ValueError(f"{meta_path}: missing or empty {spec.names_key!r}")
    class_names = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)

    train = [_read_batch(folder / f, spec.label_key, len(class_names)) for f in spec.train_files]
    test_x, test_y = _read_batch(folder / spec.test_file, spec.label_key, len(class_names))
    return ImageArrays(
        train_x=torch.from_numpy(np.concatenate([x for x, _ in train])),
        train_y=torch.from_numpy(np.concatenate([y for _, y in train])),
        test_x=torch.from_numpy(np.ascontiguousarray(test_x)),
        test_y=torch.from_numpy(test_y),
        class_names=class_names,
    )
