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


def class_stratified_indices(labels: torch.Tensor, n: int, n_classes: int) -> torch.Tensor:
    """``n`` distinct random indices of ``labels`` drawn class-stratified as the paper's
    reference draws a buffer's mini-batches (docs/fidelity.md, "Baselines"): with n ≥ c
    classes, ``n // c`` from each class (all of a class with fewer), then the rest uniformly
    from the samples not drawn yet (so not necessarily spread over the classes); with n < c,
    ``n`` samples uniformly at random. ``min(n, len(labels))`` indices in all. Drawn on the
    labels' device with its generator, nothing handed to the host.

    :param labels: the class of each sample, in 0 .. ``n_classes`` − 1 (any device; the
        indices come back on it).
    :param n: how many indices to draw.
    :param n_classes: c, the number of classes (each present in ``labels``).
    """
    device = labels.device
    order = torch.randperm(len(labels), device=device)
    slot = labels[order]
    # position of each sample within its class, in the random order
    rank = F.one_hot(slot, n_classes).cumsum(0).gather(1, slot[:, None]).squeeze(1) - 1
    per_class = n // n_classes
    # the stratified draws first, then every other sample in a second random order
    key = torch.where(rank < per_class, -1, torch.randperm(len(labels), device=device))
    return order[torch.argsort(key, stable=True)[:n]]


