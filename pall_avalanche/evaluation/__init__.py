"""Evaluation: the paper's metrics (pure functions), the measurement of every request as an
Avalanche metric, and the continual-unlearning field's metrics against reference runs. (The
log of request results the records are built from is the strategy's:
:class:`~pall_avalanche.core.RequestLog`.)

The names are loaded on first use, so reading records and writing reports
(:mod:`pall_avalanche.evaluation.metrics`: numbers only) imports neither torch nor Avalanche.
"""

from __future__ import annotations

from pall_avalanche.catalog.registration import lazy_names

#: public name → the submodule defining it
_WHERE = {
    "RequestEvaluator": "avalanche_metrics",
    "UnlearningMetrics": "avalanche_metrics",
    "request_evaluator": "avalanche_metrics",
    "unlearning_metrics": "avalanche_metrics",
    "LearningWarning": "measurement",
    "RequestMeasurement": "measurement",
    "balanced_accuracy": "measurement",
    "evaluate_tasks": "measurement",
    "learning_failed": "measurement",
    "FIELD_METRICS": "field",
    "FieldProbe": "references",
    "ReferenceMetrics": "references",
    "field_metrics": "field",
    "linear_cka": "field",
    "t_interval": "metrics",
    "METRIC_NAMES": "metrics",
    "compute_metrics": "metrics",
    "model_size_mb": "metrics",
    "summarize_metrics": "metrics",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
