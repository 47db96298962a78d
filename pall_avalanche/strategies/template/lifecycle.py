"""The request lifecycle of the unlearning template.

Learning requests are Avalanche's training experiences (one marked ``permanent``:
:func:`~pall_avalanche.requests.streams.learn_permanently`, learns its task permanently); an
:class:`~pall_avalanche.requests.streams.UnlearnExperience` in ``train`` is carried out by
``unlearn(task)``, which fires ``before_unlearning`` and ``after_unlearning`` around the
method's own ``_unlearn``, and a :class:`~pall_avalanche.requests.streams.
MakePermanentExperience` by ``make_permanent(task)`` (:mod:`.permanence`). A permanent task
is never unlearned: such a request is refused before anything runs. :meth:`RequestLifecycle.
train` is the loop that dispatches the requests. Every request ends in one event,
``after_request(strategy, result)``, fired once the request is over (every plugin of it done)
with its :class:`~pall_avalanche.core.RequestResult`, which the loop also adds to
:attr:`RequestLifecycle.request_log`, evaluator or not; a diverged request raises
:class:`~pall_avalanche.core.DivergedError` instead. :attr:`RequestLifecycle.current_request`
is the request in progress (or the last one).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLExperience
from avalanche.training.templates.base import _group_experiences_by_stream
from avalanche.training.utils import trigger_plugins

from pall_avalanche.core import DivergedError, RequestLog, RequestResult
from pall_avalanche.models.multitask import TaskIncrementalRequired
from pall_avalanche.requests import RequestKind
from pall_avalanche.requests.streams import (
    DatalessExperience,
    MakePermanentExperience,
    UnlearnExperience,
    UnlearningNotSupportedError,
)

__all__ = ["CurrentRequest", "RequestLifecycle", "and_finite", "check_dataless"]


class CurrentRequest(NamedTuple):
    """A request of the sequence: its position (0-based), its kind and its task."""

    index: int
    kind: RequestKind
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
    checks. For the template's other parts and the methods it provides :meth:`start_request`,
    :meth:`end_request`, :meth:`diverged` and :meth:`record_statistics`
    (:class:`~pall_avalanche.strategies.template.TemplateParts`)."""

    def __init__(self, **kwargs) -> None:
        self.request_log = RequestLog()
        self._statistics: dict = {}
        self._measured: RequestResult | None = None
        self._request_started = 0.0
        #: Whether every training loss of the epoch in progress was finite (on the device).
        self._loss_finite: torch.Tensor | None = None
        super().__init__(**kwargs)

    #: The request in progress, or the last one (``None`` before the first).
    current_request: CurrentRequest | None = None
    #: Every finished request's result, in order (the loop's log; checkpointed).
    request_log: RequestLog
    #: The permanent tasks, in the order they became permanent (:mod:`.permanence`).
    permanent_tasks: list[int]
    #: Tasks made permanent by a ``make_permanent`` request (not learned permanently).
    made_permanent: int = 0
    #: Whether the learning request in progress learns its task permanently.
    learning_permanently: bool = False

    def train(self, experiences: CLExperience | Iterable[CLExperience],
              eval_streams=None, **kwargs) -> dict:
        """Carry out the requests in order and return the evaluator's last metrics, as
        Avalanche's ``train`` does for learning experiences. This is the template's own
        request loop: Avalanche's loop (``BaseTemplate.train``) knows only experiences with
        data, so this one repeats its set-up and dispatches each request itself — a learning
        experience to Avalanche's per-experience steps (``_before_training_exp``,
        ``_train_exp``, ``_after_training_exp``), an unlearning request to :meth:`unlearn`, a
        make-permanent request to :meth:`make_permanent`. ``before_training`` and
        ``after_training`` fire once per call; the periodic evaluation (``eval_every``)
        evaluates ``eval_streams``, by default the call's learning experiences. The whole list
        is checked before anything trains (:meth:`check_requests`)."""
        batch = [experiences] if isinstance(experiences, CLExperience) else list(experiences)
        self.check_requests(batch)
        if eval_streams is None:
            eval_streams = [[exp for exp in batch if not isinstance(exp, DatalessExperience)]]
        if not self._distributed_check:
            self._check_distributed_training_compatibility()
            self._distributed_check = True
        self.is_training = True
        self._stop_training = False
        self.model.train()
        self.model.to(self.device)
        self._eval_streams = _group_experiences_by_stream(eval_streams)
        self._before_training(**kwargs)
        for request in batch:
            self.experience = request
            if isinstance(request, MakePermanentExperience):
                self.make_permanent(request.task_label)
            elif isinstance(request, UnlearnExperience):
                self.unlearn(request.task_label)
            else:
                self._before_training_exp(**kwargs)
                self._train_exp(request, eval_streams, **kwargs)
                self._after_training_exp(**kwargs)
        self._after_training(**kwargs)
        self._train_cleanup()
        return self.evaluator.get_last_metrics()

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
        plugins' ``after_unlearning``. A task not learned or permanent is refused. The user's
        optimizer then holds no tensor and no state (momentum, Adam's moments) of the last
        learning request, which may have trained on the task's data: its one group keeps only
        its hyper-parameters (and the learning rate a scheduler set) until the next learning
        request gives it that request's parameters."""
        check_dataless(task, True, self.active_tasks, self.permanent_tasks)
        self.model.to(self.device)
        self.start_request(RequestKind.UNLEARN, task)
        trigger_plugins(self, "before_unlearning", task=task)
        self.active_tasks.remove(task)
        self._unlearn(task)
        self.renew_optimizer([{"params": []}])
        trigger_plugins(self, "after_unlearning", task=task)
        self.end_request()

    def _unlearn(self, task: int) -> None:
        """The method's unlearning step, with ``task`` already out of ``active_tasks``.
        The default changes nothing (Sequential); methods override it or act in plugins."""

    def request_statistics(self) -> dict:
        """The method's own figures about the request in progress or just finished (name →
        JSON-ready value; e.g. PALL's re-drawn and retrained entries, Table A2). Empty by
        default; a method adds them with :meth:`record_statistics` during the request."""
        return dict(self._statistics)

    def record_statistics(self, **figures: Any) -> None:
        """Add the method's own ``figures`` (name → JSON-ready value) to the request in
        progress (:meth:`request_statistics`)."""
        self._statistics.update(figures)

    def request_measured(self, result: RequestResult) -> None:
        """Hand over the measurement of the request in progress (called once per request by
        :class:`~pall_avalanche.evaluation.UnlearningMetrics`): when the request is over and
        its parameters are finite, the loop logs it (:attr:`request_log`) and fires
        ``after_request`` with it."""
        self._measured = result

    def requests_done(self) -> int:
        """The number of requests finished so far: every learning request adds its task to
        ``active_tasks`` and counts on Avalanche's clock (``clock.train_exp_counter``), every
        unlearning request removes one, so 2 × learned − |Ω|, plus the ``make_permanent``
        requests (between requests)."""
        return 2 * self.clock.train_exp_counter - len(self.active_tasks) + self.made_permanent

    def start_request(self, kind: RequestKind, task: int) -> None:
        """A request of ``kind`` about ``task`` starts: it becomes :attr:`current_request`, and
        its statistics and measurement start empty (for the template's parts: a request
        ends in :meth:`end_request`)."""
        self._statistics, self._measured = {}, None
        self._request_started = time.perf_counter()
        self.current_request = CurrentRequest(self.requests_done(), kind, int(task))

    def diverged(self, what: str, epoch: int | None = None) -> DivergedError:
        """The error of the request in progress diverging (``what`` is not finite, in
        ``epoch``), for the template's parts to raise."""
        return DivergedError(*self.current_request, what, epoch)

    def end_request(self) -> None:
        """Check that every parameter is finite (else raise :class:`DivergedError`), then add
        the request's result to :attr:`request_log` and fire ``after_request`` on every plugin
        with it: the evaluator's measurement, or, when the evaluator does not measure requests,
        the result the loop knows by itself (no accuracy or model size)."""
        finite = torch.stack([p.detach().isfinite().all() for p in self.model.parameters()])
        if not bool(finite.all()):
            name = next(n for (n, _), ok in zip(self.model.named_parameters(), finite.tolist(),
                                                 strict=True) if not ok)
            raise self.diverged(f"parameter {name!r} at the end of the request")
        result, self._measured = self._measured, None
        if result is None:
            index, kind, task = self.current_request
            result = RequestResult(index, kind, task, time.perf_counter() - self._request_started,
                                   accuracy=(), model_size_mb=None,
                                   active_tasks=tuple(self.active_tasks),
                                   statistics=self.request_statistics())
        self.request_log.add(result)
        trigger_plugins(self, "after_request", result=result)

    # ------------------------------------------------------------ learning requests
    def _before_training_exp(self, **kwargs) -> None:
        self.learning_permanently = bool(getattr(self.experience, "permanent", False))
        self.start_request(RequestKind.LEARN, self.experience.task_label)
        super()._before_training_exp(**kwargs)
        self.start_phase(self.training_phases()[0])

    def _after_training_exp(self, **kwargs) -> None:
        self.active_tasks.append(self.experience.task_label)
        if self.learning_permanently:
            self.permanent_tasks.append(self.experience.task_label)
        self.release_experience()
        super()._after_training_exp(**kwargs)
        self.end_request()

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
            raise self.diverged("the training loss", self.clock.train_exp_epochs + 1)
        super()._after_training_epoch(**kwargs)
