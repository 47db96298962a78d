"""Files that are written whole or not at all, and records read back: the torch-free base
every layer that writes (records, checkpoints, reports, sweeps) stands on.

Every file written through :func:`write_atomic` is written to a temporary name in the same
folder (``.<name>.<random>.tmp``), synced and renamed, so a crash never leaves a half-written
file; it gets the mode a plain ``open()`` would give, ``0o666 & ~umask`` (not ``mkstemp``'s
0600), so merged results folders stay readable by others. A write that fails (a full disk, no
permission) leaves the previous file as it was and raises :class:`WriteError`, one line
saying what happened and where (``no space left on device writing <path>``).

Files that are there but unusable (invalid JSON, a record without its required keys) raise
:class:`CorruptFileError` from :func:`load_record`; callers warn with :class:`RunWarning`
(one line naming the file) and either skip the file or move it aside with
:func:`set_aside` (``<name>.corrupt``, ``<name>.corrupt.N``) so that it never blocks a rerun.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypedDict

__all__ = ["REQUIRED_KEYS", "CorruptFileError", "Record", "RunWarning", "WriteError",
           "file_mode", "load_record", "one_line", "read_record", "record_problem", "set_aside",
           "write_atomic", "write_json_atomic", "write_record", "write_text_atomic"]

#: The keys a complete record has.
REQUIRED_KEYS = ("method", "seed", "requests", "accuracy", "metrics", "config")


class Record(TypedDict, total=False):
    """A result record, one run's JSON file (docs/reference/records.md): read
    (:func:`load_record`, :func:`read_record`) and written (:func:`write_record`) here only.
    Every key of :data:`REQUIRED_KEYS` is there in a complete record."""

    #: the record layout (``pall_avalanche.runs.store.RECORD_FORMAT``)
    format: int
    method: str
    seed: int
    #: the training seed, when it is not the seed (the audit's runs)
    train_seed: int
    benchmark: str
    #: the request sequence, ``[{"kind": "learn", "task": 0}, ...]``
    requests: list[dict[str, Any]]
    #: accuracy (%) on every task after every request: one row per request
    accuracy: list[list[float]]
    #: A_l, A_u, F_l, F_u, F_u_max (``None``: undefined)
    metrics: dict[str, float | None]
    exact: bool
    #: per request, and the means of the learning epochs and unlearning requests (seconds)
    timings: dict[str, Any]
    model_size_mb: float
    model_size_mb_per_request: list[float | None]
    resumed_after: list[int]
    #: the method's own figures per unlearning request, or ``None``
    unlearning_stats: list[dict[str, Any]] | None
    #: per learning request: the task's balanced training accuracy and whether it failed
    learning_checks: list[dict[str, Any]]
    eval_batch_size: int
    #: the benchmark's class split
    split: dict[str, Any]
    #: the method's resolved configuration
    config: dict[str, Any]
    config_hash: str
    #: the fingerprint of the package's code the run imports
    code: str
    versions: dict[str, str]
    extensions: list[dict[str, Any]]
    device: dict[str, Any]
    finished_at: str
    #: what a probe measured (the audit's runs, the field's)
    probe: Any


class RunWarning(UserWarning):
    """A results file was unusable: a corrupt checkpoint or record set aside, a record skipped.
    The message is one line and names the file."""


class CorruptFileError(ValueError):
    """A file that exists but cannot be used (invalid JSON, incomplete record, unreadable
    checkpoint). ``str()`` is one line: ``<path>: <reason>``.

    :param path: the file.
    :param reason: what is wrong with it (one line).
    """

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(str(path), reason)
        self.path, self.reason = Path(path), reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class WriteError(OSError):
    """A file could not be written. ``str()`` is one line, ``<what happened> writing <path>``
    (``no space left on device writing results/.../seed0.ckpt``); ``errno`` is the operating
    system's (``errno.ENOSPC`` for a full disk).

    :param path: the file.
    :param errno: the operating system's error number (``None`` if it gave none).
    :param reason: what happened, in lower case (``"no space left on device"``).
    """

    def __init__(self, path: str | Path, errno: int | None, reason: str) -> None:
        super().__init__(errno, reason)
        self.path = Path(path)

    @classmethod
    def of(cls, path: str | Path, err: OSError) -> WriteError:
        """The error of writing ``path`` that failed with ``err`` (itself if it is one)."""
        if isinstance(err, WriteError):
            return err
        reason = err.strerror or str(err)
        return cls(path, err.errno, reason[:1].lower() + reason[1:])

    def __str__(self) -> str:
        return f"{self.strerror} writing {self.path}"

    def __reduce__(self) -> tuple:     # rebuilt from its own arguments in another process
        return type(self), (str(self.path), self.errno, self.strerror)


def file_mode() -> int:
    """The mode of a new file under the current umask, ``0o666 & ~umask``. The umask is read
    from ``/proc/self/status`` where there is one (no change, safe with threads), else by
    setting it and putting it back at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | Path, write: Callable[[IO], Any], *, binary: bool = False) -> None:
    """Create ``path`` with ``write(file)`` so that readers see the old file or the whole new
    one, never a partial file (temporary file ``.<name>.<random>.tmp`` in the same folder,
    fsync, rename). The file gets mode ``0o666 & ~umask`` (:func:`file_mode`).

    :param path: the file.
    :param write: writes the content to the open file it receives.
    :param binary: open the temporary file in binary mode.
    :raises WriteError: the folder, the temporary file or its content could not be written
        (``path`` is left as it was).
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb" if binary else "w") as f:    # closes fd whatever fails
            os.chmod(tmp, file_mode())
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise WriteError.of(path, err) from err
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`write_atomic`)."""
    write_atomic(path, lambda f: f.write(text))


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (NaN and infinity are refused)."""
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a record holds")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def record_problem(data: Any) -> str | None:
    """Why ``data`` (parsed JSON) is not a usable record, or ``None``: a JSON object with every
    key of :data:`REQUIRED_KEYS`, a method name, an integer seed, a configuration object, and
    metrics and accuracy rows of numbers (or ``null``: undefined)."""
    if not isinstance(data, dict):
        return f"not a record (a JSON {type(data).__name__})"
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        return f"not a complete record (no {', '.join(missing)})"
    if not isinstance(data["method"], str) or type(data["seed"]) is not int:
        return "not a record (its method is not a name or its seed not an integer)"
    if not isinstance(data["config"], dict) or not isinstance(data["requests"], list):
        return "not a record (its config is not an object or its requests not a list)"
    metrics, accuracy = data["metrics"], data["accuracy"]
    if not isinstance(metrics, dict) or not all(v is None or _number(v)
                                                for v in metrics.values()):
        return "not a record (its metrics are not numbers)"
    if not isinstance(accuracy, list) or not all(
            isinstance(row, list) and all(v is None or _number(v) for v in row)
            for row in accuracy):
        return "not a record (its accuracy is not rows of numbers)"
    return None


def write_record(path: str | Path, record: Record) -> None:
    """Write ``record`` to ``path`` atomically (:func:`write_json_atomic`), after
    :func:`record_problem` found it usable: a record this package writes can always be read
    back.

    :raises ValueError: the record is not usable (a bug of its writer, named).
    :raises WriteError: the file could not be written.
    """
    problem = record_problem(record)
    if problem:
        raise ValueError(f"refusing to write {path}: {problem}")
    write_json_atomic(path, record)


def load_record(path: str | Path) -> Record | None:
    """The record at ``path``; ``None`` if there is no such file.

    :param path: the record file.
    :raises CorruptFileError: the file is there but is not valid JSON (NaN and infinity
        included, which no record holds; nesting too deep for the parser), or not a usable
        record (:func:`record_problem`).
    """
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError
        raise CorruptFileError(path, f"not valid JSON ({one_line(err)})") from None
    problem = record_problem(data)
    if problem:
        raise CorruptFileError(path, problem)
    return Record(**data)



def read_record(path: str | Path) -> Record | None:
    """The record at ``path``, or ``None`` if it is missing or not a complete record
    (:func:`load_record` without the error)."""
    try:
        return load_record(path)
    except CorruptFileError:
        return None


def set_aside(path: str | Path) -> Path:
    """Rename an unusable file to ``<name>.corrupt`` (``<name>.corrupt.N`` if that exists) in
    its folder, so that a rerun starts afresh and the bytes stay for inspection; return the
    new path.

    :param path: the file.
    """
    path = Path(path)
    target, n = path.with_name(path.name + ".corrupt"), 0
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt.{n}")
    os.replace(path, target)
    return target


def one_line(err: BaseException, limit: int = 120) -> str:
    """The first sentence of an error's message, on one line, at most ``limit`` characters."""
    text = " ".join(str(err).split())
    first = text.split(". ", 1)[0]
    text = first if first else type(err).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
