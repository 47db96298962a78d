"""A restricted unpickler for numeric dataset pickles: files under the data root are read
without executing code.

It admits only the globals a pickle of dicts, lists, tuples, strings, bytes, numbers and
numeric numpy arrays refers to; in particular the official CIFAR files (written by Python 2
``cPickle``, protocol 2) refer only to ``numpy.core.multiarray._reconstruct``,
``numpy.ndarray`` and ``numpy.dtype``. Also admitted, for the same data pickled by Python 3:
``numpy._core.multiarray._reconstruct`` (NumPy 2), ``numpy[._]core.numeric._frombuffer``
(protocol 5) and ``_codecs.encode`` with ``latin1`` (how protocol 2 writes bytes).
Nothing is imported and no admitted global is handed to the unpickler itself: each maps to an
inert stand-in that checks its arguments, made afresh for every load (nothing a pickle does
reaches another load) and refusing a state (the ``BUILD`` opcode). Every length the stream
declares is checked against the bytes it holds before the unpickler allocates anything (a
short file cannot ask for a large buffer). A dtype must be bool, integer, float or complex
(``object``, structured and string dtypes are refused), and the unpickler never calls NumPy's
``__setstate__``: each array is rebuilt from its raw bytes with ``numpy.frombuffer`` once its
dtype, shape and byte count are checked, and stand-ins are replaced by the real arrays after
loading.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
import re
from typing import IO, Any

import numpy as np

__all__ = ["RefusedPickleError", "load"]

_NUMERIC_DTYPE = re.compile(r"[<>|=]?[biufc][0-9]{1,2}")
_BYTE_ORDERS = ("<", ">", "|", "=")


class RefusedPickleError(pickle.UnpicklingError):
    """The pickle refers to something a numeric data file never holds; nothing was run."""


def _text(value: Any) -> str | None:
    """``value`` as ``str`` if it is ``str`` or ASCII ``bytes`` (Python 2 strings arrive as
    ``bytes`` under ``encoding="bytes"``), else ``None``."""
    if isinstance(value, bytes):
        try:
            return value.decode("ascii")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


class _DtypeStub:
    """Stand-in for a pickled ``numpy.dtype``: a numeric dtype, with the byte order its pickled
    state names (the rest of the state is ignored, never applied)."""

    __slots__ = ("dtype",)
    __hash__ = None  # type: ignore[assignment]  # never a dict key or set member

    def __init__(self, spec: Any) -> None:
        text = _text(spec)
        if text is None or not _NUMERIC_DTYPE.fullmatch(text):
            raise RefusedPickleError(f"refusing to load a numpy array of dtype {spec!r} "
                                     f"(only bool, integer, float and complex dtypes are read)")
        try:
            dtype = np.dtype(text)
        except (TypeError, ValueError) as err:
            raise RefusedPickleError(f"refusing to load a numpy array of dtype {spec!r}") from err
        if dtype.kind not in "biufc" or dtype.hasobject or dtype.fields or dtype.subdtype:
            raise RefusedPickleError(f"refusing to load a numpy array of dtype {spec!r}")
        self.dtype = dtype

    def __setstate__(self, state: Any) -> None:
        # (version, byte order, sub-array, names, fields, item size, alignment[, flags[,
        # metadata]]); the official files hold version 3 (8 items).
        if not isinstance(state, tuple) or len(state) not in (7, 8, 9) \
                or any(item is not None for item in state[2:5]) \
                or (len(state) == 9 and state[8] not in (None, {})):
            raise RefusedPickleError("refusing to load a numpy dtype with fields, sub-arrays or "
                                     "metadata")
        order = _text(state[1])
        if order not in _BYTE_ORDERS:
            raise pickle.UnpicklingError(f"bad byte order {state[1]!r} in a numpy dtype")
        if order in "<>" and self.dtype.itemsize > 1:
            self.dtype = self.dtype.newbyteorder(order)


class _ArrayStub:
    """Stand-in for a pickled ``numpy.ndarray``; holds the real array once its state is read."""

    __slots__ = ("array",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, array: np.ndarray | None = None) -> None:
        self.array = array

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 5:
            state = state[1:]  # (version, shape, dtype, is_fortran, raw data)
        if not isinstance(state, tuple) or len(state) != 4:
            raise pickle.UnpicklingError("malformed numpy array state")
        shape, dtype, is_fortran, raw = state
        if isinstance(raw, str):  # pickled by Python 2 and read with encoding="latin1"
            raw = raw.encode("latin1")
        self.array = _array(raw, dtype, shape, "F" if is_fortran else "C")


def _array(raw: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """A writable copy of the array ``raw`` holds, after checking every argument."""
    if not isinstance(dtype, _DtypeStub):
        raise RefusedPickleError(f"refusing to load a numpy array whose dtype is a "
                                 f"{type(dtype).__name__}")
    if not isinstance(raw, (bytes, bytearray)):
        raise RefusedPickleError(f"refusing to load a numpy array whose data is a "
                                 f"{type(raw).__name__} (numeric arrays hold raw bytes)")
    if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape) \
            or order not in ("C", "F"):
        raise pickle.UnpicklingError("malformed numpy array shape or order")
    if math.prod(shape) * dtype.dtype.itemsize != len(raw):
        raise pickle.UnpicklingError(f"numpy array of shape {shape} and dtype {dtype.dtype} "
                                     f"does not match its {len(raw)} bytes of data")
    flat = np.frombuffer(raw, dtype=dtype.dtype)
    return flat.reshape(shape, order=order).copy(order="K")


class _Global:
    """An admitted global as the unpickler sees it: a callable that checks its arguments. One
    load's own (:class:`_Unpickler` makes them), and the pickle cannot change it: a state for
    it (``BUILD``) is refused."""

    __slots__ = ("name", "call")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, name: str, call: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "call", call)

    def __setattr__(self, name: str, value: Any) -> None:
        raise RefusedPickleError(f"refusing to change {self.name}")

    def __setstate__(self, state: Any) -> None:
        raise RefusedPickleError(f"refusing to set a state of {self.name}")

    def __call__(self, *args: Any) -> Any:
        if self.call is None:
            raise RefusedPickleError(f"refusing to call {self.name}")
        return self.call(*args)


_NDARRAY_NAME = "numpy.ndarray"     # only ever an argument of _reconstruct


def _reconstruct(subtype: Any, shape: Any = None, typecode: Any = None) -> _ArrayStub:
    if not (isinstance(subtype, _Global) and subtype.name == _NDARRAY_NAME
            and subtype.call is None):
        raise RefusedPickleError("refusing to reconstruct anything but a plain numpy.ndarray")
    return _ArrayStub()


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> _ArrayStub:
    return _ArrayStub(_array(buf, dtype, shape, order))


def _latin1(text: Any, encoding: Any = None) -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise RefusedPickleError("refusing _codecs.encode other than str -> latin1 bytes")
    return text.encode("latin1")


def _dtype(spec: Any, align: Any = False, copy: Any = False) -> _DtypeStub:
    return _DtypeStub(spec)


#: (module, name) → (the stand-in's name, what it calls; ``None``: it is never called).
_ADMITTED = {
    ("numpy.core.multiarray", "_reconstruct"): ("numpy _reconstruct", _reconstruct),
    ("numpy._core.multiarray", "_reconstruct"): ("numpy _reconstruct", _reconstruct),
    ("numpy.core.numeric", "_frombuffer"): ("numpy _frombuffer", _frombuffer),
    ("numpy._core.numeric", "_frombuffer"): ("numpy _frombuffer", _frombuffer),
    ("numpy", "ndarray"): (_NDARRAY_NAME, None),
    ("numpy", "dtype"): ("numpy.dtype", _dtype),
    ("_codecs", "encode"): ("_codecs.encode", _latin1),
}


class _Unpickler(pickle.Unpickler):
    """The restricted unpickler of one load: its own stand-ins, made on first reference."""

    def __init__(self, file: IO[bytes], *, encoding: str) -> None:
        super().__init__(file, encoding=encoding)
        self.stand_ins: dict[tuple[str, str], _Global] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ADMITTED:
            raise RefusedPickleError(f"refusing to load the pickled object "
                                     f"'{module}.{name}'")
        if (module, name) not in self.stand_ins:
            self.stand_ins[module, name] = _Global(*_ADMITTED[module, name])
        return self.stand_ins[module, name]


def _check_lengths(data: bytes) -> None:
    """Walk the opcodes of ``data`` (:func:`pickletools.genops`, which reads each declared
    length's bytes from the stream, never more than it holds) so that no opcode declares more
    bytes than the file has: the unpickler would allocate the declared size first.

    :raises pickle.UnpicklingError: a declared length exceeds what follows it, or the stream is
        malformed.
    """
    try:
        for _ in pickletools.genops(io.BytesIO(data)):
            pass
    except ValueError as err:      # "expected N bytes ... but only M remain", a bad opcode
        raise pickle.UnpicklingError(f"malformed pickle stream ({err})") from None


def _resolve(obj: Any, done: dict[int, Any]) -> Any:
    """``obj`` with every stand-in replaced by its array (lists and dicts in place)."""
    if isinstance(obj, _ArrayStub):
        if obj.array is None:
            raise pickle.UnpicklingError("numpy array without data")
        return obj.array
    if isinstance(obj, _DtypeStub):
        return obj.dtype
    if not isinstance(obj, (list, dict, tuple)):
        return obj
    if id(obj) in done:  # shared or cyclic: already (being) resolved
        return done[id(obj)]
    done[id(obj)] = obj
    if isinstance(obj, list):
        obj[:] = [_resolve(item, done) for item in obj]
    elif isinstance(obj, dict):
        for key, value in obj.items():
            obj[key] = _resolve(value, done)
    else:
        done[id(obj)] = tuple(_resolve(item, done) for item in obj)
    return done[id(obj)]


def load(file: IO[bytes], *, encoding: str = "bytes") -> Any:
    """Unpickle ``file`` admitting only numeric data (see the module docstring); files under
    the data root are read without executing code.

    :param file: binary file object.
    :param encoding: how Python 2 ``str`` objects are decoded (``"bytes"`` keeps them bytes).
    :raises RefusedPickleError: the pickle refers to a global outside the allow-list, or to a
        non-numeric numpy array.
    :raises pickle.UnpicklingError: the pickle is malformed (a too deep nesting and a length
        the stream does not hold included).
    """
    data = file.read()
    _check_lengths(data)
    try:
        return _resolve(_Unpickler(io.BytesIO(data), encoding=encoding).load(), {})
    except RecursionError as err:
        raise pickle.UnpicklingError("data nested too deeply") from err
