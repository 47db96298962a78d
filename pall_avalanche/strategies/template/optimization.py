"""Optimisation in the unlearning template: the user's optimizer renewed per learning
request, fresh optimizers for the unlearning and retraining loops, training phases.

Every learning request starts from fresh optimizer state (no momentum or Adam state carried
over) in the very optimizer object given to the constructor (:meth:`Optimization.
renew_optimizer`), so a scheduler the user or Avalanche's ``LRSchedulerPlugin`` holds keeps
driving the learning rate that trains; retraining loops (no scheduler, as in the paper) get a
separate one from :meth:`Optimization.fresh_optimizer`. A learning request trains one
parameter group, as the user's optimizer usually has: a scheduler made for it keeps one base
rate per group it saw, so per-parameter differences such as weight decay are applied to the
gradients instead (:meth:`Optimization.optimizer_param_groups`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import torch
from avalanche.training.plugins import LRSchedulerPlugin
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CosineAnnealingLR

from pall_avalanche.masks import mask_gradients_
from pall_avalanche.options import LR_SCHEDULES
from pall_avalanche.strategies.template.lifecycle import and_finite

__all__ = ["LR_SCHEDULES", "Optimization"]


class Optimization:
    """Optimizer renewal, fresh optimizers, training phases and the one unlearning loop."""

    #: the cosine preset's plugin (torch's cosine annealing through Avalanche's plugin,
    #: restarted from the base rate by :meth:`start_phase`); ``None`` without it
    _cosine: LRSchedulerPlugin | None = None

    def _set_up_optimization(self, optimizer: Optimizer, lr_schedule: str,
                             epochs: int) -> LRSchedulerPlugin | None:
        """Keep the optimizer's class and hyper-parameters; the cosine preset's plugin (to
        run first), or ``None``."""
        if lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule={lr_schedule!r} is invalid; valid: {LR_SCHEDULES}")
        self.lr_schedule = lr_schedule
        self._optimizer_class = type(optimizer)
        self._optimizer_defaults = dict(optimizer.defaults)
        if lr_schedule == "cosine":
            self._cosine = LRSchedulerPlugin(CosineAnnealingLR(optimizer, T_max=epochs),
                                             step_granularity="epoch", reset_scheduler=True,
                                             reset_lr=True)
        return self._cosine

    # ---------------------------------------------------------- training phases
    def training_phases(self) -> list[int]:
        """The epochs of each training phase of the current learning request (they add up to
        ``train_epochs``). One phase by default; a method that trains in phases (LwF's
        warm-up, PackNet's fine-tuning) overrides it and calls :meth:`start_phase` when the
        next one starts."""
        return [self.train_epochs]

    def start_phase(self, epochs: int) -> None:
        """A training phase of ``epochs`` epochs starts: the cosine preset restarts from the
        base rate and anneals over those epochs (without the preset nothing changes; a
        scheduler of the user's own keeps its position)."""
        if self._cosine is None:
            return
        scheduler = self._cosine.scheduler
        for group, lr in zip(self.optimizer.param_groups, scheduler.base_lrs, strict=True):
            group["lr"] = lr
        scheduler.T_max = epochs
        scheduler.last_epoch = 0

    def trains_head_only(self) -> bool:
        """Whether the current training phase trains only the task's head rows (the warm-up of
        LwF and LSF); penalties on the shared weights skip it. Default: no."""
        return False

    # ---------------------------------------------------------------- optimizers
    def optimizer_param_groups(self) -> list[dict]:
        """The parameter groups a learning request optimises (default: every trainable
        parameter, one group). Keep to one group: a scheduler of the user's optimizer knows the
        groups it saw (module docstring)."""
        return [{"params": [p for p in self.model.parameters() if p.requires_grad]}]

    def fresh_optimizer(self, param_groups: list[dict]) -> Optimizer:
        """A new optimizer of the constructor's class and hyper-parameters, with no state."""
        return self._optimizer_class(param_groups, **self._optimizer_defaults)

    def optimization_steps(self, param_groups: list[dict], n_iters: int,
                           loss: Callable[[], torch.Tensor], *,
                           trainable: list[torch.Tensor] | None = None) -> None:
        """The one optimisation loop of unlearning and retraining: ``n_iters`` steps of a
        fresh optimizer (:meth:`fresh_optimizer`, no scheduler) on ``loss()``, in train mode.

        :param param_groups: the optimizer's parameter groups.
        :param n_iters: the number of steps.
        :param loss: computes the loss of one step (draws its own minibatch).
        :param trainable: float 0/1 tensors shaped like the parameters of the first group (in
            order): only their 1-entries change, and weight decay moves to the gradient (give
            that group ``weight_decay=0``); the other groups train every entry with their own
            hyper-parameters. ``None``: every entry is trained.
        :raises DivergedError: a step's loss was not finite (checked once, after the loop).
        """
        params = list(param_groups[0]["params"])
        optimizer = self.fresh_optimizer(param_groups)
        self.model.train()
        finite = None
        for _ in range(n_iters):
            optimizer.zero_grad(set_to_none=True)
            value = loss()
            value.backward()
            finite = and_finite(finite, value)
            if trainable is not None:
                mask_gradients_(params, trainable, self.weight_decay)
            optimizer.step()
        self.model.zero_grad(set_to_none=True)
        if finite is not None and not bool(finite):
            raise self.diverged("the loss of the unlearning and retraining steps")

    @property
    def weight_decay(self) -> float:
        """The weight decay of the constructor's optimizer."""
        return float(self._optimizer_defaults.get("weight_decay", 0.0))

    def make_optimizer(self, **kwargs) -> None:
        self.renew_optimizer(self.optimizer_param_groups())

    def renew_optimizer(self, param_groups: list[dict]) -> None:
        """Give the optimizer the user passed (the object an LR scheduler or the user's own code
        holds) fresh state for a new phase of training: no momentum or Adam moments carried
        over, ``param_groups`` as its groups, each with the constructor's hyper-parameters and
        the learning rate the optimizer has now (so a scheduler's value carries over)."""
        optimizer = self.optimizer
        current = {key: optimizer.param_groups[0][key] for key in ("lr", "initial_lr")
                   if optimizer.param_groups and key in optimizer.param_groups[0]}
        optimizer.state = defaultdict(dict)
        optimizer.param_groups = []
        for group in param_groups:
            optimizer.add_param_group({**current, **group})

    def check_model_and_optimizer(self, **kwargs) -> None:
        """Adapt the model to the experience (in channels-last layout and with its backbone
        compiled if asked: the speed options), then build the request's fresh optimizer."""
        self.model = self.model_adaptation()
        self.speed.prepare_model(self.model)
        self.make_optimizer()
