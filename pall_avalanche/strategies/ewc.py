"""EWC: elastic weight consolidation with one removable penalty per task.

Avalanche's ``EWCPlugin`` (``mode="separate"``) keeps a diagonal Fisher and a parameter
snapshot per trained experience, keyed by ``clock.train_exp_counter``. :class:`TaskEWCPlugin`
reuses its storage and hooks, remembers which counter belongs to which task, sums the penalty
over the active tasks only, and forgets a task by deleting its Fisher and snapshot
(unlearning changes no parameter).

The Fisher is the paper's estimator, not Avalanche's (docs/fidelity.md, "EWC"): after
learning task t, one pass over D^t **one sample at a time**, with task t's head, the model
in training mode, the true label y:

    F_t = (1/N') Σ_n p(y_n | x_n) · (∇_θ log p(y_n | x_n))²,   N' = ⌈N/B⌉ · B

(:func:`fisher_diagonal`; N' is the reference's divisor, its loader's number of batches of the
training batch size B times B, which is N when B divides N). Avalanche's
``compute_importances`` squares mini-batch-mean gradients instead, an estimator whose scale
moves with the batch size and the training state, so the paper's λ would mean something else
with it.
"""

from __future__ import annotations

import torch
from avalanche.models.utils import avalanche_forward
from avalanche.training.plugins import EWCPlugin
from avalanche.training.utils import ParamData
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from pall_avalanche.catalog.declaration import Method
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate
from pall_avalanche.strategies.shared_keys import EWC_LAMBDA

__all__ = ["EWC", "DECLARATIONS", "TaskEWCPlugin", "fisher_diagonal"]


def check_non_negative(**values: float) -> None:
    """Raise a ValueError naming the first negative hyper-parameter."""
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name}={value} is invalid; it must be >= 0")


def fisher_diagonal(model: nn.Module, dataset, device: torch.device | str = "cpu",
                    batch_size: int = 1) -> dict[str, ParamData]:
    """The diagonal Fisher of ``model`` on ``dataset``, one sample at a time:
    ``(1/N') Σ_n p(y_n|x_n) · (∇ log p(y_n|x_n))²`` with y_n the sample's true label and the
    sample's own task head, the model in training mode (as it learned), N' = ⌈N / B⌉ · B, the
    paper's reference's divisor (its training loader's batches times the batch size B).
    Parameters that do not require a gradient get zeros.

    :param model: the network (called as ``model(x, task)`` through ``avalanche_forward``).
    :param dataset: an Avalanche dataset of ``(x, y, task)`` samples.
    :param device: where to compute.
    :param batch_size: B, the training batch size (1: N' = N).
    :return: parameter name → ``ParamData`` (Avalanche's container, as the plugin stores it).
    """
    named = [(name, p) for name, p in model.named_parameters()]
    trainable = [p for _, p in named if p.requires_grad]
    fisher = {name: torch.zeros_like(p) for name, p in named}
    was_training = model.training
    model.train()
    collate = getattr(dataset, "collate_fn", None)
    n = 0
    for x, y, task, *_ in DataLoader(dataset, batch_size=1, shuffle=False, collate_fn=collate):
        log_p = F.log_softmax(avalanche_forward(model, x.to(device), int(task[0])), dim=1)
        log_p_true = log_p[0, int(y[0])]
        grads = torch.autograd.grad(log_p_true, trainable, allow_unused=True)
        weight = log_p_true.detach().exp()
        gradient = dict(zip((id(p) for p in trainable), grads, strict=True))
        for name, p in named:
            g = gradient.get(id(p))
            if g is not None:
                fisher[name].addcmul_(g, g, value=weight)
        n += 1
    model.train(was_training)
    divisor = max(-(-n // batch_size) * batch_size, 1)
    return {name: ParamData(name, init_tensor=value / divisor, device=value.device)
            for name, value in fisher.items()}


class _FisherPenalty(torch.autograd.Function):
    """``Σ_i A_i θ_i² − 2 B_i θ_i + C_i`` of a parameter θ from float64 sums A, B, C (see
    :meth:`TaskEWCPlugin.penalty`), evaluated in float64; gradient ``2(Aθ − B)``."""

    @staticmethod
    def forward(ctx, param: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
                ) -> torch.Tensor:
        ctx.save_for_backward(param, a, b)
        x = param.double()
        return ((a * x - 2 * b) * x + c).sum().to(param.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        param, a, b = ctx.saved_tensors
        return (2 * grad * (a * param.double() - b)).to(param.dtype), None, None, None


class TaskEWCPlugin(EWCPlugin, UnlearningPlugin):
    """Avalanche's separate-mode EWC whose per-task state can be deleted.

    Penalty added to the loss: ``ewc_lambda · Σ_{τ ∈ tasks} Σ_i F_τ,i (θ_i − θ_τ,i)²`` over the
    tasks whose state is stored (the active ones). Skipped while ``strategy.trains_head_only()``
    (a head-only warm-up moves no entry any stored Fisher weights).

    :param ewc_lambda: λ, the weight of the penalty.
    """

    checkpoint_attributes = ("counter_of", "saved_params", "importances")

    def __init__(self, ewc_lambda: float) -> None:
        check_non_negative(ewc_lambda=ewc_lambda)
        super().__init__(ewc_lambda, mode="separate")
        self.counter_of: dict[int, int] = {}
        #: (the stored tasks' counters and the parameters' shapes, name → the sums A, B, C
        #: over those tasks): :meth:`penalty`'s operands
        self._sums: tuple[tuple, dict[str, tuple[torch.Tensor, ...]]] | None = None

    @property
    def tasks(self) -> list[int]:
        """The tasks with a stored Fisher and snapshot, in learning order."""
        return list(self.counter_of)

    def penalty(self, model: nn.Module) -> torch.Tensor:
        """``Σ_τ Σ_i F_τ,i (θ_i − θ_τ,i)²`` over the stored tasks (without λ), computed per
        parameter as ``Σ_i A_i θ_i² − 2 B_i θ_i + C_i`` with A = Σ_τ F_τ, B = Σ_τ F_τ θ_τ and
        C = Σ_τ F_τ θ_τ² summed once per set of stored tasks in float64 (no cancellation
        worth a float32 bit): a step costs the same operations and time whatever their
        number (:class:`_FisherPenalty`, gradient 2(Aθ − B))."""
        params = list(model.named_parameters())
        sums = self._summed(params)
        total = torch.zeros((), device=params[0][1].device)
        for name, param in params:
            if name in sums:
                total = total + _FisherPenalty.apply(param, *sums[name])
        return total

    def _summed(self, params: list[tuple[str, nn.Parameter]]
                ) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Name → (A, B, C) over the stored tasks that have the parameter, their snapshots
        and Fishers expanded to its current shape (a head grown since), in float64."""
        counters = list(self.counter_of.values())
        key = (tuple(counters), tuple((name, p.shape) for name, p in params))
        if self._sums is None or self._sums[0] != key:
            sums = {}
            for name, param in params:
                having = [c for c in counters if name in self.saved_params[c]]
                if having:
                    saved = torch.stack([self.saved_params[c][name].expand(param.shape)
                                         for c in having]).double()
                    fisher = torch.stack([self.importances[c][name].expand(param.shape)
                                          for c in having]).double()
                    sums[name] = (fisher.sum(0), (fisher * saved).sum(0),
                                  (fisher * saved.square()).sum(0))
            self._sums = (key, sums)
        return self._sums[1]

    def load_state_dict(self, state) -> None:
        """Restore the stored tasks (and forget the sums over the old ones)."""
        super().load_state_dict(state)
        self._sums = None

    def before_backward(self, strategy: UnlearningTemplate, **kwargs) -> None:
        if self.counter_of and self.ewc_lambda and not strategy.trains_head_only():
            strategy.loss += self.ewc_lambda * self.penalty(strategy.model)

    def compute_importances(self, model, criterion, optimizer, dataset, device, batch_size,
                            num_workers=0) -> dict[str, ParamData]:
        """The paper's per-sample Fisher (:func:`fisher_diagonal`, with the training batch size
        Avalanche passes) of the experience just learned; Avalanche's hook, so its
        ``after_training_exp`` stores it with the snapshot (the criterion and optimizer it
        passes are not used)."""
        return fisher_diagonal(model, dataset, device, batch_size)

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


DECLARATIONS = (Method("ewc", EWC, exact=False, label="EWC", keys={"ewc_lambda": EWC_LAMBDA}),)
