"""The evaluation plugin: after every request, evaluate every task.

:class:`RequestEvaluationPlugin` fills the accuracy matrix a_{i,t} (one row per request,
every task of the test stream — unlearned and not-yet-learned ones included), the wall time
of each request (per epoch for learning; total for unlearning; evaluation excluded) and the
inference model size after each request. Append it last to the strategy's plugins so that its
timing covers the method's own end-of-request work.

A learning request can fail silently: A_l averages over tasks, so one task left at chance right
after it was learned hides in it. After every learning request the plugin also measures the
learned task's balanced accuracy on its own training data (eval mode, un-augmented) and flags
the request when it is at chance (:func:`learning_failed`): a :class:`LearningWarning` and an
entry with ``failed: true`` in :attr:`RequestEvaluationPlugin.learning_checks` (the record's
``learning_checks``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLExperience
from avalanche.models.utils import avalanche_forward
from torch import nn
from torch.utils.data import DataLoader

from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.evaluation.metrics import model_size_mb

if TYPE_CHECKING:
    from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["LearningWarning", "RequestEvaluationPlugin", "balanced_accuracy", "evaluate_tasks",
           "learning_failed"]


class LearningWarning(UserWarning):
    """A learning request left its own task at chance on its training data."""


@torch.no_grad()
def balanced_accuracy(model: nn.Module, dataset, task: int, batch_size: int,
                      device: torch.device | str = "cpu") -> float:
    """Balanced accuracy (percent: the mean over classes of each class's accuracy) of
    ``model`` on ``dataset`` through ``task``'s head, in eval mode, unshuffled batches of
    ``batch_size``; a constant prediction scores 100 / (number of classes). The model's
    train/eval mode is restored."""
    was_training = model.training
    model.eval()
    predictions, targets = [], []
    # its own generator: iterating a DataLoader draws a seed, which must not move the
    # training's random stream
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, generator=torch.Generator())
    for x, y, *_ in loader:
        predictions.append(avalanche_forward(model, x.to(device), task).argmax(1).cpu())
        targets.append(y)
    model.train(was_training)
    predicted, target = torch.cat(predictions), torch.cat(targets)
    recalls = [float((predicted[target == c] == c).double().mean()) for c in target.unique()]
    return 100.0 * sum(recalls) / len(recalls)


def learning_failed(accuracy: float, n_classes: int, n_samples: int) -> bool:
    """Whether a balanced accuracy (percent) on ``n_samples`` training samples of
    ``n_classes`` classes is at chance: at most chance + max(10 points, two binomial standard
    deviations of a chance-level accuracy)."""
    chance = 1.0 / n_classes
    margin = max(0.10, 2 * math.sqrt(chance * (1 - chance) / max(n_samples, 1)))
    return accuracy <= 100.0 * (chance + margin)


@torch.no_grad()
def evaluate_tasks(model: nn.Module, test_stream: Sequence[CLExperience], batch_size: int,
                   device: torch.device | str = "cpu") -> list[float]:
    """Accuracy (percent) of ``model`` on each experience of ``test_stream``, in eval mode,
    unshuffled batches of ``batch_size`` (BatchNorm without running statistics depends on
    the evaluation batch; docs/fidelity.md, "Metrics"). The model's train/eval mode is restored."""
    was_training = model.training
    model.eval()
    accuracies = []
    for exp in test_stream:
        task = exp.task_label   # one task per experience: an int, no per-batch split
        correct = torch.zeros((), dtype=torch.long, device=device)
        total = 0
        for x, y, _ in DataLoader(exp.dataset.eval(), batch_size=batch_size, shuffle=False):
            x, y = x.to(device), y.to(device)
            correct += (avalanche_forward(model, x, task).argmax(1) == y).sum()
            total += len(y)
        accuracies.append(100.0 * int(correct) / total)
    model.train(was_training)
    return accuracies


class RequestEvaluationPlugin(UnlearningPlugin):
    """Accuracy matrix, per-request timings and model sizes of a request sequence.

    :param test_stream: the benchmark's test stream (experience t = task t).
    :param eval_mb_size: evaluation batch size (default: the strategy's training batch size,
        as the paper's reference did).
    """

    checkpoint_attributes = ("accuracy", "timings", "model_sizes_mb", "learning_checks")

    def __init__(self, test_stream: Sequence[CLExperience], eval_mb_size: int | None = None):
        super().__init__()
        self.test_stream = list(test_stream)
        self.eval_mb_size = eval_mb_size
        self.accuracy: list[list[float]] = []
        self.timings: list[dict] = []
        self.model_sizes_mb: list[float] = []
        #: Per learning request: request index, task, balanced training accuracy, failed.
        self.learning_checks: list[dict] = []
        self._start = 0.0
        self._epoch_start = 0.0
        self._epoch_seconds: list[float] = []

    def _now(self, strategy: UnlearningTemplate) -> float:
        strategy.synchronize()
        return time.perf_counter()

    def before_training_exp(self, strategy, **kwargs) -> None:
        self._epoch_seconds = []
        self._start = self._now(strategy)

    def before_training_epoch(self, strategy, **kwargs) -> None:
        self._epoch_start = self._now(strategy)

    def after_training_epoch(self, strategy, **kwargs) -> None:
        self._epoch_seconds.append(self._now(strategy) - self._epoch_start)

    def after_training_exp(self, strategy, **kwargs) -> None:
        seconds = self._now(strategy) - self._start
        task = int(strategy.experience.task_label)
        self._finish(strategy, {
            "kind": "learn", "task": task, "seconds": seconds,
            "epoch_seconds": self._epoch_seconds,
            "seconds_per_epoch": seconds / max(len(self._epoch_seconds), 1),
        })
        self._check_learning(strategy, task)

    def _check_learning(self, strategy: UnlearningTemplate, task: int) -> None:
        data = strategy.experience.dataset.eval()
        n_classes = len(set(data.targets))
        accuracy = balanced_accuracy(strategy.model, data, task,
                                     self.eval_mb_size or strategy.train_mb_size,
                                     strategy.device)
        failed = learning_failed(accuracy, n_classes, len(data))
        self.learning_checks.append({"request": len(self.accuracy) - 1, "task": task,
                                     "train_balanced_accuracy": accuracy, "failed": failed})
        if failed:
            warnings.warn(
                f"learning request {len(self.accuracy) - 1} left task {task} at chance on its "
                f"own training data (balanced accuracy {accuracy:.1f} %, chance "
                f"{100 / n_classes:.1f} %): too few steps, or a learning rate or initialisation "
                "that does not suit the model; A_l alone does not show it",
                LearningWarning, stacklevel=2)

    def before_unlearning(self, strategy, task: int, **kwargs) -> None:
        self._start = self._now(strategy)

    def after_unlearning(self, strategy, task: int, **kwargs) -> None:
        self._finish(strategy, {"kind": "unlearn", "task": int(task),
                                "seconds": self._now(strategy) - self._start})

    def _finish(self, strategy: UnlearningTemplate, timing: dict) -> None:
        batch = self.eval_mb_size or strategy.train_mb_size
        self.timings.append(timing)
        self.accuracy.append(evaluate_tasks(strategy.model, self.test_stream, batch,
                                            strategy.device))
        self.model_sizes_mb.append(model_size_mb(*strategy.inference_size()))
