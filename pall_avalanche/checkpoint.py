"""Per-request checkpoints: plain state dicts of strategies and plugins, RNG states, files.

The mechanism is Lightning's, on Avalanche objects: every stateful piece (plugin, strategy)
derives from :class:`Stateful` and lists the attributes that make its state in
``checkpoint_attributes`` (dotted paths reach into owned objects: ``"ledger.events"``);
:meth:`Stateful.state_dict` encodes them into plain values (tensors, numbers, strings, lists,
tuples, sets, dicts) and :meth:`Stateful.load_state_dict` writes them back. Lists and dicts are
refilled in place (so references and ``defaultdict`` types survive), ``nn.Module`` attributes
and objects with ``load_state_dict`` load in place; everything else is re-assigned.
Subclasses extend their parents' lists: the attributes of every class in the MRO are saved.

A checkpoint file (:func:`save_checkpoint`) loads with ``torch.load(..., weights_only=True)``;
:func:`capture_rng_state` / :func:`restore_rng_state` cover Python, NumPy, torch CPU and CUDA.
Tensors keep their device: resume on the device the run started on. A checkpoint file that
cannot be loaded (random bytes, truncated, empty, refused by ``weights_only``, another
format) raises :class:`~pall_avalanche.files.CorruptFileError` naming the file, so that the
runner can set it aside and start afresh (:mod:`pall_avalanche.runs`).
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from avalanche.training.utils import ParamData
from torch import nn

from pall_avalanche.files import CorruptFileError, one_line, write_atomic

__all__ = [
    "CHECKPOINT_FORMAT",
    "Stateful",
    "capture_rng_state",
    "decode_state",
    "encode_state",
    "load_checkpoint",
    "register_codec",
    "restore_rng_state",
    "save_checkpoint",
    "state_to",
]

#: The checkpoint layout; a checkpoint of another format is set aside as corrupt and its run
#: starts afresh (2: request results in the request log and the evaluator's metric, the
#: episodic memory as its own plugin, no learning-order lists; 3: evaluation draws nothing
#: from the training's random stream, so a run resumed across that change would mix two;
#: plugin state keyed by the plugin's class, not its position; 4: the request log is kept by
#: the evaluator's metric only, not also by a plugin of its own; 5: buffers and mnemonic codes
#: keep their task's classes, any class ids; 6: buffers keep their samples' dataset indices;
#: 7: plugin state keyed by the class's new module, ``pall_avalanche.rehearsal.memory``; 8: the
#: permanent tasks and make-permanent requests of the CLPU protocol in the strategy's state;
#: 9: the request log kept by the strategy's request loop, not by the evaluator's metric).
CHECKPOINT_FORMAT = 9
_KIND = "__kind__"
#: kind → (class, encode to a plain dict, decode from it): types a module of its own teaches
#: this one to checkpoint (:func:`register_codec`; ``MaskSet`` by :mod:`pall_avalanche.masks`),
#: so this module needs no import of theirs.
_CODECS: dict[str, tuple[type, Callable[[Any], dict], Callable[[Mapping], Any]]] = {}


def register_codec(kind: str, cls: type, encode: Callable[[Any], dict],
                   decode: Callable[[Mapping], Any]) -> None:
    """Teach :func:`encode_state` / :func:`decode_state` a type: instances of ``cls`` are
    stored as ``{"__kind__": kind, **encode(value)}`` and read back with ``decode``.

    :raises ValueError: ``kind`` is taken by another class.
    """
    if kind in _CODECS and _CODECS[kind][0] is not cls:
        raise ValueError(f"checkpoint kind {kind!r} is taken by {_CODECS[kind][0].__name__}")
    _CODECS[kind] = (cls, encode, decode)


def encode_state(value: Any, *, where: str = "value") -> Any:
    """``value`` as plain, ``weights_only``-loadable data.

    Tensors are detached copies; Avalanche ``ParamData``, ``nn.Module`` (its ``state_dict``)
    and the types of :func:`register_codec` (``MaskSet``) become tagged dicts; dicts, lists,
    tuples and sets are encoded entry by entry; numbers, strings and ``None`` stay.

    :param value: the value to encode.
    :param where: its name, for the error raised on an unsupported type.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    for kind, (cls, encode, _) in _CODECS.items():
        if isinstance(value, cls):
            return {_KIND: kind, **encode(value)}
    if isinstance(value, ParamData):
        return {_KIND: "param_data", "name": value.name, "data": value.data.detach().clone()}
    if isinstance(value, nn.Module):
        return {_KIND: "module", "state": value.state_dict()}
    if isinstance(value, Mapping):
        return {key: encode_state(item, where=f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [encode_state(item, where=f"{where}[{i}]") for i, item in enumerate(value)]
        return items if isinstance(value, list) else type(value)(items)
    raise TypeError(f"{where} of type {type(value).__name__} cannot be checkpointed; valid: "
                    "tensors, numbers, strings, None, MaskSet, ParamData, nn.Module and "
                    "dicts/lists/tuples/sets of them")


def decode_state(value: Any, *, where: str = "value") -> Any:
    """The inverse of :func:`encode_state` (modules excepted: they load into an existing
    module, see :meth:`Stateful.load_state_dict`).

    :param value: the encoded value.
    :param where: its name, for error messages.
    """
    if isinstance(value, Mapping):
        kind = value.get(_KIND)
        if kind in _CODECS:
            return _CODECS[kind][2](value)
        if kind == "param_data":
            data = value["data"]
            return ParamData(value["name"], init_tensor=data, device=data.device)
        if kind == "module":
            raise ValueError(f"{where} holds a module's state but there is no module to load "
                             "it into; create the module before restoring")
        return {key: decode_state(item, where=f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [decode_state(item, where=f"{where}[{i}]") for i, item in enumerate(value)]
        return items if isinstance(value, list) else type(value)(items)
    return value


def state_to(value: Any, device: torch.device | str) -> Any:
    """Encoded state (:func:`encode_state`) with every tensor on ``device``: a checkpoint
    restored into a strategy on another device than the one it was saved from."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, Mapping):
        return {key: state_to(item, device) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [state_to(item, device) for item in value]
        return items if isinstance(value, list) else type(value)(items)
    return value


def _owner(obj: object, path: str) -> tuple[object, str]:
    """The object holding the last component of a dotted attribute path, and that name."""
    *parents, name = path.split(".")
    for parent in parents:
        obj = getattr(obj, parent)
    return obj, name


class Stateful:
    """A mixin: ``state_dict()`` / ``load_state_dict()`` over ``checkpoint_attributes``.

    Declare ``checkpoint_attributes = ("buffers", "ledger.events", ...)`` on the class; the
    attributes of the parent classes are included automatically.
    """

    checkpoint_attributes: tuple[str, ...] = ()

    @classmethod
    def all_checkpoint_attributes(cls) -> list[str]:
        """The attribute paths saved, parents' first, each once."""
        out: list[str] = []
        for klass in reversed(cls.__mro__):
            for path in vars(klass).get("checkpoint_attributes", ()):
                if path not in out:
                    out.append(path)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The encoded values of the checkpoint attributes (plain data)."""
        out = {}
        for path in self.all_checkpoint_attributes():
            owner, name = _owner(self, path)
            out[path] = encode_state(getattr(owner, name), where=f"{type(self).__name__}.{path}")
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        :param state: attribute path → encoded value; it must name exactly this class's
            checkpoint attributes.
        """
        expected = self.all_checkpoint_attributes()
        if sorted(state) != sorted(expected):
            raise ValueError(f"the state of {type(self).__name__} has keys {sorted(state)}; "
                             f"expected {sorted(expected)}")
        for path in expected:
            owner, name = _owner(self, path)
            restore_attribute(owner, name, state[path], where=f"{type(self).__name__}.{path}")


def restore_attribute(owner: object, name: str, encoded: Any, *, where: str) -> None:
    """Write an encoded value back into ``owner.<name>`` (in place where possible).

    :param owner: the object holding the attribute.
    :param name: the attribute's name.
    :param encoded: the value as :func:`encode_state` returned it.
    :param where: the attribute's full name, for error messages.
    """
    current = getattr(owner, name, None)
    is_module_state = isinstance(encoded, Mapping) and encoded.get(_KIND) == "module"
    if is_module_state:
        if not isinstance(current, nn.Module):
            raise ValueError(f"{where} holds a module's state but the attribute is "
                             f"{type(current).__name__}; create the module before restoring")
        current.load_state_dict(encoded["state"])
        return
    value = decode_state(encoded, where=where)
    if isinstance(current, dict) and isinstance(value, dict):
        current.clear()
        current.update(value)
    elif isinstance(current, list) and isinstance(value, list):
        current[:] = value
    else:
        setattr(owner, name, value)


# ----------------------------------------------------------------------- RNG
def capture_rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's (CPU, and the current CUDA device if CUDA
    is initialised) global random number generators, as plain data."""
    name, key, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"name": name, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()    # the current device's: a run uses one
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`capture_rng_state` returned.

    :param state: the captured states.
    """
    random.setstate(state["python"])
    numpy = state["numpy"]
    np.random.set_state((numpy["name"], numpy["key"].numpy().astype(np.uint32), numpy["pos"],
                         numpy["has_gauss"], numpy["gauss"]))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():   # onto the current device
        torch.cuda.set_rng_state(state["cuda"].cpu())


# ---------------------------------------------------------------------- files
def save_checkpoint(path: str | Path, state: Mapping[str, Any]) -> None:
    """``torch.save`` ``state`` to ``path`` atomically (temporary file in the same folder,
    fsync, rename): a kill or a failed write leaves the previous checkpoint or the new one,
    never a mix. The bytes are serialised in memory first and written with a plain file
    write, so a full disk raises the operating system's error, as
    :class:`~pall_avalanche.files.WriteError` (``no space left on device writing <path>``),
    not one of torch's zip writer.

    :param path: the checkpoint file.
    :param state: plain data (see :func:`encode_state`).
    """
    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    write_atomic(path, lambda f: f.write(buffer.getbuffer()), binary=True)


def load_checkpoint(path: str | Path, device: str | torch.device | None = None
                    ) -> dict[str, Any]:
    """The checkpoint at ``path``, loaded with ``weights_only=True``.

    :param path: the checkpoint file.
    :param device: where its tensors go (the resuming run's device: a run resumed on another
        GPU, or on the CPU, gets its state there); ``None``: where they were saved.
    :raises FileNotFoundError: there is no such file (nor other errors opening it).
    :raises CorruptFileError: the file is there but holds no checkpoint of this format
        (one-line message naming the file and the reason).
    """
    path = Path(path)
    with path.open("rb") as f:  # OSError (missing, permissions) is not corruption
        try:
            state = torch.load(f, weights_only=True, map_location=device)
        except Exception as err:  # whatever the bytes, they hold no checkpoint
            raise CorruptFileError(path, f"unreadable checkpoint ({type(err).__name__}: "
                                         f"{one_line(err)})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CorruptFileError(path, f"not a checkpoint of format {CHECKPOINT_FORMAT} "
                                     f"(found {found!r})")
    return state
