"""The results folder: where records, checkpoints and locks live, claiming a record under its
lock, leftovers of killed runs, and the fallback for a record that cannot be written
(:mod:`pall_avalanche.runs`, "Several processes on one results folder")."""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from pall_avalanche.files import (
    CorruptFileError,
    RunWarning,
    load_record,
    set_aside,
    write_record,
)
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs.locks import RecordLock, acquire_lock
from pall_avalanche.runs.spec import RunSpec

__all__ = ["RECORD_FORMAT", "check_format", "checkpoint_path", "claim", "has_leftovers",
           "leftovers", "lock_path", "peek_record", "record_path", "unsaved_error",
           "unsaved_path"]

#: The record layout (2: evaluation draws nothing from the training's random stream, the
#: record lists its plugins; 3: seed k's class split and request sequence are the paper's
#: reference's, buffers and their draws as the reference's, Table A2's distances both; 4: the
#: identity includes the fingerprint of the code, kept as ``code``; 5: the loaded user
#: extensions are kept as ``extensions``, formerly ``plugins``); a results folder holding
#: another format is refused.
RECORD_FORMAT = 5


def record_path(out_dir: str | Path, method: str, seed: int, config: dict,
                requests: RequestSequence | list | None = None,
                train_seed: int | None = None) -> Path:
    """Where the record of (method, resolved configuration, seed, requests, training seed)
    lives (:meth:`RunSpec.record_path`)."""
    return RunSpec.of(method, seed, config, requests, train_seed).record_path(out_dir)


def checkpoint_path(record_file: str | Path) -> Path:
    """The checkpoint file kept next to a record while it runs (``seed<k>.ckpt``).

    :param record_file: the record's path (:func:`record_path`).
    """
    return Path(record_file).with_suffix(".ckpt")


def lock_path(record_file: str | Path) -> Path:
    """The lock file of a record while a process computes it (``seed<k>.lock``; module
    docstring).

    :param record_file: the record's path (:func:`record_path`).
    """
    return Path(record_file).with_suffix(".lock")


def unsaved_path(record_file: str | Path) -> Path:
    """Where a record that could not be written to ``record_file`` is kept:
    ``<tempdir>/pall_avalanche_unsaved/<benchmark>/<method>/<hash>/seed<k>.json``.

    :param record_file: the record's path (:func:`record_path`).
    """
    return Path(tempfile.gettempdir(), "pall_avalanche_unsaved", *Path(record_file).parts[-4:])


def unsaved_error(path: Path, record: dict, err: OSError) -> OSError:
    """Keep a record that could not be written to ``path`` in :func:`unsaved_path`; the error
    to raise, naming both files."""
    fallback = unsaved_path(path)
    try:
        write_record(fallback, record)
        kept = (f"the record was kept in {fallback}: copy it to {path} once that folder is "
                "writable")
    except OSError as again:
        kept = f"keeping it failed too: {again}"
    return OSError(f"could not write the record: {err}; {kept}")


def check_format(path: Path, record: dict | None) -> None:
    """Refuse a record (read from ``path``) of another format than :data:`RECORD_FORMAT`.

    :raises ValueError: naming the file and both formats.
    """
    if record is not None and record.get("format") != RECORD_FORMAT:
        raise ValueError(f"{path} has record format {record.get('format')!r}; this "
                         f"version writes format {RECORD_FORMAT}: use another --out")


def _load(path: Path, spec: RunSpec | None) -> dict | None:
    """The record at ``path`` (``None``: missing) if it can serve ``spec``.

    :raises CorruptFileError: it cannot: not a usable record, no integer ``format`` (a
        damaged file; another integer format refuses the folder, :func:`check_format`), or
        the record of another run than ``spec`` (method, seed or ``config_hash``: a file
        copied into the wrong folder).
    """
    record = load_record(path)
    if record is None:
        return None
    if type(record.get("format")) is not int:
        raise CorruptFileError(path, "a record without its format (a damaged file)")
    check_format(path, record)
    if spec is not None:
        found = (record["method"], record["seed"], record.get("config_hash"))
        if found != (spec.method, spec.seed, spec.hash):
            raise CorruptFileError(path, f"the record of another run (method {found[0]}, "
                                         f"seed {found[1]}, config_hash {found[2]}), not of "
                                         f"{spec.method} seed {spec.seed} ({spec.hash})")
    return record


def peek_record(path: Path, spec: RunSpec | None = None) -> dict | None:
    """The record at ``path`` read without its lock: ``None`` if missing or unusable for
    ``spec`` (:func:`_load`; such a record is reported and set aside by whoever takes the
    lock)."""
    try:
        return _load(path, spec)
    except CorruptFileError:
        return None


def leftovers(path: Path) -> list[Path]:
    """The temporaries a kill during :func:`~pall_avalanche.files.write_atomic` left for
    the record ``path`` and its checkpoint (``.seed<k>.json.*.tmp``, ``.seed<k>.ckpt.*.tmp``),
    and lock files of a lock breaker killed mid-way older than an hour."""
    found = [*path.parent.glob(f".{path.name}.*.tmp"),
             *path.parent.glob(f".{checkpoint_path(path).name}.*.tmp")]
    now = time.time()
    for broken in path.parent.glob(f".{lock_path(path).name}.*.broken"):
        try:
            if now - broken.stat().st_mtime > 3600:
                found.append(broken)
        except OSError:
            pass
    return found


def has_leftovers(path: Path) -> bool:
    """Whether the record ``path`` has a checkpoint or a killed run's temporaries beside it
    (:func:`leftovers`)."""
    return checkpoint_path(path).exists() or bool(leftovers(path))


def claim(path: Path, usable: Callable[[dict | None], bool], spec: RunSpec | None = None
           ) -> tuple[RecordLock | None, dict | None]:
    """Try to take the lock of the record ``path`` (of ``spec``, when given).

    Returns ``(lock, None)``: the record is ours to compute (its temporaries are deleted, a
    record file that cannot serve ``spec`` is set aside with a warning: :func:`_load`);
    ``(None, record)``: the record is finished (an orphan checkpoint beside it is deleted if
    we got the lock); ``(None, None)``: a live other owner holds the lock and the record is
    not finished.
    """
    lock = acquire_lock(lock_path(path))
    if lock is None:
        record = peek_record(path, spec)
        return None, record if usable(record) else None
    try:
        for leftover in leftovers(path):
            leftover.unlink(missing_ok=True)
        try:
            record = _load(path, spec)
        except CorruptFileError as err:
            aside = set_aside(path)
            warnings.warn(f"{err}; set aside as {aside.name}, computing the record again",
                          RunWarning, stacklevel=2)
            record = None
        if usable(record):
            checkpoint_path(path).unlink(missing_ok=True)  # orphan of a kill after the rename
    except BaseException:
        lock.release()
        raise
    if usable(record):
        lock.release()
        return None, record
    return lock, None
