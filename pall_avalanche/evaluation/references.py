"""What the field's metrics (:mod:`pall_avalanche.evaluation.field`) need from a run: the
probe that stores its final model's backbone features and per-task correct predictions in its
record (:class:`FieldProbe`), and the metrics as an Avalanche metric against reference records
at hand (:class:`ReferenceMetrics`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from avalanche.evaluation import PluginMetric
from avalanche.evaluation.metric_results import MetricValue

from pall_avalanche.data.tasks import unshuffled_batches
from pall_avalanche.evaluation.avalanche_metrics import PREFIX
from pall_avalanche.evaluation.field import field_metrics
from pall_avalanche.models import backbones

__all__ = ["FieldProbe", "ReferenceMetrics", "backbone_features"]

#: Decimals kept of a probed feature.
_DECIMALS = 5


@torch.no_grad()
def backbone_features(model: torch.nn.Module, x: torch.Tensor, task: int) -> torch.Tensor:
    """The backbone features of ``model`` on inputs ``x`` through ``task``'s route (no
    gradient; the caller sets eval mode): the output of whichever module named ``backbone``
    the forward pass runs last (an Independent or CLPU model has one per network), flattened
    per input; the logits when no backbone runs."""
    captured: list[torch.Tensor] = []
    handles = [b.register_forward_hook(lambda _m, _i, out: captured.append(out))
               for b in backbones(model)]
    try:
        logits = model(x, task)
    finally:
        for handle in handles:
            handle.remove()
    return (captured[-1] if captured else logits).flatten(1)


class FieldProbe:
    """Rides along a run of ``benchmarks/table_field.py`` (``run_record(..., probe=
    FieldProbe)``): :meth:`finish` returns, for the final model and every task t, the backbone
    features of t's test inputs through t's route (:func:`backbone_features`, 5 decimals) and
    the number of correct predictions on t's training and test data (evaluation transform)."""

    plugins: list = []

    @torch.no_grad()
    def finish(self, strategy, benchmark) -> dict[str, Any]:
        """The probe of ``strategy``'s model as it is now (class docstring), JSON-ready."""
        model, was_training = strategy.model, strategy.model.training
        model.eval()
        batch = strategy.eval_mb_size or strategy.train_mb_size
        out: dict[str, Any] = {"features": {}, "train": {}, "test": {}}
        try:
            for kind, stream in (("train", benchmark.train_stream),
                                 ("test", benchmark.test_stream)):
                for t, exp in enumerate(stream):
                    correct, n, features = 0, 0, []
                    for x, y in unshuffled_batches(exp.dataset, batch, strategy.device):
                        correct += int((model(x, t).argmax(1) == y).sum())
                        n += len(y)
                        if kind == "test":
                            features.append(backbone_features(model, x, t).cpu())
                    out[kind][str(t)] = {"correct": correct, "n": n}
                    if kind == "test":
                        out["features"][str(t)] = np.round(
                            torch.cat(features).double().numpy(), _DECIMALS).tolist()
        finally:
            model.train(was_training)
        return out


class ReferenceMetrics(PluginMetric[dict]):
    """The field's metrics as an Avalanche metric, for an ``EvaluationPlugin`` that also
    holds :func:`~pall_avalanche.evaluation.unlearning_metrics`: after every request, the
    model as it is then against the final models of two reference runs (records holding
    :class:`FieldProbe`'s probe), emitted as ``UnlearningMetrics/field/<name>``
    (:data:`~pall_avalanche.evaluation.field.FIELD_METRICS`); the values after the last
    request are the run's.

    :param benchmark: the run's benchmark (its training and test streams are probed).
    :param retrained: the record of the retrained reference (a run of the first sequence
        :func:`~pall_avalanche.evaluation.field.reference_sequences` gives).
    :param never_unlearned: the record of the never-unlearned reference (a run of the second).
    """

    def __init__(self, benchmark, retrained: Mapping[str, Any],
                 never_unlearned: Mapping[str, Any]) -> None:
        super().__init__()
        self.benchmark = benchmark
        self.retrained, self.never_unlearned = retrained, never_unlearned
        self._values: dict[str, float | None] = {}

    def result(self) -> dict:
        """The values emitted after the last request (name → value)."""
        return dict(self._values)

    def reset(self) -> None:
        """Nothing to reset between Avalanche's phases: the metric spans the sequence."""

    def after_request(self, strategy, **kwargs) -> list[MetricValue]:
        """A request is over: probe the model and emit the values against the references
        (called by the evaluator, or directly when the metric is given as a plugin)."""
        log = strategy.request_log
        record = {"requests": [{"kind": k, "task": t} for k, t in log.requests],
                  "accuracy": log.accuracy,
                  "eval_batch_size": strategy.eval_mb_size or strategy.train_mb_size,
                  "probe": FieldProbe().finish(strategy, self.benchmark)}
        self._values = field_metrics(record, self.retrained, self.never_unlearned)
        index = strategy.current_request.index
        return [MetricValue(self, f"{self}/{name}", value, index)
                for name, value in self._values.items() if value is not None]

    def __str__(self) -> str:
        return f"{PREFIX}/field"
