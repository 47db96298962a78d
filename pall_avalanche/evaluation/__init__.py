"""Evaluation: the paper's metrics (pure functions) and the per-request evaluation plugin."""

from pall_avalanche.evaluation.avalanche_metrics import UnlearningMetrics, unlearning_metrics
from pall_avalanche.evaluation.metrics import (
    METRIC_NAMES,
    compute_metrics,
    model_size_mb,
    summarize_metrics,
)
from pall_avalanche.evaluation.plugin import (
    LearningWarning,
    RequestEvaluationPlugin,
    balanced_accuracy,
    evaluate_tasks,
    learning_failed,
)

__all__ = [
    "LearningWarning",
    "METRIC_NAMES",
    "RequestEvaluationPlugin",
    "UnlearningMetrics",
    "balanced_accuracy",
    "compute_metrics",
    "evaluate_tasks",
    "learning_failed",
    "model_size_mb",
    "summarize_metrics",
    "unlearning_metrics",
]
