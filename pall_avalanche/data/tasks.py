"""Split a labelled dataset into a task-incremental Avalanche benchmark.

Classes are allocated to tasks by a seeded permutation (task t gets the t-th chunk) and
relabelled 0..cpt-1 inside each task; every sample carries its task label, so strategies see
``(x, y, t)`` mini-batches and ``experience.task_label``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.scenarios.generic_scenario import CLScenario
from avalanche.benchmarks.scenarios.supervised import with_classes_timeline
from avalanche.benchmarks.scenarios.task_aware import with_task_labels
from avalanche.benchmarks.utils import DataAttribute, TaskAwareSupervisedClassificationDataset
from avalanche.benchmarks.utils.data_attribute import TaskLabels
from avalanche.benchmarks.utils.flat_data import ConstantSequence
from avalanche.benchmarks.utils.transform_groups import TransformGroups
from torch.utils.data import TensorDataset

__all__ = ["TaskSplit", "class_order_for_seed", "task_incremental_benchmark_from_tensors"]


@dataclass(frozen=True)
class TaskSplit:
    """What a builder records about the benchmark it made (stored with every result)."""

    name: str
    n_tasks: int
    classes_per_task: int
    class_order: tuple[int, ...]
    input_shape: tuple[int, ...]
    train_sizes: tuple[int, ...]
    test_sizes: tuple[int, ...]
    train_per_task: int | None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "n_tasks": self.n_tasks,
            "classes_per_task": self.classes_per_task,
            "class_order": list(self.class_order),
            "input_shape": list(self.input_shape),
            "train_sizes": list(self.train_sizes),
            "test_sizes": list(self.test_sizes),
            "train_per_task": self.train_per_task,
        }


def class_order_for_seed(n_classes: int, seed: int) -> list[int]:
    """The seed's random allocation of classes to tasks (a permutation of all classes)."""
    return [int(c) for c in np.random.default_rng(seed).permutation(n_classes)]


def _task_dataset(x: torch.Tensor, y: torch.Tensor, task: int,
                  transforms: TransformGroups) -> TaskAwareSupervisedClassificationDataset:
    return TaskAwareSupervisedClassificationDataset(
        [TensorDataset(x, y)],
        data_attributes=[
            DataAttribute(y.tolist(), "targets"),
            TaskLabels(ConstantSequence(task, len(y))),
        ],
        transform_groups=transforms,
    )


def _balanced_subsample(y: np.ndarray, per_task: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``per_task`` samples, as equal per class as possible, chosen at random."""
    classes = np.unique(y)
    shares = np.full(len(classes), per_task // len(classes))
    shares[: per_task % len(classes)] += 1
    picked = []
    for cls, share in zip(classes, shares, strict=True):
        pool = np.flatnonzero(y == cls)
        picked.append(rng.choice(pool, size=min(share, len(pool)), replace=False))
    return np.sort(np.concatenate(picked))


def task_incremental_benchmark_from_tensors(
    name: str,
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    *,
    n_tasks: int,
    seed: int,
    train_transform: Callable | None = None,
    eval_transform: Callable | None = None,
    train_per_task: int | None = None,
) -> CLScenario:
    """Build a task-incremental benchmark with ``n_tasks`` tasks of equally many classes.

    :param name: benchmark name (recorded in ``benchmark.split``).
    :param train: ``(x, y)`` tensors of the training set, labels 0..C-1.
    :param test: ``(x, y)`` tensors of the test set.
    :param n_tasks: number of tasks; must divide the number of classes C.
    :param seed: picks the class-to-task allocation and any subsample.
    :param train_transform: per-sample transform of training inputs (augmentation).
    :param eval_transform: per-sample transform of evaluation inputs.
    :param train_per_task: keep only this many (class-balanced, random) training samples per
        task, for reduced CPU runs; ``None`` keeps all.
    :return: an Avalanche ``CLScenario`` with ``train_stream`` and ``test_stream`` (experience
        t = task t, task label t) and a ``split`` attribute (:class:`TaskSplit`).
    """
    train_x, train_y = train
    test_x, test_y = test
    n_classes = int(train_y.max()) + 1
    if n_tasks < 1 or n_classes % n_tasks:
        valid = [k for k in range(1, n_classes + 1) if n_classes % k == 0]
        raise ValueError(
            f"n_tasks={n_tasks} does not divide the {n_classes} classes of {name}; "
            f"valid values are {valid}"
        )
    if train_per_task is not None and train_per_task < n_classes // n_tasks:
        raise ValueError(
            f"train_per_task={train_per_task} is smaller than the {n_classes // n_tasks} classes "
            "of a task; use at least one sample per class, or None for all"
        )
    cpt = n_classes // n_tasks
    order = class_order_for_seed(n_classes, seed)
    remap = torch.empty(n_classes, dtype=torch.long)
    for position, cls in enumerate(order):
        remap[cls] = position % cpt
    transforms = TransformGroups({"train": train_transform, "eval": eval_transform})
    rng = np.random.default_rng([seed, 1])

    streams: dict[str, list] = {"train": [], "test": []}
    for t in range(n_tasks):
        classes = torch.tensor(order[t * cpt:(t + 1) * cpt])
        for stream, (x, y) in (("train", (train_x, train_y)), ("test", (test_x, test_y))):
            idx = torch.isin(y, classes).nonzero().flatten()
            if stream == "train" and train_per_task is not None:
                idx = idx[_balanced_subsample(y[idx].numpy(), train_per_task, rng)]
            streams[stream].append(_task_dataset(x[idx], remap[y[idx]], t, transforms))

    benchmark = with_classes_timeline(with_task_labels(benchmark_from_datasets(**streams)))
    for stream in benchmark.streams.values():
        for exp in stream:
            # Avalanche's timeline stores sets; MultiHeadClassifier indexes them.
            exp.classes_in_this_experience = sorted(exp.classes_in_this_experience)
    benchmark.split = TaskSplit(
        name=name,
        n_tasks=n_tasks,
        classes_per_task=cpt,
        class_order=tuple(order),
        input_shape=tuple(train_x.shape[1:]),
        train_sizes=tuple(len(e.dataset) for e in benchmark.train_stream),
        test_sizes=tuple(len(e.dataset) for e in benchmark.test_stream),
        train_per_task=train_per_task,
    )
    return benchmark
