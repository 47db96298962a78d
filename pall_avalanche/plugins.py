"""Plugins with one job each, shared by the subnetwork methods (PALL, WSN, PackNet, sparse).

- :class:`MaskFreezingPlugin` keeps every entry of the active tasks' masks bit-identical while a
  new task trains (gradients zeroed, weight decay only on free entries).
- :class:`WeightResettingPlugin` stores the learned task's mask and re-draws what it must from
  the initialisation distribution: unused entries after learning, a task's entries on
  unlearning.
- :class:`RehearsalPlugin` keeps a DER++ buffer per task (samples with their logits) and
  retrains a given set of entries from the remaining buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F

from pall_avalanche.masks import HEAD, MaskSet, SubnetworkNet, draw_initial, mask_gradients_
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate

__all__ = ["MaskFreezingPlugin", "RehearsalPlugin", "WeightResettingPlugin", "redraw_"]


@torch.no_grad()
def redraw_(net: SubnetworkNet, entries: MaskSet) -> None:
    """Re-draw the given entries of the maskable parameters from the initialisation
    distribution; every other entry stays bit-identical."""
    for name, mask in entries.bools(net.weight(HEAD).device).items():
        if mask.any():
            weight = net.weight(name)
            weight.copy_(torch.where(mask, draw_initial(net.maskable[name], name), weight))


class MaskFreezingPlugin(UnlearningPlugin):
    """Freezes the entries of the active tasks' masks during a learning request.

    After every backward pass: ``grad ← (grad + weight_decay · w) ⊙ (1 − M)`` on the maskable
    parameters, so frozen entries get an exactly-zero gradient and the request's fresh
    SGD/Adam (built with no weight decay of its own) leaves them bit-identical.

    :param weight_decay: the weight decay applied to free entries only (never to scores).
    """

    def __init__(self, weight_decay: float = 0.0) -> None:
        super().__init__()
        self.weight_decay = weight_decay
        self._params: list[torch.Tensor] = []
        self._trainable: list[torch.Tensor] = []

    def before_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        net: SubnetworkNet = strategy.model
        frozen = net.cumulative_mask(strategy.active_tasks)
        device = net.weight(HEAD).device
        self._params = [w for _, w in net.named_weights()]
        self._trainable = [(~m).float() for m in frozen.bools(device).values()]

    def after_backward(self, strategy: UnlearningTemplate, **kwargs) -> None:
        mask_gradients_(self._params, self._trainable, self.weight_decay)

    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        self._params, self._trainable = [], []


class WeightResettingPlugin(UnlearningPlugin):
    """Stores the learned task's final mask (top-k of its final scores) and discards the scores;
    with ``redraw_unused`` it then re-draws every entry outside the cumulative mask M (entries
    trained on D^t that ended outside m_t, and unused head rows), so no information of D^t
    stays outside m_t.

    :param redraw_unused: re-draw the entries outside M after learning (PALL: yes; WSN: no).
    """

    def __init__(self, redraw_unused: bool = True) -> None:
        super().__init__()
        self.redraw_unused = redraw_unused

    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        net: SubnetworkNet = strategy.model
        task = strategy.experience.task_label
        net.set_mask(task, MaskSet.from_bool(net.current_mask()))
        net.stop_learning()
        if self.redraw_unused:
            redraw_(net, net.cumulative_mask(strategy.active_tasks).complement())


class RehearsalPlugin(UnlearningPlugin):
    """A DER++ episodic memory per task and retraining of chosen entries from it.

    After learning task t, ``capacity // n_tasks`` class-balanced, uniformly random samples
    of D^t are stored un-augmented with their logits z = f_{θ⊙m_t}(x) computed on exactly
    those inputs in eval mode. On unlearning t, B^t is deleted before anything else.

    :param buffer_size: total capacity, split a priori over ``n_tasks``.
    :param n_tasks: the number of tasks T.
    :param classes_per_task: classes per task (the buffer must hold one sample of each).
    :param beta: weight of the logit (MSE) term; 0 gives plain experience replay.
    :param n_retrain_iters: N_f, retraining iterations per unlearning request.
    """

    def __init__(self, *, buffer_size: int, n_tasks: int, classes_per_task: int, beta: float,
                 n_retrain_iters: int) -> None:
        super().__init__()
        self.per_task = buffer_size // n_tasks
        if self.per_task < classes_per_task:
            raise ValueError(
                f"buffer_size={buffer_size} gives {self.per_task} samples per task over "
                f"{n_tasks} tasks, fewer than the {classes_per_task} classes of a task; use "
                f"buffer_size >= {n_tasks * classes_per_task}"
            )
        if beta < 0 or n_retrain_iters < 0:
            raise ValueError(f"beta={beta} and n_retrain_iters={n_retrain_iters} must be >= 0")
        self.beta = beta
        self.n_retrain_iters = n_retrain_iters
        self.buffers: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def _select(self, targets: torch.Tensor) -> torch.Tensor:
        """Class-balanced uniform random indices (remainders to the first classes)."""
        classes = targets.unique()
        shares = [self.per_task // len(classes)] * len(classes)
        for i in range(self.per_task % len(classes)):
            shares[i] += 1
        picked = []
        for cls, share in zip(classes, shares, strict=True):
            pool = (targets == cls).nonzero().flatten()
            picked.append(pool[torch.randperm(len(pool))[:share]])
        return torch.cat(picked).sort().values

    @torch.no_grad()
    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        task = strategy.experience.task_label
        data = strategy.experience.dataset.eval()
        targets = torch.as_tensor(list(data.targets))
        index = self._select(targets)
        x = torch.stack([data[int(i)][0] for i in index]).to(strategy.device)
        y = targets[index].to(strategy.device)
        net = strategy.model
        was_training = net.training
        net.eval()
        batch = strategy.eval_mb_size or strategy.train_mb_size
        z = torch.cat([net(x[i:i + batch], task) for i in range(0, len(x), batch)])
        net.train(was_training)
        self.buffers[task] = (x, y, z)

    def before_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        del self.buffers[task]

    def retrain(self, strategy: UnlearningTemplate, entries: MaskSet,
                tasks: Sequence[int]) -> None:
        """N_f iterations updating only ``entries``: per iteration, for each task τ, CE on a
        minibatch of B^τ plus β·MSE(f_{θ⊙m_τ}(x'), z') on a second one (batch_size // |Ω|
        each), averaged over tasks; a fresh optimizer of the learning type, no scheduler."""
        net: SubnetworkNet = strategy.model
        device = net.weight(HEAD).device
        params = [w for _, w in net.named_weights()]
        trainable = [m.float() for m in entries.bools(device).values()]
        weight_decay = strategy.weight_decay
        optimizer = strategy.fresh_optimizer([{"params": params, "weight_decay": 0.0}])
        per_task = max(1, strategy.train_mb_size // len(tasks))
        net.train()
        for _ in range(self.n_retrain_iters):
            optimizer.zero_grad(set_to_none=True)
            loss = torch.zeros((), device=device)
            for task in tasks:
                x, y, z = self.buffers[task]
                ce_index = torch.randperm(len(x), device=device)[:per_task]
                loss = loss + F.cross_entropy(net(x[ce_index], task), y[ce_index])
                if self.beta:
                    mse_index = torch.randperm(len(x), device=device)[:per_task]
                    loss = loss + self.beta * F.mse_loss(net(x[mse_index], task), z[mse_index])
            (loss / len(tasks)).backward()
            mask_gradients_(params, trainable, weight_decay)
            optimizer.step()
        net.zero_grad(set_to_none=True)
