"""PackNet (Mallya & Lazebnik, CVPR 2018), with mask deletion as unlearning.

Built on :class:`~pall_avalanche.masks.SubnetworkNet` masks (Avalanche's PackNet cannot
remove a task: its masks are nested per weight). A learning request of task t, with E epochs:

1. ``E - E // 2`` epochs of dense training: the forward pass uses every weight, the entries of
   the active tasks' masks are frozen (forward transfer), every other entry is free and
   trained (weight decay on free entries only).
2. Magnitude pruning, per maskable tensor: of its n_free free entries, the
   ``round(n_free / (T - j))`` of largest |w| are kept (exactly that many, ties broken
   arbitrarily), where j is the number of learning requests before this one: without
   unlearning every task gets about 1/T of each tensor and the last task keeps all that is
   left; entries freed by unlearning go back to the pool. A fused Q/K/V projection is pruned
   per slice: each of its W_Q, W_K, W_V row blocks keeps ``round(n_free_slice / (T - j))`` of
   its own free entries, as the paper's reference masks W_Q, W_K and W_V as separate layers
   (:attr:`SubnetworkNet.slices <pall_avalanche.masks.SubnetworkNet.slices>`,
   docs/fidelity.md). The other free entries are set to zero and left free for later tasks.
   The task's mask is m_t = kept ∪ M ∪ t's head rows, with M the OR of the active tasks'
   masks (backbone entries): t uses every weight of the earlier tasks still stored, so their
   entries stay frozen while t is active.
3. ``E // 2`` epochs of fine-tuning the kept entries only, through m_t, with a fresh
   optimizer (the cosine preset anneals each phase from the base rate). With E = 1 the
   task is pruned after its single epoch, without fine-tuning.

The head rows of t are t's own and never pruned (like PALL's hard-wired head). BatchNorm
running statistics, where a model has them, are t's own too (one set per task, kept by
:class:`~pall_avalanche.masks.SubnetworkNet`), so no BN state is shared across tasks.
Unlearning deletes m_t only; every weight stays (inexact, F_u = 0; docs/fidelity.md,
"Baselines"). Model size: 1 bit per maskable entry per stored mask, as for PALL and WSN (the
nested masks of the active tasks could be packed into one task index per entry; the paper
counts T binary masks).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pall_avalanche.catalog.declaration import Method
from pall_avalanche.masks import MaskSet, SubnetworkNet, by_slice, slice_counts
from pall_avalanche.strategies.shared_keys import MASK_THRESHOLD
from pall_avalanche.strategies.subnetwork import SubnetworkStrategy, require_n_tasks

__all__ = ["DECLARATIONS", "PackNet", "magnitude_keep_mask"]


def magnitude_keep_mask(weight: torch.Tensor, free: torch.Tensor,
                        keep: int | Sequence[int], slices: int = 1) -> torch.Tensor:
    """Bool mask of exactly ``keep`` entries of ``free`` with the largest |weight|.

    :param weight: the tensor to prune.
    :param free: bool mask of the entries that may be kept.
    :param keep: how many to keep (at most ``free.sum()``); with ``slices > 1`` one count per
        slice (:func:`~pall_avalanche.masks.by_slice`), each slice pruned on its own.
    :param slices: selection slices of the tensor (3 for a fused Q/K/V projection).
    """
    counts = slice_counts(keep, slices)

    def select(i: int, w: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(w.numel(), dtype=torch.bool, device=w.device)
        if counts[i] > 0:
            magnitude = torch.where(allowed, w.detach().abs(), -1.0).reshape(-1)
            mask[torch.topk(magnitude, counts[i], sorted=False).indices] = True
        return mask.view_as(allowed)
    return by_slice(slices, select, weight, free)


class PackNet(SubnetworkStrategy):
    """PackNet as an Avalanche strategy: train, prune to the task's share, fine-tune.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` or a
        :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for both phases of every request
        (each phase starts a fresh optimizer); weight decay applies to free entries only.
    :param plugins: further plugins, run after the method's own.
    """

    learns_scores = False
    checkpoint_attributes = ("_pruned",)

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer, plugins=None,
                 **kwargs) -> None:
        self._pruned = True
        super().__init__(model=model, optimizer=optimizer, plugins=plugins, **kwargs)
        require_n_tasks(self.model, "PackNet")

    @property
    def prune_epoch(self) -> int:
        """The epoch (0-based) before which the task is pruned: the dense phase's length."""
        return self.train_epochs - self.train_epochs // 2

    def keep_fraction(self) -> float:
        """The share of the free entries the learning task keeps: 1 / (T - j)."""
        n_before = self.clock.train_exp_counter    # learning requests before this one
        return 1.0 / max(1, self.model.net.n_tasks - n_before)

    def start_task(self, task: int) -> None:
        self._pruned = False

    def training_phases(self) -> list[int]:
        fine_tuning = self.train_epochs - self.prune_epoch
        return [self.prune_epoch, fine_tuning] if fine_tuning else [self.train_epochs]

    def _before_training_epoch(self, **kwargs) -> None:
        if not self._pruned and self.clock.train_exp_epochs == self.prune_epoch:
            self.prune()
            self.start_phase(self.training_phases()[1])
        super()._before_training_epoch(**kwargs)

    def _after_training_exp(self, **kwargs) -> None:
        if not self._pruned:
            self.prune()
        super()._after_training_exp(**kwargs)

    @torch.no_grad()
    def prune(self) -> None:
        """Keep the learning task's share of the free entries by magnitude, zero the rest of
        the free entries, store m_t, and restrict training to the kept entries with a fresh
        optimizer."""
        net: SubnetworkNet = self.model
        task = self.experience.task_label
        device = net.device
        earlier = net.cumulative_mask(self.active_tasks).bools(device)
        fraction = self.keep_fraction()
        own, mask = {}, {}
        for name in net.scored_names():
            weight, slices = net.weight(name), net.slices[name]
            free = ~earlier[name]
            keep = [round(fraction * int(n_free))
                    for n_free in free.reshape(slices, -1).sum(1).tolist()]
            own[name] = magnitude_keep_mask(weight, free, keep, slices)
            weight.masked_fill_(free & ~own[name], 0.0)
            mask[name] = own[name] | earlier[name]
        head = net.head_masks(task)
        own.update(head)
        mask.update(head)
        net.set_mask(task, MaskSet.from_bool(mask))
        self.freezing.set_frozen(net, MaskSet.from_bool(own).complement())
        self.make_optimizer()
        self._pruned = True


DECLARATIONS = (Method("packnet", PackNet, exact=False, label="PackNet",
                  keys={"mask_threshold": MASK_THRESHOLD}),)
