"""The requests of a run as they were measured: :class:`RequestLog`, owned by the evaluator's
:class:`~pall_avalanche.evaluation.UnlearningMetrics` (the one place a run's accuracy rows are
kept; :func:`~pall_avalanche.evaluation.request_log_of` finds it in an evaluator).

It keeps every :class:`~pall_avalanche.core.RequestResult` in the shapes of a record: the
accuracy matrix, per-request timings, model sizes, learning checks and the method's
statistics. The runner's record builder reads it; a user reads the same figures from their
own script.
"""

from __future__ import annotations

from typing import Any

from pall_avalanche.checkpoint import Stateful
from pall_avalanche.core import RequestResult

__all__ = ["RequestLog"]


class RequestLog(Stateful):
    """Every request's result, in order (stateful: resumed runs keep what came before)."""

    checkpoint_attributes = ("results",)

    def __init__(self) -> None:
        #: One plain dict per request (:class:`RequestResult` fields; JSON-ready).
        self.results: list[dict[str, Any]] = []

    def add(self, result: RequestResult) -> None:
        """Append a measured request."""
        self.results.append({
            "kind": result.kind, "task": result.task, "timing": result.timing(),
            "accuracy": list(result.accuracy), "model_size_mb": result.model_size_mb,
            "statistics": dict(result.statistics),
            "learning_check": None if result.learning_check is None
            else dict(result.learning_check),
        })

    @property
    def requests(self) -> list[tuple[str, int]]:
        """The requests so far, as (kind, task)."""
        return [(r["kind"], r["task"]) for r in self.results]

    @property
    def accuracy(self) -> list[list[float]]:
        """The accuracy matrix: one row per request, one column per task."""
        return [r["accuracy"] for r in self.results]

    @property
    def timings(self) -> list[dict[str, Any]]:
        """Per request: kind, task, seconds (and per-epoch seconds for learning)."""
        return [r["timing"] for r in self.results]

    @property
    def model_sizes_mb(self) -> list[float]:
        """The inference model size after each request."""
        return [r["model_size_mb"] for r in self.results]

    @property
    def learning_checks(self) -> list[dict[str, Any]]:
        """Per learning request: request index, task, balanced training accuracy, failed."""
        return [r["learning_check"] for r in self.results if r["learning_check"] is not None]

    def unlearning_statistics(self) -> list[dict[str, Any]] | None:
        """The method's statistics of every unlearning request, or ``None`` when the method
        reports none."""
        stats = [r["statistics"] for r in self.results if r["kind"] == "unlearn"]
        return stats if any(stats) else None
