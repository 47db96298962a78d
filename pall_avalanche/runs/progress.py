"""What a batch of runs prints while it works: one line per finished record (or a bar on a
terminal) with the time left, an overall count over a script's stages, the note while
records locked by other processes are awaited, and names that tell a method's runs apart."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from pall_avalanche.runs.locks import describe_lock
from pall_avalanche.runs.spec import RunSpec
from pall_avalanche.runs.store import lock_path

__all__ = ["LINE_SECONDS", "WAIT_NOTE_SECONDS", "OverallProgress", "StageProgress", "WaitNote",
           "distinguishing_keys", "duration", "run_name"]

#: How often the waiting note is repeated while nothing changes (seconds).
WAIT_NOTE_SECONDS = 300.0
#: The least time between two progress lines of a stage of a many-stage script (seconds).
LINE_SECONDS = 30.0


def run_name(spec: RunSpec, keys: Sequence[str] = ()) -> str:
    """``"pall seed 3"`` (with the training seed when it has one of its own, and the values of
    ``keys``: ``"pall alpha=0.2 seed 3"``)."""
    extra = f" (training seed {spec.train_seed})" if spec.train_seed is not None else ""
    setting = "".join(f" {key}={spec.config.get(key)}" for key in keys)
    return f"{spec.method}{setting} seed {spec.seed}{extra}"


def distinguishing_keys(specs: Sequence[RunSpec]) -> dict[str, list[str]]:
    """Method → the configuration keys whose values differ among its ``specs`` (a script's
    grid points: PALL's three α of Table 1), so that progress lines tell its runs apart."""
    by_method: dict[str, list[RunSpec]] = {}
    for spec in specs:
        by_method.setdefault(spec.method, []).append(spec)
    return {method: sorted(key for key in {k for s in group for k in s.config}
                           if len({repr(s.config.get(key)) for s in group}) > 1)
            for method, group in by_method.items()}


class WaitNote:
    """The note on stderr while records locked by other processes are awaited: when the set
    of awaited records changes, else every :data:`WAIT_NOTE_SECONDS`."""

    def __init__(self, poll_seconds: float) -> None:
        self.last: tuple[frozenset, float] | None = None
        self.poll_seconds = poll_seconds

    def show(self, waiting: Sequence[Path]) -> None:
        """The note for the records ``waiting`` (locked by other processes), unless the same
        set was noted less than :data:`WAIT_NOTE_SECONDS` ago."""
        key, now = frozenset(waiting), time.monotonic()
        if self.last is not None and self.last[0] == key and \
                now - self.last[1] < WAIT_NOTE_SECONDS:
            return
        self.last = (key, now)
        first = lock_path(waiting[0])
        print(f"pall_avalanche: waiting for {len(waiting)} record(s) that other processes are "
              f"computing, e.g. {first} ({describe_lock(first)}); checking every "
              f"{self.poll_seconds:g} s", file=sys.stderr, flush=True)


class OverallProgress:
    """Progress over the records of several :func:`run_specs` calls of one script (the
    audit's five stages): every record counts once it is reused or computed, and each
    progress line adds the overall count and an estimate of the time left overall (the
    records not counted yet, at the pace the computed ones ran so far: an upper bound where
    later stages find records to reuse).

    :param total: the records the script asks for, in all its stages.
    """

    def __init__(self, total: int) -> None:
        self.total, self.counted, self.computed = total, 0, 0
        self.start = time.perf_counter()

    def count(self, *, reused: int = 0, computed: int = 0) -> None:
        """``reused`` records found finished, ``computed`` ones just finished (or left out
        as diverged)."""
        self.counted += reused + computed
        self.computed += computed

    def describe(self) -> str:
        """``"overall 120/2688; about 41 min left"``."""
        left = self.total - self.counted
        text = f"overall {self.counted}/{self.total}"
        if left > 0 and self.computed:
            pace = (time.perf_counter() - self.start) / self.computed
            text += f"; about {duration(pace * left)} left"
        return text


class StageProgress:
    """Progress over records: with ``show`` on a terminal a tqdm bar; otherwise (in a log, or
    ``--quiet``: it drops the bars, not the progress) one plain line per finished record, with
    the time so far and an estimate of the time left (the mean time per finished record so
    far, times the records left), without escape codes or carriage returns.

    :param names: record → the name its line shows.
    """

    def __init__(self, total: int, desc: str, show: bool,
                 names: Callable[[RunSpec], str] = run_name,
                 overall: OverallProgress | None = None) -> None:
        self.total, self.desc, self.count = total, desc, 0
        self.tty = show and sys.stderr.isatty()
        self.names, self.overall = names, overall
        self.start = self.last = time.perf_counter()
        self.bar = tqdm(total=total, desc=desc, disable=not self.tty)

    def set_postfix_str(self, text: str) -> None:
        """Show ``text`` after the bar (on a terminal: the run being computed)."""
        self.bar.set_postfix_str(text)

    def update(self, spec: RunSpec, how: str = "done") -> None:
        """The record of ``spec`` is finished (``how``: ``"done"``, ``"diverged"``, ...):
        advance the bar, or print its line (class docstring)."""
        self.count += 1
        self.bar.update()
        if self.overall is not None:
            self.overall.count(computed=1)
            self.bar.set_description(f"{self.desc} [{self.overall.describe()}]")
        now = time.perf_counter()
        # a line per record, at most one per LINE_SECONDS when an overall count runs (many
        # records), the stage's last always
        if self.tty or (self.overall is not None and now - self.last < LINE_SECONDS
                        and self.count < self.total):
            return
        self.last = now
        elapsed, left = now - self.start, self.total - self.count
        estimate = f"; about {duration(elapsed / self.count * left)} left" if left else ""
        overall = f"; {self.overall.describe()}" if self.overall is not None else ""
        print(f"{self.desc}: {self.count}/{self.total} {self.names(spec)} {how} "
              f"({duration(elapsed)}{estimate}{overall})", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Close the bar (a terminal's line stays)."""
        self.bar.close()


def duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 5 s"``, ``"2 h 05 min"``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
