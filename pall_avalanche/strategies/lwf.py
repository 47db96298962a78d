"""LwF: learning without forgetting, with a head-only warm-up and removable distillation targets.

Pieces (LSF reuses all of them):

- :class:`TaskLwFPlugin`: Avalanche's ``LwFPlugin`` whose regulariser
  (:class:`ActiveTaskLwF`, a ``LearningWithoutForgetting``) distils only the tasks still in
  ``prev_classes_by_task`` (the active ones), with the previous model frozen, and takes the
  **mean** of their distillation terms (Avalanche sums them; the paper's reference averages,
  docs/fidelity.md "LwF"); unlearning a task deletes its entry, so no distillation term refers
  to it.
- :class:`HeadWarmupTemplate`: the first half of a learning request's epochs trains only the
  new task's head rows (the warm-up of the original LwF), the second half trains everything
  with a fresh optimizer (the cosine preset anneals each phase from the base rate). With no
  earlier active task (the first request, or Ω empty) there is nothing to protect: the
  warm-up is skipped and every epoch trains everything.
- :class:`LwF`: the two together; unlearning changes no parameter (inexact).

Avalanche's own ``_lwf_penalty`` calls ``model(x, None)``, which our multi-head network does not
accept, and runs one forward per old task; :func:`task_logits` runs the backbone once and
slices each task's head block instead.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from avalanche.training.plugins import LwFPlugin
from avalanche.training.regularization import LearningWithoutForgetting
from torch import nn
from torch.nn import functional as F

from pall_avalanche.catalog.declaration import Method
from pall_avalanche.masks import mask_gradients_
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.models.grouped import forward_groups
from pall_avalanche.models.multitask import task_network
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate
from pall_avalanche.strategies.ewc import check_non_negative
from pall_avalanche.strategies.shared_keys import LWF_ALPHA, LWF_TEMPERATURE

__all__ = ["DECLARATIONS", "ActiveTaskLwF", "HeadWarmupTemplate", "LwF", "TaskLwFPlugin",
           "task_logits"]


def task_logits(model: nn.Module, x: torch.Tensor, tasks: Sequence[int]) -> torch.Tensor:
    """The logits of each task in ``tasks`` on the same inputs ``x``, ``(G, B, W)``
    (narrower ones padded with :data:`~pall_avalanche.models.multihead.MASK_VALUE`). A
    :class:`TaskIncrementalNet` whose features do not depend on the task (a task-agnostic
    backbone, or one without per-task parameters) computes the features once and every head
    in one product; any other network runs ``x`` through every task in one batched pass
    (:func:`~pall_avalanche.models.grouped.forward_groups`)."""
    if isinstance(model, TaskIncrementalNet) and (
            not getattr(model.backbone, "task_aware", False)
            or not any(model.task_parameters(t) for t in tasks)):
        return model.head_groups(model.features(x, tasks[0]), tasks)
    return forward_groups(model, x.expand(len(tasks), 1, *x.shape), tasks)[:, 0]


class ActiveTaskLwF(LearningWithoutForgetting):
    """Avalanche's LwF regulariser over the tasks of ``prev_classes_by_task`` only.

    Penalty: ``alpha · (1/|Ω|) Σ_τ KL(softmax(z_prev,τ / T) ‖ softmax(z_τ / T))`` (batch mean),
    the mean over the distilled tasks τ ∈ Ω, on the current inputs, where z_prev comes from the
    model saved after the last learning request (or unlearning request, for LSF).

    :param alpha: weight of the distillation term.
    :param temperature: softmax temperature T.
    """

    def __init__(self, alpha: float, temperature: float) -> None:
        super().__init__(alpha, temperature)
        #: (tasks, their units, device) → the units as an index: :meth:`_units`
        self._unit_index: tuple[tuple, torch.Tensor] | None = None

    def _lwf_penalty(self, out: torch.Tensor, x: torch.Tensor, curr_model: nn.Module):
        tasks = list(self.prev_classes_by_task)
        if self.prev_model is None or not tasks:
            return 0
        with torch.no_grad():
            previous = task_logits(self.prev_model, x, tasks).float()
        current = task_logits(curr_model, x, tasks).float()
        units = [sorted(self.prev_classes_by_task[t]) for t in tasks]
        if any(len(u) != len(units[0]) for u in units):      # tasks of unlike sizes
            return sum(self._distillation_loss(c, p, u) for u, c, p
                       in zip(units, current, previous, strict=True)) / len(tasks)
        if any(u != list(range(current.shape[-1])) for u in units):
            index = self._units(tasks, units, current.device)
            current, previous = (logits.gather(-1, index.expand(*logits.shape[:-1], -1))
                                 for logits in (current, previous))
        # Avalanche's distillation term (KL of the softened outputs over the task's units, a
        # batch mean) of every task at once, then their mean
        log_p = torch.log_softmax(current / self.temperature, dim=-1)
        q = torch.softmax(previous / self.temperature, dim=-1)
        return F.kl_div(log_p, q, reduction="sum") / (len(tasks) * x.shape[0])

    def _units(self, tasks: Sequence[int], units: list[list[int]], device: torch.device
               ) -> torch.Tensor:
        """The distilled units of each task as a ``(G, 1, c)`` index on ``device``, kept
        while the tasks and their classes stay the same."""
        key = (tuple(tasks), tuple(map(tuple, units)), device)
        if self._unit_index is None or self._unit_index[0] != key:
            self._unit_index = (key, torch.tensor(units).unsqueeze(1).to(device,
                                                                          non_blocking=True))
        return self._unit_index[1]

    def post_adapt(self, agent, exp) -> None:
        """Avalanche's update (copy the model, add the experience's classes), then freeze the
        copy."""
        super().post_adapt(agent, exp)
        self._freeze_teacher()

    def set_previous_model(self, model: nn.Module) -> None:
        """Store a frozen copy of ``model`` (eval mode, no gradients) as the teacher."""
        self.prev_model = copy.deepcopy(model)
        self._freeze_teacher()

    def _freeze_teacher(self) -> None:
        self.prev_model.eval().zero_grad(set_to_none=True)
        self.prev_model.requires_grad_(False)


class TaskLwFPlugin(LwFPlugin, UnlearningPlugin):
    """Avalanche's ``LwFPlugin`` with :class:`ActiveTaskLwF` and task forgetting.

    The penalty is skipped while ``strategy.trains_head_only()``: during the head-only warm-up
    the old tasks' outputs cannot change, so the term and its gradient are zero.

    :param alpha: weight of the distillation term (config key ``lwf_alpha``).
    :param temperature: distillation temperature (config key ``lwf_temperature``).
    """

    checkpoint_attributes = ("lwf.prev_classes_by_task", "lwf.expcount", "lwf.prev_model")

    def __init__(self, alpha: float = 1.0, temperature: float = 2.0) -> None:
        check_non_negative(lwf_alpha=alpha)
        if temperature <= 0:
            raise ValueError(f"lwf_temperature={temperature} is invalid; it must be > 0")
        super().__init__(alpha, temperature)
        self.lwf = ActiveTaskLwF(alpha, temperature)

    @property
    def targets(self) -> dict[int, set]:
        """Distilled tasks → their classes."""
        return dict(self.lwf.prev_classes_by_task)

    def before_backward(self, strategy: UnlearningTemplate, **kwargs) -> None:
        """The distillation term, its forward passes under the strategy's autocast (the
        divergence in float32)."""
        if not strategy.trains_head_only():
            with strategy.speed.autocast(strategy.device):
                penalty = self.lwf(strategy.mb_x, strategy.mb_output, strategy.model)
            strategy.loss += penalty

    def before_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        self.forget(task)

    def forget(self, task: int) -> None:
        """Stop distilling ``task``."""
        del self.lwf.prev_classes_by_task[task]


class HeadWarmupTemplate(UnlearningTemplate):
    """A learning request in two phases (LwF, LSF; paper appendix): the first
    ``train_epochs // 2`` epochs train only the new task's head entries (its rows of a shared
    head, or its own head of a ``MultiHeadClassifier``; every other parameter and entry frozen,
    weight decay on those entries only), the remaining epochs train every parameter with a fresh
    optimizer. :meth:`trains_head_only` tells plugins which phase runs. A request with no
    earlier active task skips the warm-up (:attr:`warmup_epochs` is 0): all its epochs train
    every parameter.

    Takes every keyword argument of :class:`UnlearningTemplate`; ``model`` must be a
    task-incremental network (:func:`~pall_avalanche.models.multitask.task_network`).
    """

    def __init__(self, *, model: nn.Module, **kwargs) -> None:
        super().__init__(model=task_network(model, kwargs.get("n_tasks")), **kwargs)
        self.head_only = False
        self._frozen: list[nn.Parameter] = []
        self._head: list[nn.Parameter] = []
        self._rows: list[torch.Tensor] = []

    @property
    def warmup_epochs(self) -> int:
        """Epochs of the head-only phase of the current learning request: half of them when
        an earlier task is active, none otherwise."""
        return self.train_epochs // 2 if self.active_tasks else 0

    def make_optimizer(self, **kwargs) -> None:
        if self.warmup_epochs == 0:
            super().make_optimizer(**kwargs)
            return
        entries = self.model.head_entries(self.experience.task_label)
        self._head = [self.model.get_parameter(name) for name in entries]
        head = {id(p) for p in self._head}
        self._frozen = [p for p in self.model.parameters()
                        if p.requires_grad and id(p) not in head]
        for p in self._frozen:
            p.requires_grad_(False)
        self._rows = [rows.float() for rows in entries.values()]
        self.renew_optimizer([{"params": self._head, "weight_decay": 0.0}])
        self.head_only = True

    def trains_head_only(self) -> bool:
        return self.head_only

    def training_phases(self) -> list[int]:
        warmup = self.warmup_epochs
        return [warmup, self.train_epochs - warmup] if warmup else [self.train_epochs]

    def _end_head_only(self) -> None:
        for p in self._frozen:
            p.requires_grad_(True)
        self._frozen = []
        self.head_only = False

    def _before_training_epoch(self, **kwargs) -> None:
        # before the plugins run, so a learning-rate schedule sees the new optimizer
        if self.head_only and self.clock.train_exp_epochs >= self.warmup_epochs:
            self._end_head_only()
            super().make_optimizer()
            self.start_phase(self.training_phases()[1])
        super()._before_training_epoch(**kwargs)

    def _after_backward(self, **kwargs) -> None:
        if self.head_only:
            mask_gradients_(self._head, self._rows, self.weight_decay)
        super()._after_backward(**kwargs)

    def _after_training_exp(self, **kwargs) -> None:
        if self.head_only:
            self._end_head_only()
        super()._after_training_exp(**kwargs)


class LwF(HeadWarmupTemplate):
    """LwF (Li & Hoiem, 2017): head-only warm-up, then full training with distillation of the
    active earlier tasks' outputs on the current inputs. Unlearning only drops the task from
    the distillation targets; no parameter changes (inexact).

    Takes every keyword argument of :class:`HeadWarmupTemplate`, plus:

    :param lwf_alpha: weight of the distillation term.
    :param lwf_temperature: distillation temperature.
    """

    def __init__(self, *, lwf_alpha: float, lwf_temperature: float, **kwargs) -> None:
        lwf = TaskLwFPlugin(lwf_alpha, lwf_temperature)
        plugins = [lwf, *(kwargs.pop("plugins", None) or [])]
        super().__init__(plugins=plugins, **kwargs)
        self.lwf = lwf

    def checkpoint_state(self) -> dict:
        """The template's state plus whether a teacher exists (its skeleton is re-created
        from the model on restore, then loaded)."""
        return {**super().checkpoint_state(), "has_teacher": self.lwf.lwf.prev_model is not None}

    def restore_checkpoint_state(self, state: dict) -> None:
        """The template's restore; a teacher is re-created from the model on the strategy's
        device first (the saved one is loaded into it, where the model trains)."""
        if state["has_teacher"] and self.lwf.lwf.prev_model is None:
            self.lwf.lwf.set_previous_model(self.model.to(self.device))
        super().restore_checkpoint_state(state)


DECLARATIONS = (Method("lwf", LwF, exact=False, label="LwF",
                  keys={"lwf_alpha": LWF_ALPHA, "lwf_temperature": LWF_TEMPERATURE}),)
