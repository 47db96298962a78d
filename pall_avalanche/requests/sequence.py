"""Requests and validated request sequences: the model every other part of the package reads.

A sequence is valid when every task is learned at most once, unlearned at most once and only
after it was learned (paper §3.2), made permanent only while it is learned and temporary, and
never unlearned once permanent (:class:`RequestSequence` refuses any other).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import overload

import numpy as np


class RequestKind(str, Enum):
    """The kinds of request. A member is the string it stands for (``RequestKind.LEARN ==
    "learn"``), so records, JSON files and messages hold the plain strings."""

    #: learns a task (temporarily, or permanently: :attr:`Request.permanent`)
    LEARN = "learn"
    #: unlearns a task
    UNLEARN = "unlearn"
    #: makes a learned, temporary task permanent (the CLPU protocol)
    MAKE_PERMANENT = "make_permanent"

    def __str__(self) -> str:
        return self.value


#: The kinds of request, in order.
REQUEST_KINDS = tuple(RequestKind)
#: The letter of each request in the string form (``L3``; a permanent learning request
#: ``P3``).
_LETTERS = {RequestKind.LEARN: "L", RequestKind.UNLEARN: "U", RequestKind.MAKE_PERMANENT: "M"}


class InvalidRequestSequence(ValueError):
    """Raised for a request sequence that is not logically consistent."""


@dataclass(frozen=True)
class Request:
    """One instruction: ``kind`` is ``"learn"``, ``"unlearn"`` or ``"make_permanent"``,
    ``task`` a task id from 0; ``permanent`` marks a learning request whose task can never be
    unlearned (CLPU's ``R`` of a new task)."""

    kind: RequestKind
    task: int
    permanent: bool = False

    def __post_init__(self) -> None:
        if self.kind not in REQUEST_KINDS:
            raise InvalidRequestSequence(
                f"unknown request kind {self.kind!r}; valid kinds are "
                + ", ".join(repr(k.value) for k in RequestKind))
        object.__setattr__(self, "kind", RequestKind(self.kind))
        if isinstance(self.task, bool) or not isinstance(self.task, (int, np.integer)):
            raise InvalidRequestSequence(
                f"task id {self.task!r} is not an integer; task ids are 0, 1, ..."
            )
        if not isinstance(self.permanent, bool):
            raise InvalidRequestSequence(f"permanent={self.permanent!r} must be true or false")
        if self.permanent and self.kind != RequestKind.LEARN:
            raise InvalidRequestSequence(
                f"only a learning request can be permanent, not {self.kind.value!r} (make a "
                "learned task permanent with kind 'make_permanent')")
        object.__setattr__(self, "task", int(self.task))

    @property
    def is_learn(self) -> bool:
        """Whether the request learns its task (temporarily or permanently)."""
        return self.kind == RequestKind.LEARN

    @property
    def is_unlearn(self) -> bool:
        """Whether the request unlearns its task."""
        return self.kind == RequestKind.UNLEARN

    @property
    def makes_permanent(self) -> bool:
        """Whether the task is permanent after this request (a permanent learning request or
        a ``make_permanent`` one)."""
        return self.permanent or self.kind == RequestKind.MAKE_PERMANENT

    def to_dict(self) -> dict:
        """``{"kind": ..., "task": ...}``, the JSON form of a request (a permanent learning
        request adds ``"permanent": True``)."""
        out = {"kind": self.kind.value, "task": self.task}
        if self.permanent:
            out["permanent"] = True
        return out

    def __str__(self) -> str:
        return f"{'P' if self.permanent else _LETTERS[self.kind]}{self.task}"

    @classmethod
    def parse(cls, token: str) -> Request:
        """The inverse of ``str()``: ``"L3"`` → learn task 3, ``"P3"`` → learn task 3
        permanently, ``"U1"`` → unlearn task 1, ``"M1"`` → make task 1 permanent."""
        letter, task = _letter_and_task(
            token, "LPUM", "L<task> (learn), P<task> (learn permanently), U<task> (unlearn) "
            "or M<task> (make permanent), e.g. L0 or U2")
        if letter == "P":
            return cls(RequestKind.LEARN, task, permanent=True)
        return cls({"L": RequestKind.LEARN, "U": RequestKind.UNLEARN,
                    "M": RequestKind.MAKE_PERMANENT}[letter], task)


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
        return [r.task for r in self._requests if r.is_unlearn]

    @property
    def permanent_tasks(self) -> list[int]:
        """Tasks permanent at the end, in the order they became permanent."""
        return [r.task for r in self._requests if r.makes_permanent]

    def active_sets(self) -> list[frozenset[int]]:
        """Ω_i after each request i (index 0 = after the first request)."""
        active: set[int] = set()
        out = []
        for r in self._requests:
            if r.is_learn:
                active.add(r.task)
            elif r.is_unlearn:
                active.discard(r.task)
            out.append(frozenset(active))
        return out

    def without_tasks(self, tasks: Iterable[int]) -> RequestSequence:
        """The sequence with every request of the given tasks removed (an oracle sequence)."""
        drop = set(tasks)
        return RequestSequence([r for r in self._requests if r.task not in drop], self.n_tasks)

    def without_unlearning(self, unlearnable_age: int | None = None) -> RequestSequence:
        """The sequence its learner would have received had nobody asked to unlearn: every
        unlearning request removed and, with the ``unlearnable_age`` the sequence was
        generated with (:func:`generate_requests`), each formerly unlearned task made
        permanent where that protocol makes every other task permanent (right before the
        learning request of task + age, if there is one)."""
        kept = [r for r in self._requests if not r.is_unlearn]
        insert_make_permanent(kept, self.unlearned_tasks, unlearnable_age)
        return RequestSequence(kept, self.n_tasks)

    def as_continual_learning(self) -> RequestSequence:
        """The sequence as a continual-learning run with unlearning switched off, as CLArena
        runs its reference experiments (``disable_unlearning=True``): its learning requests in
        order, each one permanent, and no unlearning or make-permanent request (``L0 L1 U0 L2
        M1`` → ``P0 P1 P2``). What a method does with it is what its ``permanence`` says of a
        permanent task: CLPU-DER++ learns every task into its main network (DER++), Amnesiac
        HAT trains no backups (HAT), the Amnesiac learners store no update; the others learn
        as on the learning requests alone."""
        return RequestSequence([Request(RequestKind.LEARN, r.task, permanent=True)
                                for r in self._requests if r.is_learn], self.n_tasks)

    def to_list(self) -> list[dict]:
        """The JSON-ready form: ``[{"kind": "learn", "task": 0}, ...]`` (a permanent learning
        request adds ``"permanent": true``)."""
        return [r.to_dict() for r in self._requests]

    def save(self, path: str | Path) -> None:
        """Write the sequence as a JSON list (the format ``--requests`` reads)."""
        Path(path).write_text(json.dumps(self.to_list(), indent=1) + "\n")

    @classmethod
    def parse(cls, text: str, n_tasks: int) -> RequestSequence:
        """The inverse of ``str()`` of the requests: ``"L0 P1 U0 M1"`` validated for
        ``n_tasks`` (:meth:`Request.parse`). Comma-separated tokens are read too, so UnCLe's
        instruction strings (Adhikari et al., 2025: ``"L6,L7,L2,U1"``, 0-based task ids) are
        sequences of this form."""
        return cls([Request.parse(token) for token in _tokens(text, "L0 L1 U0")], n_tasks)

    @classmethod
    def parse_clpu(cls, text: str, n_tasks: int) -> RequestSequence:
        """A sequence in CLPU's notation (Liu, Liu and Stone, CoLLAs 2022), e.g.
        ``"R0 T1 T2 R3 R1 F2 T4 F4"`` (their default): ``T<t>`` learns t temporarily,
        ``R<t>`` learns t permanently, or makes it permanent when it is learned temporarily,
        ``F<t>`` unlearns (forgets) it."""
        requests: list[Request] = []
        learned: set[int] = set()
        for token in _tokens(text, "R0 T1 F1"):
            letter, task = _letter_and_task(
                token, "RTF", "R<task> (remember), T<task> (learn temporarily) or F<task> "
                "(forget), e.g. R0 T1 F1")
            if letter == "F":
                requests.append(Request(RequestKind.UNLEARN, task))
            elif letter == "R" and task in learned:
                requests.append(Request(RequestKind.MAKE_PERMANENT, task))
            else:
                requests.append(Request(RequestKind.LEARN, task, permanent=letter == "R"))
                learned.add(task)
        return cls(requests, n_tasks)

    def to_clpu(self) -> str:
        """The sequence in CLPU's notation (the inverse of :meth:`parse_clpu`)."""
        return " ".join(f"{'F' if r.is_unlearn else 'R' if r.makes_permanent else 'T'}{r.task}"
                        for r in self._requests)

    def __str__(self) -> str:
        return " ".join(map(str, self._requests))

    @classmethod
    def load(cls, path: str | Path, n_tasks: int) -> RequestSequence:
        """Read a JSON list of ``{"kind", "task"}`` objects and validate it for ``n_tasks``.

        :raises InvalidRequestSequence: one line naming the file: not UTF-8, not valid JSON
            (nesting too deep for the parser included), or not a valid sequence.
        """
        try:
            data = json.loads(Path(path).read_bytes().decode("utf-8"))
        except UnicodeDecodeError as err:
            raise InvalidRequestSequence(f"{path}: not UTF-8 text (byte "
                                         f"{err.object[err.start]:#04x} at position "
                                         f"{err.start})") from None
        except json.JSONDecodeError as err:
            raise InvalidRequestSequence(f"{path}: not valid JSON ({err})") from None
        except RecursionError:
            raise InvalidRequestSequence(f"{path}: not valid JSON (nested too deeply for a "
                                         "list of requests)") from None
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


def _tokens(text: str, example: str) -> list[str]:
    tokens = [t for t in re.split(r"[\s,]+", text.strip()) if t]
    if not tokens:
        raise InvalidRequestSequence(f"{text!r} holds no request; e.g. {example!r}")
    return tokens


def _letter_and_task(token: str, letters: str, expected: str) -> tuple[str, int]:
    """The letter (one of ``letters``) and task id of a request token such as ``L3``;
    ``expected`` names the valid forms in the refusal."""
    match = re.fullmatch(rf"([{letters}])([0-9]+)", token.strip())   # ASCII digits only
    if match is None:
        raise InvalidRequestSequence(f"request {token!r} is not {expected}")
    return match[1], int(match[2])


def _as_request(item: Request | dict, position: int) -> Request:
    if isinstance(item, Request):
        return item
    if not isinstance(item, dict) or not {"kind", "task"} <= set(item) <= {
            "kind", "task", "permanent"}:
        raise InvalidRequestSequence(
            f"request {position} is {item!r}; expected an object with the keys 'kind' "
            "('learn', 'unlearn' or 'make_permanent') and 'task' (an integer), and optionally "
            "'permanent' (true for a permanent learning request)"
        )
    try:
        return Request(item["kind"], item["task"], item.get("permanent", False))
    except InvalidRequestSequence as err:
        raise InvalidRequestSequence(f"request {position}: {err}") from None


def _validate(requests: Sequence[Request], n_tasks: int) -> None:
    learned: set[int] = set()
    unlearned: set[int] = set()
    permanent: dict[int, int] = {}
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
        elif r.task not in learned:
            action = "unlearned" if r.is_unlearn else "made permanent"
            raise InvalidRequestSequence(f"{where}: task {r.task} is {action} before it was "
                                         "learned")
        elif r.task in unlearned:
            raise InvalidRequestSequence(
                f"{where}: task {r.task} is unlearned twice" if r.is_unlearn else
                f"{where}: task {r.task} is made permanent after it was unlearned")
        elif r.task in permanent:
            raise InvalidRequestSequence(
                f"{where}: task {r.task} is permanent since request {permanent[r.task]}; a "
                "permanent task cannot be unlearned" if r.is_unlearn else
                f"{where}: task {r.task} is already permanent (since request "
                f"{permanent[r.task]})")
        elif r.is_unlearn:
            unlearned.add(r.task)
        if r.makes_permanent:
            permanent[r.task] = i


def learning_position(sequence: Sequence[Request], task: int) -> int | None:
    """The position of ``task``'s learning request in ``sequence`` (``None``: not learned).
    With :func:`permanent_position` and :func:`insert_make_permanent`, the placement of the CLPU
    protocol's make-permanent requests that :meth:`RequestSequence.without_unlearning` and
    :func:`~pall_avalanche.requests.generate_requests` share."""
    return next((i for i, r in enumerate(sequence) if r.is_learn and r.task == task), None)


def permanent_position(sequence: Sequence[Request], task: int, age: int | None) -> int | None:
    """Where ``task`` becomes permanent under ``unlearnable_age`` ``age``: the position of the
    learning request of task + age (``None``: it stays temporary)."""
    return learning_position(sequence, task + age) if age else None


def insert_make_permanent(sequence: list[Request], tasks: Iterable[int], age: int | None) -> None:
    """Insert, in place, the ``make_permanent`` request of each of ``tasks`` where
    :func:`permanent_position` puts it (right before the learning request of task + age)."""
    for task in tasks:
        at = permanent_position(sequence, task, age)
        if at is not None:
            sequence.insert(at, Request(RequestKind.MAKE_PERMANENT, task))
