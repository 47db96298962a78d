"""Evaluation: the paper's metrics (pure functions), the measurement of every request as an
Avalanche metric, and the log of request results the records are built from."""

from pall_avalanche.evaluation.avalanche_metrics import (
    UnlearningMetrics,
    request_evaluator,
    unlearning_metrics,
)
from pall_avalanche.evaluation.measurement import (
    LearningWarning,
    RequestMeasurement,
    balanced_accuracy,
    evaluate_tasks,
    learning_failed,
)
from pall_avalanche.evaluation.metrics import (
    METRIC_NAMES,
    compute_metrics,
    model_size_mb,
    summarize_metrics,
)
from pall_avalanche.evaluation.request_log import RequestLog

__all__ = [
    "LearningWarning",
    "METRIC_NAMES",
    "RequestLog",
    "RequestMeasurement",
    "UnlearningMetrics",
    "balanced_accuracy",
    "compute_metrics",
    "evaluate_tasks",
    "learning_failed",
    "model_size_mb",
    "request_evaluator",
    "summarize_metrics",
    "unlearning_metrics",
]
