"""Static and dynamic sparse (Ind.): T disjoint subnetworks of one network, no sharing.

The paper's ablation without knowledge transfer (Table 2): every task trains and uses only
its own entries, so unlearning task t re-draws exactly t's entries from the initialisation
distribution (and t's own tokens, where the backbone has them) and nothing else changes:
exact unlearning with F_u = 0, without buffer or retraining.

Shares. Every scored tensor of n entries is split into T near-equal disjoint shares:
share j has ``n // T + (j < n % T)`` entries (connectivity ≈ 1/T; the shares add up to n).
A fused Q/K/V projection is masked per slice (:attr:`SubnetworkNet.slices
<pall_avalanche.masks.SubnetworkNet.slices>`): each of its W_Q, W_K, W_V row blocks counts as
its own layer of n_s = n / 3 entries, split into T shares of its own, as the paper's reference
masks W_Q, W_K and W_V as separate layers (docs/fidelity.md). The head rows of a task are its
own, as in every subnetwork method.

- **Static**: at construction, a uniformly random partition of every tensor's entries into T
  parts (of every slice's entries, for a fused Q/K/V projection); task t owns part t (share
  t). Task t trains only its part (everything else frozen, no weight decay outside it) and
  runs on it.
- **Dynamic**: task t selects, with scores (straight-through estimator, as in PALL), exactly
  ``share_j`` entries of every scored tensor (of every slice) among the entries no active task
  owns (its j-th learning request, j counted over all learning requests: the shares of the
  active tasks then never exceed n - share_j, so there is always room). After learning, every entry
  outside the active tasks' masks is re-drawn (as in PALL), so D^t leaves nothing outside
  m_t. The learning task's entries are disjoint from every active task's by construction;
  which entries were available did depend on the earlier tasks' masks (a dependence on
  their data through the selection only, never through a weight).

Model size: 1 bit per maskable entry per stored mask (the active tasks' masks), as for PALL.
The static partition of not-yet-learned tasks is kept as an int16 owner index per entry on
the side; it is needed for learning, not for inference, and is not counted.
"""

from __future__ import annotations

import torch
from torch import nn

from pall_avalanche.catalog.declaration import Method
from pall_avalanche.masks import MaskSet, SubnetworkNet
from pall_avalanche.strategies.shared_keys import MASK_THRESHOLD
from pall_avalanche.strategies.subnetwork import (
    SubnetworkStrategy,
    WeightResettingPlugin,
    as_subnetwork_net,
    redraw_,
    require_n_tasks,
)

__all__ = ["DECLARATIONS", "DynamicSparse", "IndependentSubnetworks", "StaticSparse", "share_sizes"]


def share_sizes(n: int, n_tasks: int) -> list[int]:
    """Sizes of the ``n_tasks`` near-equal disjoint shares of ``n`` entries: ``n // T`` each,
    one more for the first ``n % T``."""
    return [n // n_tasks + (j < n % n_tasks) for j in range(n_tasks)]


class IndependentSubnetworks(SubnetworkStrategy):
    """Disjoint task subnetworks: unlearning re-draws the task's entries and tokens (exact).
    The shares need T a priori (an Avalanche model needs ``n_tasks``).

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` or a
        :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for every request.
    """

    accepts_unlearned_task_samples = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        require_n_tasks(self.model, type(self).__name__)

    def shares(self, j: int) -> dict[str, list[int]]:
        """Entries of share ``j`` per slice of every scored tensor (one slice but for a fused
        Q/K/V projection's three): ``share_sizes(n_slice, T)[j]`` each."""
        net: SubnetworkNet = self.model
        out = {}
        for name in net.scored_names():
            slices = net.slices[name]
            size = share_sizes(net.shapes[name].numel() // slices, net.net.n_tasks)[j]
            out[name] = [size] * slices
        return out

    def _unlearn(self, task: int) -> None:
        net: SubnetworkNet = self.model
        redraw_(net, net.remove_mask(task))
        net.net.reset_task_parameters_(task)


class StaticSparse(IndependentSubnetworks):
    """Static sparse (Ind.): a random partition, drawn at construction, into T parts.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` or a
        :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for every request.
    :param plugins: further plugins, run after the method's own.
    """

    learns_scores = False
    checkpoint_attributes = ("owner",)

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer, plugins=None,
                 **kwargs) -> None:
        net = as_subnetwork_net(model, n_tasks=kwargs.get("n_tasks"))
        n_tasks = require_n_tasks(net, type(self).__name__)
        #: scored tensor name → the task owning each entry (int16, CPU).
        self.owner: dict[str, torch.Tensor] = {}
        for name in net.scored_names():
            shape, slices = net.shapes[name], net.slices[name]
            n = shape.numel() // slices                 # entries per slice
            owners = torch.repeat_interleave(
                torch.arange(n_tasks, dtype=torch.int16), torch.tensor(share_sizes(n, n_tasks)))
            self.owner[name] = torch.cat([owners[torch.randperm(n)] for _ in range(slices)]
                                         ).view(shape)
        super().__init__(model=net, optimizer=optimizer, plugins=plugins, **kwargs)

    def part(self, task: int) -> MaskSet:
        """Task ``task``'s part of the partition, with its head rows."""
        net: SubnetworkNet = self.model
        bools = {name: owner == task for name, owner in self.owner.items()}
        return MaskSet.from_bool({**bools, **net.head_masks(task)})

    def start_task(self, task: int) -> None:
        self.model.set_mask(task, self.part(task))

    def frozen_entries(self) -> MaskSet:
        """Everything outside the learning task's part."""
        return self.model.masks[self.experience.task_label].complement()


class DynamicSparse(IndependentSubnetworks):
    """Dynamic sparse (Ind.): score-selected disjoint subnetworks of one share each.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` or a
        :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for every request; weight decay
        applies to free entries only, never to scores.
    :param plugins: further plugins, run after the method's own.
    """

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer, plugins=None,
                 **kwargs) -> None:
        self.resetting = WeightResettingPlugin(redraw_unused=True)
        super().__init__(model=model, optimizer=optimizer, plugins=[self.resetting,
                                                                    *(plugins or [])], **kwargs)

    def start_task(self, task: int) -> None:
        net: SubnetworkNet = self.model
        learned_before = self.clock.train_exp_counter    # learning requests before this one
        if learned_before >= net.net.n_tasks:
            raise ValueError(
                f"learning request {learned_before + 1} (task {task}): dynamic sparse "
                f"subnetworks split each layer into T={net.net.n_tasks} shares, one per "
                "learning request; a task cannot be learned again after it was unlearned")
        available = net.cumulative_mask(self.active_tasks).complement()
        net.start_learning(task, eligible=available,
                           keep=self.shares(learned_before))


DECLARATIONS = (
    Method("static_sparse", StaticSparse, exact=True, label="Static sparse (Ind.)",
           keys={"mask_threshold": MASK_THRESHOLD}),
    Method("dynamic_sparse", DynamicSparse, exact=True, label="Dynamic sparse (Ind.)",
           keys={"mask_threshold": MASK_THRESHOLD}),
)
