"""Avalanche streams that interleave learning experiences with unlearning requests.

``RequestStream(benchmark, requests)`` yields, in request order, the benchmark's training
experience of task t for ``learn t`` (for a permanent learning request, a copy of it marked
``permanent``: :func:`learn_permanently`), an :class:`UnlearnExperience` for ``unlearn t`` and
a :class:`MakePermanentExperience` for ``make t permanent``, so plain Avalanche code works
unchanged::

    for exp in RequestStream(benchmark, requests):
        strategy.train(exp)

The stream never mutates the experiences it is given (Avalanche's ``EagerCLStream`` would
renumber them), and the data-less requests are immutable.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence

from avalanche.benchmarks.scenarios.generic_scenario import CLExperience, CLScenario

from pall_avalanche.requests import RequestSequence

__all__ = ["DatalessExperience", "MakePermanentExperience", "RequestStream", "UnlearnExperience",
           "UnlearningNotSupportedError", "learn_permanently"]


class UnlearningNotSupportedError(TypeError):
    """An unlearning request reached a strategy that cannot unlearn."""


class DatalessExperience(CLExperience):
    """A request about task ``task`` that carries no data (:class:`UnlearnExperience`,
    :class:`MakePermanentExperience`): immutable; a strategy that asks for its dataset (one
    not derived from :class:`pall_avalanche.strategies.UnlearningTemplate`) fails with a clear
    error."""

    #: What the request does, for messages.
    action = "a request"

    def __init__(self, task: int, *, current_experience: int | None = None,
                 origin_stream: RequestStream | None = None) -> None:
        if isinstance(task, bool) or not isinstance(task, int) or task < 0:
            raise ValueError(f"task={task!r} must be a non-negative integer task id")
        super().__init__(current_experience=current_experience, origin_stream=origin_stream)
        self._task = task
        self._frozen = True

    def __setattr__(self, name: str, value) -> None:
        if getattr(self, "_frozen", False) and name in ("_task", "task_label", "task_labels"):
            raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")
        super().__setattr__(name, value)

    @property
    def task_label(self) -> int:
        """The task the request is about."""
        return self._task

    @property
    def task_labels(self) -> list[int]:
        """The task to unlearn, as Avalanche's experiences list their task labels."""
        return [self._task]

    @property
    def dataset(self):
        """An unlearning request carries no data: a strategy that reads it cannot unlearn.

        :raises UnlearningNotSupportedError: always.
        """
        raise self._not_supported()

    @property
    def origin_stream(self):
        """The request stream the request belongs to. A request made on its own
        (``UnlearnExperience(1)``) has none; Avalanche's own strategies read it first (to group
        experiences by stream), so it is where a strategy that cannot unlearn meets the request.

        :raises UnlearningNotSupportedError: the request belongs to no stream.
        """
        if self._origin_stream is None:
            raise self._not_supported()
        return self._origin_stream

    @origin_stream.setter
    def origin_stream(self, stream) -> None:
        self._origin_stream = stream

    def _not_supported(self) -> UnlearningNotSupportedError:
        return UnlearningNotSupportedError(
            f"{self.action} for task {self._task} was handed to a strategy that cannot "
            "unlearn; use a strategy derived from pall_avalanche.strategies.UnlearningTemplate "
            "(see pall_avalanche.strategies.METHODS)"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(task={self._task})"


class UnlearnExperience(DatalessExperience):
    """The request to unlearn task ``task``, routed to ``strategy.unlearn(task)`` by
    :class:`pall_avalanche.strategies.UnlearningTemplate`."""

    action = "an unlearning request"


class MakePermanentExperience(DatalessExperience):
    """The request to make the learned task ``task`` permanent (it can never be unlearned
    afterwards), routed to ``strategy.make_permanent(task)`` by
    :class:`pall_avalanche.strategies.UnlearningTemplate`."""

    action = "a request to make a task permanent"


def learn_permanently(experience: CLExperience) -> CLExperience:
    """A learning experience whose task is learned permanently (never to be unlearned): a
    shallow copy of ``experience`` with ``permanent = True`` (the experience given is not
    changed; the copy shares its dataset)."""
    marked = copy.copy(experience)
    marked.permanent = True
    return marked


class RequestStream(Sequence[CLExperience]):
    """The experiences of a request sequence over a task-incremental benchmark.

    :param benchmark: a benchmark whose ``train_stream[t]`` is task t (task label t).
    :param requests: the validated request sequence.
    :param name: the stream name (used as the origin stream of unlearning experiences).
    """

    def __init__(self, benchmark: CLScenario, requests: RequestSequence,
                 name: str = "requests") -> None:
        train = list(benchmark.train_stream)
        if requests.n_tasks != len(train):
            raise ValueError(
                f"the request sequence is over {requests.n_tasks} tasks but the benchmark has "
                f"{len(train)}; generate the requests with n_tasks={len(train)}"
            )
        for t, exp in enumerate(train):
            if getattr(exp, "task_label", None) != t:
                raise ValueError(
                    f"training experience {t} has task label "
                    f"{getattr(exp, 'task_label', None)!r}; a task-incremental benchmark with "
                    "task label t for experience t is required"
                )
        self.name = name
        self.requests = requests
        self._experiences: tuple[CLExperience, ...] = tuple(
            (learn_permanently(train[r.task]) if r.permanent else train[r.task]) if r.is_learn
            else (UnlearnExperience if r.is_unlearn else MakePermanentExperience)(
                r.task, current_experience=i, origin_stream=self)
            for i, r in enumerate(requests)
        )

    def __getitem__(self, index):
        return self._experiences[index]

    def __len__(self) -> int:
        return len(self._experiences)

    def __iter__(self) -> Iterator[CLExperience]:
        return iter(self._experiences)

    def __repr__(self) -> str:
        return f"RequestStream({self.requests!r})"
