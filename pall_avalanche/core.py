"""The plugin protocol of unlearning strategies, the result of one request, the log of a run's
requests and the error of a diverged request, in a module of its own.

:class:`UnlearningPlugin` is what plugins and subscribers derive from; :class:`RequestResult` is
what every request (learning or unlearning) ends with: the template's request loop adds it to
the strategy's :class:`RequestLog` and fires ``after_request`` with it once the request is
over, evaluator or not, and the record builder, the checkpoint writer, the W&B logger and the
audit read it there. A request whose loss or parameters stop being finite ends instead in
:class:`DivergedError`, before ``after_request``. This module imports no strategy, so
``pall_avalanche.rehearsal`` and every other module import on their own (the strategies import
this module, never the other way round).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from avalanche.core import SupervisedPlugin

from pall_avalanche.checkpoint import Stateful
from pall_avalanche.requests import REQUEST_KINDS, RequestKind

if TYPE_CHECKING:
    from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["REQUEST_KINDS", "DivergedError", "RequestLog", "RequestResult", "UnlearningPlugin"]



@dataclass(frozen=True)
class RequestResult:
    """What one request did: measured once by
    :class:`~pall_avalanche.evaluation.UnlearningMetrics` when the strategy's evaluator has
    it; else what the request loop knows by itself (no accuracy, no model size).

    :param index: the request's position in the sequence (0-based).
    :param kind: ``"learn"``, ``"unlearn"`` or ``"make_permanent"``.
    :param task: the task the request is about.
    :param seconds: wall time of the request (measured: device work waited for, evaluation
        excluded; unmeasured: the host's time from the request's start to its end).
    :param epoch_seconds: wall time of each training epoch (measured learning requests; else
        empty).
    :param accuracy: accuracy (percent) on every task of the test stream afterwards, unlearned
        and not-yet-learned tasks included: row ``index`` of the accuracy matrix (empty:
        unmeasured).
    :param model_size_mb: the inference model size afterwards (MB; ``None``: unmeasured).
    :param active_tasks: Ω afterwards, in learning order.
    :param statistics: the method's own figures about the request
        (:meth:`~pall_avalanche.strategies.base.UnlearningTemplate.request_statistics`, e.g.
        PALL's re-drawn and retrained entries, Table A2); empty when it has none.
    :param learning_check: learning requests: the task's balanced accuracy on its own
        training data and whether that is at chance
        (:func:`~pall_avalanche.evaluation.learning_failed`); ``None`` for unlearning.
    """

    index: int
    kind: str
    task: int
    seconds: float
    accuracy: tuple[float, ...]
    model_size_mb: float | None
    active_tasks: tuple[int, ...]
    epoch_seconds: tuple[float, ...] = ()
    statistics: Mapping[str, Any] = field(default_factory=dict)
    learning_check: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in REQUEST_KINDS:
            raise ValueError(f"kind={self.kind!r} is invalid; valid: "
                             f"{tuple(k.value for k in REQUEST_KINDS)}")
        object.__setattr__(self, "kind", RequestKind(self.kind))

    @property
    def measured(self) -> bool:
        """Whether an evaluator measured the request (its accuracy row is known)."""
        return bool(self.accuracy)

    def timing(self) -> dict[str, Any]:
        """The request's entry of a record's ``timings.per_request``: kind, task, seconds and,
        for learning, the epochs' seconds and their mean."""
        out: dict[str, Any] = {"kind": self.kind.value, "task": self.task,
                               "seconds": self.seconds}
        if self.kind == RequestKind.LEARN:
            out["epoch_seconds"] = list(self.epoch_seconds)
            out["seconds_per_epoch"] = self.seconds / max(len(self.epoch_seconds), 1)
        return out


class DivergedError(RuntimeError):
    """A request diverged: a training loss or a parameter is not finite (NaN or infinite).
    ``str()`` is one line naming the request, the epoch and what is not finite.

    :param index: the request's position in the sequence (0-based).
    :param kind: ``"learn"``, ``"unlearn"`` or ``"make_permanent"``.
    :param task: the task the request is about.
    :param what: what is not finite (``"the training loss"``, ``"parameter 'net.0.weight' at
        the end of the request"``).
    :param epoch: the training epoch (1-based) whose loss was not finite; ``None`` when found
        outside the epochs (the unlearning steps, the parameters at the end of the request).
    """

    def __init__(self, index: int, kind: str, task: int, what: str,
                 epoch: int | None = None) -> None:
        super().__init__(index, kind, task, what, epoch)
        self.index, self.kind, self.task, self.what, self.epoch = index, kind, task, what, epoch

    def __str__(self) -> str:
        epoch = f" in epoch {self.epoch}" if self.epoch is not None else ""
        return (f"request {self.index} ({self.kind} task {self.task}) diverged{epoch}: "
                f"{self.what} is not finite (NaN or infinite)")


class UnlearningPlugin(SupervisedPlugin, Stateful):
    """A supervised plugin that can also react to unlearning requests.

    Stateful plugins list what outlives a request in ``checkpoint_attributes``
    (:class:`~pall_avalanche.checkpoint.Stateful`: ``state_dict`` / ``load_state_dict``).
    """

    def before_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        """Called before ``task`` leaves ``strategy.active_tasks``."""

    def after_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        """Called after the strategy unlearned ``task``."""

    def before_replay_steps(self, strategy: UnlearningTemplate, tasks: Sequence[int],
                            forget: int | None = None, **kwargs) -> None:
        """Called before optimisation steps train the model on the episodic buffers of
        ``tasks`` (a retraining after an unlearning request, a replay baseline's unlearning;
        ``forget``: a task whose buffer the steps push towards uniform predictions)."""

    def before_making_permanent(self, strategy: UnlearningTemplate, task: int,
                                **kwargs) -> None:
        """Called before the learned ``task`` becomes permanent (a ``make_permanent``
        request; not for a permanent learning request, which is a learning request)."""

    def after_making_permanent(self, strategy: UnlearningTemplate, task: int,
                               **kwargs) -> None:
        """Called after ``task`` became permanent (it is in ``strategy.permanent_tasks``)."""

    def after_request(self, strategy: UnlearningTemplate, result: RequestResult,
                      **kwargs) -> None:
        """Called once a request (learning or unlearning) is over, every plugin of the request
        done, with its result: measured when the strategy's evaluator measures requests
        (:func:`~pall_avalanche.evaluation.unlearning_metrics`), else what the request loop
        knows by itself (:attr:`RequestResult.measured` tells them apart)."""


class RequestLog(Stateful):
    """Every request's :class:`RequestResult`, in order, in the shapes of a record: the
    accuracy matrix, per-request timings, model sizes, learning checks and the method's
    statistics. The strategy's request loop keeps it
    (:attr:`~pall_avalanche.strategies.base.UnlearningTemplate.request_log`, saved with its
    checkpoints, so a resumed run keeps what came before); the record builder and a user's own
    script read it there."""

    checkpoint_attributes = ("results",)

    def __init__(self) -> None:
        #: One plain dict per request (:class:`RequestResult` fields; JSON-ready).
        self.results: list[dict[str, Any]] = []

    def add(self, result: RequestResult) -> None:
        """Append a finished request (measured or not: :attr:`RequestResult.measured`)."""
        self.results.append({
            "kind": result.kind.value, "task": result.task, "timing": result.timing(),
            "accuracy": list(result.accuracy), "model_size_mb": result.model_size_mb,
            "statistics": dict(result.statistics),
            "learning_check": None if result.learning_check is None
            else dict(result.learning_check),
        })

    @property
    def requests(self) -> list[tuple[str, int]]:
        """The requests so far, as (kind, task)."""
        return [(r["kind"], r["task"]) for r in self.results]

    @property
    def accuracy(self) -> list[list[float]]:
        """The accuracy matrix: one row per request, one column per task."""
        return [r["accuracy"] for r in self.results]

    @property
    def timings(self) -> list[dict[str, Any]]:
        """Per request: kind, task, seconds (and per-epoch seconds for learning)."""
        return [r["timing"] for r in self.results]

    @property
    def model_sizes_mb(self) -> list[float]:
        """The inference model size after each request."""
        return [r["model_size_mb"] for r in self.results]

    @property
    def learning_checks(self) -> list[dict[str, Any]]:
        """Per learning request: request index, task, balanced training accuracy, failed."""
        return [r["learning_check"] for r in self.results if r["learning_check"] is not None]

    def unlearning_statistics(self) -> list[dict[str, Any]] | None:
        """The method's statistics of every unlearning request, or ``None`` when the method
        reports none."""
        stats = [r["statistics"] for r in self.results if r["kind"] == RequestKind.UNLEARN]
        return stats if any(stats) else None
