"""The plugin protocol of unlearning strategies, the result of one request and the error of a
diverged one, in a module of its own.

:class:`UnlearningPlugin` is what plugins and subscribers derive from; :class:`RequestResult` is
what every request (learning or unlearning) ends with: the template fires ``after_request`` with
it once the request is over, and the record builder, the checkpoint writer, the W&B logger and
the audit read it there. A request whose loss or parameters stop being finite ends instead in
:class:`DivergedError`, before ``after_request``. This module imports no strategy, so
``pall_avalanche.rehearsal`` and every other module import on their own (the strategies import
this module, never the other way round).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from avalanche.core import SupervisedPlugin

from pall_avalanche.checkpoint import Stateful
from pall_avalanche.requests import REQUEST_KINDS

if TYPE_CHECKING:
    from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["REQUEST_KINDS", "DivergedError", "RequestResult", "UnlearningPlugin"]



@dataclass(frozen=True)
class RequestResult:
    """What one request did, measured once (by
    :class:`~pall_avalanche.evaluation.UnlearningMetrics` in the strategy's evaluator).

    :param index: the request's position in the sequence (0-based).
    :param kind: ``"learn"``, ``"unlearn"`` or ``"make_permanent"``.
    :param task: the task the request is about.
    :param seconds: wall time of the request (device work waited for; evaluation excluded).
    :param epoch_seconds: wall time of each training epoch (learning requests; else empty).
    :param accuracy: accuracy (percent) on every task of the test stream afterwards, unlearned
        and not-yet-learned tasks included: row ``index`` of the accuracy matrix.
    :param model_size_mb: the inference model size afterwards (MB).
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
    model_size_mb: float
    active_tasks: tuple[int, ...]
    epoch_seconds: tuple[float, ...] = ()
    statistics: Mapping[str, Any] = field(default_factory=dict)
    learning_check: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in REQUEST_KINDS:
            raise ValueError(f"kind={self.kind!r} is invalid; valid: {REQUEST_KINDS}")

    def timing(self) -> dict[str, Any]:
        """The request's entry of a record's ``timings.per_request``: kind, task, seconds and,
        for learning, the epochs' seconds and their mean."""
        out: dict[str, Any] = {"kind": self.kind, "task": self.task, "seconds": self.seconds}
        if self.kind == "learn":
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
        done, with what it measured (only when the strategy's evaluator measures requests:
        :func:`~pall_avalanche.evaluation.unlearning_metrics`)."""
