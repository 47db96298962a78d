"""How a task's samples are kept: :class:`EpisodicMemory`, a buffer B^t per task (samples,
for DER++ and PALL with their logits), its selection, storage and state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from avalanche.models import MultiHeadClassifier

from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.data.tasks import unshuffled_batches
from pall_avalanche.models import backbones
from pall_avalanche.rehearsal.exemplars import (
    SELECTIONS,
    class_starts,
    class_stratified_indices,
    select_exemplars,
)

if TYPE_CHECKING:
    from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["BufferStack", "EpisodicMemory", "logits_and_features"]

#: How many stacks of buffers (one per combination of tasks) a memory keeps.
_STACK_CACHE = 4


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


@dataclass(frozen=True)
class BufferStack:
    """The buffers of some tasks, all of one size and one number of classes, stacked: one
    batched draw and one gather serve them all (:meth:`EpisodicMemory.stacks`).

    :param tasks: the tasks, in order (G of them).
    :param x: their samples, ``(G, n, *input)``.
    :param y: their labels, ``(G, n)``.
    :param z: their stored logits, ``(G, n, W)``, or ``None``.
    :param labels: each sample's class as its position among its task's classes, ``(G, n)``.
    :param classes: each task's classes (sorted label values), ``(G, c)``.
    :param starts: :func:`class_starts` of ``labels``, ``(G, c)``.
    :param rows: ``0 .. G − 1`` as ``(G, 1, 1)``, to gather drawn indices.
    """

    tasks: tuple[int, ...]
    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor | None
    labels: torch.Tensor
    classes: torch.Tensor
    starts: torch.Tensor
    rows: torch.Tensor

    def draw(self, n: int, repeats: int = 1) -> torch.Tensor:
        """``repeats`` class-stratified draws of ``n`` indices from every buffer
        (:func:`class_stratified_indices`, all in one batched draw), ``(G, repeats, m)``,
        m = min(n, buffer size)."""
        return class_stratified_indices(
            self.labels.unsqueeze(1).expand(-1, repeats, -1), n, self.classes.shape[1],
            self.starts.unsqueeze(1).expand(-1, repeats, -1))

    def gather(self, index: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(x, y, z) of the drawn ``index`` ``(G, r, m)``: ``(G, r, m, ...)`` each."""
        return (self.x[self.rows, index], self.y[self.rows, index],
                None if self.z is None else self.z[self.rows, index])

    def columns(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` ``(G, ..., W)`` restricted to each task's classes, ``(G, ..., c)`` (as
        they are when its classes are every unit of its logits)."""
        count = self.classes.shape[1]
        if count == logits.shape[-1]:
            return logits
        index = self.classes.view(len(self.tasks), *([1] * (logits.dim() - 2)), count)
        return logits.gather(-1, index.expand(*logits.shape[:-1], count))


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
        #: task → the positions in its training dataset of the stored samples (the exactness
        #: audit attacks buffer members against the task's other samples).
        self.indices: dict[int, torch.Tensor] = {}
        #: tasks → (their buffers as stacked, the stacks): :meth:`stacks`
        self._stacks: dict[tuple[int, ...], tuple[list, list[BufferStack]]] = {}

    def share(self) -> int:
        """The samples the next task's buffer gets (module docstring, "Capacity")."""
        return self.per_task if self.per_task is not None else (
            self.buffer_size // (len(self.buffers) + 1))

    def shrink(self, size: int) -> None:
        """Every buffer larger than ``size`` keeps ``size`` of its samples, class-balanced,
        chosen uniformly at random (it never gains any)."""
        for task, (x, y, z) in self.buffers.items():
            if len(x) > size:
                keep = select_exemplars(y.cpu(), size).to(x.device)
                self.indices[task] = self.indices[task][keep]
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
        self.indices[task] = index.to(strategy.device)

    def before_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        if self.delete_on_unlearning:
            self.drop(task)

    def drop(self, task: int) -> None:
        """Delete B^t."""
        del self.buffers[task]
        del self.classes[task]
        del self.indices[task]

    def stacks(self, tasks: Sequence[int]) -> list[BufferStack]:
        """The buffers of ``tasks`` as :class:`BufferStack` s, one per combination of buffer
        size and number of classes (one for the paper's a-priori split), in order of first
        appearance; kept while the buffers stay as they are."""
        key = tuple(tasks)
        current = [(self.buffers[t], self.classes[t]) for t in key]
        kept = self._stacks.get(key)
        if kept is not None and all(a is b and c is d for (a, c), (b, d)
                                    in zip(kept[0], current, strict=True)):
            return kept[1]
        parts: dict[tuple, list[int]] = {}
        for task in key:
            _, y, z = self.buffers[task]
            shape = (len(y), len(self.classes[task]), None if z is None else z.shape[1])
            parts.setdefault(shape, []).append(task)
        out = []
        for part in parts.values():
            x, y, z = (list(column) for column in zip(*(self.buffers[t] for t in part),
                                                       strict=True))
            classes = torch.stack([self.classes[t] for t in part])
            labels = torch.stack([torch.searchsorted(self.classes[t], self.buffers[t][1])
                                  for t in part])
            out.append(BufferStack(
                tuple(part), torch.stack(x), torch.stack(y),
                None if z[0] is None else torch.stack(z), labels, classes,
                class_starts(labels, classes.shape[1]),
                torch.arange(len(part), device=labels.device).view(-1, 1, 1)))
        if len(self._stacks) >= _STACK_CACHE:
            del self._stacks[next(iter(self._stacks))]
        self._stacks[key] = (current, out)
        return out

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


