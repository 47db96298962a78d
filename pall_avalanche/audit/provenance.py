"""Run-time provenance of a subnetwork method's entries (:class:`ProvenanceTracker`), read from
the weights' values alone, independently of the method's own bookkeeping."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pall_avalanche.core import RequestResult
from pall_avalanche.masks import SubnetworkNet
from pall_avalanche.requests import RequestKind
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate

__all__ = ["ProvenanceTracker"]


def _flat(weights: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([w.detach().reshape(-1) for w in weights]).clone()


class ProvenanceTracker(UnlearningPlugin):
    """Run-time provenance of every maskable entry of a subnetwork method, tracked from the
    weights' values alone (independently of the method's own bookkeeping).

    - ``direct[t]``: entries whose current value was updated with D^t (changed during t's
      learning request) or with B^t (changed during a retraining that used t's buffer),
      cleared when the entry is re-drawn.
    - ``forward[t]``: entries updated while an entry of ``direct[t] ∪ forward[t]`` was in the
      forward pass (a later task trained on top of t's weights), or retrained towards stored
      logits that depend on t.

    At every unlearning request of t it checks (``results``): *direct* — every entry of
    ``direct[t]`` changed value during the request (was re-drawn) and, where the method
    promises a ``redraw_set(t)``, lies in that set, and no entry was retrained with B^t during
    the request; *strict* — the same for ``forward[t]``, and no remaining buffer stores logits
    computed with t's weights. Entries changed during an unlearning request count as re-drawn;
    those in a remaining task's mask as then retrained with that task's buffer (B^u's loss
    reaches only m_u), the others as trained with the remaining tasks' weights in the forward
    pass. Which buffers a retraining replays is read from the replay steps' own event
    (``before_replay_steps``): when t's own request replays B^t, every entry it retrained
    counts as trained with B^t and left after the request (``buffer_entries``). "In the
    forward pass" is read from the tasks' final masks, not the evolving masks during
    training: the strict check is an under-approximation. Strategies whose model is not a
    :class:`~pall_avalanche.masks.SubnetworkNet` are not tracked (``results`` stays None).
    The weights are read when a request starts (and after each epoch); each request is booked
    when it is over, in the template's ``after_request`` event.
    """

    def __init__(self) -> None:
        super().__init__()
        self.results: list[dict] | None = None
        self.direct: dict[int, torch.Tensor] = {}
        self.forward: dict[int, torch.Tensor] = {}
        self.logit_deps: dict[int, set[int]] = {}
        self._start = self._end = self._expected = None
        #: The task whose unlearning request runs, and whether its replay steps used B^task.
        self._unlearning: int | None = None
        self._replayed_own = False

    @staticmethod
    def _weights(strategy: UnlearningTemplate) -> list[torch.Tensor] | None:
        net = strategy.model
        return [w for _, w in net.named_weights()] if isinstance(net, SubnetworkNet) else None

    @staticmethod
    def _mask(strategy: UnlearningTemplate, task: int) -> torch.Tensor:
        bools = strategy.model.masks[task].bools()
        return torch.cat([b.reshape(-1) for b in bools.values()])

    def _influencers(self, mask: torch.Tensor, exclude: int | None = None) -> set[int]:
        return {u for u in self.direct if u != exclude
                and bool(((self.direct[u] | self.forward[u]) & mask).any())}

    def _clear(self, entries: torch.Tensor) -> None:
        for u in self.direct:
            self.direct[u] &= ~entries
            self.forward[u] &= ~entries

    def before_training_exp(self, strategy, **kwargs) -> None:
        weights = self._weights(strategy)
        if weights is None:
            return
        if self.results is None:
            self.results = []
        self._start = _flat(weights)

    def after_training_epoch(self, strategy, **kwargs) -> None:
        if self._start is not None:
            self._end = _flat(self._weights(strategy))

    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        """Book the request once it is over (the template's ``after_request``)."""
        if result.kind == RequestKind.LEARN:
            self._learned(strategy, result.task)
        else:
            self._unlearned(strategy, result.task)

    def _learned(self, strategy: UnlearningTemplate, task: int) -> None:
        if self._start is None:
            return
        changed = self._end != self._start
        mask = self._mask(strategy, task)
        for u in self._influencers(mask, exclude=task):
            self.forward[u] |= changed
        self.direct[task] = changed.clone()
        self.forward[task] = torch.zeros_like(changed)
        self._clear(_flat(self._weights(strategy)) != self._end)  # re-drawn after learning
        if strategy.stores_logits():
            self.logit_deps[task] = self._influencers(mask, exclude=task)
        self._start = self._end = None

    def before_unlearning(self, strategy, task: int, **kwargs) -> None:
        if self.results is None:
            return
        self._start = _flat(self._weights(strategy))
        self._unlearning, self._replayed_own = task, False
        promised = strategy.redraw_set(task)
        self._expected = None if promised is None else torch.cat(
            [b.reshape(-1) for b in promised.bools().values()])

    def before_replay_steps(self, strategy, tasks, forget=None, **kwargs) -> None:
        """Note whether the unlearning request of t replays B^t."""
        if self._unlearning is not None and self._unlearning in tasks:
            self._replayed_own = True

    def _unlearned(self, strategy: UnlearningTemplate, task: int) -> None:
        if self.results is None or self._start is None:
            return
        changed = _flat(self._weights(strategy)) != self._start
        covered = changed if self._expected is None else changed & self._expected
        remaining = list(strategy.active_tasks)
        direct, forward = self.direct.pop(task), self.forward.pop(task)
        self.logit_deps.pop(task, None)
        logits_free = not any(task in self.logit_deps.get(u, ()) for u in remaining)
        masks = {u: self._mask(strategy, u) for u in remaining}
        retrained = (changed & torch.stack(list(masks.values())).any(0) if masks
                     else torch.zeros_like(changed))
        # retrained with B^t during t's own request: trained with B^t, and left after it
        with_buffer = retrained if self._replayed_own else torch.zeros_like(changed)
        missed_direct = int(((direct & ~covered) | with_buffer).sum())
        missed_forward = int((forward & ~covered).sum())
        self.results.append({
            "task": task, "direct_entries": int(direct.sum()), "direct_missed": missed_direct,
            "buffer_entries": int(with_buffer.sum()),
            "forward_entries": int(forward.sum()), "forward_missed": missed_forward,
            "logits_free": logits_free, "direct_pass": missed_direct == 0,
            "strict_pass": missed_direct == 0 and missed_forward == 0 and logits_free,
        })
        self._clear(changed)
        if remaining:
            sources = set().union(*(self._influencers(m) for m in masks.values()))
            sources |= set().union(*(self.logit_deps.get(u, set()) for u in remaining))
            for u in remaining:
                # B^u's loss term moves only entries of u's own mask (docs/fidelity.md,
                # "PALL"); the rest of the retrained entries merely saw u's weights in the
                # forward pass.
                self.direct[u] |= retrained & masks[u]
                self.forward[u] |= retrained & ~masks[u]
            for u in sources & set(self.direct):
                self.forward[u] |= retrained
        self._start = self._expected = self._unlearning = None
        self._replayed_own = False

