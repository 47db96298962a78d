"""Request sequences R_{1:r}: ordered learning and unlearning instructions.

A request is ``learn t`` or ``unlearn t``. A sequence is valid when every task is learned at
most once, unlearned at most once, and only after it was learned (paper §3.2). This module is
the single source of truth for that model: generation (the paper's procedure), validation,
the active sets Ω_i, and the JSON form ``[{"kind": "learn", "task": 0}, ...]`` used in result
records and by ``--requests FILE``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

import numpy as np

__all__ = [
    "LEARN",
    "UNLEARN",
    "InvalidRequestSequence",
    "Request",
    "REQUEST_KINDS",
    "RequestSequence",
    "generate_requests",
]

#: The kind of a request that learns a task.
LEARN: Literal["learn"] = "learn"
#: The kind of a request that unlearns a task.
UNLEARN: Literal["unlearn"] = "unlearn"
#: The kinds of request, the one definition (:mod:`pall_avalanche.core` uses it too).
REQUEST_KINDS = (LEARN, UNLEARN)


class InvalidRequestSequence(ValueError):
    """Raised for a request sequence that is not logically consistent."""


@dataclass(frozen=True)
class Request:
    """One instruction: ``kind`` is ``"learn"`` or ``"unlearn"``, ``task`` a task id from 0."""

    kind: Literal["learn", "unlearn"]
    task: int

    def __post_init__(self) -> None:
        if self.kind not in REQUEST_KINDS:
            raise InvalidRequestSequence(
                f"unknown request kind {self.kind!r}; valid kinds are 'learn' and 'unlearn'"
            )
        if isinstance(self.task, bool) or not isinstance(self.task, (int, np.integer)):
            raise InvalidRequestSequence(
                f"task id {self.task!r} is not an integer; task ids are 0, 1, ..."
            )
        object.__setattr__(self, "task", int(self.task))

    @property
    def is_learn(self) -> bool:
        """Whether the request learns its task."""
        return self.kind == LEARN

    def to_dict(self) -> dict:
        """``{"kind": ..., "task": ...}``, the JSON form of a request."""
        return {"kind": self.kind, "task": self.task}

    def __str__(self) -> str:
        return f"{'L' if self.is_learn else 'U'}{self.task}"

    @classmethod
    def parse(cls, token: str) -> Request:
        """The inverse of ``str()``: ``"L3"`` → learn task 3, ``"U1"`` → unlearn task 1."""
        match = re.fullmatch(r"([LU])(\d+)", token.strip())
        if match is None:
            raise InvalidRequestSequence(
                f"request {token!r} is not L<task> (learn) or U<task> (unlearn), e.g. L0 or U2")
        return cls(LEARN if match[1] == "L" else UNLEARN, int(match[2]))


class RequestSequence(Sequence[Request]):
    """An immutable, validated request sequence over tasks ``0..n_tasks-1``.

    :param requests: the requests in order (``Request`` objects or ``{"kind", "task"}`` dicts).
    :param n_tasks: number of tasks in the benchmark; every task id must be below it.
    """

    def __init__(self, requests: Iterable[Request | dict], n_tasks: int) -> None:
        if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
            raise InvalidRequestSequence(f"n_tasks={n_tasks!r} must be a positive integer")
        self._requests = tuple(_as_request(r, i) for i, r in enumerate(requests, start=1))
        self.n_tasks = n_tasks
        _validate(self._requests, n_tasks)

    @overload
    def __getitem__(self, index: int) -> Request: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Request, ...]: ...
    def __getitem__(self, index):
        return self._requests[index]

    def __len__(self) -> int:
        return len(self._requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._requests)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestSequence):
            return NotImplemented
        return self._requests == other._requests and self.n_tasks == other.n_tasks

    def __hash__(self) -> int:
        return hash((self._requests, self.n_tasks))

    def __repr__(self) -> str:
        return f"RequestSequence([{' '.join(map(str, self._requests))}], n_tasks={self.n_tasks})"

    @property
    def learned_tasks(self) -> list[int]:
        """Tasks with a learning request, in request order."""
        return [r.task for r in self._requests if r.is_learn]

    @property
    def unlearned_tasks(self) -> list[int]:
        """Tasks with an unlearning request, in request order."""
        return [r.task for r in self._requests if not r.is_learn]

    def active_sets(self) -> list[frozenset[int]]:
        """Ω_i after each request i (index 0 = after the first request)."""
        active: set[int] = set()
        out = []
        for r in self._requests:
            if r.is_learn:
                active.add(r.task)
            else:
                active.discard(r.task)
            out.append(frozenset(active))
        return out

    def without_tasks(self, tasks: Iterable[int]) -> RequestSequence:
        """The sequence with every request of the given tasks removed (an oracle sequence)."""
        drop = set(tasks)
        return RequestSequence([r for r in self._requests if r.task not in drop], self.n_tasks)

    def to_list(self) -> list[dict]:
        """The JSON-ready form: ``[{"kind": "learn", "task": 0}, ...]``."""
        return [r.to_dict() for r in self._requests]

    def save(self, path: str | Path) -> None:
        """Write the sequence as a JSON list (the format ``--requests`` reads)."""
        Path(path).write_text(json.dumps(self.to_list(), indent=1) + "\n")

    @classmethod
    def parse(cls, text: str, n_tasks: int) -> RequestSequence:
        """The inverse of ``str()`` of the requests: ``"L0 L1 U0"`` (or comma-separated,
        ``"L0,L1,U0"``) validated for ``n_tasks`` (:meth:`Request.parse`)."""
        tokens = [t for t in re.split(r"[\s,]+", text.strip()) if t]
        if not tokens:
            raise InvalidRequestSequence(f"{text!r} holds no request; e.g. 'L0 L1 U0'")
        return cls([Request.parse(token) for token in tokens], n_tasks)

    def __str__(self) -> str:
        return " ".join(map(str, self._requests))

    @classmethod
    def load(cls, path: str | Path, n_tasks: int) -> RequestSequence:
        """Read a JSON list of ``{"kind", "task"}`` objects and validate it for ``n_tasks``."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise InvalidRequestSequence(f"{path}: not valid JSON ({err})") from None
        if not isinstance(data, list):
            raise InvalidRequestSequence(
                f"{path}: expected a JSON list of {{'kind', 'task'}} objects, "
                f"got {type(data).__name__}"
            )
        if not data:
            raise InvalidRequestSequence(
                f"{path}: the list holds no request; give at least one "
                '{"kind": "learn", "task": t}')
        return cls(data, n_tasks)


def _as_request(item: Request | dict, position: int) -> Request:
    if isinstance(item, Request):
        return item
    if not isinstance(item, dict) or set(item) != {"kind", "task"}:
        raise InvalidRequestSequence(
            f"request {position} is {item!r}; expected an object with exactly the keys "
            "'kind' ('learn' or 'unlearn') and 'task' (an integer)"
        )
    try:
        return Request(item["kind"], item["task"])
    except InvalidRequestSequence as err:
        raise InvalidRequestSequence(f"request {position}: {err}") from None


def _validate(requests: Sequence[Request], n_tasks: int) -> None:
    learned: set[int] = set()
    unlearned: set[int] = set()
    for i, r in enumerate(requests, start=1):
        where = f"request {i} ({r})"
        if not 0 <= r.task < n_tasks:
            raise InvalidRequestSequence(
                f"{where}: unknown task id {r.task}; valid task ids are 0..{n_tasks - 1}"
            )
        if r.is_learn:
            if r.task in learned:
                raise InvalidRequestSequence(f"{where}: task {r.task} is learned twice")
            learned.add(r.task)
        else:
            if r.task in unlearned:
                raise InvalidRequestSequence(f"{where}: task {r.task} is unlearned twice")
            if r.task not in learned:
                raise InvalidRequestSequence(
                    f"{where}: task {r.task} is unlearned before it was learned"
                )
            unlearned.add(r.task)


def generate_requests(n_tasks: int, n_unlearn: int, seed: int) -> RequestSequence:
    """The paper's random request sequence, drawn as its reference draws it, so seed k gives
    the reference's sequence of seed k (docs/fidelity.md, "Benchmarks and requests").

    Learning requests come in task order ``0..n_tasks-1``. ``n_unlearn`` distinct tasks are
    drawn without replacement (``random.choice`` of the tasks not drawn yet, one at a time);
    for each, in drawing order, its unlearning request is inserted at a uniformly random
    position after that task's learning request in the list so far (``random.choice`` of the
    positions) — all from Python's generator seeded with ``seed``.

    :param n_tasks: T, the number of tasks.
    :param n_unlearn: N_u, the number of unlearning requests (0..T).
    :param seed: the seed of the sequence.
    """
    if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
        raise InvalidRequestSequence(f"n_tasks={n_tasks!r} must be a positive integer")
    if isinstance(n_unlearn, bool) or not isinstance(n_unlearn, int) or not (
        0 <= n_unlearn <= n_tasks
    ):
        raise InvalidRequestSequence(
            f"n_unlearn={n_unlearn!r} is invalid; it must be an integer in 0..{n_tasks} "
            f"(N_u cannot exceed the number of tasks T={n_tasks})"
        )
    rng = random.Random(seed)
    sequence = [Request(LEARN, t) for t in range(n_tasks)]
    undrawn = list(range(n_tasks))
    drawn = []
    for _ in range(n_unlearn):
        task = rng.choice(undrawn)
        undrawn.remove(task)
        drawn.append(task)
    for task in drawn:
        after = sequence.index(Request(LEARN, task)) + 1
        position = rng.choice(range(after, len(sequence) + 1))
        sequence.insert(position, Request(UNLEARN, task))
    return RequestSequence(sequence, n_tasks)
