"""Extensions: a user's code that registers methods, benchmarks and models, loaded by name
("plugins" are Avalanche's strategy plugins; the command line spells an extension
``--plugin``, as users know it).

An extension is a Python file or an importable module whose import registers what it brings
(:func:`~pall_avalanche.catalog.register_method`,
:func:`~pall_avalanche.catalog.register_benchmark`,
:func:`~pall_avalanche.catalog.register_model`). Every script takes
``--plugin MODULE_OR_FILE`` (repeatable), and every installed package may name one in the
entry-point group :data:`ENTRY_POINT_GROUP` (a module, or a function called with no
arguments; ``[project.entry-points."pall_avalanche.extensions"]`` in its ``pyproject.toml``).
They are loaded before the methods and benchmarks are parsed, in the main process and again in
every ``--jobs`` worker (:func:`loaded_extensions` lists what a worker must load). An extension that
fails to import, or registers a name already taken, is refused in one line.

Every record carries :func:`provenance` (its ``extensions``): which extensions were loaded
and the SHA-256 of each one's file (or its package's version), so a result says what code
made it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["ENTRY_POINT_GROUP", "load_extensions", "loaded_extensions", "provenance"]

#: The entry-point group of installed extensions.
ENTRY_POINT_GROUP = "pall_avalanche.extensions"

#: What was loaded, in order: the ``--plugin`` value (a file as its absolute path) or the entry
#: point → its provenance.
_LOADED: dict[str, dict[str, Any]] = {}


def _sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _is_file(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or Path(spec).is_file()


def _load_file(path: Path) -> dict[str, Any]:
    digest = _sha256(path)
    name = f"pall_avalanche_extension_{path.stem}_{digest[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # classes defined there pickle by this name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return {"extension": str(path), "sha256": digest}


def _load_module(name: str) -> dict[str, Any]:
    module = importlib.import_module(name)
    out: dict[str, Any] = {"extension": name}
    file = getattr(module, "__file__", None)
    if file:
        out["sha256"] = _sha256(file)
    package = metadata.packages_distributions().get(name.split(".")[0])
    if package:
        out["package"] = package[0]
        out["version"] = metadata.version(package[0])
    return out


def _load_entry_point(entry: metadata.EntryPoint) -> dict[str, Any]:
    loaded = entry.load()
    if callable(loaded):
        loaded()
    out: dict[str, Any] = {"extension": entry.value, "entry_point": entry.name}
    if entry.dist is not None:
        out["package"], out["version"] = entry.dist.name, entry.dist.version
    return out


def load_extensions(specs: Sequence[str] = (), *, entry_points: bool = True) -> list[dict]:
    """Load the installed extensions (``entry_points``) and each of ``specs`` (a module name or a
    ``.py`` file) once per process, in that order; return :func:`provenance`.

    :raises ValueError: one line naming the extension and what went wrong (missing file, import
        error, a name already registered).
    """
    todo: list[tuple[str, Any]] = []
    if entry_points:
        todo += [(f"entry point {e.name} = {e.value}", e)
                 for e in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    for spec in specs:
        if _is_file(spec):
            path = Path(spec).expanduser()
            if not path.is_file():
                raise ValueError(f"--plugin {spec}: no such file")
            todo.append((str(path.resolve()), path.resolve()))
        else:
            todo.append((spec, spec))
    for key, item in todo:
        if key in _LOADED:
            continue
        where = key if key.startswith("entry point") else f"--plugin {key}"
        try:
            if isinstance(item, metadata.EntryPoint):
                _LOADED[key] = _load_entry_point(item)
            elif isinstance(item, Path):
                _LOADED[key] = _load_file(item)
            else:
                _LOADED[key] = _load_module(item)
        except Exception as err:
            raise ValueError(f"{where}: {type(err).__name__}: {err}".replace("\n", " ")
                             ) from None
    return provenance()


def loaded_extensions() -> list[str]:
    """The ``--plugin`` values loaded in this process (files as absolute paths), for a worker
    process to load again (its entry points it finds itself)."""
    return [key for key, value in _LOADED.items() if "entry_point" not in value]


def provenance() -> list[dict[str, Any]]:
    """What the loaded extensions are: per extension its ``extension`` (file or module),
    ``sha256`` of its file, and ``package`` / ``version`` where it comes from an installed
    package."""
    return [dict(value) for value in _LOADED.values()]
