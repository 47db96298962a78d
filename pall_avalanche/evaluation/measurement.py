"""Measuring a request: after every request, evaluate every task.

:class:`RequestMeasurement` gives row i of the accuracy matrix a_{i,t} (every task of the test
stream — unlearned and not-yet-learned ones included), the wall time of the request (per epoch
for learning; total for unlearning; evaluation excluded) and the inference model size after it,
as a :class:`~pall_avalanche.core.RequestResult`.

A learning request can fail silently: A_l averages over tasks, so one task left at chance right
after it was learned hides in it. After every learning request the measurement also takes the
learned task's balanced accuracy on its own training data (eval mode, un-augmented) and flags
the request when it is at chance (:func:`learning_failed`): a :class:`LearningWarning` and
``failed: true`` in the result's ``learning_check`` (kept by
:class:`~pall_avalanche.core.RequestLog`; the record's ``learning_checks``).
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

from pall_avalanche.core import RequestResult
from pall_avalanche.data.tasks import unshuffled_batches
from pall_avalanche.evaluation.metrics import model_size_mb
from pall_avalanche.requests import RequestKind

if TYPE_CHECKING:
    from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["LearningWarning", "RequestMeasurement", "balanced_accuracy", "evaluate_tasks",
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
    for x, y in unshuffled_batches(dataset, batch_size, device):
        predictions.append(avalanche_forward(model, x, task).argmax(1).cpu())
        targets.append(y.cpu())
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
        for x, y in unshuffled_batches(exp.dataset, batch_size, device):
            correct += (avalanche_forward(model, x, task).argmax(1) == y).sum()
            total += len(y)
        accuracies.append(100.0 * int(correct) / total)
    model.train(was_training)
    return accuracies


class RequestMeasurement:
    """Measures each request of a strategy (the work of
    :class:`~pall_avalanche.evaluation.UnlearningMetrics`): its wall time (per epoch for
    learning; evaluation excluded), then every task's accuracy on the test stream, the
    inference model size and, for learning, :func:`learning_failed` on the task's own
    training data; the result is a :class:`~pall_avalanche.core.RequestResult`.

    Its hooks are called by the evaluator, which runs after the method's plugins, so a
    request's time covers the method's own end-of-request work.

    :param test_stream: the benchmark's test stream (experience t = task t).
    :param eval_mb_size: evaluation batch size (default: the strategy's training batch size,
        as the paper's reference did).
    :param label: what the learning check's warning names the run by (the harness: method
        and seed; default: the strategy's class).
    """

    def __init__(self, test_stream: Sequence[CLExperience], eval_mb_size: int | None = None,
                 label: str | None = None):
        self.test_stream = list(test_stream)
        self.eval_mb_size = eval_mb_size
        self.label = label
        self._start = 0.0
        self._epoch_start = 0.0
        self._epoch_seconds: list[float] = []

    def _now(self, strategy: UnlearningTemplate) -> float:
        strategy.synchronize()
        return time.perf_counter()

    def start(self, strategy: UnlearningTemplate) -> None:
        """A request starts."""
        self._epoch_seconds = []
        self._start = self._now(strategy)

    def start_epoch(self, strategy: UnlearningTemplate) -> None:
        """A training epoch starts."""
        self._epoch_start = self._now(strategy)

    def end_epoch(self, strategy: UnlearningTemplate) -> None:
        """A training epoch ended."""
        self._epoch_seconds.append(self._now(strategy) - self._epoch_start)

    def finish(self, strategy: UnlearningTemplate, index: int, kind: str, task: int
               ) -> RequestResult:
        """The request ended: its result (evaluating every task; for learning also the
        learning check, with a :class:`LearningWarning` when it failed).

        :param index: the request's position in the sequence.
        :param kind: ``"learn"`` or ``"unlearn"``.
        :param task: the task learned or unlearned.
        """
        seconds = self._now(strategy) - self._start
        batch = self.eval_mb_size or strategy.train_mb_size
        accuracy = evaluate_tasks(strategy.model, self.test_stream, batch, strategy.device)
        check = self._check_learning(strategy, index, task) if kind == RequestKind.LEARN else None
        return RequestResult(
            index=index, kind=kind, task=task, seconds=seconds, accuracy=tuple(accuracy),
            model_size_mb=model_size_mb(*strategy.inference_size()),
            active_tasks=tuple(strategy.active_tasks),
            epoch_seconds=tuple(self._epoch_seconds) if kind == RequestKind.LEARN else (),
            statistics=strategy.request_statistics(), learning_check=check)

    def _check_learning(self, strategy: UnlearningTemplate, index: int, task: int) -> dict:
        data = strategy.experience.dataset.eval()
        n_classes = len(set(data.targets))
        accuracy = balanced_accuracy(strategy.model, data, task,
                                     self.eval_mb_size or strategy.train_mb_size,
                                     strategy.device)
        failed = learning_failed(accuracy, n_classes, len(data))
        if failed:
            warnings.warn(
                f"{self.label or type(strategy).__name__}: learning request {index} left task "
                f"{task} at chance on its "
                f"own training data (balanced accuracy {accuracy:.1f} %, chance "
                f"{100 / n_classes:.1f} %): too few steps, or a learning rate or initialisation "
                "that does not suit the model; A_l alone does not show it",
                LearningWarning, stacklevel=2)
        return {"request": index, "task": task, "train_balanced_accuracy": accuracy,
                "failed": failed}
