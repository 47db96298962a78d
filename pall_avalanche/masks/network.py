"""A task-incremental network run through per-task subnetwork masks (:class:`SubnetworkNet`)
and the straight-through estimator of its masked weights."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
from avalanche.models import MultiTaskModule
from torch import nn
from torch.func import functional_call

from pall_avalanche.masks.maskset import MaskSet
from pall_avalanche.masks.selection import (
    HEAD,
    THRESHOLD_METHODS,
    draw_initial,
    maskable_parameters,
    running_statistics_layers,
    selection_slices,
    slice_counts,
    subnetwork_mask,
)
from pall_avalanche.masks.task_statistics import TaskStatistics
from pall_avalanche.models.grouped import stack_groups
from pall_avalanche.models.multihead import TaskIncrementalNet, forward_by_task
from pall_avalanche.models.multitask import MultiHeadNet, task_network

__all__ = ["SubnetworkNet"]


class _MaskedWeight(torch.autograd.Function):
    """``w ⊙ m(s)`` with the straight-through estimator; the mask is computed once in
    forward and saved as bool (no sort, no float mask), by :func:`subnetwork_mask` (per
    slice; with ``eligible`` the ``keep`` eligible entries of largest |score|; thresholds by
    ``method``)."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, scores: torch.Tensor, alpha: float,
                slices: int = 1, eligible: torch.Tensor | None = None,
                keep: int | Sequence[int] | None = None, method: str = "auto"
                ) -> torch.Tensor:
        mask = subnetwork_mask(scores, alpha, slices, eligible, keep, method)
        ctx.save_for_backward(weight, scores, mask)
        return torch.where(mask, weight, 0.0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        weight, scores, mask = ctx.saved_tensors
        return (torch.where(mask, grad, 0.0), grad * weight * scores.sign(),
                None, None, None, None, None)



class _MaskedStack(torch.autograd.Function):
    """``w ⊙ m_g`` for every stacked 0/1 mask m_g: ``(G, *w.shape)``. The weight's gradient
    sums the groups' in the memory order of the incoming gradient: a batched linear layer
    hands back each group's gradient transposed, and a sum over the group dimension in that
    layout is several times slower on the CPU."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(masks)
        return weight * masks

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (masks,) = ctx.saved_tensors
        product = grad * masks
        order = sorted(range(1, product.dim()), key=lambda d: -product.stride(d))
        total = product.permute(0, *order).sum(0)
        return total.permute(*sorted(range(len(order)), key=order.__getitem__)), None


class SubnetworkNet(TaskStatistics, MultiTaskModule):
    """A task-incremental network evaluated through per-task subnetwork masks.

    - A task with a stored mask runs with ``w ⊙ m_t`` on its maskable parameters. Masks stay
      bit-packed; only the :attr:`unpacked_cache` most recently used ones are kept unpacked
      (bool, on the weights' device), so memory does not grow with the number of tasks.
    - The task being learned (``learning_task``, with ``scores`` set) runs with the
      straight-through top-k mask of its scores at connectivity ``alpha`` (or, when
      :meth:`start_learning` got ``eligible`` and ``keep``, of ``keep[name]`` eligible
      entries per tensor: disjoint subnetworks).
    - Selection is per layer, and a fused Q/K/V projection is masked per slice: each of its
      ``slices[name] = 3`` row blocks (W_Q, W_K, W_V) is its own layer, with its own top-k and
      its own ``keep`` count, as the paper's reference masks W_Q, W_K and W_V as separate
      layers (:func:`selection_slices`, docs/fidelity.md). The training forward and the
      stored mask both come from :func:`subnetwork_mask`.
    - Any other task (never learned, or unlearned) runs on the dense current weights.
    - Normalisation statistics are task state. Every norm layer with running statistics
      (:func:`running_statistics_layers`) runs, for task t, on t's own set
      (:attr:`statistics`): the learning task's set starts fresh (as ``reset_running_stats``
      leaves it) at :meth:`start_statistics` and is updated by its training forward passes
      only; from :meth:`stop_statistics` on it is frozen, used whenever t is evaluated, and a
      train-mode forward of t (PALL's retraining) normalises with batch statistics and leaves it
      unchanged. A task without a set (never learned, or unlearned: :meth:`remove_mask`
      deletes it) runs on fresh statistics. The model's own statistics buffers are never read
      or written.

    The wrapped network is used as is: its parameters and statistics are substituted per call
    through ``torch.func.functional_call``.

    :param net: the network: a :class:`~pall_avalanche.models.TaskIncrementalNet` (backbone +
        shared multi-head output) or a :class:`~pall_avalanche.models.multitask.MultiHeadNet`
        (an Avalanche model with a ``MultiHeadClassifier``).
    :param alpha: per-layer connectivity of a task's subnetwork.
    :param threshold: how the per-layer thresholds are found
        (:data:`~pall_avalanche.masks.THRESHOLD_METHODS`; the same masks whichever, ``auto``:
        ``numpy.partition`` on CPU, ``torch.topk`` on a GPU); also settable later, as
        :attr:`threshold`.
    """

    def __init__(self, net: TaskIncrementalNet | MultiHeadNet, alpha: float,
                 threshold: str = "auto") -> None:
        super().__init__()
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha={alpha!r} must be in (0, 1] (the fraction of each "
                             "layer's entries a task subnetwork keeps)")
        self.net = task_network(net)
        self.alpha = alpha
        self.threshold = threshold
        self.maskable = maskable_parameters(net)
        if not self.maskable:
            raise ValueError(f"model {type(net.model).__name__} has no Conv2d/Linear layer "
                             "outside its MultiHeadClassifier, so a subnetwork method has "
                             "nothing to mask; add a feature layer before the classifier")
        params = dict(net.named_parameters())
        self.shapes = {name: params[name].shape for name in self.maskable}
        #: name → number of selection slices (3 for a fused Q/K/V projection, else 1).
        self.slices = selection_slices(net)
        self.masks: dict[int, MaskSet] = {}
        self.scores: nn.ParameterList | None = None
        self.learning_task: int | None = None
        self.eligible: dict[str, torch.Tensor] | None = None
        #: name → entries kept per slice (with ``eligible``).
        self.keep: dict[str, list[int]] | None = None
        #: How many tasks' masks are kept unpacked at once (least recently used dropped).
        self.unpacked_cache = 2
        self._cache: dict[int, dict[str, torch.Tensor]] = {}
        #: name → norm layer with running statistics (:func:`running_statistics_layers`).
        self.norm_layers = running_statistics_layers(net)
        #: task → its normalisation statistics (buffer name → tensor).
        self.statistics: dict[int, dict[str, torch.Tensor]] = {}
        #: The task whose statistics train-mode forward passes update (its learning request).
        self.statistics_task: int | None = None
        #: (tasks, their masks and statistics stacked) while :meth:`stacked` runs.
        self._stack: tuple[tuple[int, ...], dict[str, torch.Tensor],
                           dict[str, torch.Tensor] | None] | None = None

    @property
    def threshold(self) -> str:
        """How the learning task's per-layer thresholds are found
        (:data:`~pall_avalanche.masks.THRESHOLD_METHODS`)."""
        return self._threshold

    @threshold.setter
    def threshold(self, method: str) -> None:
        if method not in THRESHOLD_METHODS:
            raise ValueError(f"mask_threshold={method!r} is invalid; valid: "
                             f"{THRESHOLD_METHODS}")
        self._threshold = method

    # ------------------------------------------------------------------ parameters
    def weight(self, name: str) -> nn.Parameter:
        """The maskable parameter ``name`` of the wrapped network."""
        return self.net.get_parameter(name)

    @property
    def device(self) -> torch.device:
        """The device of the maskable parameters."""
        return self.weight(next(iter(self.maskable))).device

    def scored_names(self) -> list[str]:
        """Maskable parameters whose mask comes from scores (all but the head)."""
        return [name for name in self.maskable if name != HEAD]

    def head_masks(self, task: int) -> dict[str, torch.Tensor]:
        """The maskable output entries of ``task`` (name → bool mask): its rows of a shared
        head; none for per-task heads, which are task parameters."""
        return {name: mask for name, mask in self.net.head_entries(task).items()
                if name in self.maskable}

    def named_weights(self) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of every maskable parameter."""
        for name in self.maskable:
            yield name, self.weight(name)

    # ------------------------------------------------------------------ masks
    def start_learning(self, task: int, eligible: MaskSet | None = None,
                       keep: Mapping[str, int | Sequence[int]] | None = None
                       ) -> nn.ParameterList:
        """Fresh scores for ``task`` (one per scored tensor, in :meth:`scored_names` order),
        drawn like the weights; returns them.

        :param eligible: restrict the mask to these entries (default: any entry)...
        :param keep: ...and keep ``keep[name]`` of them per scored tensor (more only on tied
            scores), instead of a fraction ``alpha`` of the tensor (give both or neither); one
            count per slice for a tensor of several :attr:`slices` (an int or a one-element
            sequence otherwise).
        """
        if (eligible is None) != (keep is None):
            raise ValueError("start_learning needs both eligible and keep, or neither")
        if eligible is not None:
            bools = eligible.bools(self.device)
            counts = {}
            for name in self.scored_names():
                slices = self.slices[name]
                counts[name] = slice_counts(keep[name], slices)
                available = bools[name].reshape(slices, -1).sum(1).tolist()
                for i, (k, a) in enumerate(zip(counts[name], available, strict=True)):
                    if not 0 <= k <= a:
                        where = f" (slice {i} of {slices})" if slices > 1 else ""
                        raise ValueError(f"keep[{name!r}]={keep[name]} is invalid{where}: it "
                                         f"must be between 0 and the {a} eligible entries")
            self.eligible = {name: bools[name] for name in self.scored_names()}
            self.keep = counts
        self.learning_task = task
        self.scores = nn.ParameterList(
            nn.Parameter(draw_initial(self.maskable[name], name)) for name in self.scored_names()
        )
        return self.scores

    def current_mask(self) -> dict[str, torch.Tensor]:
        """The learning task's mask from its current scores (bool, per tensor)."""
        assert self.scores is not None and self.learning_task is not None
        masks = {name: subnetwork_mask(score, *self.selection(name))
                 for name, score in zip(self.scored_names(), self.scores, strict=True)}
        masks.update(self.head_masks(self.learning_task))
        return masks

    def selection(self, name: str) -> tuple:
        """The arguments after the scores of :func:`subnetwork_mask` for scored tensor
        ``name`` of the learning task: (alpha, slices, eligible, keep, method)."""
        if self.eligible is None:
            return self.alpha, self.slices[name], None, None, self.threshold
        return (self.alpha, self.slices[name], self.eligible[name], self.keep[name],
                self.threshold)

    def stop_learning(self) -> None:
        """Discard the scores (and any restriction of the learning task's mask)."""
        self.scores = None
        self.learning_task = None
        self.eligible = self.keep = None

    def set_mask(self, task: int, mask: MaskSet) -> None:
        """Store ``mask`` as task ``task``'s mask."""
        self.masks[task] = mask
        self._cache.pop(task, None)
        self._stack = None

    def remove_mask(self, task: int) -> MaskSet:
        """Delete ``task``'s mask (returned) and its normalisation statistics."""
        self._cache.pop(task, None)
        self._stack = None
        self.statistics.pop(task, None)
        return self.masks.pop(task)

    def mask_state_dict(self) -> dict[str, torch.Tensor]:
        """The stored masks, bit-packed: task (as a string) → one ``uint8`` tensor, the packed
        bits of every maskable parameter in order (1 bit per entry per task; what a
        checkpoint of the masks holds)."""
        return {str(task): torch.cat([mask.packed[name] for name in self.shapes])
                for task, mask in self.masks.items()}

    def load_mask_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Replace the stored masks by those of :meth:`mask_state_dict`."""
        sizes = [(math.prod(shape) + 7) // 8 for shape in self.shapes.values()]
        masks = {}
        for task, packed in state.items():
            if packed.numel() != sum(sizes):
                raise ValueError(f"the mask of task {task} has {packed.numel()} bytes; this "
                                 f"network's maskable parameters need {sum(sizes)}")
            parts = packed.to(self.device).split(sizes)
            masks[int(task)] = MaskSet(self.shapes, dict(zip(self.shapes, parts, strict=True)))
        self.masks = masks
        self._cache.clear()
        self._stack = None

    def get_extra_state(self) -> dict[str, torch.Tensor]:
        """The packed masks (:meth:`mask_state_dict`) and every task's statistics, keyed
        ``"<task>/<buffer name>"``."""
        return {**self.mask_state_dict(),
                **{f"{task}/{name}": buffer for task, stored in self.statistics.items()
                   for name, buffer in stored.items()}}

    def set_extra_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """Load :meth:`get_extra_state` onto the network's device."""
        self.load_mask_state_dict({key: v for key, v in state.items() if "/" not in key})
        self.statistics = {}
        device = self.device
        for key, value in state.items():
            if "/" in key:
                task, name = key.split("/", 1)
                self.statistics.setdefault(int(task), {})[name] = value.to(device)

    def _apply(self, fn, recurse: bool = True):
        """``Module.to`` / ``cuda`` / ``cpu`` (and casts) also take the stored masks and every
        task's statistics along: the network's state lives on its device."""
        super()._apply(fn, recurse)
        self.masks = {task: MaskSet(m.shapes, {n: fn(p) for n, p in m.packed.items()})
                      for task, m in self.masks.items()}
        self.statistics = {task: {n: fn(b) for n, b in stored.items()}
                           for task, stored in self.statistics.items()}
        self._cache.clear()
        self._stack = None
        return self

    def cumulative_mask(self, tasks: Iterable[int] | None = None) -> MaskSet:
        """OR of the stored masks of ``tasks`` (default: all stored)."""
        tasks = self.masks if tasks is None else tasks
        return MaskSet.union((self.masks[t] for t in tasks), self.shapes, self.device)

    @contextmanager
    def stacked(self, tasks: Sequence[int]) -> Iterator[None]:
        """Keep the masks and statistics of ``tasks`` unpacked and stacked for
        :meth:`forward_groups` while the block runs (PALL's retraining runs every remaining
        task in every step: one stack serves all its steps), then drop them."""
        self._stack = (tuple(tasks), *self._stacked_state(tasks))
        try:
            yield
        finally:
            self._stack = None

    def _stacked_state(self, tasks: Sequence[int]
                       ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
        """(scored tensor → the masks of ``tasks`` stacked, as 0/1 in the tensor's dtype (a
        product with them is several times cheaper than a ``where`` on bool masks), all ones
        for a task without a stored mask; buffer name → their statistics stacked, ``None``
        without norm layers)."""
        device = self.device
        per_task = [self.masks[t].bools(device) if t in self.masks else None for t in tasks]
        masks = {name: torch.stack([
            m[name] if m is not None else torch.ones(self.shapes[name], dtype=torch.bool,
                                                     device=device) for m in per_task]
            ).to(self.weight(name).dtype) for name in self.scored_names()}
        if not self.norm_layers:
            return masks, None
        statistics = [self._statistics_of(t) for t in tasks]
        return masks, {name: torch.stack([s[name] for s in statistics])
                       for name in statistics[0]}

    def bool_mask(self, task: int) -> dict[str, torch.Tensor]:
        """The stored mask of ``task`` as bool tensors on the weights' device (cached)."""
        device = self.device
        masks = self._cache.pop(task, None)
        if masks is None or next(iter(masks.values())).device != device:
            masks = self.masks[task].bools(device)
        self._cache[task] = masks                       # now the most recently used
        while len(self._cache) > self.unpacked_cache:
            del self._cache[next(iter(self._cache))]    # the least recently used
        return masks

    # ------------------------------------------------------------------ forward
    def masked_parameters(self, task: int) -> dict[str, torch.Tensor]:
        """The substituted parameters for a forward pass of ``task`` (empty = dense)."""
        if task == self.learning_task and self.scores is not None and self.training:
            return {name: _MaskedWeight.apply(self.weight(name), score, *self.selection(name))
                    for name, score in zip(self.scored_names(), self.scores, strict=True)}
        if task == self.learning_task and self.scores is not None:
            masks = self.current_mask()
        elif task in self.masks:
            masks = self.bool_mask(task)
        else:
            return {}
        return {name: torch.where(masks[name], self.weight(name), 0.0)
                for name in self.scored_names()}

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        return forward_by_task(x, task_labels, lambda xs, task, labels: functional_call(
            self.net, {**self.masked_parameters(task), **self.task_statistics(task)},
            (xs, labels), strict=False))

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward(x, task_label)

    def forward_groups(self, x: torch.Tensor, tasks: Sequence[int]) -> torch.Tensor:
        """The logits of ``x[g, j]`` through task ``tasks[g]`` (its stored mask and
        statistics) for every group g and mini-batch j, ``(G, r, k, *input) → (G, r, k, W)``,
        in one batched pass of a :class:`~pall_avalanche.models.TaskIncrementalNet`
        (:meth:`~pall_avalanche.models.TaskIncrementalNet.forward_groups`, the tasks' masked
        weights and statistics stacked; :meth:`stacked` keeps the stacks for many steps); the
        same as :meth:`forward` per mini-batch up to floating-point reduction order. The
        learning task (scores, statistics being learned) and the networks of an Avalanche
        model run one mini-batch after another."""
        if (not isinstance(self.net, TaskIncrementalNet)
                or (self.scores is not None and self.learning_task in tasks)
                or (self.statistics_task is not None and self.statistics_task in tasks)):
            return stack_groups([[self(batch, int(task)) for batch in group]
                                 for group, task in zip(x, tasks, strict=True)])
        if self._stack is not None and self._stack[0] == tuple(tasks):
            masks, statistics = self._stack[1:]
        else:
            masks, statistics = self._stacked_state(tasks)
        parameters = {name: _MaskedStack.apply(self.weight(name), masks[name])
                      for name in self.scored_names()}
        return self.net.forward_groups(x, tasks, parameters=parameters, statistics=statistics)
