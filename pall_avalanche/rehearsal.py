"""Rehearsal: which samples a task keeps, how they are stored, and what is trained from them —
shared by PALL (its DER++ buffer and retraining) and the replay baselines (ER, DER++, GEM,
ER (Retraining); :mod:`pall_avalanche.strategies.rehearsal`).

- Buffer selection (Table A3): :data:`SELECTIONS` per class, :func:`select_exemplars`
  class-balanced; :func:`class_stratified_indices` for every mini-batch drawn from a buffer.
- :class:`EpisodicMemory` keeps a buffer per task (samples, for DER++ and PALL with their
  logits): selection, storage and state.
- :class:`ReplayObjective` is what is trained from those buffers (CE + β·MSE replay, the
  uniform-prediction term of unlearning) in the one replay loop: PALL retrains chosen entries
  with it, the replay baselines replay, fine-tune away and retrain from scratch with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from avalanche.models import MultiHeadClassifier
from torch.nn import functional as F

from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.data.tasks import unshuffled_batches
from pall_avalanche.models import backbones

if TYPE_CHECKING:
    from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = [
    "SELECTIONS",
    "EpisodicMemory",
    "ReplayObjective",
    "check_replay_settings",
    "class_stratified_indices",
    "select_exemplars",
    "uniform_target",
]


# ------------------------------------------------------------------ buffer selection
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


@torch.no_grad()
def logits_and_features(net: torch.nn.Module, dataset, task: int, batch: int,
                        device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode logits of every sample of ``dataset`` (its training view, augmented where it
    augments) through ``task``'s head (and mask), in one unshuffled pass in mini-batches of
    ``batch`` (so a network normalising with batch statistics sees full batches, as the
    paper's reference computes buffer logits; :func:`~pall_avalanche.data.tasks.
    unshuffled_batches`), and the
    penultimate features, captured by a hook: the output of the module named ``backbone``,
    else the input of a ``MultiHeadClassifier``; the logits themselves when the network has
    neither. Both come back on ``device``."""
    captured: list[torch.Tensor] = []
    backbone = next(iter(backbones(net)), None)
    classifier = next((m for m in net.modules() if isinstance(m, MultiHeadClassifier)), None)
    if backbone is not None:
        handle = backbone.register_forward_hook(lambda _m, _i, out: captured.append(out))
    elif classifier is not None:
        handle = classifier.register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    else:
        handle = None
    was_training = net.training
    net.eval()
    try:
        logits = torch.cat([net(x, task) for x, _ in unshuffled_batches(dataset, batch, device,
                                                                       view="train")])
    finally:
        net.train(was_training)
        if handle is not None:
            handle.remove()
    features = torch.cat([f.flatten(1) for f in captured]) if captured else logits
    return logits, features


def uniform_target(logits: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """The uniform distribution over a task's ``classes`` (units of ``logits``' width), as a
    target of ``cross_entropy`` for every row of ``logits``."""
    n = len(classes)
    if n == logits.shape[1]:
        return torch.full_like(logits, 1.0 / n)
    target = torch.zeros_like(logits)
    target[:, classes] = 1.0 / n
    return target


def check_replay_settings(beta: float, n_retrain_iters: int) -> None:
    """β and N_f of a replay method: both >= 0."""
    if beta < 0 or n_retrain_iters < 0:
        raise ValueError(f"beta={beta} and n_retrain_iters={n_retrain_iters} must be >= 0")


class EpisodicMemory(UnlearningPlugin):
    """An episodic memory B^t per task: which samples, stored how, and its state.

    After learning task t, as the paper's reference does (docs/fidelity.md, "PALL": buffer):
    one pass over D^t with its training augmentation, unshuffled, in eval mode, in
    mini-batches of the training batch size, gives every sample's logits z through t's head
    (and, for PALL, t's mask) and its features; class-balanced samples, chosen by
    ``selection`` (uniformly random by default) from those, are stored as another draw of the
    training augmentation each, with (``store_logits``) their z from the pass. Without
    augmentation both draws are the sample itself. The task's classes (its label values, any
    ids) are kept with its buffer. Every mini-batch drawn from a buffer is class-stratified
    (:func:`class_stratified_indices`). What is trained from it is :class:`ReplayObjective`'s
    job.

    Capacity. With ``n_tasks`` (the paper) every task gets ``buffer_size // n_tasks`` samples,
    split a priori. Without it (an Avalanche model whose heads grow as tasks arrive, T
    unknown) the memory rebalances as Avalanche's ``ExperienceBalancedBuffer`` does: a new
    task gets ``buffer_size // (number of buffers held + 1)`` samples and every held buffer
    larger than that drops samples (class-balanced, at random) down to it; no buffer ever
    gains samples (a departure from the paper's a-priori split, docs/fidelity.md).

    :param buffer_size: total capacity.
    :param n_tasks: the number of tasks T, or ``None`` (rebalance as tasks arrive).
    :param classes_per_task: classes per task, when known in advance (with ``n_tasks``, the
        a-priori share must hold one sample of each); every task's own classes are checked
        when it is stored.
    :param store_logits: store z with the samples (DER++ and PALL's logit term need it).
    :param delete_on_unlearning: delete B^t in ``before_unlearning`` (PALL); with ``False``
        the strategy uses B^t while unlearning t and deletes it with :meth:`drop`.
    :param selection: how B^t's class-balanced samples are chosen, a name from
        :data:`SELECTIONS` (``random``, the paper's default; ``herding``, ``entropy``,
        ``confidence``, ``logit_distance``: Table A3), scored with the model just trained.
    """

    checkpoint_attributes = ("buffers", "classes", "indices")

    def __init__(self, *, buffer_size: int, n_tasks: int | None,
                 classes_per_task: int | None = None, store_logits: bool = True,
                 delete_on_unlearning: bool = True, selection: str = "random") -> None:
        super().__init__()
        if selection not in SELECTIONS:
            raise ValueError(f"unknown buffer selection {selection!r}; valid selections are "
                             f"{list(SELECTIONS)}")
        self.selection = selection
        self.buffer_size = buffer_size
        #: The a-priori share of every task (``None``: rebalanced as tasks arrive).
        self.per_task = None if n_tasks is None else buffer_size // n_tasks
        if self.per_task is not None and classes_per_task is not None \
                and self.per_task < classes_per_task:
            raise ValueError(
                f"buffer_size={buffer_size} gives {self.per_task} samples per task over "
                f"{n_tasks} tasks, fewer than the {classes_per_task} classes of a task; use "
                f"buffer_size >= {n_tasks * classes_per_task}"
            )
        self.store_logits = store_logits
        self.delete_on_unlearning = delete_on_unlearning
        #: task → (inputs, labels, logits or None), on the training device.
        self.buffers: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = {}
        #: task → its classes (sorted label values), on the buffer's device.
        self.classes: dict[int, torch.Tensor] = {}
        #: task → the positions in its training dataset of the stored samples (CPU; the
        #: exactness audit attacks buffer members against the task's other samples).
        self.indices: dict[int, torch.Tensor] = {}

    def share(self) -> int:
        """The samples the next task's buffer gets (module docstring, "Capacity")."""
        return self.per_task if self.per_task is not None else (
            self.buffer_size // (len(self.buffers) + 1))

    def shrink(self, size: int) -> None:
        """Every buffer larger than ``size`` keeps ``size`` of its samples, class-balanced,
        chosen uniformly at random (it never gains any)."""
        for task, (x, y, z) in self.buffers.items():
            if len(x) > size:
                keep = select_exemplars(y.cpu(), size)
                self.indices[task] = self.indices[task][keep]
                keep = keep.to(x.device)
                self.buffers[task] = (x[keep], y[keep], None if z is None else z[keep])

    @torch.no_grad()
    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        task = strategy.experience.task_label
        data = strategy.experience.dataset.eval()
        targets = torch.as_tensor(list(data.targets))
        classes = targets.unique()
        share = self.share()
        if share < len(classes):
            raise ValueError(
                f"the buffer gives task {task} {share} samples, fewer than its "
                f"{len(classes)} classes; use a larger buffer_size (now {self.buffer_size})")
        if self.per_task is None:
            self.shrink(share)
        augmented = strategy.experience.dataset.train()
        logits = features = None
        if self.store_logits or self.selection != "random":
            logits, features = (t.cpu() for t in logits_and_features(
                strategy.model, augmented, task, strategy.train_mb_size, strategy.device))
        index = select_exemplars(targets, share, self.selection, logits=logits,
                                 features=features)
        # the stored samples: another draw of the training augmentation
        x = torch.stack([augmented[int(i)][0] for i in index]).to(strategy.device)
        y = targets[index].to(strategy.device)
        z = logits[index].to(strategy.device) if self.store_logits else None
        self.buffers[task] = (x, y, z)
        self.classes[task] = classes.to(strategy.device)
        self.indices[task] = index.cpu()

    def before_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        if self.delete_on_unlearning:
            self.drop(task)

    def drop(self, task: int) -> None:
        """Delete B^t."""
        del self.buffers[task]
        del self.classes[task]
        del self.indices[task]

    def draw(self, task: int, n: int) -> torch.Tensor:
        """``n`` class-stratified indices of B^t (:func:`class_stratified_indices`)."""
        _, y, _ = self.buffers[task]
        classes = self.classes[task]
        return class_stratified_indices(torch.searchsorted(classes, y), n, len(classes))

    def task_columns(self, task: int, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` restricted to task ``task``'s classes (as they are when its classes
        are every unit of its output)."""
        classes = self.classes[task]
        return logits if len(classes) == logits.shape[1] else logits[:, classes]


class ReplayObjective:
    """What is trained from an :class:`EpisodicMemory`, and the one replay loop: PALL's
    retraining of chosen entries, the replay baselines' (ER, DER++, GEM) learning-time
    replay, unlearning fine-tuning, and ER (Retraining)'s retraining from scratch.

    :param memory: the buffers.
    :param beta: weight of the logit (MSE) term; 0 gives plain experience replay.
    """

    def __init__(self, memory: EpisodicMemory, beta: float) -> None:
        if beta < 0:
            raise ValueError(f"beta={beta} must be >= 0")
        if beta and not memory.store_logits:
            raise ValueError(f"beta={beta} needs the stored logits; use store_logits=True")
        self.memory = memory
        self.beta = beta

    def replay_loss(self, net: torch.nn.Module, tasks: Sequence[int], per_task: int
                    ) -> torch.Tensor:
        """Mean over τ in ``tasks`` of β·MSE(f(x'), z') on ``per_task`` samples of B^τ (over τ's
        classes' logits) plus CE(f(x), y) on ``per_task`` others, each sample through its own
        task's head, every mini-batch class-stratified (drawn in that order, as the paper's
        reference does)."""
        loss = None
        for task in tasks:
            x, y, z = self.memory.buffers[task]
            if self.beta:
                mse_index = self.memory.draw(task, per_task)
                columns = self.memory.task_columns
                term = self.beta * F.mse_loss(columns(task, net(x[mse_index], task)),
                                              columns(task, z[mse_index]))
                loss = term if loss is None else loss + term
            ce_index = self.memory.draw(task, per_task)
            term = F.cross_entropy(net(x[ce_index], task), y[ce_index])
            loss = term if loss is None else loss + term
        return loss / len(tasks)

    def uniform_loss(self, net: torch.nn.Module, task: int, n: int) -> torch.Tensor:
        """CE of ``n`` class-stratified samples of B^t (through t's head) towards the uniform
        distribution over t's classes: minimal when t's predictions are at chance."""
        x, _, _ = self.memory.buffers[task]
        logits = net(x[self.memory.draw(task, n)], task)
        return F.cross_entropy(logits, uniform_target(logits, self.memory.classes[task]))

    def steps(self, strategy: UnlearningTemplate, tasks: Sequence[int], *,
              param_groups: list[dict], n_iters: int,
              trainable: list[torch.Tensor] | None = None, forget: int | None = None) -> None:
        """The replay objective in the strategy's optimisation loop
        (:meth:`~pall_avalanche.strategies.base.UnlearningTemplate.optimization_steps`):
        ``n_iters`` steps on :meth:`replay_loss` over ``tasks``, ``batch_size // |tasks|``
        samples of each buffer. With ``forget=t`` (the replay baselines' unlearning,
        docs/fidelity.md "ER, DER++, GEM") B^t first adds a whole mini-batch of
        ``batch_size`` samples to :meth:`uniform_loss`. Every mini-batch is class-stratified.

        :param param_groups: the optimizer's parameter groups.
        :param n_iters: the number of steps.
        :param trainable: float 0/1 tensors shaped like the parameters of the first group (in
            order): only their 1-entries change, and weight decay moves to the gradient
            (give that group ``weight_decay=0``); other groups train every entry. ``None``:
            every entry is trained.
        :param forget: a task whose buffer is pushed towards uniform predictions.
        """
        if not tasks and forget is None:
            raise ValueError("replay steps need remaining tasks or a task to forget; got "
                             f"tasks={list(tasks)} and forget=None")
        net = strategy.model
        batch = strategy.train_mb_size
        per_task = max(1, batch // len(tasks)) if tasks else 0

        def loss() -> torch.Tensor:
            total = self.uniform_loss(net, forget, batch) if forget is not None else 0.0
            if tasks:
                total = total + self.replay_loss(net, tasks, per_task)
            return total

        strategy.optimization_steps(param_groups, n_iters, loss, trainable=trainable)
