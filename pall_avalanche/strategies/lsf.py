"""LSF: learning with selective forgetting (Shibata et al., 2021) with mnemonic codes.

Each class of each task gets a mnemonic code, a random noise image of the input's shape
(standard normal, the scale of normalised inputs). Learning task t:

- the data term: one mean cross-entropy over the concatenation of the clean mini-batch x and
  its mixture ``λx + (1−λ)·code[y]``, λ ~ U(0, 1) per sample (mnemonic embedding), i.e. half
  the weight on each, computed in **one forward pass over the concatenated batch** (a
  BatchNorm backbone normalises clean and mixed samples together), as the paper's reference
  does (docs/fidelity.md, "LSF"),
- the EWC and LwF terms (:class:`TaskEWCPlugin`: per-sample Fisher; :class:`TaskLwFPlugin`:
  mean distillation over the earlier active tasks),
- ``γ · CE(codes of the active earlier tasks → their labels)``, one forward pass per task's
  codes, averaged over the tasks,

after LwF's head-only warm-up (:class:`HeadWarmupTemplate`), which trains on the clean
samples only (the terms that cannot move the task's head rows are skipped there). Unlearning t
runs N_f steps of ``CE(codes of t → uniform over t's classes) + γ · CE(codes of the remaining
tasks → labels)`` (one forward pass per task's codes), then deletes t's codes, Fisher and
snapshot and its distillation targets; the teacher of the next request's distillation is the
model after unlearning. Inexact.
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
        self._mixed_output: torch.Tensor | None = None

    # ------------------------------------------------------------------ codes
    def code_loss(self, tasks: Sequence[int]) -> torch.Tensor:
        """Mean over ``tasks`` of the mean cross-entropy of each task's codes towards its own
        labels, one forward pass per task."""
        return sum(F.cross_entropy(avalanche_forward(self.model, self.codes[t], t),
                                   torch.arange(len(self.codes[t]), device=self.device))
                   for t in tasks) / len(tasks)

    # ---------------------------------------------------------------- learning
    def _before_training_exp(self, **kwargs) -> None:
        task = self.experience.task_label
        shape = self.experience.dataset[0][0].shape
        self.codes[task] = torch.randn(self.model.classes_per_task, *shape).to(self.device)
        super()._before_training_exp(**kwargs)

    def forward(self) -> torch.Tensor:
        """Training after the warm-up: one forward pass over the clean mini-batch and its
        mnemonic mixture, concatenated; the clean half's logits are returned (what metrics
        and the distillation see), the mixed half's are kept for :meth:`criterion`.
        Evaluation and the warm-up: the clean mini-batch only."""
        self._mixed_output = None
        if not self.is_training or self.head_only:
            return super().forward()
        x, y = self.mb_x, self.mb_y
        lam = torch.rand(len(x), *([1] * (x.dim() - 1)), device=x.device)
        mixed = lam * x + (1 - lam) * self.codes[self.experience.task_label][y]
        out = self.forward_inputs(torch.cat([x, mixed]))
        self._mixed_output = out[len(x):]
        return out[:len(x)]

    def criterion(self) -> torch.Tensor:
        """The criterion over the concatenated clean and mixed mini-batch (the clean one alone
        during the warm-up and in evaluation)."""
        if self._mixed_output is None:
            return super().criterion()
        return self._criterion(torch.cat([self.mb_output, self._mixed_output]),
                               torch.cat([self.mb_y, self.mb_y]))

    def _before_backward(self, **kwargs) -> None:
        if self.active_tasks and self.gamma and not self.head_only:
            self.loss += self.gamma * self.code_loss(self.active_tasks)
        super()._before_backward(**kwargs)

    # -------------------------------------------------------------- unlearning
    def _unlearn(self, task: int) -> None:
        remaining = list(self.active_tasks)
        param_groups = self.optimizer_param_groups()
        forget = self.codes[task]
        uniform = torch.full((len(forget), self.model.classes_per_task),
                             1.0 / self.model.classes_per_task, device=forget.device)

        def loss() -> torch.Tensor:
            total = F.cross_entropy(avalanche_forward(self.model, forget, task), uniform)
            if remaining:
                total = total + self.gamma * self.code_loss(remaining)
            return total

        self.optimization_steps(param_groups, self.n_retrain_iters, loss)
        del self.codes[task]
        self.lwf.lwf.set_previous_model(self.model)
