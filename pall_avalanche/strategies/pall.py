"""PALL: privacy-aware lifelong learning (Özdenizci et al., ICLR 2025).

Each task learns a sparse subnetwork (scores → per-layer top-k at connectivity α) over
weights that are free or frozen from earlier tasks (forward transfer); its own entries are
then frozen (no forgetting). Unlearning task t re-draws every entry trained with D^t or B^t
(m̄_t) from the initialisation distribution and retrains, from the remaining tasks' DER++
buffers, only the re-drawn entries still used by a remaining task (θ̄), for N_f iterations.
Every choice where the paper is silent or its reference differs is listed in docs/fidelity.md,
"PALL"; see also docs/explanation/pall.md, "How PALL is implemented".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from pall_avalanche.catalog.declaration import Key, Method
from pall_avalanche.masks import MaskSet, SubnetworkNet
from pall_avalanche.models import count_parameters
from pall_avalanche.rehearsal import EpisodicMemory, ReplayObjective, check_replay_settings
from pall_avalanche.strategies.shared_keys import (
    ALPHA,
    BETA,
    BUFFER_SELECTION,
    BUFFER_SIZE,
    MASK_THRESHOLD,
    N_RETRAIN_ITERS,
)
from pall_avalanche.strategies.subnetwork import (
    SubnetworkStrategy,
    WeightResettingPlugin,
    as_subnetwork_net,
    redraw_,
)

__all__ = ["DECLARATIONS", "PALL", "PALL_KEYS", "RetrainingLedger"]


class RetrainingLedger:
    """Which retraining events updated which entries using which tasks' buffers.

    Unlearning task t must re-draw every entry trained with D^t *or with B^t*: entries of m_t
    that an earlier unlearning's retraining updated while B^t was in the loss
    (docs/fidelity.md, "PALL": forget set).
    """

    def __init__(self) -> None:
        self.events: list[tuple[MaskSet, set[int]]] = []

    def record(self, entries: MaskSet, buffer_tasks: Iterable[int]) -> None:
        self.events.append((entries, set(buffer_tasks)))

    def updated_with(self, task: int, shapes: Mapping[str, torch.Size],
                     device: torch.device | str = "cpu") -> MaskSet:
        """Entries any recorded retraining updated using ``task``'s buffer (the empty set on
        ``device`` when none did)."""
        return MaskSet.union((e for e, tasks in self.events if task in tasks), shapes, device)

    def forget(self, task: int) -> None:
        """Drop ``task`` from every event (its buffer is gone); drop events with no task."""
        for _, tasks in self.events:
            tasks.discard(task)
        self.events = [(e, tasks) for e, tasks in self.events if tasks]


class PALL(SubnetworkStrategy):
    """PALL as an Avalanche strategy.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` (any backbone of
        Conv2d/Linear layers), an Avalanche ``MultiTaskModule`` with a ``MultiHeadClassifier``
        (with ``n_tasks``; each task's head is its own) or an already wrapped
        :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for every request (SGD or Adam);
        weight decay is applied to free entries only, never to scores.
    :param alpha: α, per-layer connectivity of a task subnetwork (0.1 ⇒ 90 % sparse).
    :param n_retrain_iters: N_f, retraining iterations after an unlearning request (50), each
        a step of a fresh optimizer at the rate ``optimizer`` was built with, as the paper's
        reference retrains: a scheduler attached to the strategy shapes learning requests
        only.
    :param beta: β, weight of the DER++ logit (MSE) term in retraining (0.5; 0 = plain ER).
    :param buffer_size: total episodic memory, split a priori over the model's T tasks (500).
    :param buffer_selection: how the buffer's samples are chosen (``random``, the paper's
        default; see :data:`~pall_avalanche.rehearsal.SELECTIONS`, Table A3).
    :param strict_cascade: strict option closing a channel of docs/fidelity.md, "Where exact
        unlearning is weaker" (default False, the paper's PALL): unlearning t also re-draws,
        and retrains from the remaining buffers, the own entries of every remaining task
        learned after t (entries trained while t's weights were in the forward pass;
        :meth:`cascade_set`). With ``beta=0`` no logits are computed or stored (the
        stored-logit channel closes too).
    :param retrain_tokens: let the retraining also train every remaining task's own token
        parameters (a ViT's CLS token and positional embedding; default True, as the paper's
        reference, whose Tiny ImageNet numbers come from it); False keeps them frozen, as
        Algorithm 1 (which updates θ̄ only) reads: the more conservative choice, since tokens
        retrained with the remaining buffers are not re-drawn when one of those tasks is
        unlearned later (docs/fidelity.md, "PALL").
    :param refresh_statistics: for a model with running normalisation statistics (one set per
        task): after unlearning changed entries a remaining task uses, recompute that task's
        statistics from its buffer (default True; False keeps the statistics it was learned
        with, which the retrained weights no longer match).
    """

    checkpoint_attributes = ("ledger.events",)
    accepts_unlearned_task_samples = False
    permanence = ("nothing changes: PALL reclaims nothing (the task's subnetwork stays "
                  "frozen and its buffer stays, needed to retrain the shared entries when "
                  "another task is unlearned)")

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer, alpha: float,
                 n_retrain_iters: int = 50, beta: float = 0.5, buffer_size: int = 500,
                 buffer_selection: str = "random", strict_cascade: bool = False,
                 refresh_statistics: bool = True, retrain_tokens: bool = True, plugins=None,
                 **kwargs) -> None:
        if not isinstance(strict_cascade, bool):
            raise ValueError(f"strict_cascade={strict_cascade!r} must be true or false")
        self.strict_cascade = strict_cascade
        self.refresh_statistics = bool(refresh_statistics)
        if not isinstance(retrain_tokens, bool):
            raise ValueError(f"retrain_tokens={retrain_tokens!r} must be true or false")
        self.retrain_tokens = retrain_tokens
        net = as_subnetwork_net(model, alpha, kwargs.get("n_tasks"))
        check_replay_settings(beta, n_retrain_iters)
        self.n_retrain_iters = n_retrain_iters
        self.resetting = WeightResettingPlugin(redraw_unused=True)
        self.memory = EpisodicMemory(
            buffer_size=buffer_size, n_tasks=net.net.n_tasks,
            classes_per_task=net.net.classes_per_task if net.net.n_tasks else None,
            selection=buffer_selection,
            store_logits=bool(beta),
        )
        self.replay = ReplayObjective(self.memory, beta)
        self.ledger = RetrainingLedger()
        super().__init__(model=net, optimizer=optimizer, alpha=alpha,
                         plugins=[self.resetting, self.memory, *(plugins or [])], **kwargs)

    def stored_order(self) -> list[int]:
        """The tasks whose masks are stored, in learning order (Ω, plus the task being
        unlearned while its request runs): the order of the stored masks, since a task's
        mask is stored when it is learned and deleted when it is unlearned."""
        return list(self.model.masks)

    def forget_set(self, task: int) -> MaskSet:
        """m̄_t = (m_t ∧ ¬P) ∪ (m_t ∧ entries retrained with B^t), P = OR of the masks of the
        remaining tasks learned before t."""
        net: SubnetworkNet = self.model
        order = self.stored_order()
        earlier = order[:order.index(task)]
        mask = net.masks[task]
        return (mask - net.cumulative_mask(earlier)) | (
            mask & self.ledger.updated_with(task, net.shapes, net.device))

    def cascade_set(self, task: int) -> MaskSet:
        """The own entries of the remaining tasks learned after t: for each such τ,
        m_τ minus the masks of the tasks learned before τ (t's included). They were trained
        while t's weights were in the forward pass (a superset where τ never used t's
        entries: re-drawing more is safe)."""
        net: SubnetworkNet = self.model
        order = self.stored_order()
        position = order.index(task)
        out = MaskSet.empty(net.shapes, net.device)
        for i, later in enumerate(order[position + 1:], start=position + 1):
            out = out | (net.masks[later] - net.cumulative_mask(order[:i]))
        return out

    def redraw_set(self, task: int) -> MaskSet:
        """Every entry unlearning ``task`` re-draws: :meth:`forget_set`, plus
        :meth:`cascade_set` with ``strict_cascade``."""
        forget = self.forget_set(task)
        return forget | self.cascade_set(task) if self.strict_cascade else forget

    def _unlearn(self, task: int) -> None:
        net: SubnetworkNet = self.model
        forget = self.redraw_set(task)
        remaining = net.cumulative_mask(self.active_tasks)
        retrain = forget & remaining
        before = {n: w.detach().clone() for n, w in net.named_weights()}
        net.remove_mask(task)
        redraw_(net, forget)
        redrawn = {n: w.detach().clone() for n, w in net.named_weights()}
        net.net.reset_task_parameters_(task)
        if self.active_tasks and retrain.count():
            if self.n_retrain_iters:
                self.retrain(retrain, self.active_tasks)
            # booked with N_f = 0 too, as the paper's reference does: unlearning a task whose
            # buffer this retraining would use re-draws these entries (docs/fidelity.md)
            self.ledger.record(retrain, self.active_tasks)
            if self.refresh_statistics:
                self._refresh_statistics(retrain)
        self.ledger.forget(task)
        if not self.active_tasks:
            redraw_(net, MaskSet.full(net.shapes, net.device))
        self._record_stats(before, redrawn, forget, retrain)

    def _refresh_statistics(self, changed: MaskSet) -> None:
        """Every remaining task whose mask holds a re-drawn or retrained entry gets its
        normalisation statistics recomputed from its buffer
        (:meth:`~pall_avalanche.masks.SubnetworkNet.refresh_statistics`): its stored ones
        were taken with weights that are gone. Nothing happens for a network without
        running statistics."""
        net: SubnetworkNet = self.model
        if not net.norm_layers:
            return
        for task in self.active_tasks:
            if (net.masks[task] & changed).count():
                net.refresh_statistics(task, self.memory.buffers[task][0])

    def retrain(self, entries: MaskSet, tasks: list[int]) -> None:
        """PALL's retraining: N_f replay steps (:meth:`ReplayObjective.steps`) updating
        ``entries`` of the weights; per iteration, for each task τ, β·MSE(f_{θ⊙m_τ}(x'), z')
        on a class-stratified minibatch of B^τ plus CE on a second one (batch_size // |Ω|
        each), averaged over tasks. With ``retrain_tokens`` the remaining tasks' own token
        parameters (a ViT's CLS token and positional embedding) train too, every entry, as in
        the paper's reference. The remaining tasks' masks and statistics stay stacked for the
        N_f steps (:meth:`~pall_avalanche.masks.SubnetworkNet.stacked`), and every step runs
        all of them in one batched pass (:meth:`ReplayObjective.replay_loss`)."""
        net: SubnetworkNet = self.model
        device = net.device
        params = [w for _, w in net.named_weights()]
        trainable = [m.float() for m in entries.bools(device).values()]
        groups = [{"params": params, "weight_decay": 0.0}]
        tokens = [p for t in tasks for p in net.net.task_tokens(t)] if self.retrain_tokens \
            else []
        if tokens:
            groups.append({"params": tokens, "weight_decay": 0.0})
        with net.stacked(tasks):
            self.replay.steps(self, tasks, param_groups=groups, n_iters=self.n_retrain_iters,
                              trainable=trainable)

    def stores_logits(self) -> bool:
        return self.memory.store_logits

    def _dense_size(self) -> int:
        """d of Table A2: the network's parameters with one set of per-task tokens (the
        dense model the paper counts)."""
        net: SubnetworkNet = self.model
        extra = sum(p.numel() for t in net.net.known_tasks()[1:]
                    for p in net.net.task_parameters(t))
        return count_parameters(net.net) - extra

    @torch.no_grad()
    def _record_stats(self, before: dict[str, torch.Tensor], redrawn: dict[str, torch.Tensor],
                      forget: MaskSet, retrain: MaskSet) -> None:
        """|m̄_t|, |θ̄|/d and two mean absolute differences of θ̄ after retraining: from its
        re-drawn values (the paper's Table A2, "before and after retraining") and from its
        values before unlearning (docs/fidelity.md, "PALL")."""
        net: SubnetworkNet = self.model
        n_retrained = retrain.count()

        def mean_abs_change(start: dict[str, torch.Tensor]) -> float | None:
            if not n_retrained:
                return None
            return sum(float((w - start[n])[m].abs().sum())
                       for (n, w), m in zip(net.named_weights(), retrain.bools().values(),
                                            strict=True)) / n_retrained

        self.record_statistics(
            redrawn=forget.count(),
            retrained=n_retrained,
            retrained_fraction=n_retrained / self._dense_size(),
            retrained_mean_abs_change=mean_abs_change(redrawn),
            retrained_mean_abs_change_from_learned=mean_abs_change(before),
        )


#: PALL's keys (its strategy's keyword arguments; :class:`PALL`'s docstring says more).
PALL_KEYS = {
    "alpha": ALPHA,
    "n_retrain_iters": N_RETRAIN_ITERS,
    "beta": BETA,
    "buffer_size": BUFFER_SIZE,
    "buffer_selection": BUFFER_SELECTION,
    "strict_cascade": Key(False, "unlearning t also re-draws and retrains the own entries of "
                          "every remaining task learned after t (a channel the paper's PALL "
                          "leaves open)"),
    "retrain_tokens": Key(True, "the retraining also trains the remaining tasks' own tokens "
                          "(a ViT's; the reference) instead of keeping them frozen"),
    "mask_threshold": MASK_THRESHOLD,
}
_PALL = Method("pall", PALL, exact=True, label="PALL", keys=PALL_KEYS)
# strict variants for the exactness audit (docs/fidelity.md; docs/explanation/audit.md)
DECLARATIONS = (
    _PALL,
    _PALL.variant("pall_beta0", "PALL (β=0)", beta=0.0),
    _PALL.variant("pall_strict", "PALL (β=0, cascade)", beta=0.0, strict_cascade=True),
    _PALL.variant("pall_frozen_tokens", "PALL (frozen tokens)", retrain_tokens=False),
)
