"""Evaluation: the paper's metrics (pure functions) and the per-request evaluation plugin."""

from pall_avalanche.evaluation.metrics import (
    METRIC_NAMES,
    compute_metrics,
    model_size_mb,
    summarize_metrics,
)
from pall_avalanche.evaluation.plugin import RequestEvaluationPlugin, evaluate_tasks

__all__ = [
    "METRIC_NAMES",
    "RequestEvaluationPlugin",
    "compute_metrics",
    "evaluate_tasks",
    "model_size_mb",
    "summarize_metrics",
]
