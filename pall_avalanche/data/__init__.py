"""Benchmarks: a registered builder (:func:`~pall_avalanche.catalog.register_benchmark`; the
built-in :func:`digits`, :func:`cifar10`, :func:`cifar100` and :func:`tinyimagenet`) returns a
task-incremental Avalanche benchmark, checked by :func:`check_benchmark`.

``build_benchmark("digits", seed=0)`` needs no download (scikit-learn ships the data);
``cifar10``, ``cifar100`` and ``tinyimagenet`` read the official files under ``data_root``
and download them where the machine can.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLScenario
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torchvision.transforms import v2

from pall_avalanche.catalog import BENCHMARK_INFO, load
from pall_avalanche.data.augment import CropFlip, ResizedCropFlip
from pall_avalanche.data.cifar import load_cifar
from pall_avalanche.data.device import BatchPipeline
from pall_avalanche.data.tasks import (
    TaskSplit,
    class_order_for_seed,
    half_of_task,
    task_incremental_benchmark_from_tensors,
    with_canaries,
)
from pall_avalanche.data.tinyimagenet import load_tinyimagenet

__all__ = [
    "TaskSplit",
    "build_benchmark",
    "check_benchmark",
    "cifar10",
    "cifar100",
    "class_order_for_seed",
    "digits",
    "image_benchmark",
    "task_incremental_benchmark_from_tensors",
    "tinyimagenet",
]

# Normalisation statistics (the paper's).
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2615))
CIFAR100_STATS = ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))
TINYIMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


def build_benchmark(
    name: str,
    *,
    seed: int,
    n_tasks: int | None = None,
    data_root: str | Path | None = None,
    train_per_task: int | None = None,
    download: bool = True,
    shadow: tuple[int, int] | None = None,
    canaries: tuple[int, int] | None = None,
) -> CLScenario:
    """Build a registered benchmark and check it (:func:`check_benchmark`).

    :param name: a registered benchmark (digits, cifar10, cifar100, tinyimagenet, or one of a
        plugin's).
    :param seed: picks the random allocation of classes to tasks (and any subsample).
    :param n_tasks: number of tasks (default: the benchmark's; TinyImageNet takes 20, 40 or
        100).
    :param data_root: folder holding (or receiving) the dataset files; default ``./data``.
    :param train_per_task: subsample each task's training set to this size (reduced runs).
    :param download: download missing files where the machine can.
    :param shadow: ``(task, seed)``: train that task on the class-balanced random half of its
        training set the seed picks (:func:`~pall_avalanche.data.tasks.half_of_task`: the
        exactness audit's shadow runs); ``None``: every task whole.
    :param canaries: ``(task, count)``: add that many canaries to that task's training set,
        each with probability 1/2, drawn with ``seed``
        (:func:`~pall_avalanche.data.tasks.with_canaries`: the exactness audit's canary runs);
        ``None``: none.
    """
    if name not in BENCHMARK_INFO:
        raise ValueError(f"unknown benchmark {name!r}; valid benchmarks are "
                         f"{sorted(BENCHMARK_INFO)}")
    info = BENCHMARK_INFO[name]
    n_tasks = info.default_n_tasks if n_tasks is None else n_tasks
    if n_tasks not in info.valid_n_tasks():
        raise ValueError(
            f"n_tasks={n_tasks} is not valid for {name} ({info.n_classes} classes); valid values "
            f"are {info.valid_n_tasks()}"
        )
    root = Path("data") if data_root is None else Path(data_root)
    benchmark = load(info.builder)(seed=seed, n_tasks=n_tasks, root=root,
                                   train_per_task=train_per_task, download=download)
    benchmark.split = check_benchmark(benchmark, name=name, n_tasks=n_tasks,
                                      train_per_task=train_per_task)
    if shadow is not None:
        benchmark = half_of_task(benchmark, *shadow)
    return benchmark if canaries is None else with_canaries(benchmark, *canaries, seed)


def check_benchmark(benchmark: Any, *, name: str, n_tasks: int | None = None,
                    train_per_task: int | None = None) -> TaskSplit:
    """Check that ``benchmark`` is task-incremental as the strategies and metrics need it, and
    return its :class:`TaskSplit` (``benchmark.split`` where the builder made one).

    Checked: a ``train_stream`` and a ``test_stream`` of one experience per task (``n_tasks``
    of them when given), experience t with task label t alone, the same classes in both
    streams of a task, labelled 0 .. c−1, and the same c in every task. Nothing is drawn from
    any random stream (training inputs are not transformed).

    :param name: the benchmark's name, for messages.
    :raises ValueError: one line naming the benchmark, the stream and experience, and the
        problem.
    """
    def fail(problem: str) -> ValueError:
        return ValueError(f"benchmark {name!r}: {problem}")

    streams = {}
    for stream in ("train_stream", "test_stream"):
        experiences = list(getattr(benchmark, stream, None) or ())
        if not experiences:
            raise fail(f"it has no {stream}; a builder returns an Avalanche benchmark with a "
                       "train_stream and a test_stream")
        if n_tasks is not None and len(experiences) != n_tasks:
            raise fail(f"its {stream} has {len(experiences)} experiences, expected one per task "
                       f"({n_tasks})")
        streams[stream] = experiences
    if len(streams["train_stream"]) != len(streams["test_stream"]):
        raise fail(f"its train_stream has {len(streams['train_stream'])} experiences, its "
                   f"test_stream {len(streams['test_stream'])}: one per task in each")
    classes_per_task = None
    for stream, experiences in streams.items():
        for t, exp in enumerate(experiences):
            labels = list(getattr(exp, "task_labels", None) or ())
            if labels != [t]:
                raise fail(f"{stream}[{t}] has task labels {labels}, expected [{t}] (experience "
                           "t holds task t alone; Avalanche's with_task_labels adds them)")
            classes = sorted({int(y) for y in exp.dataset.targets})
            if classes != list(range(len(classes))):
                raise fail(f"{stream}[{t}] has classes {classes[:10]}; each task's labels "
                           "must be 0 .. c-1")
            if classes_per_task is None:
                classes_per_task = len(classes)
            elif len(classes) != classes_per_task:
                raise fail(f"{stream}[{t}] has {len(classes)} classes, task 0 has "
                           f"{classes_per_task}: every task needs the same number")
    split = getattr(benchmark, "split", None)
    if isinstance(split, TaskSplit):
        return split
    test = streams["test_stream"]
    return TaskSplit(
        name=name, n_tasks=len(test), classes_per_task=classes_per_task, class_order=(),
        input_shape=tuple(test[0].dataset.eval()[0][0].shape),
        train_sizes=tuple(len(e.dataset) for e in streams["train_stream"]),
        test_sizes=tuple(len(e.dataset) for e in test), train_per_task=train_per_task)


def _crop_flip() -> tuple[list, CropFlip]:
    return [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()], CropFlip(32, 4)


def _resized_crop_flip() -> tuple[list, ResizedCropFlip]:
    return ([v2.RandomResizedCrop(64, antialias=True), v2.RandomHorizontalFlip()],
            ResizedCropFlip(64))


#: name → (normalisation statistics, the training augmentation: per-sample transforms and the
#: same as a batch operation) of the image benchmarks.
IMAGE_AUGMENTATION = {
    "cifar10": (CIFAR10_STATS, _crop_flip),
    "cifar100": (CIFAR100_STATS, _crop_flip),
    "tinyimagenet": (TINYIMAGENET_STATS, _resized_crop_flip),
}


def image_benchmark(name: str, train: tuple[torch.Tensor, torch.Tensor],
                    test: tuple[torch.Tensor, torch.Tensor], *, seed: int, n_tasks: int,
                    train_per_task: int | None = None) -> CLScenario:
    """The task-incremental benchmark of ``uint8`` image tensors with the transforms of image
    benchmark ``name`` (:data:`IMAGE_AUGMENTATION`): per-sample augmentation, normalisation
    and, for the device path, the same augmentation as a batch operation
    (:class:`~pall_avalanche.data.device.BatchPipeline`).

    :param train: ``(x, y)``: ``(N, C, H, W)`` uint8 images and their labels.
    :param test: the same for the test set.
    """
    stats, augmentation = IMAGE_AUGMENTATION[name]
    per_sample, batched = augmentation()
    to_float = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(*stats)]
    return task_incremental_benchmark_from_tensors(
        name, train, test, n_tasks=n_tasks, seed=seed,
        train_transform=v2.Compose([*per_sample, *to_float]), eval_transform=v2.Compose(to_float),
        train_per_task=train_per_task, batch_pipeline=BatchPipeline(batched, *stats))


def digits(*, seed, n_tasks, root, train_per_task, download) -> CLScenario:
    """scikit-learn's 8x8 digits (1,797 images), a fixed stratified 80/20 split, standardised
    with the training mean and std; inputs are (1, 8, 8) float tensors, no augmentation."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    train_idx, test_idx = train_test_split(
        range(len(y)), test_size=DIGITS_TEST_FRACTION, random_state=DIGITS_SPLIT_SEED,
        stratify=digits.target,
    )
    train_x, test_x = x[train_idx], x[test_idx]
    mean, std = train_x.mean(), train_x.std()
    return task_incremental_benchmark_from_tensors(
        "digits", ((train_x - mean) / std, y[train_idx]), ((test_x - mean) / std, y[test_idx]),
        n_tasks=n_tasks, seed=seed, train_per_task=train_per_task,
    )


def _cifar(name: str, *, seed, n_tasks, root, train_per_task, download) -> CLScenario:
    arrays = load_cifar(root, name, download=download)
    return image_benchmark(name, (arrays.train_x, arrays.train_y),
                           (arrays.test_x, arrays.test_y), seed=seed, n_tasks=n_tasks,
                           train_per_task=train_per_task)


def cifar10(**kwargs) -> CLScenario:
    """S-CIFAR10: 5 tasks x 2 classes, RandomCrop(32, 4) + flip, CIFAR-10 normalisation
    (per sample, and as a batch on the training device: :mod:`pall_avalanche.data.device`)."""
    return _cifar("cifar10", **kwargs)


def cifar100(**kwargs) -> CLScenario:
    """S-CIFAR100: 10 tasks x 10 classes, RandomCrop(32, 4) + flip, CIFAR-100 normalisation."""
    return _cifar("cifar100", **kwargs)


def tinyimagenet(*, seed, n_tasks, root, train_per_task, download) -> CLScenario:
    """S-TinyImageNet: 20 x 10 (or 40 x 5, 100 x 2), RandomResizedCrop(64) + flip; the test
    split is the official validation split (augmented per sample, and as a batch on the
    training device: :mod:`pall_avalanche.data.device`)."""
    arrays = load_tinyimagenet(root, download=download)
    return image_benchmark("tinyimagenet", (arrays.train_x, arrays.train_y),
                           (arrays.test_x, arrays.test_y), seed=seed, n_tasks=n_tasks,
                           train_per_task=train_per_task)
