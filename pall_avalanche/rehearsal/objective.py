"""What is trained from the buffers: :class:`ReplayObjective` (CE + β·MSE replay and the
uniform-prediction term of unlearning) in the one replay loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from avalanche.training.utils import trigger_plugins
from torch.nn import functional as F

from pall_avalanche.models.grouped import forward_groups

if TYPE_CHECKING:
    from pall_avalanche.rehearsal.memory import EpisodicMemory
    from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["ReplayObjective", "check_replay_settings", "uniform_target"]


def uniform_target(logits: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """The uniform distribution over a task's ``classes`` (units of ``logits``' width), as a
    target of ``cross_entropy`` for every row of ``logits``."""
    n = len(classes)
    if n == logits.shape[1]:
        return torch.full_like(logits, 1.0 / n)
    target = torch.zeros_like(logits)
    target[:, classes] = 1.0 / n
    return target


def check_replay_settings(beta: float, n_retrain_iters: int) -> None:
    """β and N_f of a replay method: both >= 0."""
    if beta < 0 or n_retrain_iters < 0:
        raise ValueError(f"beta={beta} and n_retrain_iters={n_retrain_iters} must be >= 0")


class ReplayObjective:
    """What is trained from an :class:`EpisodicMemory`, and the one replay loop: PALL's
    retraining of chosen entries, the replay baselines' (ER, DER++, GEM) learning-time
    replay, unlearning fine-tuning, and ER (Retraining)'s retraining from scratch.

    :param memory: the buffers.
    :param beta: weight of the logit (MSE) term; 0 gives plain experience replay.
    :param ce_weight: weight of the CE term on buffer samples (1.0, every method's; 0: no CE
        term and no draw for it, DER's objective, Buzzega et al. 2020, with ``beta`` > 0).
    """

    def __init__(self, memory: EpisodicMemory, beta: float, *, ce_weight: float = 1.0) -> None:
        if beta < 0:
            raise ValueError(f"beta={beta} must be >= 0")
        if beta and not memory.store_logits:
            raise ValueError(f"beta={beta} needs the stored logits; use store_logits=True")
        if ce_weight < 0 or not (beta or ce_weight):
            raise ValueError(f"ce_weight={ce_weight} is invalid with beta={beta}; it must be "
                             ">= 0, and > 0 when beta is 0 (else nothing is replayed)")
        self.memory = memory
        self.beta = beta
        self.ce_weight = ce_weight

    def replay_loss(self, strategy: UnlearningTemplate, tasks: Sequence[int], per_task: int
                    ) -> torch.Tensor:
        """Mean over τ in ``tasks`` of β·MSE(f(x'), z') on ``per_task`` samples of B^τ (over τ's
        classes' logits) plus ``ce_weight``·CE(f(x), y) on ``per_task`` others (none drawn when
        ``ce_weight`` is 0), each mini-batch its own forward pass through its own task's head
        (and subnetwork), every mini-batch class-stratified, as the paper's reference
        computes it.

        All of it at once, whatever |Ω|: one batched draw from the stacked buffers
        (:meth:`~pall_avalanche.rehearsal.EpisodicMemory.stacks`), one forward pass of every
        mini-batch (:func:`~pall_avalanche.models.grouped.forward_groups`), the per-task
        terms as one vector each (docs/explanation/performance.md). With ``amp="bf16"`` the
        forward pass runs under the strategy's bfloat16 autocast, the loss in float32.
        """
        net = strategy.model
        repeats = bool(self.beta) + bool(self.ce_weight)
        loss = None
        for stack in self.memory.stacks(tasks):
            x, y, z = stack.gather(stack.draw(per_task, repeats))
            with strategy.speed.autocast(strategy.device):
                logits = forward_groups(net, x, stack.tasks)
            logits = logits.float()
            # every task's mini-batch has the same size here: the sum over the tasks of each
            # one's mean is G times the mean over all of them
            groups = len(stack.tasks)
            terms = []
            if self.beta:
                terms.append(self.beta * groups * F.mse_loss(stack.columns(logits[:, 0]),
                                                             stack.columns(z[:, 0])))
            if self.ce_weight:
                terms.append(self.ce_weight * groups * F.cross_entropy(
                    logits[:, -1].flatten(0, 1), y[:, -1].flatten()))
            part = terms[0] if len(terms) == 1 else terms[0] + terms[1]
            loss = part if loss is None else loss + part
        return loss / len(tasks)

    def uniform_loss(self, strategy: UnlearningTemplate, task: int, n: int) -> torch.Tensor:
        """CE of ``n`` class-stratified samples of B^t (through t's head) towards the uniform
        distribution over t's classes: minimal when t's predictions are at chance."""
        x, _, _ = self.memory.buffers[task]
        with strategy.speed.autocast(strategy.device):
            logits = strategy.model(x[self.memory.draw(task, n)], task)
        logits = logits.float()
        return F.cross_entropy(logits, uniform_target(logits, self.memory.classes[task]))

    def steps(self, strategy: UnlearningTemplate, tasks: Sequence[int], *,
              param_groups: list[dict], n_iters: int,
              trainable: list[torch.Tensor] | None = None, forget: int | None = None) -> None:
        """The replay objective in the strategy's optimisation loop
        (:meth:`~pall_avalanche.strategies.base.UnlearningTemplate.optimization_steps`):
        ``n_iters`` steps on :meth:`replay_loss` over ``tasks``, ``batch_size // |tasks|``
        samples of each buffer. With ``forget=t`` (the replay baselines' unlearning,
        docs/fidelity.md "ER, DER++, GEM") B^t first adds a whole mini-batch of
        ``batch_size`` samples to :meth:`uniform_loss`. Every mini-batch is class-stratified.

        :param param_groups: the optimizer's parameter groups.
        :param n_iters: the number of steps.
        :param trainable: float 0/1 tensors shaped like the parameters of the first group (in
            order): only their 1-entries change, and weight decay moves to the gradient
            (give that group ``weight_decay=0``); other groups train every entry. ``None``:
            every entry is trained.
        :param forget: a task whose buffer is pushed towards uniform predictions.
        """
        if not tasks and forget is None:
            raise ValueError("replay steps need remaining tasks or a task to forget; got "
                             f"tasks={list(tasks)} and forget=None")
        batch = strategy.train_mb_size
        per_task = max(1, batch // len(tasks)) if tasks else 0

        def loss() -> torch.Tensor:
            total = self.uniform_loss(strategy, forget, batch) if forget is not None else 0.0
            if tasks:
                total = total + self.replay_loss(strategy, tasks, per_task)
            return total

        trigger_plugins(strategy, "before_replay_steps", tasks=list(tasks), forget=forget)
        strategy.optimization_steps(param_groups, n_iters, loss, trainable=trainable)
