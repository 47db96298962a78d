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

from pall_avalanche.catalog.declaration import Key, Method
from pall_avalanche.models.grouped import forward_groups
from pall_avalanche.rehearsal import uniform_target
from pall_avalanche.strategies.ewc import TaskEWCPlugin, check_non_negative
from pall_avalanche.strategies.lwf import LwF
from pall_avalanche.strategies.shared_keys import (
    EWC_LAMBDA,
    LWF_ALPHA,
    LWF_TEMPERATURE,
    N_RETRAIN_ITERS,
)

__all__ = ["LSF", "DECLARATIONS"]


class LSF(LwF):
    """LSF on a multi-head model: mnemonic codes, EWC and LwF while learning; code-based
    forgetting on unlearning.

    Takes every keyword argument of :class:`LwF` (``lwf_alpha``, ``lwf_temperature``, ...), plus:

    :param ewc_lambda: λ of the EWC penalty.
    :param lsf_gamma: γ, the weight of the mnemonic-code cross-entropy terms.
    :param n_retrain_iters: N_f, optimisation steps per unlearning request.
    """

    checkpoint_attributes = ("codes", "code_classes")

    def __init__(self, *, ewc_lambda: float, lsf_gamma: float, n_retrain_iters: int,
                 **kwargs) -> None:
        check_non_negative(lsf_gamma=lsf_gamma, n_retrain_iters=n_retrain_iters)
        ewc = TaskEWCPlugin(ewc_lambda)
        plugins = [ewc, *(kwargs.pop("plugins", None) or [])]
        super().__init__(plugins=plugins, **kwargs)
        self.ewc = ewc
        self.gamma = lsf_gamma
        self.n_retrain_iters = n_retrain_iters
        #: task → one mnemonic code per class (rows in the order of :attr:`code_classes`)
        self.codes: dict[int, torch.Tensor] = {}
        #: task → its classes (sorted label values)
        self.code_classes: dict[int, torch.Tensor] = {}
        self._mixed_output: torch.Tensor | None = None
        #: tasks → (their codes, stacked codes, stacked labels): :meth:`_stacked_codes`
        self._code_stack: dict[tuple[int, ...], tuple] = {}

    # ------------------------------------------------------------------ codes
    def code_loss(self, tasks: Sequence[int]) -> torch.Tensor:
        """Mean over ``tasks`` of the mean cross-entropy of each task's codes towards its own
        labels, each task's codes their own forward pass through it; tasks with as many
        classes each run in one batched pass (:func:`~pall_avalanche.models.grouped.
        forward_groups`), under the strategy's autocast (float32 loss)."""
        parts: dict[int, list[int]] = {}
        for task in tasks:
            parts.setdefault(len(self.code_classes[task]), []).append(task)
        total = None
        for part in parts.values():
            codes, labels = self._stacked_codes(part)
            with self.speed.autocast(self.device):
                logits = forward_groups(self.model, codes, part)
            term = len(part) * F.cross_entropy(logits.float().flatten(0, 2), labels.flatten())
            total = term if total is None else total + term
        return total / len(tasks)

    def _stacked_codes(self, tasks: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(the codes of ``tasks`` as ``(G, 1, c, *input)``, their labels ``(G, c)``), kept
        while those tasks' codes stay the same."""
        current = [self.codes[t] for t in tasks]
        kept = self._code_stack.get(tuple(tasks))
        if kept is None or any(a is not b for a, b in zip(kept[0], current, strict=True)):
            kept = (current, torch.stack(current).unsqueeze(1),
                    torch.stack([self.code_classes[t] for t in tasks]))
            self._code_stack = {tuple(tasks): kept}
        return kept[1], kept[2]

    def code_of(self, y: torch.Tensor, tasks: torch.Tensor | int) -> torch.Tensor:
        """The mnemonic code of each sample's class in its own task (``tasks``: one task, or
        the task of each sample, as :meth:`mb_tasks` gives them).

        :raises ValueError: a sample's task has no codes (it is not learned nor being
            learned: a plugin added it).
        """
        if isinstance(tasks, int):
            return self.codes[tasks][torch.searchsorted(self.code_classes[tasks], y)]
        out = None
        for task in tasks.unique().tolist():
            if task not in self.codes:
                raise ValueError(
                    f"a learning mini-batch holds samples of task {task}, which has no "
                    "mnemonic codes (it is not learned): LSF mixes every sample with its own "
                    "task's code; let the plugin that adds samples replay learned tasks only")
            rows = tasks == task
            codes = self.code_of(y[rows], task)
            if out is None:
                out = codes.new_empty((len(y), *codes.shape[1:]))
            out[rows] = codes
        return out

    # ---------------------------------------------------------------- learning
    def _before_training_exp(self, **kwargs) -> None:
        task = self.experience.task_label
        shape = self.experience.dataset[0][0].shape
        classes = sorted(self.experience.classes_in_this_experience)
        self.code_classes[task] = torch.tensor(classes, dtype=torch.long, device=self.device)
        self.codes[task] = torch.randn(len(classes), *shape).to(self.device)
        super()._before_training_exp(**kwargs)

    def forward(self) -> torch.Tensor:
        """Training after the warm-up: one forward pass over the clean mini-batch and its
        mnemonic mixture, concatenated; the clean half's logits are returned (what metrics
        and the distillation see), the mixed half's are kept for :meth:`criterion`.
        Evaluation and the warm-up: the clean mini-batch only."""
        self._mixed_output = None
        if not self.is_training or self.head_only:
            return super().forward()
        x, y, tasks = self.mb_x, self.mb_y, self.mb_tasks()
        lam = torch.rand(len(x), *([1] * (x.dim() - 1)), device=x.device)
        mixed = lam * x + (1 - lam) * self.code_of(y, tasks)
        out = self.forward_inputs(torch.cat([x, mixed]), tasks if isinstance(tasks, int)
                                  else torch.cat([tasks, tasks]))
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
        forget, classes = self.codes[task], self.code_classes[task]

        def loss() -> torch.Tensor:
            logits = avalanche_forward(self.model, forget, task)
            total = F.cross_entropy(logits, uniform_target(logits, classes))
            if remaining:
                total = total + self.gamma * self.code_loss(remaining)
            return total

        self.optimization_steps(param_groups, self.n_retrain_iters, loss)
        del self.codes[task], self.code_classes[task]
        self.lwf.lwf.set_previous_model(self.model)


DECLARATIONS = (Method("lsf", LSF, exact=False, label="LSF",
                  keys={"ewc_lambda": EWC_LAMBDA, "lwf_alpha": LWF_ALPHA,
                        "lwf_temperature": LWF_TEMPERATURE,
                        "lsf_gamma": Key(10.0, "γ of LSF's mnemonic-code terms (the paper's "
                                         "default)", low=0),
                        "n_retrain_iters": N_RETRAIN_ITERS}),)
