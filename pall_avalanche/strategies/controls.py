"""Audit-only positive controls and leaky variants beside PALL's
(:mod:`pall_avalanche.strategies.leaky`), for the two other kinds of model the audit judges
(docs/explanation/audit.md, "How exact is exact?"): a method whose unlearning changes nothing,
so that the audit can show its attack detects a model of that kind keeping everything it
learned, and variants that keep a known part of it, so that it can say how small a leak of
that kind's channel it detects.

- a model per task (:class:`LeakyIndependent`):
  :class:`~pall_avalanche.strategies.independent.Independent` whose unlearning keeps t's own
  model and re-draws each of its entries with probability 1 − ``leak_fraction`` only;
  ``independent_no_unlearning`` (f = 1, the control), ``independent_leak_50`` and
  ``independent_leak_25``;
- one dense network (:class:`LeakySequential`): Sequential (whose unlearning changes nothing:
  the control) whose unlearning subtracts t's own update (the change of every entry while t
  was learned) from each entry with probability 1 − ``leak_fraction``; what later tasks
  learned on top of t stays either way, so even f = 0 is not exact;
  ``sequential_leak_50`` and ``sequential_leak_25``.

The entries kept are drawn from a generator of their own (seeded by
:data:`~pall_avalanche.strategies.leaky.LEAK_SEED` and the task), never from the run's random
stream, so that a variant learns exactly as its method does and its runs on a sequence
without unlearning requests are its method's (:mod:`pall_avalanche.audit.twins`).
:mod:`pall_avalanche.audit.plans` says which control and which variants judge which method.
Registered as inexact methods for the audit only; no table of the paper runs them.
"""

from __future__ import annotations

import copy

import torch

from pall_avalanche.catalog.declaration import Key, Method
from pall_avalanche.models.init import reinitialize_
from pall_avalanche.strategies.independent import Independent
from pall_avalanche.strategies.leaky import LEAK_SEED, kept_entries
from pall_avalanche.strategies.sequential import Sequential

__all__ = ["DECLARATIONS", "LeakyIndependent", "LeakySequential"]


def _check_fraction(leak_fraction: float) -> float:
    if not 0.0 <= leak_fraction <= 1.0:
        raise ValueError(f"leak_fraction={leak_fraction!r} must lie in [0, 1]")
    return float(leak_fraction)


class LeakyIndependent(Independent):
    """Independent whose unlearning keeps t's own model, each entry re-drawn from the
    initialisation distribution with probability 1 − ``leak_fraction`` (f = 1: nothing
    changes, the positive control of the per-task models); t leaves ``active_tasks``.

    :param leak_fraction: the probability that an entry of t's model keeps its learned value.
    :param kwargs: :class:`~pall_avalanche.strategies.independent.Independent`'s arguments.
    """

    def __init__(self, *, leak_fraction: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.leak_fraction = _check_fraction(leak_fraction)

    def _unlearn(self, task: int) -> None:
        """Re-draw the entries of ``task``'s model the draw does not keep; keep the model."""
        if self.leak_fraction == 1.0:
            return
        model = self.model.model_for(task)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(LEAK_SEED + task)
            fresh = reinitialize_(copy.deepcopy(model))
        params = list(model.parameters())
        kept = kept_entries(task, [p.shape for p in params], self.leak_fraction)
        with torch.no_grad():
            for p, new, keep in zip(params, fresh.parameters(), kept, strict=True):
                p.copy_(torch.where(keep.to(p.device), p, new))


class LeakySequential(Sequential):
    """Sequential whose unlearning of t subtracts t's own update from each entry with
    probability 1 − ``leak_fraction`` (module docstring).

    :param leak_fraction: the probability that an entry keeps t's update.
    :param kwargs: :class:`~pall_avalanche.strategies.sequential.Sequential`'s arguments.
    """

    checkpoint_attributes = ("updates",)

    def __init__(self, *, leak_fraction: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.leak_fraction = _check_fraction(leak_fraction)
        #: Per learned task, every parameter's change while it was learned (name → tensor).
        self.updates: dict[int, dict[str, torch.Tensor]] = {}
        self._before: dict[str, torch.Tensor] = {}

    def _before_training_exp(self, **kwargs) -> None:
        super()._before_training_exp(**kwargs)
        self._before = {n: p.detach().clone() for n, p in self.model.named_parameters()}

    def _after_training_exp(self, **kwargs) -> None:
        self.updates[self.experience.task_label] = {
            n: p.detach() - self._before[n] for n, p in self.model.named_parameters()
            if n in self._before}
        self._before = {}
        super()._after_training_exp(**kwargs)

    def _unlearn(self, task: int) -> None:
        """Subtract ``task``'s update from the entries the draw does not keep."""
        update = self.updates.pop(task)
        params = dict(self.model.named_parameters())
        kept = kept_entries(task, [u.shape for u in update.values()], self.leak_fraction)
        with torch.no_grad():
            for (name, delta), keep in zip(update.items(), kept, strict=True):
                params[name].sub_(torch.where(keep.to(delta.device), 0.0, delta))


_FRACTION = Key(1.0, "the probability that an entry keeps what t trained (the audit's "
                "calibration)", low=0, high=1)
_INDEPENDENT = Method("leaky_independent", LeakyIndependent, exact=False,
                      keys={"leak_fraction": _FRACTION})
_SEQUENTIAL = Method("leaky_sequential", LeakySequential, exact=False,
                     keys={"leak_fraction": _FRACTION})
#: The per-task models' control and leaky variants, then the dense network's variants
#: (:data:`~pall_avalanche.catalog.AUDIT_PER_TASK_CONTROL`,
#: :data:`~pall_avalanche.catalog.AUDIT_PER_TASK_LEAKS`,
#: :data:`~pall_avalanche.catalog.AUDIT_DENSE_LEAKS`).
DECLARATIONS = (
    _INDEPENDENT.variant("independent_no_unlearning", "Independent, no unlearning (control)",
                         leak_fraction=1.0),
    *(_INDEPENDENT.variant(f"independent_leak_{percent}",
                           f"Independent keeping {percent} % of t's model",
                           leak_fraction=percent / 100) for percent in (50, 25)),
    *(_SEQUENTIAL.variant(f"sequential_leak_{percent}",
                          f"Sequential keeping {percent} % of t's update",
                          leak_fraction=percent / 100) for percent in (50, 25)),
)
