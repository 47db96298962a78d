"""The mixin classes of :class:`~pall_avalanche.strategies.base.UnlearningTemplate`, one concern
each, composed as Avalanche composes ``SupervisedTemplate`` from mixins:

- :mod:`.lifecycle`: the request loop and lifecycle (learning and unlearning requests, the
  one ``after_request`` event, the request log, divergence checks, the request in progress);
- :mod:`.permanence`: making a learned task permanent (the CLPU protocol);
- :mod:`.routing`: which task each sample goes through, the model's adaptation, the loaders;
- :mod:`.optimization`: optimizer renewal, fresh optimizers, training phases, the one
  unlearning loop;
- :mod:`.speed`: the speed options (bf16 autocast, channels-last, compile, the batched input
  path) as one object;
- :mod:`.state`: checkpoint state, inference size and what a method says of itself.

The parts reach each other, and methods reach them, only through the names of
:class:`TemplateParts` (and Avalanche's own); a part's private names stay in its module
(``tests/strategies/test_template_parts.py`` checks both). Methods subclass the assembled
template only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from pall_avalanche.core import DivergedError, RequestLog
    from pall_avalanche.requests import RequestKind
    from pall_avalanche.strategies.template.lifecycle import CurrentRequest

__all__ = ["TemplateParts"]


class TemplateParts(Protocol):
    """What the template's parts provide to each other, to plugins and to the methods built on
    the template (beyond Avalanche's ``SupervisedTemplate``)."""

    #: Ω, the learned tasks in learning order (a task joins after its training experience and
    #: leaves before ``_unlearn`` runs).
    active_tasks: list[int]
    #: The permanent tasks, in the order they became permanent.
    permanent_tasks: list[int]
    #: The request in progress, or the last one.
    current_request: CurrentRequest | None
    #: Every finished request's result (the loop's log).
    request_log: RequestLog

    def start_request(self, kind: RequestKind, task: int) -> None:
        """(lifecycle) A request starts."""

    def end_request(self) -> None:
        """(lifecycle) The request ends: finite parameters checked, result logged,
        ``after_request`` fired."""

    def diverged(self, what: str, epoch: int | None = None) -> DivergedError:
        """(lifecycle) The error of the request in progress diverging."""

    def record_statistics(self, **figures: Any) -> None:
        """(lifecycle) The method's own figures about the request in progress."""

    def request_statistics(self) -> dict:
        """(lifecycle) The figures recorded so far for the request."""

    def make_permanent(self, task: int) -> None:
        """(permanence) Carry out a make-permanent request."""

    def renew_optimizer(self, param_groups: list[dict]) -> None:
        """(optimization) The user's optimizer with fresh state and ``param_groups``."""

    def fresh_optimizer(self, param_groups: list[dict]) -> Optimizer:
        """(optimization) A fresh optimizer of the configured kind over ``param_groups``."""

    def optimization_steps(self, param_groups: list[dict], n_iters: int, *args: Any,
                           **kwargs: Any) -> Any:
        """(optimization) The one loop of unlearning and retraining steps."""

    def training_phases(self) -> list[int]:
        """(optimization) The epochs of each training phase of a learning request."""

    def mb_tasks(self) -> Any:
        """(routing) The task of every sample of the mini-batch."""

    def release_experience(self) -> None:
        """(routing) Drop the learning experience's data after its request."""

    def checkpoint_state(self) -> dict:
        """(state) The strategy's whole state between requests."""

    def inference_size(self, n_tasks: int | None = None) -> tuple[int, int]:
        """(state) Float parameters and mask bits of the inference model."""
