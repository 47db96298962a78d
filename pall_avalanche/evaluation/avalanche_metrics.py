"""The paper's metrics as an Avalanche metric, for a user's own ``EvaluationPlugin``.

``unlearning_metrics(test_stream)`` goes next to Avalanche's metrics::

    evaluator = EvaluationPlugin(accuracy_metrics(epoch=True),
                                 *unlearning_metrics(benchmark.test_stream),
                                 loggers=[TextLogger(), InteractiveLogger()])

After every request (learning or unlearning) it evaluates every task of the test stream
(:class:`~pall_avalanche.evaluation.RequestEvaluationPlugin`'s evaluation, timing and model
size) and emits, as Avalanche metric values at x = the request's index:
``UnlearningMetrics/accuracy/task<t>`` for every task, ``UnlearningMetrics/A_l``, ``A_u``,
``F_l``, ``F_u``, ``F_u_max`` as they become defined (:func:`compute_metrics` over the requests
so far, with the final denominators T−1 and N_u of the sequence seen so far),
``UnlearningMetrics/request_seconds`` and ``UnlearningMetrics/model_size_mb``. Avalanche's
loggers (text, interactive, CSV, TensorBoard, W&B) then show them, and the evaluator's
``get_last_metrics()`` returns them.

Avalanche hands a metric only the strategy, not the unlearned task: the metric finds it as
the task that left ``strategy.active_tasks`` during the request.
"""

from __future__ import annotations

from collections.abc import Sequence

from avalanche.evaluation import PluginMetric
from avalanche.evaluation.metric_results import MetricValue

from pall_avalanche.evaluation.metrics import compute_metrics
from pall_avalanche.evaluation.plugin import RequestEvaluationPlugin
from pall_avalanche.requests import Request, RequestSequence

__all__ = ["UnlearningMetrics", "unlearning_metrics"]

PREFIX = "UnlearningMetrics"


class UnlearningMetrics(PluginMetric[dict]):
    """Every task's accuracy, the paper's metrics, request time and model size after every
    request (module docstring).

    :param test_stream: the benchmark's test stream (experience t = task t).
    :param eval_mb_size: evaluation batch size (default: the strategy's training batch).
    """

    def __init__(self, test_stream: Sequence, eval_mb_size: int | None = None) -> None:
        super().__init__()
        self.evaluation = RequestEvaluationPlugin(test_stream, eval_mb_size)
        self.n_tasks = len(self.evaluation.test_stream)
        self.requests: list[Request] = []
        self._active_before: list[int] = []
        self._last: dict = {}

    def result(self) -> dict:
        """The values emitted after the last request (name → value)."""
        return dict(self._last)

    def reset(self) -> None:
        """Nothing to reset between Avalanche's phases: the metric spans the sequence."""

    # learning requests: the evaluation plugin's own timing hooks
    def before_training_exp(self, strategy) -> None:
        self.evaluation.before_training_exp(strategy)

    def before_training_epoch(self, strategy) -> None:
        self.evaluation.before_training_epoch(strategy)

    def after_training_epoch(self, strategy) -> None:
        self.evaluation.after_training_epoch(strategy)

    def after_training_exp(self, strategy) -> list[MetricValue]:
        self.evaluation.after_training_exp(strategy)
        self.requests.append(Request("learn", int(strategy.experience.task_label)))
        return self._emit()

    # unlearning requests (events of the unlearning template, forwarded by the evaluator)
    def before_unlearning(self, strategy) -> None:
        self._active_before = list(strategy.active_tasks)
        self.evaluation.before_unlearning(strategy, task=-1)

    def after_unlearning(self, strategy) -> list[MetricValue]:
        (task,) = set(self._active_before) - set(strategy.active_tasks)
        self.evaluation.after_unlearning(strategy, task=task)
        self.requests.append(Request("unlearn", task))
        return self._emit()

    def _emit(self) -> list[MetricValue]:
        index = len(self.requests) - 1
        values = {f"{PREFIX}/accuracy/task{t}": a
                  for t, a in enumerate(self.evaluation.accuracy[-1])}
        metrics = compute_metrics(self.evaluation.accuracy,
                                  RequestSequence(self.requests, self.n_tasks))
        values.update({f"{PREFIX}/{name}": value for name, value in metrics.items()
                       if value is not None})
        values[f"{PREFIX}/request_seconds"] = self.evaluation.timings[-1]["seconds"]
        values[f"{PREFIX}/model_size_mb"] = self.evaluation.model_sizes_mb[-1]
        self._last = values
        return [MetricValue(self, name, value, index) for name, value in values.items()]

    def __str__(self) -> str:
        return PREFIX


def unlearning_metrics(test_stream: Sequence, eval_mb_size: int | None = None
                       ) -> list[PluginMetric]:
    """The paper's metrics for an Avalanche ``EvaluationPlugin`` (a list, as Avalanche's
    metric helpers return): :class:`UnlearningMetrics`.

    :param test_stream: the benchmark's test stream (experience t = task t).
    :param eval_mb_size: evaluation batch size (default: the strategy's training batch).
    """
    return [UnlearningMetrics(test_stream, eval_mb_size)]
