"""Task-incremental output: one backbone, one bias-free head whose block t belongs to task t.

The head has ``n_tasks * classes_per_task`` units; a sample of task t sees only the logits of
block t (other tasks' logits never enter its softmax), which is the reference's multi-head
layout. The network is an Avalanche ``MultiTaskModule``, so ``avalanche_forward(model, x, t)``
and every Avalanche strategy pass the task labels through.

Class ids. A task whose classes are ``0 .. classes_per_task − 1`` (the paper's benchmarks, every
benchmark built with ``class_ids_from_zero_in_each_exp=True``) gets its block as its logits. A
task with other class ids, or fewer classes than a block has units (Avalanche's
``nc_benchmark(task_labels=True)`` keeps the original ids; tasks of 4, 2, 2, 2 classes), gets
them as Avalanche's ``MultiHeadClassifier`` would give them: logits of width max(class id) + 1,
unit j of its block at its j-th class id (sorted), every other unit masked with
:data:`MASK_VALUE`. The model learns a task's classes from its training experience
(:meth:`TaskIncrementalNet.adaptation`, as Avalanche's models do) and keeps them in a buffer
``classes_T<t>`` (only for tasks that need one, so the state dict of a paper benchmark's model
is unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLExperience
from avalanche.models import MultiTaskModule
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from pall_avalanche.models.grouped import MASK_VALUE, batchable, stack_groups, vmap_backbone

__all__ = ["MASK_VALUE", "TaskIncrementalNet", "evaluated_widths", "forward_by_task",
           "pad_logits"]

#: How many index sets (one per combination of tasks, class ids and device) a network keeps
#: for :meth:`TaskIncrementalNet.forward_groups`.
_GROUP_INDEX_CACHE = 8


def pad_logits(logits: torch.Tensor, width: int) -> torch.Tensor:
    """``logits`` widened to ``width`` units with :data:`MASK_VALUE` (unchanged when wide
    enough)."""
    if logits.shape[1] >= width:
        return logits
    return torch.cat([logits, logits.new_full((len(logits), width - logits.shape[1]),
                                              MASK_VALUE)], dim=1)


def evaluated_widths(widths: dict[int, int], experience: CLExperience) -> None:
    """Note in ``widths`` (task → units) how wide an evaluation experience of one task needs
    its task's logits: its largest class id + 1 (Avalanche grows a head that far in
    evaluation, every new unit masked)."""
    labels = list(experience.task_labels)
    classes = list(getattr(experience, "classes_in_this_experience", None) or [])
    if len(labels) == 1 and classes:
        task = int(labels[0])
        widths[task] = max(widths.get(task, 0), int(max(classes)) + 1)


def forward_by_task(x: torch.Tensor, task_labels: torch.Tensor | int,
                    forward_one: Callable[[torch.Tensor, int, torch.Tensor | int], torch.Tensor]
                    ) -> torch.Tensor:
    """Run ``forward_one(x_task, task, labels)`` once per task present in the mini-batch and
    reassemble the outputs in the original order (one call when the batch has one task). Tasks
    whose logits are narrower than the widest are padded with :data:`MASK_VALUE` (a unit the
    task does not have, masked as Avalanche masks the units a head does not use)."""
    tasks = [task_labels] if isinstance(task_labels, int) else task_labels.unique().tolist()
    if len(tasks) == 1:
        return forward_one(x, int(tasks[0]), task_labels)
    parts = []
    for task in tasks:
        rows = task_labels == task
        parts.append((rows, forward_one(x[rows], int(task), int(task))))
    width = max(logits.shape[1] for _, logits in parts)
    out = parts[0][1].new_full((len(x), width), MASK_VALUE)
    for rows, logits in parts:
        out[rows, :logits.shape[1]] = logits
    return out


class TaskIncrementalNet(MultiTaskModule):
    """``backbone`` (x → features) followed by a per-task block of a shared linear head.

    :param backbone: maps inputs to ``(batch, feature_dim)`` features. A backbone with a true
        ``task_aware`` attribute is called as ``backbone(x, task_labels)`` (e.g. ViT with
        per-task tokens).
    :param feature_dim: width of the features.
    :param n_tasks: number of tasks T.
    :param classes_per_task: units of each head block: at least the classes of any task.
    """

    def __init__(self, backbone: nn.Module, feature_dim: int, n_tasks: int,
                 classes_per_task: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(feature_dim, n_tasks * classes_per_task, bias=False)
        self.n_tasks = n_tasks
        self.classes_per_task = classes_per_task
        #: task → its class ids (sorted), for tasks whose ids are not 0 .. classes_per_task − 1
        self._classes: dict[int, tuple[int, ...]] = {}
        #: task → the logits' width its evaluation experiences need (:func:`evaluated_widths`)
        self._widths: dict[int, int] = {}
        #: (tasks, class ids, widths, device) → the indices of :meth:`forward_groups`
        self._group_indices: dict[tuple, tuple[torch.Tensor, torch.Tensor | None, int]] = {}
        self._register_load_state_dict_pre_hook(self._classes_from_state)

    def head_rows(self, task: int) -> slice:
        """The rows of ``head.weight`` that belong to ``task``."""
        return slice(task * self.classes_per_task, (task + 1) * self.classes_per_task)

    def head_entries(self, task: int) -> dict[str, torch.Tensor]:
        """Name → bool mask of ``task``'s output entries: its rows of ``head.weight``."""
        rows = torch.zeros_like(self.head.weight, dtype=torch.bool)
        rows[self.head_rows(task)] = True
        return {"head.weight": rows}

    def known_tasks(self) -> list[int]:
        """The tasks the network has an output for: all T."""
        return list(range(self.n_tasks))

    def backbone_modules(self) -> Iterator[tuple[str, nn.Module]]:
        """(name, module) of every module of the backbone, the modules all tasks share."""
        for name, module in self.backbone.named_modules():
            yield (f"backbone.{name}" if name else "backbone"), module

    def task_parameters(self, task: int) -> list[nn.Parameter]:
        """Backbone parameters only ``task`` uses (e.g. ViT's per-task tokens); the head rows
        are not included (they are masked, see :meth:`head_rows`)."""
        own = getattr(self.backbone, "task_parameters", None)
        return own(task) if own is not None else []

    def task_tokens(self, task: int) -> list[nn.Parameter]:
        """``task``'s own parameters inside the shared backbone (ViT's per-task CLS token and
        positional embedding; none for other backbones): what PALL's retraining may train for
        a remaining task besides the shared weights."""
        return self.task_parameters(task)

    def reset_task_parameters_(self, task: int) -> None:
        """Return ``task`` to its never-learned state: re-draw the parameters of
        :meth:`task_parameters` from their initialisation and forget its class ids."""
        reset = getattr(self.backbone, "reset_task_parameters_", None)
        if reset is not None and self.task_parameters(task):
            reset(task)
        self.forget_task_classes(task)

    # ------------------------------------------------------------------ class ids
    def task_classes(self, task: int) -> tuple[int, ...]:
        """The class ids of ``task``'s block units, in unit order (``0 .. classes_per_task − 1``
        unless the task's training experience had others)."""
        return self._classes.get(task, tuple(range(self.classes_per_task)))

    def set_task_classes(self, task: int, classes) -> None:
        """Give ``task``'s block the class ids ``classes`` (unit j → the j-th smallest id).

        :raises ValueError: more classes than a block has units, or a negative id.
        """
        classes = tuple(sorted({int(c) for c in classes}))
        if len(classes) > self.classes_per_task or (classes and classes[0] < 0):
            raise ValueError(
                f"task {task} has classes {list(classes)}: {len(classes)} classes, more than "
                f"the {self.classes_per_task} units of a head block (or a negative id); build "
                f"the model with classes_per_task={len(classes)} or more")
        name = f"classes_T{task}"
        if classes == tuple(range(self.classes_per_task)):
            self.forget_task_classes(task)
            return
        self._classes[task] = classes
        buffer = torch.tensor(classes, dtype=torch.long, device=self.head.weight.device)
        if name in self._buffers:
            self._buffers[name] = buffer
        else:
            self.register_buffer(name, buffer)

    def forget_task_classes(self, task: int) -> None:
        """``task``'s block gets the default ids again (a task never learned)."""
        self._classes.pop(task, None)
        self._buffers.pop(f"classes_T{task}", None)

    def adaptation(self, experience: CLExperience) -> None:
        """Avalanche's adaptation; in training, also take the experience's class ids as its
        task's (:meth:`set_task_classes`)."""
        super().adaptation(experience)
        labels = list(experience.task_labels)
        if self.training and len(labels) == 1:
            self.set_task_classes(int(labels[0]), experience.classes_in_this_experience)

    def evaluation_adaptation(self, experience: CLExperience) -> None:
        """An evaluation experience: only the width its task's logits need is noted (a
        never-learned task evaluated on class ids beyond its block gets masked units)."""
        evaluated_widths(self._widths, experience)

    def _classes_from_state(self, state_dict, prefix, *args) -> None:
        """Before loading a state dict: the class ids of its ``classes_T<t>`` buffers."""
        for task in list(self._classes):
            self.forget_task_classes(task)
        for key, value in state_dict.items():
            if key.startswith(f"{prefix}classes_T") and "." not in key[len(prefix):]:
                self.set_task_classes(int(key[len(prefix) + len("classes_T"):]), value.tolist())

    # ------------------------------------------------------------------ forward
    def features(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        """The backbone's features of ``x`` (a task-aware backbone also gets the task
        labels)."""
        if getattr(self.backbone, "task_aware", False):
            return self.backbone(x, task_labels)
        return self.backbone(x)

    def head_logits(self, features: torch.Tensor, task: int) -> torch.Tensor:
        """``task``'s logits from the backbone's features: its block, placed at its class ids
        (module docstring)."""
        block = F.linear(features, self.head.weight[self.head_rows(task)])
        classes = self._classes.get(task)
        if classes is None:
            return pad_logits(block, self._widths.get(task, 0))
        out = block.new_full((len(block), max(classes[-1] + 1, self._widths.get(task, 0))),
                             MASK_VALUE)
        out[:, getattr(self, f"classes_T{task}")] = block[:, :len(classes)]
        return out

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        """Logits of each sample's own task (:meth:`head_logits`; a mini-batch of several
        tasks is padded to the widest with :data:`MASK_VALUE`)."""
        if isinstance(task_labels, int):
            return self.head_logits(self.features(x, task_labels), task_labels)
        if task_labels.numel() and bool((task_labels == task_labels[0]).all()):
            task = int(task_labels[0])
            return self.head_logits(self.features(x, task_labels), task)
        if self._classes:
            return forward_by_task(x, task_labels, lambda xs, task, _: self.forward(xs, task))
        logits = self.head(self.features(x, task_labels)).view(len(x), self.n_tasks,
                                                               self.classes_per_task)
        return logits[torch.arange(len(x), device=x.device), task_labels]

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward(x, task_label)

    def forward_groups(self, x: torch.Tensor, tasks: Sequence[int], *,
                       parameters: Mapping[str, torch.Tensor] | None = None,
                       statistics: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """The logits of ``x[g, j]`` through task ``tasks[g]`` for every group g and mini-batch
        j, ``(G, r, k, *input) → (G, r, k, W)``, in one batched pass: the backbone under
        ``vmap`` (:func:`~pall_avalanche.models.grouped.vmap_backbone`), the heads as one
        batched product of each task's rows, the class ids placed as :meth:`head_logits`
        places them (widths padded to the widest with :data:`MASK_VALUE`). A backbone that
        cannot run under ``vmap`` (:func:`~pall_avalanche.models.grouped.batchable`) runs the
        mini-batches one by one.

        A task-aware backbone is called with the first group's task, each group's own task
        parameters (:meth:`task_parameters`: ViT's tokens) substituted for it: a task-aware
        backbone's passes differ by task through those parameters only.

        :param parameters: backbone parameters (names as in this network's ``state_dict``)
            substituted per group, each stacked over the G groups (a subnetwork's masked
            weights).
        :param statistics: the running statistics of the backbone's norm layers (names as in
            the ``state_dict``) substituted per group, stacked over the groups; what a
            train-mode pass adds to them is dropped. ``None``: the backbone's own, updated as
            the passes one after another would update them.
        """
        if not batchable(self.backbone):
            return stack_groups([[functional_call(
                self, {**{n: v[g] for n, v in (parameters or {}).items()},
                       **{n: v[g] for n, v in (statistics or {}).items()}},
                (batch, int(task)), strict=False) for batch in group]
                for g, (group, task) in enumerate(zip(x, tasks, strict=True))])
        substituted = {name.removeprefix("backbone."): value
                       for name, value in (parameters or {}).items()}
        aware = getattr(self.backbone, "task_aware", False)
        own = self.task_parameters(tasks[0]) if aware else []
        if own:
            names = {id(p): name for name, p in self.backbone.named_parameters()}
            for slot, parameter in enumerate(own):
                substituted[names[id(parameter)]] = torch.stack(
                    [self.task_parameters(t)[slot] for t in tasks])
        features = vmap_backbone(
            self.backbone, x, parameters=substituted, arguments=(tasks[0],) if aware else (),
            statistics=None if statistics is None else {
                name.removeprefix("backbone."): value for name, value in statistics.items()})
        groups, repeats = x.shape[:2]
        logits = self.head_groups(features.flatten(1, 2), tasks)
        return logits.view(groups, repeats, -1, logits.shape[-1])

    def head_groups(self, features: torch.Tensor, tasks: Sequence[int]) -> torch.Tensor:
        """Each task's logits (:meth:`head_logits`) from ``features``, ``(G, n, f)`` (group g's
        for task ``tasks[g]``) or ``(n, f)`` (the same for every task), as one batched
        product: ``(G, n, W)``, padded to the widest with :data:`MASK_VALUE`."""
        rows, columns, width = self._group_index(tasks, features.device)
        head = self.head.weight.index_select(0, rows.flatten()).view(*rows.shape, -1)
        logits = torch.matmul(features, head.transpose(1, 2))
        if columns is None:
            return logits
        placed = logits.new_full((*logits.shape[:-1], width + 1), MASK_VALUE)
        return placed.scatter(-1, columns[:, None, :].expand(*logits.shape),
                              logits)[..., :width]

    def _group_index(self, tasks: Sequence[int], device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """For :meth:`forward_groups`: each task's head rows ``(G, C)``; the column each of
        its units goes to (``None`` when every task's logits are its block as it is; a unit a
        task does not use goes to a spare column past the logits, dropped afterwards); the
        logits' width. Kept per combination of tasks, class ids, widths and device, so a
        training step hands nothing between host and device."""
        per_task = self.classes_per_task
        classes = tuple(self._classes.get(t) for t in tasks)
        key = (tuple(tasks), classes, tuple(self._widths.get(t, 0) for t in tasks), device)
        if key not in self._group_indices:
            width = max(max(max(c) + 1 if c else per_task, w)
                        for c, w in zip(classes, key[2], strict=True))
            rows = torch.tensor([[t * per_task + u for u in range(per_task)] for t in tasks])
            columns = None
            if width != per_task or any(c is not None for c in classes):
                columns = torch.tensor([[(c[u] if u < len(c) else width) if c else u
                                         for u in range(per_task)] for c in classes])
                columns = columns.to(device, non_blocking=True)
            if len(self._group_indices) >= _GROUP_INDEX_CACHE:
                del self._group_indices[next(iter(self._group_indices))]
            self._group_indices[key] = (rows.to(device, non_blocking=True), columns, width)
        return self._group_indices[key]
