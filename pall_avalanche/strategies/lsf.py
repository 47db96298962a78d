"""LSF: learning with selective forgetting (Shibata et al., 2021) with mnemonic codes.

Each class of each task gets a mnemonic code, a random noise image of the input's shape
(standard normal, the scale of normalised inputs). Learning task t:

- the data term: one mean cross-entropy over the concatenation of the clean mini-batch x and
  its mixture ``λx + (1−λ)·code[y]``, λ ~ U(0, 1) per sample (mnemonic embedding), i.e. half
  the weight on each (docs/fidelity.md, "LSF"),
- the EWC and LwF terms (:class:`TaskEWCPlugin`: per-sample Fisher; :class:`TaskLwFPlugin`:
  mean distillation over the earlier active tasks),
- ``γ · CE(codes of the active earlier tasks → their labels)``,

after LwF's head-only warm-up (:class:`HeadWarmupTemplate`; the terms that cannot move the
task's head rows are skipped there). Unlearning t runs N_f steps of
``CE(codes of t → uniform over t's classes) + γ · CE(codes of the remaining tasks → labels)``,
then deletes t's codes, Fisher and snapshot and its distillation targets; the teacher of the
next request's distillation is the model after unlearning. Inexact.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from avalanche.models.utils import avalanche_forward
from torch.nn import functional as F

from pall_avalanche.strategies.ewc import TaskEWCPlugin, check_non_negative
from pall_avalanche.strategies.lwf import LwF

__all__ = ["LSF"]


class LSF(LwF):
    """LSF on a multi-head model: mnemonic codes, EWC and LwF while learning; code-based
    forgetting on unlearning.

    Takes every keyword argument of :class:`LwF` (``lwf_alpha``, ``lwf_temperature``, ...), plus:

    :param ewc_lambda: λ of the EWC penalty.
    :param lsf_gamma: γ, the weight of the mnemonic-code cross-entropy terms.
    :param n_retrain_iters: N_f, optimisation steps per unlearning request.
    """

    checkpoint_attributes = ("codes",)

    def __init__(self, *, ewc_lambda: float, lsf_gamma: float, n_retrain_iters: int,
                 **kwargs) -> None:
        check_non_negative(lsf_gamma=lsf_gamma, n_retrain_iters=n_retrain_iters)
        ewc = TaskEWCPlugin(ewc_lambda)
        plugins = [ewc, *(kwargs.pop("plugins", None) or [])]
        super().__init__(plugins=plugins, **kwargs)
        self.ewc = ewc
        self.gamma = lsf_gamma
        self.n_retrain_iters = n_retrain_iters
        self.codes: dict[int, torch.Tensor] = {}

    # ------------------------------------------------------------------ codes
    def code_batch(self, tasks: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(codes, labels, task labels) of ``tasks``, concatenated in that order."""
        codes = [self.codes[t] for t in tasks]
        x = torch.cat(codes)
        y = torch.cat([torch.arange(len(c), device=x.device) for c in codes])
        t = torch.cat([torch.full((len(c),), task, device=x.device)
                       for task, c in zip(tasks, codes, strict=True)])
        return x, y, t

    def code_loss(self, tasks: Sequence[int]) -> torch.Tensor:
        """Mean cross-entropy of the codes of ``tasks`` towards their own labels."""
        x, y, t = self.code_batch(tasks)
        return F.cross_entropy(avalanche_forward(self.model, x, t), y)

    # ---------------------------------------------------------------- learning
    def _before_training_exp(self, **kwargs) -> None:
        task = self.experience.task_label
        shape = self.experience.dataset[0][0].shape
        self.codes[task] = torch.randn(self.model.classes_per_task, *shape).to(self.device)
        super()._before_training_exp(**kwargs)

    def _before_backward(self, **kwargs) -> None:
        x, y = self.mb_x, self.mb_y
        lam = torch.rand(len(x), *([1] * (x.dim() - 1)), device=x.device)
        mixed = lam * x + (1 - lam) * self.codes[self.experience.task_label][y]
        # self.loss is the criterion's mean CE on x: halving the sum with the mean CE on the
        # (equally many) mixed samples gives the mean CE over the concatenated mini-batch
        mixed_ce = F.cross_entropy(avalanche_forward(self.model, mixed, self.mb_task_id), y)
        self.loss = (self.loss + mixed_ce) / 2
        if self.active_tasks and self.gamma and not self.head_only:
            self.loss += self.gamma * self.code_loss(self.active_tasks)
        super()._before_backward(**kwargs)

    # -------------------------------------------------------------- unlearning
    def _unlearn(self, task: int) -> None:
        remaining = list(self.active_tasks)
        param_groups = self.optimizer_param_groups()
        x, y, t = self.code_batch([task, *remaining])
        n_forget = len(self.codes[task])
        uniform = torch.full((n_forget, self.model.classes_per_task),
                             1.0 / self.model.classes_per_task, device=x.device)

        def loss() -> torch.Tensor:
            logits = avalanche_forward(self.model, x, t)
            total = F.cross_entropy(logits[:n_forget], uniform)
            if remaining:
                total = total + self.gamma * F.cross_entropy(logits[n_forget:], y[n_forget:])
            return total

        self.optimization_steps(param_groups, self.n_retrain_iters, loss)
        del self.codes[task]
        self.lwf.lwf.set_previous_model(self.model)
