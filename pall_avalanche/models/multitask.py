"""Avalanche's own task-incremental models as the strategies' networks.

The strategies need, of a task-incremental network: the number of tasks T, the classes per
task, the layers shared by all tasks (the Conv2d/Linear layers the subnetwork methods mask, and
the norm layers whose running statistics they keep per task), and each task's own output
entries. :class:`~pall_avalanche.models.TaskIncrementalNet` has them by construction (one
shared head whose row block t belongs to task t). :class:`MultiHeadNet` gives them to any
Avalanche ``MultiTaskModule`` whose output layer is one ``MultiHeadClassifier``
(``avalanche.models.MTSimpleMLP``, ``MTSimpleCNN``, ``as_multitask(model, "classifier")``, a
user's own module):

- task t's head is the classifier's head ``classifiers[str(t)]`` (weight and bias), a
  parameter set of task t alone (:meth:`MultiHeadNet.task_parameters`), like ViT's per-task
  tokens: trained only by its task, untouched by any other, re-drawn on unlearning by the exact
  methods (:meth:`MultiHeadNet.reset_task_parameters_`);
- every other module of the user's model is shared (:meth:`MultiHeadNet.backbone_modules`);
- the heads of all T tasks are created at construction, as ``MultiHeadClassifier.adaptation``
  would create them one by one (an ``IncrementalClassifier`` of ``initial_out_features`` units
  and an all-zero active-unit mask each), so every task can be evaluated from the start (a
  task never learned answers every sample with the same masked logits: chance) and the state
  dict has one layout whatever was learned (checkpoints restore into a model built alike).

The strategies wrap a user's model themselves (:func:`adapt_model`, :func:`task_network`);
the model's own forward pass runs unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLExperience
from avalanche.models import IncrementalClassifier, MultiHeadClassifier, MultiTaskModule
from torch import nn

from pall_avalanche.models.multihead import TaskIncrementalNet

__all__ = ["MultiHeadNet", "adapt_model", "task_network"]


class MultiHeadNet(MultiTaskModule):
    """An Avalanche ``MultiTaskModule`` with one ``MultiHeadClassifier``, with the heads of
    ``n_tasks`` tasks, as a task-incremental network of the strategies (module docstring).

    :param model: the user's model; its ``forward(x, task_labels)`` is the network's.
    :param n_tasks: the number of tasks T (a head is created for each of 0..T−1).
    """

    def __init__(self, model: MultiTaskModule, n_tasks: int) -> None:
        heads = [name for name, m in model.named_modules() if isinstance(m, MultiHeadClassifier)]
        if len(heads) != 1:
            raise ValueError(
                f"model {type(model).__name__} has {len(heads)} MultiHeadClassifier layers "
                f"({heads}); a task-incremental model needs exactly one output layer of that "
                "type (e.g. avalanche.models.as_multitask(model, 'classifier'))")
        if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
            raise ValueError(f"n_tasks={n_tasks!r} must be an integer >= 1 (the number of "
                             "tasks)")
        super().__init__()
        self.model = model
        #: The classifier's name inside ``model``.
        self.head_name = heads[0]
        classifier = self.classifier
        self.n_tasks = n_tasks
        #: Units of every head: the classifier's ``initial_out_features``.
        self.classes_per_task = classifier.starting_out_features
        device = classifier._adaptation_device
        for task in range(n_tasks):
            if str(task) not in classifier.classifiers:
                classifier.classifiers[str(task)] = IncrementalClassifier(
                    classifier.in_features, self.classes_per_task, masking=False,
                    auto_adapt=False).to(device)
                classifier.register_buffer(
                    f"active_units_T{task}",
                    torch.zeros(self.classes_per_task, dtype=torch.int8, device=device))

    @property
    def classifier(self) -> MultiHeadClassifier:
        """The user's ``MultiHeadClassifier``."""
        return self.model.get_submodule(self.head_name)

    def _qualified(self, name: str) -> str:
        """``name`` (relative to the user's model) relative to this network."""
        return f"model.{name}" if name else "model"

    def backbone_modules(self) -> Iterator[tuple[str, nn.Module]]:
        """(name, module) of every module of the user's model outside the classifier."""
        head = self.head_name
        for name, module in self.model.named_modules():
            if name != head and not name.startswith(f"{head}."):
                yield self._qualified(name), module

    def head(self, task: int) -> nn.Linear:
        """Task ``task``'s output layer."""
        return self.classifier.classifiers[str(task)].classifier

    def head_entries(self, task: int) -> dict[str, torch.Tensor]:
        """Name → bool mask of ``task``'s output entries: all of its head's weight and bias."""
        prefix = self._qualified(f"{self.head_name}.classifiers.{task}.classifier")
        return {f"{prefix}.{attr}": torch.ones_like(p, dtype=torch.bool)
                for attr, p in self.head(task).named_parameters()}

    def task_parameters(self, task: int) -> list[nn.Parameter]:
        """The parameters only ``task`` uses: its head's weight and bias."""
        return list(self.head(task).parameters())

    @torch.no_grad()
    def reset_task_parameters_(self, task: int) -> None:
        """Re-draw ``task``'s head from its initialisation distribution and clear its active
        units: the head of a task never learned."""
        self.head(task).reset_parameters()
        getattr(self.classifier, f"active_units_T{task}").zero_()

    def adaptation(self, experience: CLExperience) -> None:
        """Refuse an experience whose task has no head or whose classes do not fit one (the
        classifier would grow a head, and the state dict would change layout)."""
        super().adaptation(experience)
        for task in set(experience.task_labels):
            if not 0 <= task < self.n_tasks:
                raise ValueError(f"task {task} is outside the {self.n_tasks} tasks this model "
                                 f"has heads for; pass n_tasks={task + 1} or more")
        top = max(experience.classes_in_this_experience)
        if top >= self.classes_per_task:
            raise ValueError(
                f"class {top} does not fit the {self.classes_per_task} units of a "
                f"MultiHeadClassifier head ({self.head_name!r}); build it with "
                f"initial_out_features={top + 1} or more")

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        return self.model(x, task_labels)

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.model(x, task_label)


def adapt_model(model: nn.Module, n_tasks: int | None = None) -> nn.Module:
    """``model`` wrapped in :class:`MultiHeadNet` if it holds a ``MultiHeadClassifier`` and is
    not wrapped yet; any other model as it is.

    :raises ValueError: the model needs wrapping and ``n_tasks`` is not given.
    """
    modules = list(model.modules())
    if any(isinstance(m, MultiHeadNet) for m in modules) or not any(
            isinstance(m, MultiHeadClassifier) for m in modules):
        return model
    if n_tasks is None:
        raise ValueError(f"model {type(model).__name__} has a MultiHeadClassifier, which grows "
                         "one head per task: pass n_tasks=T (the number of tasks) to the "
                         "strategy")
    return MultiHeadNet(model, n_tasks)


def task_network(model: nn.Module, n_tasks: int | None = None
                 ) -> TaskIncrementalNet | MultiHeadNet:
    """The task-incremental network of ``model`` (:func:`adapt_model`): a
    :class:`~pall_avalanche.models.TaskIncrementalNet` or a :class:`MultiHeadNet`.

    :param n_tasks: the number of tasks T (needed to wrap a model; must match a wrapped one).
    :raises ValueError: ``model`` is neither, or has heads for another number of tasks.
    """
    net = adapt_model(model, n_tasks)
    if not isinstance(net, (TaskIncrementalNet, MultiHeadNet)):
        raise ValueError(
            f"model {type(model).__name__} has no per-task heads: use a TaskIncrementalNet "
            "(pall_avalanche.models.build_model) or an Avalanche MultiTaskModule with a "
            "MultiHeadClassifier (e.g. avalanche.models.as_multitask(model, 'classifier'))")
    if n_tasks is not None and n_tasks != net.n_tasks:
        raise ValueError(f"n_tasks={n_tasks}, but the model has heads for {net.n_tasks} tasks; "
                         "pass the same number")
    return net
