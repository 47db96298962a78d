"""Which samples a task keeps: the buffer selections of Table A3, class-balanced, and the
class-stratified draw of every mini-batch taken from a buffer."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

__all__ = ["SELECTIONS", "class_stratified_indices", "select_exemplars"]

# Each selection function picks ``n`` of the ``m`` samples of ONE class: it gets the class's
# logits (m, classes_per_task), penultimate features (m, f) and task-local labels (m,), and
# returns n distinct local indices. :func:`select_exemplars` makes any of them class-balanced.

def _top(values: torch.Tensor, n: int, largest: bool) -> torch.Tensor:
    """Indices of the n largest (smallest) values; ties keep the lower index first."""
    order = torch.argsort(-values if largest else values, stable=True)
    return order[:n]


def select_random(n: int, logits: torch.Tensor | None, features: torch.Tensor | None,
                  labels: torch.Tensor) -> torch.Tensor:
    """Uniformly random samples (the paper's default)."""
    return torch.randperm(len(labels))[:n]


def select_herding(n: int, logits: torch.Tensor | None, features: torch.Tensor,
                   labels: torch.Tensor) -> torch.Tensor:
    """iCaRL herding on L2-normalised penultimate features: greedily add the sample that
    brings the mean of the chosen samples closest to the class mean."""
    feats = F.normalize(features.double(), dim=1)
    target = feats.mean(0)
    chosen: list[int] = []
    total = torch.zeros_like(target)
    available = torch.ones(len(feats), dtype=torch.bool)
    for k in range(1, min(n, len(feats)) + 1):
        distance = ((target - (total + feats) / k) ** 2).sum(1)
        distance[~available] = float("inf")
        best = int(torch.argmin(distance))
        chosen.append(best)
        available[best] = False
        total = total + feats[best]
    return torch.tensor(chosen, dtype=torch.long)


def select_entropy(n: int, logits: torch.Tensor, features: torch.Tensor | None,
                   labels: torch.Tensor) -> torch.Tensor:
    """The samples whose softmax output has the highest entropy (most uncertain)."""
    log_p = F.log_softmax(logits.double(), dim=1)
    return _top(-(log_p.exp() * log_p).sum(1), n, largest=True)


def select_confidence(n: int, logits: torch.Tensor, features: torch.Tensor | None,
                      labels: torch.Tensor) -> torch.Tensor:
    """The samples with the highest softmax confidence (max probability)."""
    return _top(F.softmax(logits.double(), dim=1).max(1).values, n, largest=True)


def select_logit_distance(n: int, logits: torch.Tensor, features: torch.Tensor | None,
                          labels: torch.Tensor) -> torch.Tensor:
    """The samples closest to the decision boundary: smallest |z_y − max_{j≠y} z_j|."""
    z = logits.double()
    true = z.gather(1, labels[:, None]).squeeze(1)
    others = z.scatter(1, labels[:, None], float("-inf")).max(1).values
    return _top((true - others).abs(), n, largest=False)


#: ``buffer_selection`` name → per-class selection function.
SELECTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "random": select_random,
    "herding": select_herding,
    "entropy": select_entropy,
    "confidence": select_confidence,
    "logit_distance": select_logit_distance,
}


def select_exemplars(targets: torch.Tensor, n: int, selection: str = "random", *,
                     logits: torch.Tensor | None = None,
                     features: torch.Tensor | None = None) -> torch.Tensor:
    """Class-balanced choice of ``n`` sample indices (sorted) with a :data:`SELECTIONS`
    function applied within each class; ``n // n_classes`` per class, the remainder to the
    first classes (in label order).

    :param targets: task-local labels of the task's samples.
    :param n: how many samples to keep.
    :param selection: a name from :data:`SELECTIONS`.
    :param logits: the samples' logits (needed by every selection but random and herding).
    :param features: the samples' penultimate features (needed by herding).
    """
    if selection not in SELECTIONS:
        raise ValueError(f"unknown buffer selection {selection!r}; valid selections are "
                         f"{list(SELECTIONS)}")
    if selection == "herding" and features is None:
        raise ValueError("buffer selection 'herding' needs the samples' features")
    if selection not in ("random", "herding") and logits is None:
        raise ValueError(f"buffer selection {selection!r} needs the samples' logits")
    classes = targets.unique()
    shares = [n // len(classes)] * len(classes)
    for i in range(n % len(classes)):
        shares[i] += 1
    picked = []
    for cls, share in zip(classes, shares, strict=True):
        pool = (targets == cls).nonzero().flatten()
        local = SELECTIONS[selection](
            share, None if logits is None else logits[pool],
            None if features is None else features[pool], targets[pool])
        picked.append(pool[local])
    return torch.cat(picked).sort().values


def class_starts(labels: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Where each class starts in ``labels`` sorted, per row: ``(..., len) → (..., c)``, the
    number of samples of every smaller class."""
    counts = F.one_hot(labels, n_classes).sum(-2)
    return counts.cumsum(-1) - counts


def class_stratified_indices(labels: torch.Tensor, n: int, n_classes: int,
                             starts: torch.Tensor | None = None) -> torch.Tensor:
    """``n`` distinct random indices of ``labels`` drawn class-stratified as the paper's
    reference draws a buffer's mini-batches (docs/fidelity.md, "Baselines"): with n ≥ c
    classes, ``n // c`` from each class (all of a class with fewer), then the rest uniformly
    from the samples not drawn yet (so not necessarily spread over the classes); with n < c,
    ``n`` samples uniformly at random. ``min(n, len)`` indices in all. Every row of a
    ``(..., len)`` ``labels`` is drawn on its own, all rows in one batched draw (the buffers
    of many tasks at once); drawn on the labels' device with its generator, nothing handed to
    the host.

    How: sorting ``label + u`` (u uniform in [0, 1)) lists every class's samples in a uniformly
    random order, the classes one after another; a sample's rank within its class is its
    position minus its class's start (:func:`class_starts`); the first ``n // c`` of each
    class come first, then the others in a second random order.

    :param labels: the class of each sample, in 0 .. ``n_classes`` − 1 (any device; the
        indices come back on it), ``(len,)`` or rows of samples ``(..., len)``.
    :param n: how many indices to draw (per row).
    :param n_classes: c, the number of classes (each present in every row).
    :param starts: :func:`class_starts` of ``labels`` (computed when not given; a caller
        drawing from the same labels many times keeps it).
    """
    rows = labels.reshape(-1, labels.shape[-1])
    starts = (class_starts(rows, n_classes) if starts is None
              else starts.reshape(-1, n_classes))
    order = (rows + torch.rand(rows.shape, device=rows.device)).argsort(dim=1)
    sorted_labels = rows.gather(1, order)
    rank = torch.arange(rows.shape[1], device=rows.device) - starts.gather(1, sorted_labels)
    key = torch.where(rank < n // n_classes, -1.0, torch.rand(rows.shape, device=rows.device))
    picked = order.gather(1, key.argsort(dim=1, stable=True)[:, :n])
    return picked.reshape(*labels.shape[:-1], picked.shape[-1])
