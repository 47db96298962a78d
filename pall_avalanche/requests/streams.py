"""Avalanche streams that interleave learning experiences with unlearning requests.

``RequestStream(benchmark, requests)`` yields, in request order, the benchmark's training
experience of task t for ``learn t`` and an :class:`UnlearnExperience` for ``unlearn t``, so
plain Avalanche code works unchanged::

    for exp in RequestStream(benchmark, requests):
        strategy.train(exp)

The stream never mutates the experiences it is given (Avalanche's ``EagerCLStream`` would
renumber them), and unlearning experiences are immutable.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from avalanche.benchmarks.scenarios.generic_scenario import CLExperience, CLScenario

from pall_avalanche.requests import RequestSequence

__all__ = ["RequestStream", "UnlearnExperience", "UnlearningNotSupportedError"]


class UnlearningNotSupportedError(TypeError):
    """An unlearning request reached a strategy that cannot unlearn."""


class UnlearnExperience(CLExperience):
    """The request to unlearn task ``task``: an experience that carries no data.

    Strategies built on :class:`pall_avalanche.strategies.UnlearningTemplate` route it to
    ``strategy.unlearn(task)``; any other strategy fails with a clear error when it asks for
    the (non-existent) dataset.
    """

    def __init__(self, task: int, *, current_experience: int | None = None,
                 origin_stream: RequestStream | None = None) -> None:
        if isinstance(task, bool) or not isinstance(task, int) or task < 0:
            raise ValueError(f"task={task!r} must be a non-negative integer task id")
        super().__init__(current_experience=current_experience, origin_stream=origin_stream)
        self._task = task
        self._frozen = True

    def __setattr__(self, name: str, value) -> None:
        if getattr(self, "_frozen", False) and name in ("_task", "task_label", "task_labels"):
            raise AttributeError(f"UnlearnExperience is immutable: cannot set {name!r}")
        super().__setattr__(name, value)

    @property
    def task_label(self) -> int:
        """The task to unlearn."""
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
        raise UnlearningNotSupportedError(
            f"an unlearning request for task {self._task} was handed to a strategy that cannot "
            "unlearn; use a strategy derived from pall_avalanche.strategies.UnlearningTemplate "
            "(see pall_avalanche.strategies.METHODS)"
        )

    def __repr__(self) -> str:
        return f"UnlearnExperience(task={self._task})"


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
            train[r.task] if r.is_learn
            else UnlearnExperience(r.task, current_experience=i, origin_stream=self)
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
