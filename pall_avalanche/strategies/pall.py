"""PALL: privacy-aware lifelong learning (Özdenizci et al., ICLR 2025).

Each task learns a sparse subnetwork (scores → per-layer top-k at connectivity α) over
weights that are free or frozen from earlier tasks (forward transfer); its own entries are
then frozen (no forgetting). Unlearning task t re-draws every entry trained with D^t or B^t
(m̄_t) from the initialisation distribution and retrains, from the remaining tasks' DER++
buffers, only the re-drawn entries still used by a remaining task (θ̄), for N_f iterations.
Every **Decision** of protocol §5 is followed; see the README, "How PALL is implemented".
"""

from __future__ import annotations

import torch
from torch import nn

from pall_avalanche.masks import MaskSet, RetrainingLedger, SubnetworkNet
from pall_avalanche.models import count_parameters
from pall_avalanche.plugins import (
    MaskFreezingPlugin,
    RehearsalPlugin,
    WeightResettingPlugin,
    redraw_,
)
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["PALL"]


class PALL(UnlearningTemplate):
    """PALL as an Avalanche strategy.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` (any backbone of
        Conv2d/Linear layers) or an already wrapped :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for every request (SGD or Adam);
        weight decay is applied to free entries only, never to scores.
    :param alpha: α, per-layer connectivity of a task subnetwork (0.1 ⇒ 90 % sparse).
    :param n_retrain_iters: N_f, retraining iterations after an unlearning request (50).
    :param beta: β, weight of the DER++ logit (MSE) term in retraining (0.5; 0 = plain ER).
    :param buffer_size: total episodic memory, split a priori over the model's T tasks (500).
    """

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer, alpha: float,
                 n_retrain_iters: int = 50, beta: float = 0.5, buffer_size: int = 500,
                 plugins=None, **kwargs) -> None:
        net = model if isinstance(model, SubnetworkNet) else SubnetworkNet(model, alpha)
        self.freezing = MaskFreezingPlugin(float(optimizer.defaults.get("weight_decay", 0.0)))
        self.resetting = WeightResettingPlugin(redraw_unused=True)
        self.rehearsal = RehearsalPlugin(
            buffer_size=buffer_size, n_tasks=net.net.n_tasks,
            classes_per_task=net.net.classes_per_task, beta=beta,
            n_retrain_iters=n_retrain_iters,
        )
        self.ledger = RetrainingLedger()
        self.learning_order: list[int] = []
        self.unlearning_stats: list[dict] = []
        super().__init__(model=net, optimizer=optimizer,
                         plugins=[self.freezing, self.resetting, self.rehearsal,
                                  *(plugins or [])], **kwargs)

    def model_adaptation(self, model=None):
        model = super().model_adaptation(model)
        if self.is_training:
            task = self.experience.task_label
            self.model.start_learning(task)
            self.learning_order.append(task)
        return model

    def optimizer_param_groups(self) -> list[dict]:
        weights = [w for _, w in self.model.named_weights()]
        return [{"params": weights, "weight_decay": 0.0},
                {"params": list(self.model.scores), "weight_decay": 0.0}]

    def forget_set(self, task: int) -> MaskSet:
        """m̄_t = (m_t ∧ ¬P) ∪ (m_t ∧ entries retrained with B^t), P = OR of the masks of the
        remaining tasks learned before t."""
        net: SubnetworkNet = self.model
        position = self.learning_order.index(task)
        earlier = [t for t in self.learning_order[:position] if t in net.masks and t != task]
        mask = net.masks[task]
        return (mask - net.cumulative_mask(earlier)) | (
            mask & self.ledger.updated_with(task, net.shapes))

    def _unlearn(self, task: int) -> None:
        net: SubnetworkNet = self.model
        forget = self.forget_set(task)
        remaining = net.cumulative_mask(self.active_tasks)
        retrain = forget & remaining
        before = {n: w.detach().clone() for n, w in net.named_weights()}
        net.remove_mask(task)
        self.learning_order.remove(task)
        redraw_(net, forget)
        if self.active_tasks and self.rehearsal.n_retrain_iters and retrain.count():
            self.rehearsal.retrain(self, retrain, self.active_tasks)
            self.ledger.record(retrain, self.active_tasks)
        self.ledger.forget(task)
        if not self.active_tasks:
            redraw_(net, MaskSet.full(net.shapes))
        self._record_stats(before, forget, retrain)

    @torch.no_grad()
    def _record_stats(self, before: dict[str, torch.Tensor], forget: MaskSet,
                      retrain: MaskSet) -> None:
        """|m̄_t|, |θ̄|/d and the mean |θ̄ after retraining − θ̄ before unlearning| (Table A3)."""
        net: SubnetworkNet = self.model
        n_retrained = retrain.count()
        change = sum(float((w - before[n])[m].abs().sum())
                     for (n, w), m in zip(net.named_weights(), retrain.bools().values(),
                                          strict=True))
        self.unlearning_stats.append({
            "redrawn": forget.count(),
            "retrained": n_retrained,
            "retrained_fraction": n_retrained / count_parameters(net.net),
            "retrained_mean_abs_change": change / n_retrained if n_retrained else None,
        })

    def inference_size(self) -> tuple[int, int]:
        net: SubnetworkNet = self.model
        return count_parameters(net.net), MaskSet.empty(net.shapes).n_entries() * len(net.masks)
