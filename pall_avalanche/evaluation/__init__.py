"""Evaluation: the paper's metrics (pure functions), the measurement of every request as an
Avalanche metric, and the log of request results the records are built from.

The names are loaded on first use, so reading records and writing reports
(:mod:`pall_avalanche.evaluation.metrics`: numbers only) imports neither torch nor Avalanche.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name → the submodule defining it
_WHERE = {
    "UnlearningMetrics": "avalanche_metrics",
    "request_evaluator": "avalanche_metrics",
    "unlearning_metrics": "avalanche_metrics",
    "LearningWarning": "measurement",
    "RequestMeasurement": "measurement",
    "balanced_accuracy": "measurement",
    "evaluate_tasks": "measurement",
    "learning_failed": "measurement",
    "METRIC_NAMES": "metrics",
    "compute_metrics": "metrics",
    "model_size_mb": "metrics",
    "summarize_metrics": "metrics",
    "RequestLog": "request_log",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return __all__
