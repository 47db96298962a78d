"""Audit-only positive controls beside PALL's (:mod:`pall_avalanche.strategies.leaky`): a
method whose unlearning changes nothing, so that the audit can show its attack detects a model
of that kind keeping everything it learned (docs/explanation/audit.md, "How exact is
exact?").

- ``independent_no_unlearning``: :class:`~pall_avalanche.strategies.independent.Independent`
  whose unlearning keeps the task's own model (the control of the methods that give every task
  a model of its own).

The dense methods' control is Sequential itself (its unlearning changes nothing) and the
subnetwork methods' is ``pall_no_unlearning``; :mod:`pall_avalanche.audit.plans` says which
control judges which method. Registered as inexact methods for the audit only; no table of the
paper runs them.
"""

from __future__ import annotations

from pall_avalanche.catalog.declaration import Method
from pall_avalanche.strategies.independent import Independent

__all__ = ["DECLARATIONS", "IndependentNoUnlearning"]


class IndependentNoUnlearning(Independent):
    """Independent whose unlearning keeps the task's model: the task leaves ``active_tasks``
    and nothing else changes (the positive control of the per-task models)."""

    def _unlearn(self, task: int) -> None:
        """Keep ``task``'s model (a leak of everything ``task`` trained)."""


DECLARATIONS = (Method("independent_no_unlearning", IndependentNoUnlearning, exact=False,
                       label="Independent, no unlearning (control)"),)
