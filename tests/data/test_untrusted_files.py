"""Files under the data root are read without executing code: crafted CIFAR pickles and Tiny
ImageNet caches are refused (or ignored) and their payload never runs; official files load."""

from __future__ import annotations

import io
import os
import pickle
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import dump_pickle
from test_datasets_files import _age_index_files, _write_cifar10, _write_tiny

from pall_avalanche.data import build_benchmark, safe_pickle
from pall_avalanche.data.cifar import load_cifar
from pall_avalanche.data.synthetic import cifar_rows, write_cifar10
from pall_avalanche.data.tinyimagenet import load_tinyimagenet


class _Payload:
    """Unpickling this runs ``os.makedirs(marker)``: the marker folder proves code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.makedirs, (str(self.marker),)


def _batch(folder: Path, name: str) -> dict:
    with (folder / name).open("rb") as f:
        return pickle.load(f, encoding="bytes")  # our own, trusted test file


def _refused(path: Path, what: str) -> str:
    return re.escape(f"{path}: refusing to load {what}")


# ---------------------------------------------------------------------------------------------
# CIFAR pickles


def test_code_running_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    folder = write_cifar10(tmp_path, train_per_class=2, test_per_class=1)
    marker = tmp_path / "pwned"
    batch = _batch(folder, "data_batch_1")
    dump_pickle(folder / "data_batch_1", {**batch, b"filenames": _Payload(marker)})

    with pytest.raises(ValueError, match=_refused(folder / "data_batch_1",
                                                  "the pickled object 'os.makedirs'")) as err:
        build_benchmark("cifar10", seed=0, data_root=tmp_path, download=False)
    assert "CIFAR files hold only dicts, lists, strings, bytes, numbers" in str(err.value)
    assert not marker.exists()


def test_whole_file_payload_in_meta_is_refused(tmp_path: Path) -> None:
    folder = write_cifar10(tmp_path, train_per_class=1, test_per_class=1)
    marker = tmp_path / "pwned"
    dump_pickle(folder / "batches.meta", _Payload(marker))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=_refused(folder / "batches.meta",
                                                  "the pickled object 'os.makedirs'")):
        load_cifar(tmp_path, "cifar10", download=False)
    assert not marker.exists()


def test_object_array_with_payload_is_refused_and_never_runs(tmp_path: Path) -> None:
    folder = write_cifar10(tmp_path, train_per_class=2, test_per_class=1)
    marker = tmp_path / "pwned"
    batch = _batch(folder, "data_batch_1")
    data = np.empty(2, dtype=object)
    data[:] = [_Payload(marker), b"x"]
    dump_pickle(folder / "data_batch_1", {**batch, b"data": data})

    with pytest.raises(ValueError, match=_refused(folder / "data_batch_1",
                                                  "a numpy array of dtype 'O8'")):
        load_cifar(tmp_path, "cifar10", download=False)
    assert not marker.exists()


@pytest.mark.parametrize("value", [
    np.array([1, "x"], dtype=object),                         # harmless object array
    np.zeros(2, dtype=[("a", "u1"), ("b", "O")]),             # object field in a record
    np.array([b"ab", b"cd"]),                                 # bytes strings: not numeric
])
def test_non_numeric_arrays_are_refused(tmp_path: Path, value: np.ndarray) -> None:
    folder = write_cifar10(tmp_path, train_per_class=1, test_per_class=1)
    dump_pickle(folder / "test_batch", {**_batch(folder, "test_batch"), b"extra": value})
    with pytest.raises(ValueError, match=_refused(folder / "test_batch", "a numpy array")):
        load_cifar(tmp_path, "cifar10", download=False)


class _ForgedDtype:
    """A uint8 dtype whose pickled state adds a field and sets the object flags (63): NumPy
    would apply that state to the copied descriptor, making a "uint8" that claims to hold
    object references."""

    def __reduce__(self):
        return np.dtype, ("u1", False, True), (
            3, "|", None, ("a",), {"a": (np.dtype("u1"), 0)}, 1, 1, 63)


def test_dtype_state_with_object_fields_is_refused(tmp_path: Path) -> None:
    folder = write_cifar10(tmp_path, train_per_class=1, test_per_class=1)
    dump_pickle(folder / "test_batch", {**_batch(folder, "test_batch"), b"dt": _ForgedDtype()})
    with pytest.raises(ValueError, match=_refused(folder / "test_batch",
                                                  "a numpy dtype with fields")):
        load_cifar(tmp_path, "cifar10", download=False)


@pytest.mark.parametrize("payload", [
    (b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x06\x00\x00\x00rot_13\x86R.",
     "_codecs.encode other than"),
    (b"\x80\x02cnumpy\nndarray\nK\x01\x85R.", "to call numpy.ndarray"),
    (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\ndtype\nK\x00\x85U\x01b\x87R.",
     "anything but a plain numpy.ndarray"),
    (b"\x80\x02cbuiltins\neval\nX\x01\x00\x00\x001\x85R.", "the pickled object 'builtins.eval'"),
    (b"\x80\x02c__builtin__\nopen\nX\x01\x00\x00\x00x\x85R.",
     "the pickled object '__builtin__.open'"),
])
def test_admitted_globals_check_their_arguments(payload: tuple[bytes, str]) -> None:
    data, message = payload
    with pytest.raises(safe_pickle.RefusedPickleError, match=re.escape(message)):
        safe_pickle.load(io.BytesIO(data))


#: A stand-in's state set by the pickle (``BUILD``): ``numpy.dtype``'s stand-in with
#: ``call = 5``. Were it admitted, every later load in the process would call 5.
POISON = b"\x80\x02cnumpy\ndtype\nN}X\x04\x00\x00\x00callK\x05s\x86b."


def test_a_pickle_cannot_change_how_another_file_is_read(tmp_path: Path) -> None:
    clean = pickle.dumps({b"x": np.arange(6, dtype=np.int16).reshape(2, 3)}, protocol=2)
    with pytest.raises(safe_pickle.RefusedPickleError, match="refusing to set a state of "
                                                             "numpy.dtype"):
        safe_pickle.load(io.BytesIO(POISON))
    loaded = safe_pickle.load(io.BytesIO(clean), encoding="bytes")
    assert loaded[b"x"].tolist() == [[0, 1, 2], [3, 4, 5]]
    # through the CIFAR loader: the crafted meta file is named, and a clean folder still loads
    bad = write_cifar10(tmp_path / "bad", train_per_class=2, test_per_class=1)
    (bad / "batches.meta").write_bytes(POISON)
    with pytest.raises(ValueError, match=re.escape(f"{bad / 'batches.meta'}: refusing to set "
                                                   "a state of numpy.dtype")):
        load_cifar(tmp_path / "bad", "cifar10", download=False)
    write_cifar10(tmp_path / "good", train_per_class=2, test_per_class=1)
    images = load_cifar(tmp_path / "good", "cifar10", download=False)
    assert len(images.train_y) == 20


def test_a_short_file_cannot_ask_for_a_large_buffer() -> None:
    """BINBYTES8 declaring 80 MB in a 20-byte file: refused before anything is allocated."""
    import tracemalloc

    data = b"\x80\x04\x8e" + (80 * 2**20).to_bytes(8, "little") + b"abc."
    tracemalloc.start()
    try:
        with pytest.raises(pickle.UnpicklingError, match="malformed pickle stream"):
            safe_pickle.load(io.BytesIO(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    # the plain unpickler allocates the declared size first
    tracemalloc.start()
    try:
        with pytest.raises(pickle.UnpicklingError):
            pickle.Unpickler(io.BytesIO(data)).load()
        assert tracemalloc.get_traced_memory()[1] > 80 * 2**20
    finally:
        tracemalloc.stop()


# ---------------------------------------------------------------------------------------------
# The official format still loads


def _py2_array(rows: np.ndarray) -> bytes:
    """``rows`` (uint8, 2-D) as Python 2 ``cPickle`` protocol 2 writes a numpy array."""
    return (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01b\x87R"
            b"(K\x01M" + struct.pack("<H", rows.shape[0]) + b"M" + struct.pack("<H", rows.shape[1])
            + b"\x86cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xff"
            b"J\xff\xff\xff\xffK\x00tb\x89T" + struct.pack("<I", rows.nbytes) + rows.tobytes()
            + b"tb")


def _py2_str(value: bytes) -> bytes:
    return b"U" + bytes([len(value)]) + value


def _py2_dict(items: dict[bytes, bytes]) -> bytes:
    """A dict of already-pickled values, keyed by Python 2 strings, as a protocol 2 pickle."""
    body = b"".join(_py2_str(key) + value for key, value in items.items())
    return b"\x80\x02}(" + body + b"u."


def _py2_list(values: list[bytes]) -> bytes:
    return b"](" + b"".join(values) + b"e"


def test_python2_cpickle_files_load(tmp_path: Path) -> None:
    """Files shaped like the official archive's (Python 2 cPickle, protocol 2, numpy.core)."""
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "batches.meta").write_bytes(_py2_dict({
        b"num_cases_per_batch": b"K\x02", b"num_vis": b"M\x00\x0c",
        b"label_names": _py2_list([_py2_str(n) for n in (b"cat", b"dog")])}))
    rng = np.random.default_rng(0)
    images = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        images[name] = rng.integers(0, 256, size=(2, 3, 32, 32), dtype=np.uint8)
        (folder / name).write_bytes(_py2_dict({
            b"batch_label": _py2_str(name.encode()),
            b"labels": _py2_list([b"K\x00", b"K\x01"]),
            b"data": _py2_array(cifar_rows(images[name])),
            b"filenames": _py2_list([_py2_str(b"a.png"), _py2_str(b"b.png")])}))
    data = load_cifar(tmp_path, "cifar10", download=False)
    assert data.class_names == ("cat", "dog")
    assert np.array_equal(data.train_x.numpy(), np.concatenate(
        [images[f"data_batch_{i}"] for i in range(1, 6)]))
    assert np.array_equal(data.test_x.numpy(), images["test_batch"])
    assert data.train_y.tolist() == [0, 1] * 5
    with (folder / "test_batch").open("rb") as f:  # the stream really is what plain pickle reads
        assert np.array_equal(pickle.load(f, encoding="bytes")[b"data"],
                              cifar_rows(images["test_batch"]))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_official_format_written_by_python3_loads(tmp_path: Path, protocol: int) -> None:
    images, labels, names = _write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    for file in folder.iterdir():  # re-pickle each file with this protocol
        obj = _batch(folder, file.name)
        with file.open("wb") as f:
            pickle.dump(obj, f, protocol=protocol)
    data = load_cifar(tmp_path, "cifar10", download=False)
    assert data.class_names == tuple(names)
    assert torch.equal(data.train_x, torch.from_numpy(np.concatenate(images[:5])))
    assert torch.equal(data.test_x, torch.from_numpy(images[5]))
    assert data.train_y.tolist() == [y for batch in labels[:5] for y in batch]
    assert data.train_x.numpy().flags.writeable and data.test_x.numpy().flags.writeable


def test_big_endian_and_fortran_arrays_keep_their_values() -> None:
    value = np.asfortranarray(np.arange(12, dtype=">f8").reshape(3, 4))
    for protocol in (2, 4, 5):
        loaded = safe_pickle.load(io.BytesIO(pickle.dumps({"v": value, "t": (value, 1)},
                                                          protocol=protocol)))
        assert np.array_equal(loaded["v"], value) and loaded["v"].dtype == value.dtype
        assert np.array_equal(loaded["t"][0], value) and loaded["t"][1] == 1


# ---------------------------------------------------------------------------------------------
# Tiny ImageNet cache


def test_tinyimagenet_cache_with_pickled_objects_is_ignored_and_rebuilt(tmp_path: Path) -> None:
    """The cache is read with allow_pickle=False: a cache holding a pickled object array (whose
    payload would run under allow_pickle=True) is ignored, rebuilt from the JPEGs and replaced
    by a pickle-free one."""
    base = _write_tiny(tmp_path)
    _age_index_files(base)
    clean = load_tinyimagenet(tmp_path, download=False)
    cache = base / "pall_cache_sorted.npz"
    marker = tmp_path / "pwned"
    payload = np.empty(1, dtype=object)
    payload[0] = _Payload(marker)
    np.savez(cache, train_x=payload, train_y=payload, test_x=payload, test_y=payload)
    assert cache.stat().st_mtime_ns > base.joinpath("wnids.txt").stat().st_mtime_ns

    rebuilt = load_tinyimagenet(tmp_path, download=False)
    assert not marker.exists()
    for key in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(rebuilt, key), getattr(clean, key))
    with np.load(cache, allow_pickle=False) as arrays:  # the rewritten cache holds no objects
        assert torch.equal(torch.from_numpy(arrays["train_x"]), clean.train_x)
