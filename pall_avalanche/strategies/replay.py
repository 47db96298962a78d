"""The replay baselines: ER, DER++, GEM and ER (Retraining) (docs/fidelity.md, "Baselines").

All four keep a class-balanced episodic memory B^t of ``buffer_size // T`` samples per task
(:class:`~pall_avalanche.rehearsal.EpisodicMemory`, the buffer PALL uses) and share the one
replay loop (:meth:`~pall_avalanche.rehearsal.ReplayObjective.steps`):

- **ER** adds, to every learning minibatch, CE on a task-balanced replay minibatch of the
  active tasks' buffers (each sample through its own task's head).
- **DER++** adds β·MSE(f(x'), z') + 1.0·CE(f(x), y) on two replay minibatches, z the logits
  stored with the sample (computed in eval mode with the sample's own head, so Avalanche's
  multi-head bug #1657 cannot occur).
- **GEM** projects every learning gradient with Avalanche's ``GEMPlugin`` (quadprog), its
  memories keyed by task and taken from the same buffers, so tasks can be removed.
- Unlearning t (ER, DER++, GEM; approximate): N_f steps of replay on the remaining buffers
  (batch_size // |Ω| samples of each) plus CE of a whole mini-batch (batch_size samples) of
  B^t, through t's head, towards the uniform distribution over t's classes, every mini-batch
  drawn class-stratified; then B^t (and GEM's memory of t) is deleted.
- **ER (Retraining)** learns like ER; unlearning t deletes B^t, re-draws every parameter
  and retrains from scratch on the remaining buffers (exact).
"""

from __future__ import annotations

import math

import numpy as np
import qpsolvers
import torch
from avalanche.training.plugins import GEMPlugin
from torch import nn

from pall_avalanche.catalog.declaration import Key, Method
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.models.grouped import batchable, group_losses
from pall_avalanche.models.init import reinitialize_
from pall_avalanche.models.multitask import task_network
from pall_avalanche.rehearsal import EpisodicMemory, ReplayObjective, check_replay_settings
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate
from pall_avalanche.strategies.shared_keys import BETA, BUFFER_SIZE, N_RETRAIN_ITERS

__all__ = ["ER", "GEM", "DECLARATIONS", "DERpp", "ERRetraining", "LearningReplayPlugin",
           "ReplayTemplate", "TaskGEMPlugin"]


class LearningReplayPlugin(UnlearningPlugin):
    """Adds the rehearsal loss of the active tasks' buffers to every learning minibatch:
    ``loss += replay_loss(Ω, batch_size // |Ω| samples per task)`` (CE, plus β·MSE for DER++).

    :param replay: the replay objective over the buffers.
    """

    def __init__(self, replay: ReplayObjective) -> None:
        super().__init__()
        self.replay = replay

    def before_backward(self, strategy: UnlearningTemplate, **kwargs) -> None:
        tasks = strategy.active_tasks
        if tasks:
            per_task = max(1, strategy.train_mb_size // len(tasks))
            strategy.loss = strategy.loss + self.replay.replay_loss(strategy, tasks, per_task)


class TaskGEMPlugin(GEMPlugin, UnlearningPlugin):
    """Avalanche's ``GEMPlugin`` with removable, task-keyed memories.

    Upstream keys the memories by ``train_exp_counter`` and reads them with ``range()``, so a
    deleted task raises ``KeyError``; here the memory of task t is B^t of ``memory`` (the
    same tensors, filled after ``memory`` filled B^t), the reference gradients iterate the
    stored tasks, and ``after_unlearning`` drops t. The projection is upstream's, with the
    |Ω|×d products computed on the parameters' device (only the |Ω|×|Ω| QP goes to quadprog).
    It is the one step of any method that waits for the device: GEM decides on the host
    whether a constraint is violated and solves the QP there, as upstream and the paper's
    reference do (an on-device solver would change GEM's numbers).

    :param memory: the buffers (must come before this plugin in the plugin list).
    :param memory_strength: γ, the margin added to the projection constraints (0.5).
    """

    checkpoint_attributes = ("memory_x", "memory_y", "memory_tid")

    def __init__(self, memory: EpisodicMemory, memory_strength: float) -> None:
        if memory_strength < 0:
            raise ValueError(f"memory_strength={memory_strength} must be >= 0")
        super().__init__(patterns_per_experience=memory.per_task or memory.buffer_size,
                         memory_strength=memory_strength)
        self.episodic = memory

    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        """Every task's memory is its buffer as it is now (a rebalanced buffer shrinks)."""
        for task, (x, y, _) in self.episodic.buffers.items():
            self.memory_x[task], self.memory_y[task] = x, y
            self.memory_tid[task] = torch.full_like(y, task)

    def after_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        for memory in (self.memory_x, self.memory_y, self.memory_tid):
            memory.pop(task, None)

    def before_training_iteration(self, strategy: UnlearningTemplate, **kwargs) -> None:
        """Reference gradients g_k of every stored task's memory (rows of ``self.G``): the
        gradient of the loss of each task's whole memory through that task.

        On a :class:`~pall_avalanche.models.TaskIncrementalNet` whose backbone runs batched
        (:func:`~pall_avalanche.models.grouped.batchable`, no per-task parameters), all of
        them at once: every task's memory in one batched forward pass, each with its own copy
        of the backbone's parameters (torch.func's construction of per-example gradients), so
        one backward pass gives every task's gradient: a copy's gradient is its task's, and a
        head row is used by its task alone (rows in the order of the stacked buffers; GEM's
        projection does not depend on it). Any other network: one forward and one backward
        pass per task, in task order."""
        if not self.memory_x:
            return
        model = strategy.model
        model.train()
        tasks = sorted(self.memory_x)
        if (isinstance(model, TaskIncrementalNet) and batchable(model.backbone)
                and not any(model.task_parameters(t) for t in tasks)):
            self.G = torch.cat([self._stack_gradients(strategy, model, stack)
                                for stack in self.episodic.stacks(tasks)])
            return
        rows = []
        for task in tasks:
            with strategy.speed.autocast(strategy.device):
                logits = model(self.memory_x[task], task)
            loss = strategy._criterion(logits.float(), self.memory_y[task])
            params = [p for p in model.parameters() if p.requires_grad]
            grads = dict(zip(map(id, params), torch.autograd.grad(loss, params,
                                                                  allow_unused=True),
                             strict=True))
            rows.append(torch.cat([g.flatten() if (g := grads.get(id(p))) is not None
                                   else p.new_zeros(p.numel()) for p in model.parameters()]))
        self.G = torch.stack(rows)

    @staticmethod
    def _stack_gradients(strategy: UnlearningTemplate, model: TaskIncrementalNet,
                         stack) -> torch.Tensor:
        """The reference gradients of the tasks of one buffer stack, ``(G, d)``."""
        groups = len(stack.tasks)
        copies = {name: p.detach().unsqueeze(0).repeat(groups, *([1] * p.dim()))
                  .requires_grad_(True)
                  for name, p in model.named_parameters()
                  if name.startswith("backbone.") and p.requires_grad}
        with strategy.speed.autocast(strategy.device):
            logits = model.forward_groups(stack.x.unsqueeze(1), stack.tasks,
                                          parameters=copies)[:, 0]
        losses = group_losses(strategy._criterion, logits.float(), stack.y)
        head = model.head.weight
        grads = torch.autograd.grad(losses.sum(), [*copies.values(), head], allow_unused=True)
        rows = dict(zip(copies, grads[:-1], strict=True))
        # the head's gradient: each task's rows, in its own task's row of G
        index, _, _ = model._group_index(stack.tasks, head.device)
        per_task = head.new_zeros(groups, *head.shape)
        if grads[-1] is not None:
            spread = index.unsqueeze(-1).expand(-1, -1, head.shape[1])
            per_task.scatter_(1, spread, grads[-1].index_select(0, index.flatten())
                              .view(*index.shape, -1))
        return torch.cat([
            per_task.flatten(1) if p is head
            else rows[name].flatten(1) if rows.get(name) is not None
            else p.new_zeros(groups, p.numel())
            for name, p in model.named_parameters()], dim=1)

    def after_backward(self, strategy: UnlearningTemplate, **kwargs) -> None:
        if self.memory_x:
            super().after_backward(strategy, **kwargs)

    @torch.no_grad()
    def solve_quadprog(self, g: torch.Tensor) -> torch.Tensor:
        """GEM's projection g̃ = Gᵀv + g, v = argmin ½vᵀ(GGᵀ)v + (Gg)ᵀv s.t. v ≥ γ (the dual
        of min ½‖g̃ − g‖² s.t. G g̃ ≥ 0 with margin γ), as upstream, in float64."""
        memories = self.G.double()
        gradient = g.double().flatten()
        n = memories.shape[0]
        gram = (memories @ memories.T).cpu().numpy()
        gram = 0.5 * (gram + gram.T) + np.eye(n) * 1e-3
        linear = (memories @ gradient).cpu().numpy()
        v = qpsolvers.solve_qp(P=gram, q=linear, G=-np.eye(n), h=-np.full(n, self.memory_strength),
                               solver="quadprog")
        return (torch.from_numpy(v).to(memories) @ memories + gradient).float()


class ReplayTemplate(UnlearningTemplate):
    """A dense model with per-task buffers, unlearning by replay fine-tuning (approximate).

    Unlearning t runs ``n_retrain_iters`` replay steps (fresh optimizer of the learning type,
    every parameter trained) on the remaining tasks' buffers plus CE of B^t towards uniform
    predictions over t's classes (:meth:`ReplayObjective.steps` with ``forget=t``:
    class-stratified mini-batches, a whole one from B^t), then deletes B^t. Subclasses choose
    what learning adds.

    :param model: a task-incremental model: a
        :class:`~pall_avalanche.models.TaskIncrementalNet`, or an Avalanche ``MultiTaskModule``
        with a ``MultiHeadClassifier`` and ``n_tasks``
        (:func:`~pall_avalanche.models.multitask.task_network`).
    :param buffer_size: total episodic memory, split a priori over the model's T tasks
        (rebalanced as tasks arrive for a model without T: :class:`EpisodicMemory`).
    :param n_retrain_iters: N_f, fine-tuning steps per unlearning request.
    :param beta: weight of the logit (MSE) term in every replay loss (0: plain ER).
    :param replay: add the replay loss to every learning minibatch.
    """

    def __init__(self, *, model: nn.Module, buffer_size: int, n_retrain_iters: int = 50,
                 beta: float = 0.0, replay: bool = True, plugins=None, **kwargs) -> None:
        model = task_network(model, kwargs.get("n_tasks"))
        self.memory = EpisodicMemory(
            buffer_size=buffer_size, n_tasks=model.n_tasks,
            classes_per_task=model.classes_per_task if model.n_tasks else None,
            store_logits=beta > 0, delete_on_unlearning=False,
        )
        check_replay_settings(beta, n_retrain_iters)
        self.n_retrain_iters = n_retrain_iters
        self.replay = ReplayObjective(self.memory, beta)
        own = [self.memory, *([LearningReplayPlugin(self.replay)] if replay else [])]
        super().__init__(model=model, plugins=[*own, *self._method_plugins(),
                                               *(plugins or [])], **kwargs)

    def _method_plugins(self) -> list[UnlearningPlugin]:
        """Plugins a subclass adds after the buffer's (they see B^t filled)."""
        return []

    def stores_logits(self) -> bool:
        return self.memory.store_logits

    def _unlearn(self, task: int) -> None:
        if self.n_retrain_iters:
            self.replay.steps(self, self.active_tasks,
                              param_groups=self.optimizer_param_groups(),
                              n_iters=self.n_retrain_iters, forget=task)
        self.memory.drop(task)


class ER(ReplayTemplate):
    """Experience replay (Chaudhry et al., 2019): CE on a replay minibatch with every
    learning minibatch. Takes the arguments of :class:`ReplayTemplate` except ``beta`` and
    ``replay``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(beta=0.0, replay=True, **kwargs)


class DERpp(ReplayTemplate):
    """DER++ (Buzzega et al., 2020): β·MSE on stored logits plus 1.0·CE on buffer samples
    with every learning minibatch, and in unlearning's replay.

    :param beta: weight of the logit (MSE) term (the paper: 0.5).
    """

    def __init__(self, *, beta: float = 0.5, **kwargs) -> None:
        super().__init__(beta=beta, replay=True, **kwargs)


class GEM(ReplayTemplate):
    """Gradient episodic memory (Lopez-Paz & Ranzato, 2017): learning gradients projected so
    that no active task's memory loss increases (:class:`TaskGEMPlugin`); no replay loss.

    :param memory_strength: γ of GEM (0.5, Avalanche's and the GEM paper's value).
    """

    def __init__(self, *, memory_strength: float = 0.5, **kwargs) -> None:
        self._memory_strength = memory_strength
        super().__init__(beta=0.0, replay=False, **kwargs)

    def _method_plugins(self) -> list[UnlearningPlugin]:
        self.gem = TaskGEMPlugin(self.memory, self._memory_strength)
        return [self.gem]


class ERRetraining(ER):
    """ER (Retraining): learns like :class:`ER`; unlearning t deletes B^t, re-draws every
    parameter from its initialisation distribution and retrains the model from scratch on
    the remaining buffers, so no parameter trained with D^t or B^t survives (exact).

    :param retrain_epochs: epochs of retraining over the remaining buffers; an epoch is
        ``ceil(Σ_τ |B^τ| / batch_size)`` steps of task-balanced minibatches.
    """

    accepts_unlearned_task_samples = False
    permanence = ("nothing changes: the task's buffer stays, needed to retrain from scratch "
                  "when another task is unlearned")

    def __init__(self, *, retrain_epochs: int, **kwargs) -> None:
        if isinstance(retrain_epochs, bool) or not isinstance(retrain_epochs, int) \
                or retrain_epochs < 0:
            raise ValueError(f"retrain_epochs={retrain_epochs!r} must be an integer >= 0")
        self.retrain_epochs = retrain_epochs
        super().__init__(n_retrain_iters=0, **kwargs)

    @classmethod
    def retrains_from_scratch(cls) -> bool:
        return True

    def retrain_steps(self) -> int:
        """Steps of the retraining from scratch on the active tasks' buffers."""
        samples = sum(len(self.memory.buffers[t][0]) for t in self.active_tasks)
        return self.retrain_epochs * math.ceil(samples / self.train_mb_size)

    def _unlearn(self, task: int) -> None:
        self.memory.drop(task)
        reinitialize_(self.model)
        if self.active_tasks and self.retrain_epochs:
            self.replay.steps(self, self.active_tasks,
                              param_groups=self.optimizer_param_groups(),
                              n_iters=self.retrain_steps())


DECLARATIONS = (
    Method("er", ER, exact=False, label="ER",
           keys={"buffer_size": BUFFER_SIZE, "n_retrain_iters": N_RETRAIN_ITERS}),
    Method("derpp", DERpp, exact=False, label="DER++",
           keys={"buffer_size": BUFFER_SIZE, "n_retrain_iters": N_RETRAIN_ITERS, "beta": BETA}),
    Method("gem", GEM, exact=False, label="GEM",
           keys={"buffer_size": BUFFER_SIZE, "n_retrain_iters": N_RETRAIN_ITERS,
                 "memory_strength": Key(0.5, "GEM's margin γ (Avalanche's and the GEM "
                                        "paper's)", low=0)}),
    Method("er_retrain", ERRetraining, exact=True, label="ER (Retraining)",
           keys={"buffer_size": BUFFER_SIZE,
                 "retrain_epochs": Key(20, "epochs over the remaining buffers after an "
                                       "unlearning request (the paper gives none; as many "
                                       "as S-CIFAR10's learning request)", low=0)}),
)
