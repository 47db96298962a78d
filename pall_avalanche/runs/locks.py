"""Record locks: several processes share one results folder (the records themselves are
read and written atomically by :mod:`pall_avalanche.files`).

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
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pall_avalanche.files import WriteError

__all__ = ["LOCK_STALE_SECONDS", "LockLostError", "RecordLock", "acquire_lock",
           "describe_lock", "lock_staleness"]

#: A lock not refreshed for this long is stale whoever holds it (seconds; 6 hours).
LOCK_STALE_SECONDS = 6 * 3600
#: An unreadable (empty, half-written) lock older than this is stale (seconds).
UNREADABLE_LOCK_SECONDS = 60


class LockLostError(RuntimeError):
    """A record's lock was broken while its owner was still computing the record."""


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
