"""The request lifecycle of the unlearning template.

Learning requests are Avalanche's training experiences (one marked ``permanent``:
:func:`~pall_avalanche.requests.streams.learn_permanently`, learns its task permanently); an
:class:`~pall_avalanche.requests.streams.UnlearnExperience` in ``train`` is carried out by
``unlearn(task)``, which fires ``before_unlearning`` and ``after_unlearning`` around the
method's own ``_unlearn``, and a :class:`~pall_avalanche.requests.streams.
MakePermanentExperience` by ``make_permanent(task)`` (:mod:`.permanence`). A permanent task
is never unlearned: such a request is refused before anything runs. Every request ends in one
event, ``after_request(strategy, result)``, fired once the request is over (every plugin of it
done) with its :class:`~pall_avalanche.core.RequestResult`; a diverged request raises
:class:`~pall_avalanche.core.DivergedError` instead. :attr:`RequestLifecycle.current_request`
is the request in progress (or the last one), the one place that knows it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLExperience
from avalanche.training.utils import trigger_plugins

from pall_avalanche.core import DivergedError, RequestResult
from pall_avalanche.models.multitask import TaskIncrementalRequired
from pall_avalanche.requests.streams import (
    DatalessExperience,
    MakePermanentExperience,
    UnlearnExperience,
    UnlearningNotSupportedError,
)

__all__ = ["CurrentRequest", "RequestLifecycle", "and_finite", "check_dataless"]


class CurrentRequest(NamedTuple):
    """A request of the sequence: its position (0-based), its kind (``"learn"``,
    ``"unlearn"`` or ``"make_permanent"``) and its task."""

    index: int
    kind: str
    task: int


def and_finite(flag: torch.Tensor | None, loss: torch.Tensor) -> torch.Tensor:
    """``flag`` (``None``: true) and whether ``loss`` is finite, as a bool tensor on the loss's
    device (no host synchronisation)."""
    finite = torch.isfinite(loss.detach()).all()
    return finite if flag is None else flag & finite


#: Streams already found task-incremental (:func:`_check_stream_is_task_incremental`).
_TASK_INCREMENTAL_STREAMS: weakref.WeakSet = weakref.WeakSet()


def _check_stream_is_task_incremental(exp: CLExperience) -> None:
    """Raise :class:`~pall_avalanche.models.multitask.TaskIncrementalRequired` when the
    stream ``exp`` comes from (its ``origin_stream``, when it is a sequence) has several
    experiences of one task label: class-incremental (or domain-incremental) input, which the
    first experience alone would not show."""
    try:
        stream = exp.origin_stream
    except (AttributeError, AssertionError, UnlearningNotSupportedError):
        return
    if stream is None or not hasattr(stream, "__len__") or stream in _TASK_INCREMENTAL_STREAMS:
        return
    labels = [label for other in stream for label in getattr(other, "task_labels", [])]
    if len(labels) != len(set(labels)):
        raise TaskIncrementalRequired(
            f"a stream whose {len(stream)} experiences have task labels {sorted(labels)} "
            "(class-incremental input)")
    _TASK_INCREMENTAL_STREAMS.add(stream)


def check_dataless(task: int, unlearn: bool, active: Sequence[int],
                    permanent: Sequence[int]) -> None:
    """Refuse, in one line, unlearning (``unlearn``) or making permanent ``task`` when it
    is not learned or already permanent."""
    action = "unlearn" if unlearn else "make permanent"
    if task not in active:
        raise ValueError(f"cannot {action} task {task}: it is not learned (active tasks "
                         f"{list(active)})")
    if task in permanent:
        raise ValueError(f"cannot {action} task {task}: it is permanent (permanent tasks "
                         f"{list(permanent)}); a permanent task is never unlearned")


class RequestLifecycle:
    """Learning, unlearning and permanence requests, their one ending event and divergence
    checks."""

    #: The request in progress, or the last one (``None`` before the first).
    current_request: CurrentRequest | None = None
    #: The permanent tasks, in the order they became permanent (:mod:`.permanence`).
    permanent_tasks: list[int]
    #: Tasks made permanent by a ``make_permanent`` request (not learned permanently).
    made_permanent: int = 0
    #: Whether the learning request in progress learns its task permanently.
    learning_permanently: bool = False

    def train(self, experiences: CLExperience | Iterable[CLExperience],
              eval_streams=None, **kwargs):
        """Process learning experiences and unlearning requests in order, as Avalanche's
        ``train``: ``before_training`` and ``after_training`` fire once per call, and the
        periodic evaluation (``eval_every``) evaluates ``eval_streams``, by default the
        learning experiences of the call. The whole list is checked before anything trains
        (:meth:`check_requests`)."""
        batch = [experiences] if isinstance(experiences, CLExperience) else list(experiences)
        self.check_requests(batch)
        if eval_streams is None:
            eval_streams = [[exp for exp in batch if not isinstance(exp, DatalessExperience)]]
        return super().train(self._learning_experiences(batch), eval_streams, **kwargs)

    def _learning_experiences(self, batch: Sequence[CLExperience]) -> Iterator[CLExperience]:
        """The learning experiences of ``batch`` for Avalanche's training loop; an
        unlearning request is carried out, in its place, when the loop asks for the next
        one (so it runs inside the ``train`` call, between its neighbours)."""
        for exp in batch:
            if isinstance(exp, DatalessExperience):
                self.experience = exp
                if isinstance(exp, MakePermanentExperience):
                    self.make_permanent(exp.task_label)
                else:
                    self.unlearn(exp.task_label)
            else:
                yield exp

    def check_requests(self, experiences: Sequence[CLExperience]) -> None:
        """Refuse, before anything trains, a list of requests this strategy cannot process:
        a learning experience of several tasks or of none, class-incremental input (a stream
        whose learning experiences repeat a task label:
        :class:`~pall_avalanche.models.multitask.TaskIncrementalRequired`), learning a task
        that is learned, unlearning one that is not or that is permanent, making permanent one
        that is not learned or is permanent already."""
        active, permanent = list(self.active_tasks), list(self.permanent_tasks)
        for exp in experiences:
            if isinstance(exp, DatalessExperience):
                task = exp.task_label
                check_dataless(task, isinstance(exp, UnlearnExperience), active,
                                     permanent)
                if isinstance(exp, UnlearnExperience):
                    active.remove(task)
                else:
                    permanent.append(task)
                continue
            labels = list(getattr(exp, "task_labels", None) or [])
            if len(labels) != 1:
                raise ValueError(
                    f"experience {exp!r} has task labels {labels}; task-incremental strategies "
                    "need one task per learning experience")
            _check_stream_is_task_incremental(exp)
            task = int(labels[0])
            if task in active:
                raise ValueError(f"task {task} is already learned (active tasks {active}); "
                                 "unlearn it before learning it again")
            active.append(task)
            if getattr(exp, "permanent", False):
                permanent.append(task)

    def unlearn(self, task: int) -> None:
        """Unlearn ``task``: plugins' ``before_unlearning``, the method's ``_unlearn``,
        plugins' ``after_unlearning``. A task not learned or permanent is refused."""
        check_dataless(task, True, self.active_tasks, self.permanent_tasks)
        self.model.to(self.device)
        self._start_request("unlearn", task)
        trigger_plugins(self, "before_unlearning", task=task)
        self.active_tasks.remove(task)
        self._unlearn(task)
        trigger_plugins(self, "after_unlearning", task=task)
        self._end_request()

    def _unlearn(self, task: int) -> None:
        """The method's unlearning step, with ``task`` already out of ``active_tasks``.
        The default changes nothing (Sequential); methods override it or act in plugins."""

    def request_statistics(self) -> dict:
        """The method's own figures about the request in progress or just finished (name →
        JSON-ready value; e.g. PALL's re-drawn and retrained entries, Table A2). Empty by
        default; a method fills ``self._statistics`` during the request."""
        return dict(self._statistics)

    def request_measured(self, result: RequestResult,
                         accepted: Callable[[RequestResult], Any] | None = None) -> None:
        """Hand over the measurement of the request in progress (called once per request by
        :class:`~pall_avalanche.evaluation.UnlearningMetrics`); when the request is over and
        its parameters are finite, the template calls ``accepted(result)`` (the metric's
        request log keeps it) and then fires ``after_request`` with it."""
        self._measured = (result, accepted)

    def requests_done(self) -> int:
        """The number of requests finished so far: every learning request adds its task to
        ``active_tasks`` and counts on Avalanche's clock (``clock.train_exp_counter``), every
        unlearning request removes one, so 2 × learned − |Ω|, plus the ``make_permanent``
        requests (between requests)."""
        return 2 * self.clock.train_exp_counter - len(self.active_tasks) + self.made_permanent

    def _start_request(self, kind: str, task: int) -> None:
        self._statistics, self._measured = {}, None
        self.current_request = CurrentRequest(self.requests_done(), kind, int(task))

    def _diverged(self, what: str, epoch: int | None = None) -> DivergedError:
        return DivergedError(*self.current_request, what, epoch)

    def _end_request(self) -> None:
        """Check that every parameter is finite (else raise :class:`DivergedError`), then fire
        ``after_request`` on every plugin with the request's measured result (none when the
        evaluator does not measure requests)."""
        finite = torch.stack([p.detach().isfinite().all() for p in self.model.parameters()])
        if not bool(finite.all()):
            name = next(n for (n, _), ok in zip(self.model.named_parameters(), finite.tolist(),
                                                 strict=True) if not ok)
            raise self._diverged(f"parameter {name!r} at the end of the request")
        measured, self._measured = self._measured, None
        if measured is not None:
            result, accepted = measured
            if accepted is not None:
                accepted(result)
            trigger_plugins(self, "after_request", result=result)

    # ------------------------------------------------------------ learning requests
    def _before_training_exp(self, **kwargs) -> None:
        self.learning_permanently = bool(getattr(self.experience, "permanent", False))
        self._start_request("learn", self.experience.task_label)
        super()._before_training_exp(**kwargs)
        self.start_phase(self.training_phases()[0])

    def _after_training_exp(self, **kwargs) -> None:
        self.active_tasks.append(self.experience.task_label)
        if self.learning_permanently:
            self.permanent_tasks.append(self.experience.task_label)
        self.release_experience()
        super()._after_training_exp(**kwargs)
        self._end_request()

    def _before_training_epoch(self, **kwargs) -> None:
        self._loss_finite = None
        super()._before_training_epoch(**kwargs)

    def _after_training_iteration(self, **kwargs) -> None:
        self._loss_finite = and_finite(self._loss_finite, self.loss)
        super()._after_training_iteration(**kwargs)

    def _after_training_epoch(self, **kwargs) -> None:
        """Raise :class:`DivergedError` if a training loss of the epoch was not finite (the
        epoch's one host synchronisation for it), before the plugins see the epoch end."""
        if self._loss_finite is not None and not bool(self._loss_finite):
            raise self._diverged("the training loss", self.clock.train_exp_epochs + 1)
        super()._after_training_epoch(**kwargs)
