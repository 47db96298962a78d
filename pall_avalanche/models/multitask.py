"""Avalanche's own task-incremental models as the strategies' networks.

The strategies need, of a task-incremental network: its tasks' outputs, the classes of each,
the layers shared by all tasks (the Conv2d/Linear layers the subnetwork methods mask, and the
norm layers whose running statistics they keep per task), and each task's own output entries.
:class:`~pall_avalanche.models.TaskIncrementalNet` has them by construction (one shared head
whose row block t belongs to task t). :class:`MultiHeadNet` gives them to any Avalanche
``MultiTaskModule`` whose output layer is one ``MultiHeadClassifier``
(``avalanche.models.MTSimpleMLP``, ``MTSimpleCNN``, ``as_multitask(model, "classifier")``, a
user's own module), with Avalanche's own head semantics:

- task t's head is the classifier's head ``classifiers[str(t)]`` (weight and bias), created and
  grown by Avalanche's ``MultiHeadClassifier.adaptation`` to the classes t's training
  experience brings (original class ids, any number of classes per task), the units t does not
  use masked; it is a parameter set of task t alone (:meth:`MultiHeadNet.task_parameters`),
  like ViT's per-task tokens: trained by its task's samples only, re-drawn with its active units
  cleared on unlearning by the exact methods (:meth:`MultiHeadNet.reset_task_parameters_`);
- every other module of the user's model is shared (:meth:`MultiHeadNet.backbone_modules`);
- heads are created and grown in training only: evaluating a task without a head answers
  every sample with masked logits (as Avalanche's fresh, all-masked head would: class 0),
  without creating one, so evaluating never draws random numbers or changes the state dict;
- with ``n_tasks=T`` (the paper's a-priori T) the heads of all T tasks exist from the start;
  without it they appear as tasks arrive, as in Avalanche. A state dict restores into a model
  built alike whatever heads it has (:meth:`MultiHeadNet.load_state_dict` grows them first).

A model without per-task heads (class-incremental, e.g. ``SimpleMLP``) is refused with
:class:`TaskIncrementalRequired`, one line shared by every strategy.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLExperience
from avalanche.models import IncrementalClassifier, MultiHeadClassifier, MultiTaskModule
from torch import nn

from pall_avalanche.models.multihead import (
    TaskIncrementalNet,
    evaluated_widths,
    forward_by_task,
    pad_logits,
)

__all__ = ["MultiHeadNet", "TaskIncrementalRequired", "adapt_model", "task_network"]

#: Where a reader finds how to build a task-incremental set-up.
_SEE = "see docs/tutorials/avalanche.md, 'PALL in your own Avalanche script'"


class TaskIncrementalRequired(ValueError):
    """The strategies are task-incremental: a model without per-task heads, or a stream
    whose learning experiences repeat a task label (class-incremental input), is refused with
    one line, the same for every strategy.

    :param what: what was given (``"model SimpleMLP"``, ``"a stream whose experiences ..."``).
    """

    def __init__(self, what: str) -> None:
        super().__init__(
            f"task-incremental: needs task labels and a multi-head model; got {what} (use a "
            "benchmark with task labels, e.g. nc_benchmark(task_labels=True) or "
            "SplitMNIST(return_task_id=True), and a TaskIncrementalNet or an Avalanche "
            "MultiTaskModule with one MultiHeadClassifier: MTSimpleMLP, MTSimpleCNN, "
            f"as_multitask(model, 'classifier')); {_SEE}")


def _classifier_prefix(net: MultiHeadNet) -> str:
    return f"model.{net.head_name}."


class MultiHeadNet(MultiTaskModule):
    """An Avalanche ``MultiTaskModule`` with one ``MultiHeadClassifier`` as a task-incremental
    network of the strategies (module docstring).

    :param model: the user's model; its ``forward(x, task)`` is the network's, task by task.
    :param n_tasks: the number of tasks T: a head is created for each of 0..T−1 at once, and
        a task outside them is refused; ``None``: heads appear as tasks arrive.
    """

    def __init__(self, model: MultiTaskModule, n_tasks: int | None = None) -> None:
        heads = [name for name, m in model.named_modules() if isinstance(m, MultiHeadClassifier)]
        if len(heads) != 1:
            raise ValueError(
                f"model {type(model).__name__} has {len(heads)} MultiHeadClassifier layers "
                f"({heads}); a task-incremental model needs exactly one output layer of that "
                "type (e.g. avalanche.models.as_multitask(model, 'classifier'))")
        if n_tasks is not None and (isinstance(n_tasks, bool) or not isinstance(n_tasks, int)
                                    or n_tasks < 1):
            raise ValueError(f"n_tasks={n_tasks!r} must be an integer >= 1 (the number of "
                             "tasks) or None")
        super().__init__()
        self.model = model
        #: The classifier's name inside ``model``.
        self.head_name = heads[0]
        classifier = self.classifier
        self.n_tasks = n_tasks
        #: Units of a new head: the classifier's ``initial_out_features``.
        self.classes_per_task = classifier.starting_out_features
        for task in range(n_tasks or 0):
            if str(task) not in classifier.classifiers:
                self._new_head(task, self.classes_per_task)
        #: task → the logits' width its evaluation experiences need (:func:`evaluated_widths`)
        self._widths: dict[int, int] = {}
        self._register_load_state_dict_pre_hook(self._heads_from_state)

    @property
    def classifier(self) -> MultiHeadClassifier:
        """The user's ``MultiHeadClassifier``."""
        return self.model.get_submodule(self.head_name)

    def _new_head(self, task: int, units: int) -> None:
        """An ``IncrementalClassifier`` of ``units`` units for ``task`` with an all-zero
        active-unit mask, as ``MultiHeadClassifier.adaptation`` creates one (and grows it)."""
        classifier = self.classifier
        device = classifier._adaptation_device
        head = IncrementalClassifier(classifier.in_features, self.classes_per_task,
                                     masking=False, auto_adapt=False)
        if units != self.classes_per_task:      # grown, as its adaptation grows it
            head.classifier = nn.Linear(classifier.in_features, units)
        classifier.classifiers[str(task)] = head.to(device)
        name = f"active_units_T{task}"
        units_mask = torch.zeros(units, dtype=torch.int8, device=device)
        if name in classifier._buffers:
            classifier._buffers[name] = units_mask
        else:
            classifier.register_buffer(name, units_mask)

    def _qualified(self, name: str) -> str:
        """``name`` (relative to the user's model) relative to this network."""
        return f"model.{name}" if name else "model"

    def known_tasks(self) -> list[int]:
        """The tasks with a head, in increasing order."""
        return sorted(int(t) for t in self.classifier.classifiers)

    def backbone_modules(self) -> Iterator[tuple[str, nn.Module]]:
        """(name, module) of every module of the user's model outside the classifier."""
        head = self.head_name
        for name, module in self.model.named_modules():
            if name != head and not name.startswith(f"{head}."):
                yield self._qualified(name), module

    def has_head(self, task: int) -> bool:
        """Whether task ``task``'s head exists (it is created when the task trains)."""
        return str(task) in self.classifier.classifiers

    def head(self, task: int) -> nn.Linear:
        """Task ``task``'s output layer."""
        return self.classifier.classifiers[str(task)].classifier

    def head_entries(self, task: int) -> dict[str, torch.Tensor]:
        """Name → bool mask of ``task``'s output entries: all of its head's weight and bias."""
        prefix = self._qualified(f"{self.head_name}.classifiers.{task}.classifier")
        return {f"{prefix}.{attr}": torch.ones_like(p, dtype=torch.bool)
                for attr, p in self.head(task).named_parameters()}

    def task_parameters(self, task: int) -> list[nn.Parameter]:
        """The parameters only ``task`` uses: its head's weight and bias (none without a
        head)."""
        return list(self.head(task).parameters()) if self.has_head(task) else []

    def task_tokens(self, task: int) -> list[nn.Parameter]:
        """None: a task's own parameters here are its head, its output layer, which no other
        task's retraining trains (:meth:`~pall_avalanche.models.TaskIncrementalNet.
        task_tokens`)."""
        return []

    def task_classes(self, task: int) -> tuple[int, ...]:
        """The class ids of ``task``: the active units of its head."""
        if not self.has_head(task):
            return ()
        units = getattr(self.classifier, f"active_units_T{task}")
        return tuple(int(u) for u in units.nonzero().flatten())

    @torch.no_grad()
    def reset_task_parameters_(self, task: int) -> None:
        """Re-draw ``task``'s head from its initialisation distribution and clear its active
        units: the head of a task never learned."""
        if self.has_head(task):
            self.head(task).reset_parameters()
            getattr(self.classifier, f"active_units_T{task}").zero_()

    def adaptation(self, experience: CLExperience) -> None:
        """Refuse, in training, a task outside the ``n_tasks`` heads; Avalanche's
        ``MultiHeadClassifier.adaptation`` (reached by Avalanche's recursive adaptation, in
        training only: the strategies do not adapt the model to evaluation experiences) then
        creates or grows the task's head and marks its classes active."""
        super().adaptation(experience)
        if not self.training or self.n_tasks is None:
            return
        for task in set(experience.task_labels):
            if not 0 <= task < self.n_tasks:
                raise ValueError(f"task {task} is outside the {self.n_tasks} tasks this model "
                                 f"has heads for; pass n_tasks={task + 1} or more, or none")

    def evaluation_adaptation(self, experience: CLExperience) -> None:
        """An evaluation experience: no head is created or grown (that would draw random
        numbers); only the width its task's logits need is noted, masked beyond the head."""
        evaluated_widths(self._widths, experience)

    def _heads_from_state(self, state_dict, prefix, *args) -> None:
        """Before loading a state dict: the heads it holds, each of its size, and no other
        (so a model whose heads grew restores into one built alike)."""
        head_prefix = prefix + _classifier_prefix(self)
        sizes = {}
        for key, value in state_dict.items():
            rest = key[len(head_prefix):] if key.startswith(head_prefix) else ""
            if rest.startswith("classifiers.") and rest.endswith(".classifier.weight"):
                sizes[int(rest.split(".")[1])] = value.shape[0]
        if not sizes:
            return
        classifier = self.classifier
        for task in self.known_tasks():
            if task not in sizes:
                del classifier.classifiers[str(task)]
                classifier._buffers.pop(f"active_units_T{task}", None)
        for task, units in sizes.items():
            if not self.has_head(task) or self.head(task).out_features != units:
                self._new_head(task, units)

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        """The user's model, task by task; a task without a head gets all-masked logits."""
        if not isinstance(task_labels, int):
            return forward_by_task(x, task_labels, lambda xs, task, _: self.forward(xs, task))
        width = self._widths.get(task_labels, 0)
        if not self.has_head(task_labels):
            classifier = self.classifier
            return torch.full((len(x), max(classifier.starting_out_features, width)),
                              float(classifier.mask_value), device=x.device)
        return pad_logits(self.model(x, task_labels), width)

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward(x, task_label)


def adapt_model(model: nn.Module, n_tasks: int | None = None) -> nn.Module:
    """``model`` wrapped in :class:`MultiHeadNet` if it holds a ``MultiHeadClassifier`` and is
    not wrapped yet; any other model as it is."""
    modules = list(model.modules())
    if any(isinstance(m, MultiHeadNet) for m in modules) or not any(
            isinstance(m, MultiHeadClassifier) for m in modules):
        return model
    return MultiHeadNet(model, n_tasks)


def task_network(model: nn.Module, n_tasks: int | None = None
                 ) -> TaskIncrementalNet | MultiHeadNet:
    """The task-incremental network of ``model`` (:func:`adapt_model`): a
    :class:`~pall_avalanche.models.TaskIncrementalNet` or a :class:`MultiHeadNet`.

    :param n_tasks: the number of tasks T (must match a network that knows its T).
    :raises TaskIncrementalRequired: ``model`` is neither.
    :raises ValueError: the model has heads for another number of tasks.
    """
    net = adapt_model(model, n_tasks)
    if not isinstance(net, (TaskIncrementalNet, MultiHeadNet)):
        raise TaskIncrementalRequired(f"model {type(model).__name__}")
    if n_tasks is not None and net.n_tasks is not None and n_tasks != net.n_tasks:
        raise ValueError(f"n_tasks={n_tasks}, but the model has heads for {net.n_tasks} tasks; "
                         "pass the same number")
    return net
