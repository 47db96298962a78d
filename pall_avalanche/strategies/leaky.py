"""Audit-only PALL variants that leak a known part of D^t: the audit's positive control and
its dose-response (docs/explanation/audit.md, "How exact is exact?").

An audit that finds nothing says something only if it would have found a leak of a known
size. :class:`LeakyPALL` is PALL whose unlearning of t deliberately keeps one thing trained
with D^t (``leak``):

- ``everything``: unlearning changes nothing (t's mask, head and weights stay, and later
  tasks leave t's entries frozen as if t remained): the positive control, the largest
  possible leak;
- ``redraw``: unlearning re-draws (and retrains, as PALL does) each entry t trained, of m̄_t
  (:meth:`~pall_avalanche.strategies.pall.PALL.forget_set`) and of t's own head, with
  probability 1 − ``leak_fraction`` only (independently, from a generator seeded by the
  task), and t keeps its subnetwork: its mask stays stored and frozen and still answers t, so
  a fraction f of what t trained leaks through t's own outputs (the dose-response);
- ``body``: the entries of m̄_t outside t's output keep their learned values; t's output is
  re-drawn and its mask dropped, as PALL does;
- ``head``: t's output (its rows of a shared head, or its own head) keeps its learned
  values; everything else is unlearned as PALL does. With ``body`` and ``head`` t has no
  mask any more, so the next learning request re-draws every masked entry no remaining task
  holds (:class:`~pall_avalanche.strategies.subnetwork.WeightResettingPlugin`), the kept
  ones among them (a head of t's own, outside the masks, stays): their leak lasts until then
  (on the audited sequence, one request);
- ``buffer``: the retraining after unlearning t replays B^t (its samples and stored logits,
  through t's mask) beside the remaining tasks' buffers, then drops it: the retrained shared
  entries learn from t's buffer (through t's output as PALL leaves it before retraining,
  re-drawn).

They are registered (``pall_no_unlearning``, ``pall_leak_redraw_<percent>``,
``pall_leak_body``, ``pall_leak_head``, ``pall_leak_buffer``;
:data:`~pall_avalanche.catalog.AUDIT_LEAKS`) as inexact methods for the audit only; no table
of the paper runs them.
"""

from __future__ import annotations

import torch

from pall_avalanche.catalog.declaration import Key, Method
from pall_avalanche.masks import MaskSet
from pall_avalanche.strategies.pall import PALL, PALL_KEYS

__all__ = ["LEAKS", "DECLARATIONS", "LeakyPALL", "kept_entries"]

#: ``leak`` values (module docstring).
LEAKS = ("everything", "redraw", "body", "head", "buffer")
#: Seeds the choice of the entries a ``redraw`` leak keeps (plus the task): drawn from a
#: generator of its own, so that asking for the re-drawn set twice (the provenance check
#: does) gives the same set and draws nothing from the run's random stream.
LEAK_SEED = 20_250_424


def kept_entries(task: int, shapes, fraction: float) -> list[torch.Tensor]:
    """Per tensor of ``shapes``, the entries that keep what ``task`` trained: each with
    probability ``fraction``, a fixed draw per task from a generator of its own
    (:data:`LEAK_SEED`), so that asking twice gives the same entries and nothing is drawn from
    the run's random stream."""
    generator = torch.Generator().manual_seed(LEAK_SEED + task)
    return [torch.rand(shape, generator=generator) < fraction for shape in shapes]


class LeakyPALL(PALL):
    """PALL whose unlearning leaks (module docstring).

    :param leak: what unlearning keeps, one of :data:`LEAKS`.
    :param leak_fraction: with ``leak="redraw"``, the probability that an entry t trained
        keeps its learned value (0 < f ≤ 1); ignored otherwise.
    :param kwargs: :class:`~pall_avalanche.strategies.pall.PALL`'s arguments.
    """

    checkpoint_attributes = (*PALL.checkpoint_attributes, "kept")

    def __init__(self, *, leak: str = "redraw", leak_fraction: float = 1.0, **kwargs) -> None:
        if leak not in LEAKS:
            raise ValueError(f"leak={leak!r} is invalid; valid: {', '.join(LEAKS)}")
        if not 0.0 < leak_fraction <= 1.0:
            raise ValueError(f"leak_fraction={leak_fraction!r} must lie in (0, 1]")
        super().__init__(**kwargs)
        self.leak, self.leak_fraction = leak, float(leak_fraction)
        #: Tasks "unlearned" with ``leak="everything"`` or ``"redraw"``: their masks stay
        #: stored and frozen.
        self.kept: list[int] = []
        self._replayed: tuple[int, MaskSet] | None = None
        if leak == "buffer":
            self.memory.delete_on_unlearning = False

    def kept_tasks(self) -> list[int]:
        """The active tasks and those whose unlearning kept their subnetwork (its entries stay
        frozen and are never re-drawn as unused)."""
        return [*self.active_tasks, *self.kept]

    def redraw_set(self, task: int) -> MaskSet:
        """PALL's re-drawn entries without the leaked ones (``redraw``: a random fraction;
        ``body``: all but t's output entries; ``head``: t's output entries)."""
        entries = super().redraw_set(task)
        net = self.model
        if self.leak == "redraw":
            kept = dict(zip(net.shapes, kept_entries(task, net.shapes.values(),
                                                     self.leak_fraction),
                            strict=True))
        elif self.leak in ("body", "head"):
            heads = net.head_masks(task)
            in_head = {name: heads[name].cpu() if name in heads else torch.zeros(shape, dtype=bool)
                       for name, shape in net.shapes.items()}
            kept = in_head if self.leak == "head" else {n: ~m for n, m in in_head.items()}
        else:
            return entries
        return entries - MaskSet.from_bool(kept).to(entries.device)

    def _unlearn(self, task: int) -> None:
        if self.leak == "everything":
            self.kept.append(task)
            return
        own = [p.detach().clone() for p in self.model.net.task_parameters(task)]
        mask, statistics = self.model.masks[task], self.model.statistics.get(task)
        if self.leak == "buffer":
            self._replayed = (task, mask)
        try:
            super()._unlearn(task)
        finally:
            self._replayed = None
        if self.leak in ("head", "redraw"):
            shapes = [*self.model.shapes.values(), *(value.shape for value in own)]
            # t's own head draws after the network's entries (as redraw_set's draw)
            keep = (kept_entries(task, shapes, self.leak_fraction)[len(self.model.shapes):]
                    if self.leak == "redraw" else [torch.ones_like(v, dtype=bool) for v in own])
            with torch.no_grad():
                for p, value, kept in zip(self.model.net.task_parameters(task), own, keep,
                                          strict=True):
                    p.copy_(torch.where(kept.to(p.device), value, p))
        if self.leak == "redraw":
            self.model.set_mask(task, mask)
            if statistics is not None:
                self.model.statistics[task] = statistics
            self.kept.append(task)
        if self.leak == "buffer":
            self.memory.drop(task)

    def retrain(self, entries: MaskSet, tasks: list[int]) -> None:
        """PALL's retraining; with ``leak="buffer"`` while t is unlearned, t (its stored mask
        restored for the steps) is replayed beside the remaining tasks."""
        if self._replayed is None:
            super().retrain(entries, tasks)
            return
        task, mask = self._replayed
        self.model.set_mask(task, mask)
        try:
            super().retrain(entries, [*tasks, task])
        finally:
            self.model.remove_mask(task)


_LEAKY = Method("leaky_pall", LeakyPALL, exact=False, keys={
    **PALL_KEYS,
    "leak": Key("redraw", "what unlearning keeps (the audit's calibration)", choices=LEAKS),
    "leak_fraction": Key(1.0, "with leak redraw, the probability that an entry t trained "
                         "keeps its learned value", low=0, low_open=True, high=1),
})
#: The audit's positive control and its leaky variants (:data:`~pall_avalanche.catalog.
#: AUDIT_CONTROL`, :data:`~pall_avalanche.catalog.AUDIT_LEAKS`); inexact by construction.
DECLARATIONS = (
    _LEAKY.variant("pall_no_unlearning", "PALL, no unlearning (control)", leak="everything",
                   leak_fraction=1.0),
    *(_LEAKY.variant(f"pall_leak_redraw_{percent}",
                     f"PALL keeping {percent} % of what t trained", leak="redraw",
                     leak_fraction=percent / 100) for percent in (50, 25, 10)),
    *(_LEAKY.variant(f"pall_leak_{leak}", f"PALL keeping {what}", leak=leak, leak_fraction=1.0)
      for leak, what in (("body", "m̄_t (t's head re-drawn)"), ("head", "t's head"),
                         ("buffer", "B^t in retraining"))),
)
