"""Sequential: plain fine-tuning of one dense model; unlearning changes nothing."""

from __future__ import annotations

from pall_avalanche.catalog.declaration import Method
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["DECLARATIONS", "Sequential"]


class Sequential(UnlearningTemplate):
    """Fine-tunes the whole model on each task. Unlearning only drops the task from
    ``active_tasks``: every parameter stays as it is (inexact, F_u = 0)."""


DECLARATIONS = (Method("sequential", Sequential, exact=False, label="Sequential"),)
