"""EWC: elastic weight consolidation with one removable penalty per task.

Avalanche's ``EWCPlugin`` (``mode="separate"``) keeps a diagonal Fisher and a parameter
snapshot per trained experience, keyed by ``clock.train_exp_counter``. :class:`TaskEWCPlugin`
reuses its Fisher computation and storage, remembers which counter belongs to which task, sums
the penalty over the active tasks only, and forgets a task by deleting its Fisher and snapshot
(protocol §6: unlearning changes no parameter).

The Fisher of task t is computed on D^t with task t's head: Avalanche's
``compute_importances`` forwards each batch with its task labels, and the multi-head model
then answers with task t's block only, so every other task's head rows get zero importance.
"""

from __future__ import annotations

import torch
from avalanche.training.plugins import EWCPlugin
from torch import nn

from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate

__all__ = ["EWC", "TaskEWCPlugin"]


def check_non_negative(**values: float) -> None:
    """Raise a ValueError naming the first negative hyper-parameter."""
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name}={value} is invalid; it must be >= 0")


class TaskEWCPlugin(EWCPlugin, UnlearningPlugin):
    """Avalanche's separate-mode EWC whose per-task state can be deleted.

    Penalty added to the loss: ``ewc_lambda · Σ_{τ ∈ tasks} Σ_i F_τ,i (θ_i − θ_τ,i)²`` over the
    tasks whose state is stored (the active ones). Skipped while ``strategy.head_only`` is true
    (a head-only warm-up moves no entry any stored Fisher weights).

    :param ewc_lambda: λ, the weight of the penalty.
    """

    checkpoint_attributes = ("counter_of", "saved_params", "importances")

    def __init__(self, ewc_lambda: float) -> None:
        check_non_negative(ewc_lambda=ewc_lambda)
        super().__init__(ewc_lambda, mode="separate")
        self.counter_of: dict[int, int] = {}

    @property
    def tasks(self) -> list[int]:
        """The tasks with a stored Fisher and snapshot, in learning order."""
        return list(self.counter_of)

    def penalty(self, model: nn.Module) -> torch.Tensor:
        """``Σ_τ Σ_i F_τ,i (θ_i − θ_τ,i)²`` over the stored tasks (without λ)."""
        params = list(model.named_parameters())
        total = torch.zeros((), device=params[0][1].device)
        for counter in self.counter_of.values():
            saved, importance = self.saved_params[counter], self.importances[counter]
            for name, param in params:
                if name in saved:
                    shape = param.shape
                    diff = param - saved[name].expand(shape)
                    total = total + (importance[name].expand(shape) * diff.pow(2)).sum()
        return total

    def before_backward(self, strategy: UnlearningTemplate, **kwargs) -> None:
        if self.counter_of and self.ewc_lambda and not getattr(strategy, "head_only", False):
            strategy.loss += self.ewc_lambda * self.penalty(strategy.model)

    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        super().after_training_exp(strategy, **kwargs)
        self.counter_of[strategy.experience.task_label] = strategy.clock.train_exp_counter

    def before_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        self.forget(task)

    def forget(self, task: int) -> None:
        """Delete ``task``'s Fisher and parameter snapshot."""
        counter = self.counter_of.pop(task)
        del self.saved_params[counter]
        del self.importances[counter]


class EWC(UnlearningTemplate):
    """EWC (Kirkpatrick et al., 2017) on a multi-head model, with unlearning by deleting the
    task's Fisher and parameter snapshot; no parameter changes (inexact).

    Takes every keyword argument of :class:`UnlearningTemplate`, plus:

    :param ewc_lambda: λ, the weight of the EWC penalty (config key ``ewc_lambda``).
    """

    def __init__(self, *, ewc_lambda: float, **kwargs) -> None:
        ewc = TaskEWCPlugin(ewc_lambda)
        plugins = [ewc, *(kwargs.pop("plugins", None) or [])]
        super().__init__(plugins=plugins, **kwargs)
        self.ewc = ewc
