"""The evaluation plugin: after every request, evaluate every task.

:class:`RequestEvaluationPlugin` fills the accuracy matrix a_{i,t} (one row per request,
every task of the test stream — unlearned and not-yet-learned ones included), the wall time
of each request (per epoch for learning; total for unlearning; evaluation excluded) and the
inference model size after each request. Append it last to the strategy's plugins so that its
timing covers the method's own end-of-request work.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLExperience
from avalanche.models.utils import avalanche_forward
from torch import nn
from torch.utils.data import DataLoader

from pall_avalanche.evaluation.metrics import model_size_mb
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate

__all__ = ["RequestEvaluationPlugin", "evaluate_tasks"]


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

    checkpoint_attributes = ("accuracy", "timings", "model_sizes_mb")

    def __init__(self, test_stream: Sequence[CLExperience], eval_mb_size: int | None = None):
        super().__init__()
        self.test_stream = list(test_stream)
        self.eval_mb_size = eval_mb_size
        self.accuracy: list[list[float]] = []
        self.timings: list[dict] = []
        self.model_sizes_mb: list[float] = []
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
        self._finish(strategy, {
            "kind": "learn", "task": int(strategy.experience.task_label), "seconds": seconds,
            "epoch_seconds": self._epoch_seconds,
            "seconds_per_epoch": seconds / max(len(self._epoch_seconds), 1),
        })

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
