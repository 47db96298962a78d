"""Independent (= CLPU in this setting): a fresh model per task, deleted on unlearning."""

from __future__ import annotations

import copy

import torch
from avalanche.models import MultiTaskModule
from avalanche.models.dynamic_modules import avalanche_model_adaptation
from torch import nn

from pall_avalanche.catalog import INDEPENDENT_SIZE
from pall_avalanche.catalog.declaration import Method
from pall_avalanche.models import count_parameters
from pall_avalanche.models.init import reinitialize_
from pall_avalanche.models.multihead import forward_by_task
from pall_avalanche.models.multitask import task_network
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["DECLARATIONS", "Independent", "IndependentModels"]


class IndependentModels(MultiTaskModule):
    """One model per learned task, routed by task label (each sample of a mini-batch to its
    own task's model).

    A task without a model (never learned or unlearned) is answered by ``untrained``, a fresh
    draw of the architecture that is never trained: chance-level predictions. It is the same
    for every such task and is not part of the inference size.

    Only the model of the task being learned adapts to its experience (its head grows, its
    classes are taken: :meth:`adaptation`); the others are not touched.

    :param template: the architecture (a task-incremental network taking
        ``(x, task_labels)``).
    """

    def __init__(self, template: nn.Module) -> None:
        super().__init__()
        self.untrained = reinitialize_(copy.deepcopy(template))
        self.untrained.requires_grad_(False)
        self.untrained._auto_adapt = False
        self.task_models = nn.ModuleDict()
        #: The task whose model the next adaptation adapts.
        self.adapting: int | None = None

    def add_task(self, task: int) -> nn.Module:
        """Create the fresh model of ``task`` (a new draw of the initial distribution)."""
        model = reinitialize_(copy.deepcopy(self.untrained)).requires_grad_(True)
        model._auto_adapt = False
        self.task_models[str(task)] = model
        return model

    def adaptation(self, experience) -> None:
        """Adapt the model of the task being learned (:attr:`adapting`) to ``experience``."""
        super().adaptation(experience)
        if self.adapting is not None:
            avalanche_model_adaptation(self.task_models[str(self.adapting)], experience)

    def remove_task(self, task: int) -> None:
        """Delete ``task``'s model (unlearning: it answers as the untrained one again)."""
        del self.task_models[str(task)]

    def model_for(self, task: int) -> nn.Module:
        """The model of ``task``, or the untrained one if the task has none."""
        key = str(task)
        if key in self.task_models:
            return self.task_models[key]
        return self.untrained

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        return forward_by_task(x, task_labels,
                               lambda xs, task, labels: self.model_for(task)(xs, labels))

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward(x, task_label)


class Independent(UnlearningTemplate):
    """Trains a fresh copy of ``model`` (re-initialised) for every task and deletes it on
    unlearning: exact unlearning, no forgetting, inference size d × |Ω|.

    :param model: the architecture, wrapped in :class:`IndependentModels` (a
        task-incremental network: :func:`~pall_avalanche.models.multitask.task_network`).
    """

    table_size = INDEPENDENT_SIZE
    permanence = "nothing changes: the task's own model stays"

    def __init__(self, *, model: nn.Module, **kwargs) -> None:
        super().__init__(model=IndependentModels(task_network(model, kwargs.get("n_tasks"))),
                         **kwargs)

    def model_adaptation(self, model=None):
        task = self.experience.task_label
        if self.is_training and str(task) not in self.model.task_models:
            self.model.add_task(task).to(self.device)
        self.model.adapting = task if self.is_training else None
        try:
            return super().model_adaptation(model)
        finally:
            self.model.adapting = None

    def optimizer_param_groups(self) -> list[dict]:
        task_model = self.model.model_for(self.experience.task_label)
        return [{"params": list(task_model.parameters())}]

    def _after_training_exp(self, **kwargs) -> None:
        """The task's model is final: no later request trains it (a sample of this task in
        a later mini-batch, e.g. replayed by a plugin, goes through it without training it)."""
        self.model.model_for(self.experience.task_label).requires_grad_(False)
        super()._after_training_exp(**kwargs)

    def _unlearn(self, task: int) -> None:
        self.model.remove_task(task)

    def checkpoint_state(self) -> dict:
        """The template's state plus which tasks have a model (they are re-created, then
        loaded, on restore)."""
        return {**super().checkpoint_state(),
                "task_models": [int(key) for key in self.model.task_models]}

    def restore_checkpoint_state(self, state: dict) -> None:
        for key in list(self.model.task_models):
            self.model.remove_task(int(key))
        for task in state["task_models"]:
            self.model.add_task(task).to(self.device).requires_grad_(False)
        super().restore_checkpoint_state(state)

    def inference_size(self, n_tasks: int | None = None) -> tuple[int, int]:
        """(d × |Ω| float parameters, no mask bits).

        :param n_tasks: the size with that many task models (default: the ones held now).
        """
        if n_tasks is None:
            return count_parameters(self.model.task_models), 0
        return n_tasks * count_parameters(self.model.untrained), 0


DECLARATIONS = (Method("independent", Independent, exact=True, label="Independent"),)
