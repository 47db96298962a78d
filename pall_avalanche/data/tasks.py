"""Split a labelled dataset into a task-incremental Avalanche benchmark.

Classes are allocated to tasks by a seeded permutation (task t gets the t-th chunk) and
relabelled 0..cpt-1 inside each task; every sample carries its task label, so strategies see
``(x, y, t)`` mini-batches and ``experience.task_label``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

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
from torch.utils.data import DataLoader, TensorDataset

from pall_avalanche.data.device import IDENTITY, BatchPipeline, DeviceImages, device_images_of

__all__ = ["TaskSplit", "canary_members", "class_order_for_seed", "evaluation_loader",
           "half_members", "half_of_task",
           "task_incremental_benchmark_from_tensors", "unshuffled_batches", "with_canaries"]


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
    #: A shadow run's halved task (:func:`half_of_task`): ``{"task", "seed", "members"}``,
    #: ``members`` the kept positions in the task's whole training set; ``None``: no halving.
    shadow: dict | None = None
    #: A canary run's task (:func:`with_canaries`): ``{"task", "count", "members"}``,
    #: ``members`` the positions of the canaries its training set includes; ``None``: none.
    canaries: dict | None = None

    def to_dict(self) -> dict:
        """The split as plain data, as a record's ``split`` stores it."""
        audit = {key: dict(value) for key, value in (("shadow", self.shadow),
                                                      ("canaries", self.canaries))
                 if value is not None}
        return {
            "name": self.name,
            "n_tasks": self.n_tasks,
            "classes_per_task": self.classes_per_task,
            "class_order": list(self.class_order),
            "input_shape": list(self.input_shape),
            "train_sizes": list(self.train_sizes),
            "test_sizes": list(self.test_sizes),
            "train_per_task": self.train_per_task,
            **audit,
        }


def evaluation_loader(dataset, batch_size: int) -> DataLoader:
    """Unshuffled batches of ``dataset``, with a generator of their own: iterating a
    ``DataLoader`` draws a seed, which must not move the training's random stream (evaluating
    never changes training)."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, generator=torch.Generator())


def unshuffled_batches(dataset, batch_size: int, device: torch.device | str, *,
                       view: str = "eval") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``(x, y)`` batches of ``dataset`` in order, on ``device``, through its evaluation view
    (``view="eval"``) or its training view (``"train"``: augmented where the dataset
    augments). From the tensors the dataset carries (``device_images``) when their batches
    are the view's: always for the evaluation view, for the training view when it does not
    augment; else from an unshuffled ``DataLoader`` of the view's per-sample transforms
    (:func:`evaluation_loader`; an augmented view draws its augmentations from torch's
    default generator, as the per-sample path does)."""
    source = device_images_of(dataset)
    if source is not None and (view == "eval" or not source.augmented):
        yield from source.eval_batches(batch_size, device)
        return
    for x, y, *_ in evaluation_loader(dataset.eval() if view == "eval" else dataset.train(),
                                      batch_size):
        yield x.to(device), y.to(device)


def class_order_for_seed(n_classes: int, seed: int) -> list[int]:
    """The seed's random allocation of classes to tasks (a permutation of all classes; task t
    gets the t-th chunk, its local label j the chunk's j-th class): the paper's reference's,
    ``np.random.permutation`` of NumPy's legacy generator seeded with ``seed``, its first draw
    after seeding (docs/fidelity.md, "Benchmarks and requests")."""
    return [int(c) for c in np.random.RandomState(seed).permutation(n_classes)]


def _task_dataset(x: torch.Tensor, y: torch.Tensor, task: int, transforms: TransformGroups,
                  pipeline: BatchPipeline | None = None
                  ) -> TaskAwareSupervisedClassificationDataset:
    dataset = TaskAwareSupervisedClassificationDataset(
        [TensorDataset(x, y)],
        data_attributes=[
            DataAttribute(y.tolist(), "targets"),
            TaskLabels(ConstantSequence(task, len(y))),
        ],
        transform_groups=transforms,
    )
    if pipeline is not None:
        dataset.device_images = DeviceImages(x, y, task, pipeline)
    return dataset


def _task_benchmark(train: list, test: list) -> CLScenario:
    """The Avalanche benchmark of per-task datasets (experience t = task t, task labels, the
    classes' timeline)."""
    benchmark = with_classes_timeline(with_task_labels(benchmark_from_datasets(train=train,
                                                                               test=test)))
    for stream in benchmark.streams.values():
        for exp in stream:
            # Avalanche's timeline stores sets; MultiHeadClassifier indexes them.
            exp.classes_in_this_experience = sorted(exp.classes_in_this_experience)
    return benchmark


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
    batch_pipeline: BatchPipeline | None = None,
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
    :param batch_pipeline: the training augmentation and the evaluation transform as batch
        operations on the device (``uint8`` images; its normalisation must be
        ``eval_transform``'s; :mod:`pall_avalanche.data.device`). Every dataset then carries
        its tensors as ``device_images``: strategies train from them batch by batch and
        evaluate in batches. ``None``: where no transform applies (``train_transform`` or
        ``eval_transform`` ``None``), the tensors are carried as they are
        (:data:`~pall_avalanche.data.device.IDENTITY`), else per-sample transforms only.
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
    # the tensors' batched views (data.device): the given pipeline (its normalisation is the
    # evaluation transform), or the inputs as stored where no transform applies
    pipelines = {"train": batch_pipeline if batch_pipeline is not None
                 else IDENTITY if train_transform is None else None,
                 "test": batch_pipeline if batch_pipeline is not None
                 else IDENTITY if eval_transform is None else None}
    rng = np.random.default_rng([seed, 1])

    streams: dict[str, list] = {"train": [], "test": []}
    for t in range(n_tasks):
        classes = torch.tensor(order[t * cpt:(t + 1) * cpt])
        for stream, (x, y) in (("train", (train_x, train_y)), ("test", (test_x, test_y))):
            idx = torch.isin(y, classes).nonzero().flatten()
            if stream == "train" and train_per_task is not None:
                idx = idx[_balanced_subsample(y[idx].numpy(), train_per_task, rng)]
            streams[stream].append(_task_dataset(x[idx], remap[y[idx]], t, transforms,
                                                 pipelines[stream]))

    benchmark = _task_benchmark(streams["train"], streams["test"])
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


def half_members(targets: np.ndarray, seed: int) -> np.ndarray:
    """The sorted positions of a class-balanced random half of a task's training set (each
    class contributes ⌈n_c / 2⌉ or ⌊n_c / 2⌋ samples, at random), drawn with ``seed``.

    :param targets: the labels of the task's whole training set, in order.
    """
    targets = np.asarray(targets)
    rng = np.random.default_rng([seed, 2])
    picked = []
    for index, cls in enumerate(np.unique(targets)):
        pool = np.flatnonzero(targets == cls)
        # odd class sizes alternate which side gets the extra sample, so the half stays a half
        size = (len(pool) + (index + seed) % 2) // 2
        picked.append(rng.choice(pool, size=size, replace=False))
    return np.sort(np.concatenate(picked))


def half_of_task(benchmark: CLScenario, task: int, seed: int) -> CLScenario:
    """``benchmark`` with task ``task`` trained on a class-balanced random half of its training
    set (:func:`half_members`): a shadow run of the exactness audit's membership attack, whose
    every target example is IN (trained on) in about half of the shadow runs. The other tasks
    and every test set are unchanged. The result keeps the task's whole training set as
    ``audit_targets`` (the attack's target examples, IN and OUT) and records the half in
    ``split.shadow``.

    :param benchmark: a task-incremental benchmark (:func:`check_benchmark`'s form) with a
        :class:`TaskSplit` ``split``.
    :param task: the halved task.
    :param seed: picks the half.
    """
    train = [exp.dataset for exp in benchmark.train_stream]
    test = [exp.dataset for exp in benchmark.test_stream]
    if not 0 <= task < len(train):
        raise ValueError(f"shadow_task={task} is not a task of the benchmark (0..{len(train) - 1})")
    whole = train[task]
    members = half_members(np.asarray(list(whole.targets)), seed)
    train[task] = whole.subset(members.tolist())
    if device_images_of(whole) is not None:
        train[task].device_images = device_images_of(whole).subset(members.tolist())
    halved = _task_benchmark(train, test)
    sizes = list(benchmark.split.train_sizes)
    sizes[task] = len(members)
    halved.split = replace(benchmark.split, train_sizes=tuple(sizes), shadow={
        "task": task, "seed": seed, "members": members.tolist()})
    halved.audit_targets = whole
    return halved


def canary_members(count: int, seed: int) -> np.ndarray:
    """The sorted positions of the canaries a run includes: each of ``count`` independently
    with probability 1/2, drawn with ``seed``."""
    return np.flatnonzero(np.random.default_rng([seed, 3]).random(count) < 0.5)


def with_canaries(benchmark: CLScenario, task: int, count: int, seed: int) -> CLScenario:
    """``benchmark`` with canaries in task ``task``'s training set: ``count`` inputs, each a
    training input of the task (drawn at random) with its entries in a random order, with a
    label drawn uniformly among the task's classes; each is added to the task's training set
    with probability 1/2 (:func:`canary_members`). The exactness audit's canary runs: which
    canaries trained is random, so after an exact unlearning the model cannot tell the
    included ones from the others (one-run auditing, Steinke, Nasr & Jagielski 2023).

    The result keeps all canaries as ``audit_canaries`` (a dataset of the task, the included
    and the others) and records the included positions in ``split.canaries``. The other
    tasks and every test set are unchanged.

    :param benchmark: a task-incremental benchmark whose tasks carry their input tensors
        (``device_images``: every built-in benchmark).
    :param task: the task the canaries join.
    :param count: how many canaries (at least 2).
    :param seed: draws the canaries and which of them are included.
    """
    train = [exp.dataset for exp in benchmark.train_stream]
    if not 0 <= task < len(train):
        raise ValueError(f"canary_task={task} is not a task of the benchmark "
                         f"(0..{len(train) - 1})")
    if count < 2:
        raise ValueError(f"canaries={count} is invalid: at least 2 (included and left out)")
    whole = train[task]
    source = device_images_of(whole)
    if source is None:
        raise ValueError(f"canaries need a benchmark whose tasks carry their input tensors "
                         f"(device_images); {benchmark.split.name} applies per-sample "
                         "transforms")
    rng = np.random.default_rng([seed, 4])
    picked = torch.as_tensor(rng.integers(len(source), size=count))
    flat = source.images[picked].reshape(count, -1)
    order = torch.as_tensor(np.argsort(rng.random(flat.shape), axis=1))
    x = torch.gather(flat, 1, order).reshape(count, *source.images.shape[1:])
    y = torch.as_tensor(rng.integers(benchmark.split.classes_per_task, size=count))
    # Avalanche 0.6 keeps a dataset's transform groups only on its flat data (no public
    # getter): the canaries are evaluated as the task's own inputs are
    canaries = _task_dataset(x, y, task, whole._flat_data._transform_groups, source.pipeline)
    members = canary_members(count, seed)
    train[task] = whole.concat(canaries.subset(members.tolist()))
    train[task].device_images = DeviceImages(torch.cat([source.images, x[members]]),
                                             torch.cat([source.targets, y[members]]), task,
                                             source.pipeline)
    out = _task_benchmark(train, [exp.dataset for exp in benchmark.test_stream])
    sizes = list(benchmark.split.train_sizes)
    sizes[task] = len(train[task])
    out.split = replace(benchmark.split, train_sizes=tuple(sizes), canaries={
        "task": task, "count": count, "members": members.tolist()})
    out.audit_canaries = canaries
    return out
