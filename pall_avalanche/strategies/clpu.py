"""CLPU-DER++ (Liu, Liu and Stone, "Continual Learning and Private Unlearning", CoLLAs 2022;
docs/fidelity.md, "The field").

A task learned *temporarily* (it may be unlearned later) trains a side network of its own, a
fresh draw of the architecture, with plain cross-entropy; its DER++ exemplars B^t (samples,
labels and the side network's logits) are stored. Unlearning a temporary task deletes its
side network and B^t: nothing else ever saw D^t, so the unlearning is exact and every other
task's predictions stay bit-identical. A task learned *permanently* trains the main network
with DER++ (β·MSE on stored logits plus CE, on the buffers of the permanent tasks only).
Making a temporary task permanent merges it into the main network: DER++ distillation from
its buffer (the side network's logits as targets, CE on its labels) beside the permanent
tasks' rehearsal, then the side network is deleted.

Memory: the main network plus one network per live temporary task (the model-size column,
:data:`~pall_avalanche.catalog.CLPU_SIZE`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from avalanche.models import MultiTaskModule
from avalanche.models.dynamic_modules import avalanche_model_adaptation
from torch import nn

from pall_avalanche.catalog import CLPU_SIZE
from pall_avalanche.catalog.declaration import Key, Method
from pall_avalanche.models import count_parameters
from pall_avalanche.models.grouped import forward_groups, stack_groups
from pall_avalanche.models.init import reinitialize_
from pall_avalanche.models.multihead import forward_by_task
from pall_avalanche.models.multitask import task_network
from pall_avalanche.rehearsal import EpisodicMemory, ReplayObjective
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate
from pall_avalanche.strategies.shared_keys import BETA, BUFFER_SIZE

__all__ = ["DECLARATIONS", "MERGE_LENGTHS", "CLPUDERpp", "CLPUNetworks", "PermanentReplayPlugin"]


#: How many steps a merge runs (:class:`CLPUDERpp`'s ``merge_length``).
MERGE_LENGTHS = ("task", "last_permanent")

class CLPUNetworks(MultiTaskModule):
    """The main network and one side network per temporary task, routed by task label (each
    sample of a mini-batch through its own task's network: its side network if it has one,
    else the main network).

    Only the networks :attr:`adapting` names adapt to an experience (heads grow, classes are
    taken): the main network for a task learned permanently; the task's side network and the
    main network for a task learned temporarily (the main one gets the task's head and
    classes, untrained, so that merging it later has an output to distil into).

    :param main: the main network (a task-incremental network taking ``(x, task_labels)``).
    """

    def __init__(self, main: nn.Module) -> None:
        super().__init__()
        self.main = main
        self.main._auto_adapt = False
        self.side = nn.ModuleDict()
        #: The networks the next adaptation adapts.
        self.adapting: tuple[nn.Module, ...] = ()

    def add_side(self, task: int) -> nn.Module:
        """Create ``task``'s side network: a fresh draw of the main network's architecture
        (CLPU's default, ``use_pretrain=False``)."""
        net = reinitialize_(copy.deepcopy(self.main)).requires_grad_(True)
        net._auto_adapt = False
        self.side[str(task)] = net
        return net

    def remove_side(self, task: int) -> None:
        del self.side[str(task)]

    def has_side(self, task: int) -> bool:
        return str(task) in self.side

    def network_of(self, task: int) -> nn.Module:
        """The network that answers ``task``."""
        return self.side[str(task)] if self.has_side(task) else self.main

    def adaptation(self, experience) -> None:
        super().adaptation(experience)
        for net in self.adapting:
            avalanche_model_adaptation(net, experience)

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        return forward_by_task(x, task_labels,
                               lambda xs, task, labels: self.network_of(task)(xs, labels))

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward(x, task_label)

    def forward_groups(self, x: torch.Tensor, tasks: Sequence[int]) -> torch.Tensor:
        """:func:`~pall_avalanche.models.grouped.forward_groups` of the main network when it
        answers every task (CLPU's replay of the permanent tasks), else one mini-batch after
        another."""
        if not any(self.has_side(t) for t in tasks):
            return forward_groups(self.main, x, tasks)
        return stack_groups([[self(batch, int(task)) for batch in group]
                             for group, task in zip(x, tasks, strict=True)])


class PermanentReplayPlugin(UnlearningPlugin):
    """While a task is learned permanently, adds DER++ rehearsal of the permanent tasks'
    buffers to every mini-batch: ``loss += replay_loss(P, batch_size // |P| samples per
    task)`` (β·MSE + CE, mean over P, the permanent tasks learned so far; CLPU's
    ``learn``). A temporary task's buffer never reaches the main network here.

    :param replay: the replay objective over the buffers.
    """

    def __init__(self, replay: ReplayObjective) -> None:
        super().__init__()
        self.replay = replay

    def before_backward(self, strategy: CLPUDERpp, **kwargs) -> None:
        tasks = strategy.permanent_tasks
        if strategy.learning_permanently and tasks:
            per_task = max(1, strategy.train_mb_size // len(tasks))
            strategy.loss = strategy.loss + self.replay.replay_loss(strategy, tasks, per_task)


class CLPUDERpp(UnlearningTemplate):
    """CLPU-DER++: temporary tasks in side networks (exact unlearning by deletion),
    permanent ones in the main network by DER++, merging on request (module docstring).

    :param model: the architecture (a task-incremental network:
        :func:`~pall_avalanche.models.multitask.task_network`); the main network is it, each
        side network a fresh draw of it.
    :param buffer_size: total episodic memory, split a priori over the model's T tasks
        (rebalanced as tasks arrive for a model without T); every task, temporary or
        permanent, keeps its B^t.
    :param beta: β, the weight of the logit (MSE) term of DER++ (CLPU's ``alpha``, 0.5; the
        CE term's weight is 1, CLPU's ``beta``).
    :param merge_length: how many steps a merge runs (:meth:`merge_steps`): ``"task"``, as
        many as one learning request of the merged task (epochs × its mini-batches; CLArena's
        count), or ``"last_permanent"``, as the CLPU authors' code counts (its ``n_iters``:
        the steps of the last permanent learning request, 1 before there is one; so under
        ``unlearnable_age``, where every task is temporary first, every merge runs one step).
    """

    table_size = CLPU_SIZE
    #: An unlearned task's samples (replayed by a plugin such as Avalanche's ``ReplayPlugin``)
    #: would reach the main network: refused.
    accepts_unlearned_task_samples = False
    permanence = ("its side network is merged into the main network by DER++ distillation "
                  "from its buffer (the side network's logits as targets), then deleted")
    checkpoint_attributes = (*UnlearningTemplate.checkpoint_attributes, "train_sizes",
                             "permanent_steps")

    def __init__(self, *, model: nn.Module, buffer_size: int, beta: float = 0.5,
                 merge_length: str = "task", plugins=None, **kwargs) -> None:
        if merge_length not in MERGE_LENGTHS:
            raise ValueError(f"merge_length={merge_length!r} is invalid; valid: "
                             f"{', '.join(MERGE_LENGTHS)}")
        self.merge_length = merge_length
        #: The steps of the last permanent learning request (1 before any): the merge length
        #: of ``merge_length="last_permanent"``.
        self.permanent_steps = 1
        main = task_network(model, kwargs.get("n_tasks"))
        self.memory = EpisodicMemory(
            buffer_size=buffer_size, n_tasks=main.n_tasks,
            classes_per_task=main.classes_per_task if main.n_tasks else None,
            store_logits=True, delete_on_unlearning=True)
        self.replay = ReplayObjective(self.memory, beta)
        #: task → |D^t|, the merge's number of steps (an epoch count of t's own loader).
        self.train_sizes: dict[int, int] = {}
        super().__init__(model=CLPUNetworks(main),
                         plugins=[self.memory, PermanentReplayPlugin(self.replay),
                                  *(plugins or [])], **kwargs)

    def model_adaptation(self, model=None):
        task = self.experience.task_label
        adapting: tuple[nn.Module, ...] = ()
        if self.is_training:
            if self.learning_permanently:
                adapting = (self.model.main,)
            else:
                side = (self.model.network_of(task) if self.model.has_side(task)
                        else self.model.add_side(task).to(self.device))
                adapting = (side, self.model.main)
        self.model.adapting = adapting
        try:
            return super().model_adaptation(model)
        finally:
            self.model.adapting = ()

    def optimizer_param_groups(self) -> list[dict]:
        net = self.model.network_of(self.experience.task_label)
        return [{"params": [p for p in net.parameters() if p.requires_grad]}]

    def _before_training_exp(self, **kwargs) -> None:
        super()._before_training_exp(**kwargs)
        self.train_sizes[self.experience.task_label] = len(self.experience.dataset)
        if self.learning_permanently:
            self.permanent_steps = self._request_steps(len(self.experience.dataset))

    def _request_steps(self, n_samples: int) -> int:
        """The steps of a learning request on ``n_samples`` samples: epochs × mini-batches."""
        return self.train_epochs * math.ceil(n_samples / self.train_mb_size)

    def _after_training_exp(self, **kwargs) -> None:
        """A side network is final once its task is learned (no later request trains it)."""
        task = self.experience.task_label
        if self.model.has_side(task):
            self.model.network_of(task).requires_grad_(False)
        super()._after_training_exp(**kwargs)

    def stores_logits(self) -> bool:
        return True

    def merge_steps(self, task: int) -> int:
        """The merge's steps (``merge_length``): as many as one learning request of ``task``
        takes (epochs × mini-batches of D^t), or those of the last permanent learning
        request (1 before any)."""
        if self.merge_length == "last_permanent":
            return self.permanent_steps
        return self._request_steps(self.train_sizes[task])

    def _make_permanent(self, task: int) -> None:
        """Merge ``task`` into the main network (CLPU's ``finally_learn``): delete its side
        network, then :meth:`merge_steps` steps of DER++ on B^t (a mini-batch of
        ``batch_size`` samples, the side network's logits as targets) plus the rehearsal of
        the permanent tasks (``batch_size // |P|`` samples of each)."""
        self.model.remove_side(task)
        permanent = list(self.permanent_tasks)
        per_task = max(1, self.train_mb_size // len(permanent)) if permanent else 0
        batch = self.train_mb_size

        def loss() -> torch.Tensor:
            total = self.replay.replay_loss(self, [task], batch)
            if permanent:
                total = total + self.replay.replay_loss(self, permanent, per_task)
            return total

        main = [p for p in self.model.main.parameters() if p.requires_grad]
        self.optimization_steps([{"params": main}], self.merge_steps(task), loss)

    def _unlearn(self, task: int) -> None:
        """Delete ``task``'s side network and its size (B^t is deleted by the buffer before
        this step)."""
        self.model.remove_side(task)
        self.train_sizes.pop(task, None)

    def checkpoint_state(self) -> dict:
        """The template's state plus which tasks have a side network (re-created, then
        loaded, on restore)."""
        return {**super().checkpoint_state(), "side": [int(key) for key in self.model.side]}

    def restore_checkpoint_state(self, state: dict) -> None:
        for key in list(self.model.side):
            self.model.remove_side(int(key))
        for task in state["side"]:
            self.model.add_side(task).to(self.device).requires_grad_(False)
        super().restore_checkpoint_state(state)

    def inference_size(self, n_tasks: int | None = None) -> tuple[int, int]:
        """(d × (1 + live side networks) float parameters, no mask bits).

        :param n_tasks: the size with that many side networks (default: the live ones).
        """
        side = len(self.model.side) if n_tasks is None else n_tasks
        return (1 + side) * count_parameters(self.model.main), 0


DECLARATIONS = (Method("clpu_derpp", CLPUDERpp, exact=True, label="CLPU-DER++", keys={
    "buffer_size": BUFFER_SIZE, "beta": BETA,
    "merge_length": Key("task", "a merge's steps: task (one learning request of the merged "
                        "task, CLArena's) or last_permanent (the last permanent learning "
                        "request's, 1 before any: the CLPU authors' code)",
                        choices=MERGE_LENGTHS)}),)
