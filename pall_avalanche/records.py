"""Result records: one JSON file per (method, configuration, seed), written atomically.

A record holds at least ``method``, ``seed``, ``benchmark``, ``requests``, ``accuracy`` (the
r × T matrix, percent), ``metrics``, ``timings``, ``model_size_mb``, ``config`` and
``versions`` (README, "Result records"). A crash never leaves a half-written record: the
file is written to a temporary name in the same folder and renamed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["read_record", "write_atomic", "write_json_atomic", "write_text_atomic"]


def write_atomic(path: str | Path, write: Callable[[IO], Any], *, binary: bool = False) -> None:
    """Create ``path`` with ``write(file)`` so that readers see the old file or the whole new
    one, never a partial file (temporary file in the same folder, fsync, rename).

    :param path: the file.
    :param write: writes the content to the open file it receives.
    :param binary: open the temporary file in binary mode.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`write_atomic`)."""
    write_atomic(path, lambda f: f.write(text))


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (NaN and infinity are refused)."""
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def read_record(path: str | Path) -> dict | None:
    """The record at ``path``, or ``None`` if it is missing or not a complete record."""
    try:
        data = json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    required = ("method", "seed", "requests", "accuracy", "metrics")
    return data if isinstance(data, dict) and all(k in data for k in required) else None
