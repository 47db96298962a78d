"""The paper's metrics as an Avalanche metric, for a user's own ``EvaluationPlugin``.

``unlearning_metrics(test_stream)`` goes next to Avalanche's metrics::

    evaluator = EvaluationPlugin(accuracy_metrics(epoch=True),
                                 *unlearning_metrics(benchmark.test_stream),
                                 loggers=[TextLogger(), InteractiveLogger()])

After every request (learning or unlearning) it measures the request
(:class:`~pall_avalanche.evaluation.RequestMeasurement`: time, every task of the test stream,
model size) and emits, as Avalanche metric values at x = the request's index:
``UnlearningMetrics/accuracy/task<t>`` for every task, ``UnlearningMetrics/A_l``, ``A_u``,
``F_l``, ``F_u``, ``F_u_max`` as they become defined (:func:`compute_metrics` over the requests
so far, with the final denominators T−1 and N_u of the sequence seen so far; none once the
sequence leaves the paper's protocol, e.g. a task learned again after it was unlearned),
``UnlearningMetrics/relapse`` and ``relapse_max`` once an unlearning request has later
requests (the mean and largest rise of an unlearned task's accuracy after its unlearning:
:func:`~pall_avalanche.evaluation.metrics.relapse`),
``UnlearningMetrics/request_seconds`` and ``UnlearningMetrics/model_size_mb``. Avalanche's
loggers (text, interactive, CSV, TensorBoard, W&B) then show them, and the evaluator's
``get_last_metrics()`` returns them. The runner's records are built from the same
measurements: the strategy's request loop adds each to its
:class:`~pall_avalanche.core.RequestLog` (``strategy.request_log``).

Avalanche hands a metric only the strategy: the metric reads the request in progress (its
position, kind and task) from the strategy's ``current_request``
(:class:`~pall_avalanche.strategies.base.CurrentRequest`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from avalanche.evaluation import PluginMetric
from avalanche.evaluation.metric_results import MetricValue
from avalanche.training.plugins import EvaluationPlugin

from pall_avalanche.evaluation.measurement import RequestMeasurement
from pall_avalanche.evaluation.metrics import compute_metrics, relapse_summary
from pall_avalanche.requests import InvalidRequestSequence, Request, RequestSequence

__all__ = ["RequestEvaluator", "UnlearningMetrics", "request_evaluator", "unlearning_metrics"]

PREFIX = "UnlearningMetrics"


class UnlearningMetrics(PluginMetric[dict]):
    """Every task's accuracy, the paper's metrics, request time and model size after every
    request (module docstring). It also hands each request's
    :class:`~pall_avalanche.core.RequestResult` to the strategy
    (:meth:`~pall_avalanche.strategies.base.UnlearningTemplate.request_measured`), whose
    request loop adds it to ``strategy.request_log`` (the run's
    :class:`~pall_avalanche.core.RequestLog`, saved with the strategy's checkpoints; the
    earlier requests' rows this metric reads) and fires ``after_request`` with it once the
    request is over and its parameters are finite.

    :param test_stream: the benchmark's test stream (experience t = task t).
    :param eval_mb_size: evaluation batch size (default: the strategy's training batch).
    :param label: what the learning check's warning names the run by (default: the
        strategy's class).
    """

    def __init__(self, test_stream: Sequence, eval_mb_size: int | None = None,
                 label: str | None = None) -> None:
        super().__init__()
        self.measurement = RequestMeasurement(test_stream, eval_mb_size, label)
        self.n_tasks = len(self.measurement.test_stream)
        self._last: dict = {}

    def result(self) -> dict:
        """The values emitted after the last request (name → value)."""
        return dict(self._last)

    def reset(self) -> None:
        """Nothing to reset between Avalanche's phases: the metric spans the sequence."""

    # learning requests
    def before_training_exp(self, strategy) -> None:
        """A learning request starts: start timing it."""
        self.measurement.start(strategy)

    def before_training_epoch(self, strategy) -> None:
        """An epoch of a learning request starts: start timing it."""
        self.measurement.start_epoch(strategy)

    def after_training_epoch(self, strategy) -> None:
        """An epoch ends: keep its seconds."""
        self.measurement.end_epoch(strategy)

    def after_training_exp(self, strategy) -> list[MetricValue]:
        """A learning request ends: measure it and emit the metric values."""
        return self._finish(strategy)

    # unlearning requests (events of the unlearning template, forwarded by the evaluator)
    def before_unlearning(self, strategy) -> None:
        """An unlearning request starts: start timing it."""
        self.measurement.start(strategy)

    def after_unlearning(self, strategy) -> list[MetricValue]:
        """An unlearning request ends: measure it and emit the metric values."""
        return self._finish(strategy)

    # requests making a task permanent (the CLPU protocol)
    def before_making_permanent(self, strategy) -> None:
        """A request making a task permanent starts: start timing it."""
        self.measurement.start(strategy)

    def after_making_permanent(self, strategy) -> list[MetricValue]:
        """A request making a task permanent ends: measure it and emit the metric values."""
        return self._finish(strategy)

    def _finish(self, strategy) -> list[MetricValue]:
        index, kind, task = strategy.current_request
        result = self.measurement.finish(strategy, index, kind, task)
        log = strategy.request_log
        requests = [*log.requests, (kind, task)]
        rows = [*log.accuracy, list(result.accuracy)]
        try:
            sequence = RequestSequence([Request(k, t) for k, t in requests], self.n_tasks)
            metrics = compute_metrics(rows, sequence)
        except InvalidRequestSequence:
            # outside the paper's protocol (a task learned again after it was unlearned): the
            # paper's metrics are not defined, every task's accuracy still is
            metrics = {}
        relapse, relapse_max = relapse_summary(rows, [Request(k, t) for k, t in requests])
        metrics.update(relapse=relapse, relapse_max=relapse_max)
        strategy.request_measured(result)
        values = {f"{PREFIX}/accuracy/task{t}": a for t, a in enumerate(result.accuracy)}
        values.update({f"{PREFIX}/{name}": value for name, value in metrics.items()
                       if value is not None})
        values[f"{PREFIX}/request_seconds"] = result.seconds
        values[f"{PREFIX}/model_size_mb"] = result.model_size_mb
        self._last = values
        return [MetricValue(self, name, value, index) for name, value in values.items()]

    def __str__(self) -> str:
        return PREFIX


def unlearning_metrics(test_stream: Sequence, eval_mb_size: int | None = None,
                       label: str | None = None) -> list[PluginMetric]:
    """The paper's metrics for an Avalanche ``EvaluationPlugin`` (a list, as Avalanche's
    metric helpers return): :class:`UnlearningMetrics`.

    :param test_stream: the benchmark's test stream (experience t = task t).
    :param eval_mb_size: evaluation batch size (default: the strategy's training batch).
    :param label: what the learning check's warning names the run by (default: the
        strategy's class).
    """
    return [UnlearningMetrics(test_stream, eval_mb_size, label)]


def _listens(metric, callback: str) -> bool:
    """Whether ``metric`` does something on ``callback``: a ``PluginMetric`` overrides the
    base class's no-op; any other object has the attribute."""
    if isinstance(metric, PluginMetric):
        return getattr(type(metric), callback, None) is not getattr(PluginMetric, callback, None)
    return hasattr(metric, callback)


class RequestEvaluator(EvaluationPlugin):
    """Avalanche's ``EvaluationPlugin`` that passes over an event no metric and no logger of
    it acts on: Avalanche's would still make the experience's logging view, call every
    metric's no-op and hand an empty list to every logger, on every event of every iteration
    (about a fifth of a digits run's time). What the metrics and loggers receive is
    unchanged."""

    def _update_metrics_and_loggers(self, strategy, callback: str):
        if not (any(_listens(m, callback) for m in self.metrics)
                or any(hasattr(logger, callback) for logger in self.loggers)):
            return []
        return super()._update_metrics_and_loggers(strategy, callback)


def request_evaluator(test_stream: Sequence, eval_mb_size: int | None = None, *,
                      loggers: Sequence = (), label: str | None = None) -> EvaluationPlugin:
    """An evaluator with :func:`unlearning_metrics` only (what the runner gives every
    strategy; a :class:`RequestEvaluator`): the requests are measured and ``after_request``
    fires; the values reach ``loggers`` (none by default: the runner writes records and W&B
    itself).

    :param test_stream: the benchmark's test stream (experience t = task t).
    :param eval_mb_size: evaluation batch size (default: the strategy's training batch).
    :param loggers: Avalanche loggers to show the values.
    :param label: what the learning check's warning names the run by.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No loggers specified")
        return RequestEvaluator(*unlearning_metrics(test_stream, eval_mb_size, label),
                                loggers=list(loggers))
