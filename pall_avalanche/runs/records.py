"""Result records: one JSON file per (method, configuration, seed), written atomically, and
the lock files that let several processes share one results folder.

A record holds at least ``method``, ``seed``, ``benchmark``, ``requests``, ``accuracy`` (the
r × T matrix, percent), ``metrics``, ``timings``, ``model_size_mb``, ``config`` and
``versions`` (README, "Result records"). A crash never leaves a half-written record: the
file is written to a temporary name in the same folder (``.<name>.<random>.tmp``) and
renamed. Every file written through :func:`write_atomic` (records, checkpoints, reports)
gets the mode a plain ``open()`` would give, ``0o666 & ~umask`` (not ``mkstemp``'s 0600),
so merged results folders stay readable by others. A write that fails (a full disk, no
permission) leaves the previous file as it was and raises :class:`WriteError`, one line
saying what happened and where (``no space left on device writing <path>``).

Files that are there but unusable (invalid JSON, a record without its required keys) raise
:class:`CorruptFileError` from :func:`load_record`; callers warn with :class:`RunWarning`
(one line naming the file) and either skip the file or move it aside with
:func:`set_aside` (``<name>.corrupt``, ``<name>.corrupt.N``) so that it never blocks a rerun.

Record locks (:func:`acquire_lock`): ``seed<k>.lock`` beside ``seed<k>.json``, created with
``O_CREAT | O_EXCL`` and holding the owner's pid, host name, start time and a random token
as JSON. The owner refreshes its modification time after every request
(:meth:`RecordLock.refresh`) and deletes it when done (:meth:`RecordLock.release`, only
while it still holds its token). A lock is stale, and :func:`acquire_lock` breaks it (one
line on stderr naming the file), when its owner ran on this host and that pid no longer
exists, or when it was not refreshed for :data:`LOCK_STALE_SECONDS` (6 hours: owners on
other hosts sharing the folder, or a reused pid; a single request must finish within that
time), or when it is unreadable and older than a minute (an owner killed while creating it).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

__all__ = ["LOCK_STALE_SECONDS", "CorruptFileError", "LockLostError", "RecordLock", "RunWarning",
           "WriteError", "acquire_lock", "file_mode", "load_record", "read_record", "set_aside",
           "write_atomic", "write_json_atomic", "write_text_atomic"]

#: A lock not refreshed for this long is stale whoever holds it (seconds; 6 hours).
LOCK_STALE_SECONDS = 6 * 3600
#: An unreadable (empty, half-written) lock older than this is stale (seconds).
UNREADABLE_LOCK_SECONDS = 60
#: The keys a complete record has.
REQUIRED_KEYS = ("method", "seed", "requests", "accuracy", "metrics")


class LockLostError(RuntimeError):
    """A record's lock was broken while its owner was still computing the record."""


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


def load_record(path: str | Path) -> dict | None:
    """The record at ``path``; ``None`` if there is no such file.

    :param path: the record file.
    :raises CorruptFileError: the file is there but is not valid JSON or not a complete
        record (one of :data:`REQUIRED_KEYS` missing).
    """
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise CorruptFileError(path, f"not valid JSON ({_one_line(err)})") from None
    if not isinstance(data, dict):
        raise CorruptFileError(path, f"not a record (a JSON {type(data).__name__})")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise CorruptFileError(path, f"not a complete record (no {', '.join(missing)})")
    return data


def read_record(path: str | Path) -> dict | None:
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


def _one_line(err: BaseException, limit: int = 120) -> str:
    """The first sentence of an error's message, on one line, at most ``limit`` characters."""
    text = " ".join(str(err).split())
    first = text.split(". ", 1)[0]
    text = first if first else type(err).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------------------- locks
def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (a process of another user counts)."""
    if os.name == "nt":  # os.kill(pid, 0) would terminate it there: rely on the lock's age
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError, OSError):
        return False
    return True


def _read_lock(path: Path) -> tuple[dict | None, float]:
    """A lock's content (``None`` if it is not a JSON object) and modification time.

    :raises FileNotFoundError: there is no lock.
    """
    mtime = path.stat().st_mtime
    try:
        data = json.loads(path.read_bytes())
    except ValueError:
        return None, mtime
    return (data if isinstance(data, dict) else None), mtime


def lock_staleness(info: dict | None, mtime: float, *,
                   stale_seconds: float = LOCK_STALE_SECONDS) -> str | None:
    """Why a lock with this content and modification time is stale, or ``None`` if it is
    live (module docstring).

    :param info: the lock's JSON content (``None``: unreadable).
    :param mtime: its modification time (seconds since the epoch).
    :param stale_seconds: the age from which any lock is stale.
    """
    age = time.time() - mtime
    if info is None:
        return "unreadable" if age > UNREADABLE_LOCK_SECONDS else None
    pid = info.get("pid")
    if (info.get("host") == socket.gethostname() and isinstance(pid, int)
            and not _pid_alive(pid)):
        return f"process {pid} on this host no longer exists"
    if age > stale_seconds:
        return f"not refreshed for {age / 3600:.1f} h (stale after {stale_seconds / 3600:g} h)"
    return None


def describe_lock(path: str | Path) -> str:
    """``pid P on host H since T`` for a lock file (or why that cannot be said)."""
    try:
        info, _ = _read_lock(Path(path))
    except OSError:
        return "gone"
    if info is None:
        return "unreadable"
    return f"pid {info.get('pid')} on host {info.get('host')} since {info.get('started')}"


@dataclass(frozen=True)
class RecordLock:
    """A lock this process took (:func:`acquire_lock`); picklable, so that a worker process
    can refresh it.

    :param path: the lock file.
    :param token: the random token written into it (only its holder knows it).
    """

    path: Path
    token: str

    def held(self) -> bool:
        """Whether the lock file is still this lock (not broken and taken by another)."""
        try:
            info, _ = _read_lock(self.path)
        except OSError:
            return False
        return info is not None and info.get("token") == self.token

    def refresh(self) -> None:
        """Set the lock's modification time to now, the sign that its owner is alive.

        :raises LockLostError: the lock was broken (its owner looked dead, e.g. suspended for
            longer than the stale age) and may be another process's now: this process must
            stop computing the record rather than write beside the new owner.
        """
        if not self.held():
            raise LockLostError(f"the lock {self.path} is no longer this process's (it was "
                                "broken as stale); stopped computing its record, which its new "
                                "owner computes")
        with contextlib.suppress(OSError):
            os.utime(self.path)

    def release(self) -> None:
        """Delete the lock file if it is still this lock."""
        if self.held():
            self.path.unlink(missing_ok=True)


def acquire_lock(path: str | Path, *, stale_seconds: float = LOCK_STALE_SECONDS
                 ) -> RecordLock | None:
    """Take the lock file ``path`` (``O_CREAT | O_EXCL``; content: pid, host, start time,
    token), breaking it first if it is stale (:func:`lock_staleness`; one line on stderr);
    ``None`` if a live owner holds it.

    :param path: the lock file (``seed<k>.lock``).
    :param stale_seconds: the age from which any lock is stale.
    :raises WriteError: its content could not be written (the file is removed again).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(5):  # a few tries: each retry follows a lock broken or released meanwhile
        token = secrets.token_hex(16)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            if _break_if_stale(path, stale_seconds):
                continue
            return None
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"pid": os.getpid(), "host": socket.gethostname(),
                           "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "token": token}, f)
        except OSError as err:  # a full disk: no empty lock left behind
            path.unlink(missing_ok=True)
            raise WriteError.of(path, err) from err
        return RecordLock(path, token)
    return None


def _break_if_stale(path: Path, stale_seconds: float) -> bool:
    """Delete ``path`` if it is a stale lock; whether the caller should try to create it
    again (broken, or gone meanwhile). The lock is first renamed to a private name and judged
    again there, so that a live lock another process took in between is put back, not
    deleted."""
    try:
        info, mtime = _read_lock(path)
    except FileNotFoundError:
        return True
    if lock_staleness(info, mtime, stale_seconds=stale_seconds) is None:
        return False
    aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.broken")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True  # another process broke it first
    try:
        info, mtime = _read_lock(aside)
    except FileNotFoundError:
        return True
    reason = lock_staleness(info, mtime, stale_seconds=stale_seconds)
    if reason is None:  # a live lock was created between the two looks: put it back
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        except OSError:
            os.replace(aside, path)
        aside.unlink(missing_ok=True)
        return False
    aside.unlink(missing_ok=True)
    owner = "unknown owner" if info is None else (
        f"pid {info.get('pid')} on host {info.get('host')}, started {info.get('started')}")
    print(f"pall_avalanche: breaking the stale lock {path} ({owner}: {reason})",
          file=sys.stderr, flush=True)
    return True
