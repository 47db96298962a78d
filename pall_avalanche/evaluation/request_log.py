"""The requests of a run as they end: a subscriber to the template's ``after_request`` event.

:class:`RequestLog` keeps every :class:`~pall_avalanche.core.RequestResult` a strategy fired
and gives them in the record's shapes: the accuracy matrix, per-request timings, model sizes,
learning checks and the method's statistics. It is the runner's record builder's source; a
user adds it to read the same figures from their own script.
"""

from __future__ import annotations

from typing import Any

from pall_avalanche.core import RequestResult, UnlearningPlugin

__all__ = ["RequestLog"]


class RequestLog(UnlearningPlugin):
    """Every request's result, in order (stateful: resumed runs keep what came before).

    Needs an evaluator that measures requests
    (:func:`~pall_avalanche.evaluation.unlearning_metrics`): without one no result is fired.
    """

    checkpoint_attributes = ("results",)

    def __init__(self) -> None:
        super().__init__()
        #: One plain dict per request (:meth:`RequestResult` fields; JSON-ready).
        self.results: list[dict[str, Any]] = []

    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        self.results.append({
            "kind": result.kind, "task": result.task, "timing": result.timing(),
            "accuracy": list(result.accuracy), "model_size_mb": result.model_size_mb,
            "statistics": dict(result.statistics),
            "learning_check": None if result.learning_check is None
            else dict(result.learning_check),
        })

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
