"""Task-incremental output: one backbone, one bias-free head whose block t belongs to task t.

The head has ``n_tasks * classes_per_task`` units; a sample of task t sees only the logits of
block t (other tasks' logits never enter its softmax), which is the reference's multi-head
layout. The network is an Avalanche ``MultiTaskModule``, so ``avalanche_forward(model, x, t)``
and every Avalanche strategy pass the task labels through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from avalanche.models import MultiTaskModule
from torch import nn
from torch.nn import functional as F

__all__ = ["TaskIncrementalNet", "forward_by_task"]


def forward_by_task(x: torch.Tensor, task_labels: torch.Tensor | int,
                    forward_one: Callable[[torch.Tensor, int, torch.Tensor | int], torch.Tensor]
                    ) -> torch.Tensor:
    """Run ``forward_one(x_task, task, labels)`` once per task present in the mini-batch and
    reassemble the outputs in the original order (one call when the batch has one task)."""
    tasks = [task_labels] if isinstance(task_labels, int) else task_labels.unique().tolist()
    if len(tasks) == 1:
        return forward_one(x, int(tasks[0]), task_labels)
    out = None
    for task in tasks:
        rows = task_labels == task
        logits = forward_one(x[rows], int(task), int(task))
        if out is None:
            out = logits.new_empty(len(x), logits.shape[1])
        out[rows] = logits
    return out


class TaskIncrementalNet(MultiTaskModule):
    """``backbone`` (x → features) followed by a per-task block of a shared linear head.

    :param backbone: maps inputs to ``(batch, feature_dim)`` features. A backbone with a true
        ``task_aware`` attribute is called as ``backbone(x, task_labels)`` (e.g. ViT with
        per-task tokens).
    :param feature_dim: width of the features.
    :param n_tasks: number of tasks T.
    :param classes_per_task: classes per task (the size of each head block).
    """

    def __init__(self, backbone: nn.Module, feature_dim: int, n_tasks: int,
                 classes_per_task: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(feature_dim, n_tasks * classes_per_task, bias=False)
        self.n_tasks = n_tasks
        self.classes_per_task = classes_per_task

    def head_rows(self, task: int) -> slice:
        """The rows of ``head.weight`` that belong to ``task``."""
        return slice(task * self.classes_per_task, (task + 1) * self.classes_per_task)

    def head_entries(self, task: int) -> dict[str, torch.Tensor]:
        """Name → bool mask of ``task``'s output entries: its rows of ``head.weight``."""
        rows = torch.zeros_like(self.head.weight, dtype=torch.bool)
        rows[self.head_rows(task)] = True
        return {"head.weight": rows}

    def backbone_modules(self) -> Iterator[tuple[str, nn.Module]]:
        """(name, module) of every module of the backbone, the modules all tasks share."""
        for name, module in self.backbone.named_modules():
            yield (f"backbone.{name}" if name else "backbone"), module

    def task_parameters(self, task: int) -> list[nn.Parameter]:
        """Backbone parameters only ``task`` uses (e.g. ViT's per-task tokens); the head rows
        are not included (they are masked, see :meth:`head_rows`)."""
        own = getattr(self.backbone, "task_parameters", None)
        return own(task) if own is not None else []

    def reset_task_parameters_(self, task: int) -> None:
        """Re-draw the parameters of :meth:`task_parameters` from their initialisation."""
        reset = getattr(self.backbone, "reset_task_parameters_", None)
        if reset is not None and self.task_parameters(task):
            reset(task)

    def features(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        if getattr(self.backbone, "task_aware", False):
            return self.backbone(x, task_labels)
        return self.backbone(x)

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        """Logits ``(batch, classes_per_task)`` of each sample's own task block."""
        features = self.features(x, task_labels)
        if isinstance(task_labels, int):
            return F.linear(features, self.head.weight[self.head_rows(task_labels)])
        if task_labels.numel() and bool((task_labels == task_labels[0]).all()):
            return F.linear(features, self.head.weight[self.head_rows(int(task_labels[0]))])
        logits = self.head(features).view(len(x), self.n_tasks, self.classes_per_task)
        return logits[torch.arange(len(x), device=x.device), task_labels]

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward(x, task_label)
