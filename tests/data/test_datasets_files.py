"""CIFAR and Tiny ImageNet loaders on tiny files written in the official on-disk formats."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import dump_pickle as _dump
from PIL import Image

from pall_avalanche.data import cifar
from pall_avalanche.data.cifar import ImageArrays, load_cifar
from pall_avalanche.data.synthetic import cifar_rows as _flat  # test_data.py imports it here
from pall_avalanche.data.tinyimagenet import load_tinyimagenet

# ---------------------------------------------------------------------------------------------
# CIFAR


def _images_chw(n: int, seed: int) -> np.ndarray:
    """Distinct uint8 images (n, 3, 32, 32) in CHW layout."""
    return np.random.default_rng(seed).integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)


def _write_cifar10(root: Path) -> tuple[list[np.ndarray], list[list[int]], list[str]]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = ["airplane", "automobile", "bird"]
    _dump(folder / "batches.meta", {b"num_cases_per_batch": 2, b"num_vis": 3072,
                                    b"label_names": [n.encode() for n in names]})
    images, labels = [], []
    files = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, file in enumerate(files):
        batch_images = _images_chw(3 if file == "test_batch" else 2, seed=i)
        batch_labels = [(i + k) % 3 for k in range(len(batch_images))]
        _dump(folder / file, {
            b"batch_label": f"batch {i + 1} of 5".encode(),
            b"labels": batch_labels,
            b"data": _flat(batch_images),
            b"filenames": [f"img_{i}_{k}.png".encode() for k in range(len(batch_images))],
        })
        images.append(batch_images)
        labels.append(batch_labels)
    return images, labels, names


def _write_cifar100(root: Path) -> tuple[dict[str, np.ndarray], dict[str, list[int]]]:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    _dump(folder / "meta", {b"fine_label_names": [b"apple", b"aquarium_fish", b"baby", b"bear"],
                            b"coarse_label_names": [b"fruit", b"fish"]})
    images = {"train": _images_chw(4, seed=10), "test": _images_chw(2, seed=11)}
    fine = {"train": [3, 0, 2, 1], "test": [1, 3]}
    for split in ("train", "test"):
        _dump(folder / split, {
            b"filenames": [f"{split}_{k}.png".encode() for k in range(len(fine[split]))],
            b"batch_label": f"{split}ing batch 1 of 1".encode(),
            b"fine_labels": fine[split],
            b"coarse_labels": [label // 2 for label in fine[split]],
            b"data": _flat(images[split]),
        })
    return images, fine


def _check_types(data: ImageArrays, size: int) -> None:
    for x, y in ((data.train_x, data.train_y), (data.test_x, data.test_y)):
        assert x.dtype == torch.uint8 and y.dtype == torch.int64
        assert x.shape == (len(y), 3, size, size)
        assert x.is_contiguous() and y.shape == (len(y),)


def test_cifar10_pixels_labels_and_names(tmp_path: Path) -> None:
    images, labels, names = _write_cifar10(tmp_path)
    data = load_cifar(tmp_path, "cifar10", download=False)
    _check_types(data, 32)
    assert data.class_names == tuple(names)
    assert data.train_x.shape[0] == 10 and data.test_x.shape[0] == 3
    assert data.train_y.tolist() == [label for batch in labels[:5] for label in batch]
    assert data.test_y.tolist() == labels[5]
    assert np.array_equal(data.train_x.numpy(), np.concatenate(images[:5]))
    assert np.array_equal(data.test_x.numpy(), images[5])
    # CHW: the flat row's first value is red (0, 0); 1024 is green (0, 0); 3071 is blue (31, 31).
    row = _flat(images[0][1:2])[0]
    assert data.train_x[1, 0, 0, 0] == row[0]
    assert data.train_x[1, 0, 0, 5] == row[5]
    assert data.train_x[1, 0, 2, 3] == row[2 * 32 + 3]
    assert data.train_x[1, 1, 0, 0] == row[1024]
    assert data.train_x[1, 2, 31, 31] == row[3071]


def test_cifar100_uses_fine_labels(tmp_path: Path) -> None:
    images, fine = _write_cifar100(tmp_path)
    data = load_cifar(tmp_path, "cifar100", download=False)
    _check_types(data, 32)
    assert data.class_names == ("apple", "aquarium_fish", "baby", "bear")
    assert data.train_y.tolist() == fine["train"] and data.test_y.tolist() == fine["test"]
    assert np.array_equal(data.train_x.numpy(), images["train"])
    assert np.array_equal(data.test_x.numpy(), images["test"])


def test_cifar_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'cifar1000'.*cifar10.*cifar100"):
        load_cifar(tmp_path, "cifar1000", download=False)


@pytest.mark.parametrize("name, folder", [("cifar10", "cifar-10-batches-py"),
                                          ("cifar100", "cifar-100-python")])
def test_cifar_missing_without_download(tmp_path: Path, name: str, folder: str) -> None:
    with pytest.raises(FileNotFoundError) as info:
        load_cifar(tmp_path, name, download=False)
    assert str(tmp_path / folder) in str(info.value) and "--data-root" in str(info.value)


def test_failed_download_is_one_clear_error(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(url: str, download_root: str, md5: str) -> None:
        raise OSError("network is unreachable")

    monkeypatch.setattr(cifar, "download_and_extract_archive", offline)
    with pytest.raises(FileNotFoundError) as info:
        load_cifar(tmp_path, "cifar10")
    message = str(info.value)
    assert str(tmp_path / "cifar-10-batches-py") in message
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in message
    assert "network is unreachable" in message and "--data-root" in message


def test_cifar_length_mismatch(tmp_path: Path) -> None:
    _write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    with path.open("rb") as f:
        batch = pickle.load(f, encoding="bytes")
    batch[b"labels"] = batch[b"labels"][:1]
    _dump(path, batch)
    with pytest.raises(ValueError, match="data_batch_3"):
        load_cifar(tmp_path, "cifar10", download=False)


# ---------------------------------------------------------------------------------------------
# Tiny ImageNet

_WNIDS = ["n01443537", "n01629819", "n01641577"]
_TRAIN_COLOURS = {  # (wnid index, image index) -> solid RGB colour; (1, 0) is written grayscale
    (0, 0): (200, 30, 30), (0, 1): (30, 200, 30),
    (1, 0): (123, 123, 123), (1, 1): (30, 30, 200),
    (2, 0): (220, 220, 40), (2, 1): (40, 220, 220),
}
# val file -> wnid index, deliberately not in file order
_VAL = {"val_0.JPEG": 2, "val_1.JPEG": 0, "val_2.JPEG": 1,
        "val_3.JPEG": 2, "val_4.JPEG": 1, "val_5.JPEG": 0}


def _val_colour(k: int) -> tuple[int, int, int]:
    return (20 + 40 * k, 230 - 35 * k, 100)


def _write_tiny(root: Path, words: bool = True) -> Path:
    base = root / "tiny-imagenet-200"
    (base / "val" / "images").mkdir(parents=True)
    # not in sorted order: a class id is the wnid's index in sorted order (_WNIDS), as
    # torchvision's ImageFolder numbers the train folders (the paper's reference)
    (base / "wnids.txt").write_text("".join(f"{w}\n" for w in reversed(_WNIDS)))
    if words:  # like the real file: more wnids than the 200 classes; one of ours is absent
        (base / "words.txt").write_text("n00001740\tentity\n"
                                        "n01443537\tgoldfish, Carassius auratus\n"
                                        "n01641577\tbullfrog, Rana catesbeiana\n")
    for (i, k), colour in _TRAIN_COLOURS.items():
        folder = base / "train" / _WNIDS[i] / "images"
        folder.mkdir(parents=True, exist_ok=True)
        image = Image.new("L", (64, 64), colour[0]) if (i, k) == (1, 0) else \
            Image.new("RGB", (64, 64), colour)
        image.save(folder / f"{_WNIDS[i]}_{k}.JPEG", quality=95)
        (base / "train" / _WNIDS[i] / f"{_WNIDS[i]}_boxes.txt").write_text("")
    lines = []
    for name, i in _VAL.items():
        k = int(name[4])
        Image.new("RGB", (64, 64), _val_colour(k)).save(base / "val" / "images" / name,
                                                         quality=95)
        lines.append(f"{name}\t{_WNIDS[i]}\t0\t{k}\t63\t62\n")
    (base / "val" / "val_annotations.txt").write_text("".join(lines[3:] + lines[:3]))
    return base


def _age_index_files(base: Path) -> None:
    """Date the index files 10 s back, as extracted files are, so the cache is clearly newer."""
    for path in (base / "wnids.txt", base / "val" / "val_annotations.txt"):
        stamp = path.stat().st_mtime - 10
        os.utime(path, (stamp, stamp))


def _assert_solid(image: torch.Tensor, colour: tuple[int, int, int]) -> None:
    expected = torch.tensor(colour, dtype=torch.int16).view(3, 1, 1)
    assert (image.to(torch.int16) - expected).abs().max() <= 3


def test_tinyimagenet_pixels_labels_and_names(tmp_path: Path) -> None:
    _write_tiny(tmp_path)
    data = load_tinyimagenet(tmp_path, download=False)
    _check_types(data, 64)
    assert data.class_names == ("goldfish, Carassius auratus", "n01629819",
                                "bullfrog, Rana catesbeiana")
    # train: by class id (sorted wnid order), then file name
    assert data.train_y.tolist() == [0, 0, 1, 1, 2, 2]
    for n, key in enumerate(sorted(_TRAIN_COLOURS)):
        _assert_solid(data.train_x[n], _TRAIN_COLOURS[key])
    # val (the test split): by file name, labels from val_annotations.txt
    assert data.test_y.tolist() == [_VAL[f"val_{k}.JPEG"] for k in range(6)]
    for k in range(6):
        _assert_solid(data.test_x[k], _val_colour(k))


def test_tinyimagenet_without_words_uses_wnids(tmp_path: Path) -> None:
    _write_tiny(tmp_path, words=False)
    assert load_tinyimagenet(tmp_path, download=False).class_names == tuple(_WNIDS)


def test_tinyimagenet_cache_reused_and_invalidated(tmp_path: Path) -> None:
    base = _write_tiny(tmp_path)
    _age_index_files(base)
    first = load_tinyimagenet(tmp_path, download=False)
    cache = base / "pall_cache_sorted.npz"
    assert cache.is_file()
    assert [p.name for p in base.iterdir() if p.name.endswith(".tmp")] == []

    (base / "val" / "images" / "val_3.JPEG").unlink()  # only the cache can provide it now
    second = load_tinyimagenet(tmp_path, download=False)
    for key in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(first, key), getattr(second, key))
    assert second.class_names == first.class_names

    annotations = base / "val" / "val_annotations.txt"
    stamp = cache.stat().st_mtime + 10  # annotations edited after the cache: rebuild
    os.utime(annotations, (stamp, stamp))
    with pytest.raises(ValueError, match="val_3.JPEG"):
        load_tinyimagenet(tmp_path, download=False)


def test_tinyimagenet_missing_without_download(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        load_tinyimagenet(tmp_path, download=False)
    assert str(tmp_path / "tiny-imagenet-200") in str(info.value)
    assert "http://cs231n.stanford.edu/tiny-imagenet-200.zip" in str(info.value)


def test_tinyimagenet_unknown_wnid_in_annotations(tmp_path: Path) -> None:
    base = _write_tiny(tmp_path)
    annotations = base / "val" / "val_annotations.txt"
    annotations.write_text(annotations.read_text() + "val_6.JPEG\tn99999999\t0\t0\t63\t63\n")
    with pytest.raises(ValueError, match=r"val_annotations\.txt, line 7.*n99999999"):
        load_tinyimagenet(tmp_path, download=False)
    assert not (base / "pall_cache_sorted.npz").exists()
