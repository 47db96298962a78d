"""Benchmark builders: a registry from name to a task-incremental Avalanche benchmark.

``build_benchmark("digits", seed=0)`` needs no download (scikit-learn ships the data);
``cifar10``, ``cifar100`` and ``tinyimagenet`` read the official files under ``data_root``
and download them where the machine can.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLScenario
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torchvision.transforms import v2

from pall_avalanche.catalog import BENCHMARK_INFO
from pall_avalanche.data.cifar import load_cifar
from pall_avalanche.data.tasks import (
    TaskSplit,
    class_order_for_seed,
    task_incremental_benchmark_from_tensors,
)
from pall_avalanche.data.tinyimagenet import load_tinyimagenet

__all__ = [
    "BENCHMARKS",
    "BenchmarkSpec",
    "TaskSplit",
    "build_benchmark",
    "class_order_for_seed",
    "task_incremental_benchmark_from_tensors",
]

# Normalisation statistics (the paper's).
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2615))
CIFAR100_STATS = ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))
TINYIMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


@dataclass(frozen=True)
class BenchmarkSpec:
    """A registered benchmark: its class count, default and valid task counts, and loader."""

    name: str
    n_classes: int
    default_n_tasks: int
    builder: Callable[..., CLScenario]

    def valid_n_tasks(self) -> list[int]:
        return [k for k in range(2, self.n_classes + 1) if self.n_classes % k == 0]


BENCHMARKS: dict[str, BenchmarkSpec] = {}


def _register(name: str):
    """Register the builder of the benchmark ``name`` described in
    :data:`~pall_avalanche.catalog.BENCHMARK_INFO`."""
    info = BENCHMARK_INFO[name]

    def decorate(builder: Callable[..., CLScenario]) -> Callable[..., CLScenario]:
        BENCHMARKS[name] = BenchmarkSpec(name, info.n_classes, info.default_n_tasks, builder)
        return builder

    return decorate


def build_benchmark(
    name: str,
    *,
    seed: int,
    n_tasks: int | None = None,
    data_root: str | Path | None = None,
    train_per_task: int | None = None,
    download: bool = True,
) -> CLScenario:
    """Build a registered benchmark.

    :param name: one of ``BENCHMARKS`` (digits, cifar10, cifar100, tinyimagenet).
    :param seed: picks the random allocation of classes to tasks (and any subsample).
    :param n_tasks: number of tasks (default: the paper's; TinyImageNet takes 20, 40 or 100).
    :param data_root: folder holding (or receiving) the dataset files; default ``./data``.
    :param train_per_task: subsample each task's training set to this size (reduced runs).
    :param download: download missing files where the machine can.
    """
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; valid benchmarks are {sorted(BENCHMARKS)}")
    spec = BENCHMARKS[name]
    n_tasks = spec.default_n_tasks if n_tasks is None else n_tasks
    if n_tasks not in spec.valid_n_tasks():
        raise ValueError(
            f"n_tasks={n_tasks} is not valid for {name} ({spec.n_classes} classes); valid values "
            f"are {spec.valid_n_tasks()}"
        )
    root = Path("data") if data_root is None else Path(data_root)
    return spec.builder(seed=seed, n_tasks=n_tasks, root=root, train_per_task=train_per_task,
                        download=download)


def _image_transforms(stats, train_augment: list) -> tuple[v2.Compose, v2.Compose]:
    to_float = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(*stats)]
    return v2.Compose([*train_augment, *to_float]), v2.Compose(to_float)


@_register("digits")
def _digits(*, seed, n_tasks, root, train_per_task, download) -> CLScenario:
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


def _cifar(name: str, stats, *, seed, n_tasks, root, train_per_task, download) -> CLScenario:
    arrays = load_cifar(root, name, download=download)
    train_tf, eval_tf = _image_transforms(
        stats, [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()]
    )
    return task_incremental_benchmark_from_tensors(
        name, (arrays.train_x, arrays.train_y), (arrays.test_x, arrays.test_y),
        n_tasks=n_tasks, seed=seed, train_transform=train_tf, eval_transform=eval_tf,
        train_per_task=train_per_task,
    )


@_register("cifar10")
def _cifar10(**kwargs) -> CLScenario:
    """S-CIFAR10: 5 tasks x 2 classes, RandomCrop(32, 4) + flip, CIFAR-10 normalisation."""
    return _cifar("cifar10", CIFAR10_STATS, **kwargs)


@_register("cifar100")
def _cifar100(**kwargs) -> CLScenario:
    """S-CIFAR100: 10 tasks x 10 classes, RandomCrop(32, 4) + flip, CIFAR-100 normalisation."""
    return _cifar("cifar100", CIFAR100_STATS, **kwargs)


@_register("tinyimagenet")
def _tinyimagenet(*, seed, n_tasks, root, train_per_task, download) -> CLScenario:
    """S-TinyImageNet: 20 x 10 (or 40 x 5, 100 x 2), RandomResizedCrop(64) + flip; the test
    split is the official validation split."""
    arrays = load_tinyimagenet(root, download=download)
    train_tf, eval_tf = _image_transforms(
        TINYIMAGENET_STATS, [v2.RandomResizedCrop(64, antialias=True), v2.RandomHorizontalFlip()]
    )
    return task_incremental_benchmark_from_tensors(
        "tinyimagenet", (arrays.train_x, arrays.train_y), (arrays.test_x, arrays.test_y),
        n_tasks=n_tasks, seed=seed, train_transform=train_tf, eval_transform=eval_tf,
        train_per_task=train_per_task,
    )
