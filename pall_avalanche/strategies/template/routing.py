"""Which task each sample goes through, how the model adapts to an experience, and where
mini-batches come from.

A mini-batch the strategy's own loader gave for a one-task experience goes through that task
as an ``int`` (no per-batch host synchronisation); a mini-batch a plugin built or extended
(Avalanche's ``ReplayPlugin``) goes through each sample's own task, as Avalanche's
``MultiTaskModule`` routes it. Evaluation never adapts the model and draws nothing from the
random streams training uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from avalanche.models.utils import avalanche_forward
from avalanche.training.plugins import EvaluationPlugin, LRSchedulerPlugin
from avalanche.training.plugins.clock import Clock
from avalanche.training.templates.base_sgd import PeriodicEval

from pall_avalanche.data.device import device_images_of

__all__ = ["TaskRouting"]

#: Plugins every Avalanche strategy has (none of them changes a mini-batch).
_AVALANCHE_OWN_PLUGINS = (Clock, EvaluationPlugin, LRSchedulerPlugin, PeriodicEval)


class TaskRouting:
    """Per-sample task routing, model adaptation and the training loader."""

    #: Whether a learning mini-batch may hold samples of a task that is neither learned nor
    #: being learned (a plugin replaying an unlearned task, or one not learned yet). A method
    #: whose exact unlearning cannot book such samples (their gradients would train what the
    #: learning task keeps) sets it to False: such a mini-batch is refused in one line
    #: (:meth:`check_minibatch_tasks`).
    accepts_unlearned_task_samples: bool = True
    #: The learning experience's own loader, whether the epoch iterates it, and the task
    #: labels of its current batch (:meth:`mb_tasks`).
    _experience_loader = None
    _own_loader = False
    _own_batch_tasks: torch.Tensor | None = None

    def eval(self, exp_list, **kwargs):
        """Avalanche's evaluation, with the random streams training uses (torch's CPU and
        device generators) restored afterwards: iterating a ``DataLoader`` draws a seed from
        them, so without this an extra evaluation, metric or logger would change the training
        that follows."""
        devices = ([torch.device(self.device)] if torch.device(self.device).type == "cuda"
                   else [])
        with torch.random.fork_rng(devices=devices):
            return super().eval(exp_list, **kwargs)

    def forward(self):
        """The mini-batch's forward pass (:meth:`forward_inputs` of ``mb_x``)."""
        return self.forward_inputs(self.mb_x)

    def mb_tasks(self) -> torch.Tensor | int:
        """The task of each sample of the mini-batch, as the model is to be called with it.

        In training, a mini-batch exactly as the strategy's own loader of the (one-task)
        experience gave it holds that task only: its label as an ``int``, with no per-batch
        host synchronisation. A mini-batch a plugin built or extended (Avalanche's
        ``ReplayPlugin`` replays earlier experiences' samples) gives ``mb_task_id``, so that
        every sample goes through its own task's head, subnetwork or model, as Avalanche's
        ``MultiTaskModule`` routes it; its tasks are checked first
        (:meth:`check_minibatch_tasks`). In evaluation, an experience of one task gives its
        label, any other ``mb_task_id``.
        """
        if self.is_training:
            if self._own_batch_tasks is not None and self.mb_task_id is self._own_batch_tasks:
                return int(self.experience.task_label)
            self.check_minibatch_tasks(self.mb_task_id.unique().tolist())
            return self.mb_task_id
        labels = getattr(self.experience, "task_labels", None)
        return int(labels[0]) if labels is not None and len(labels) == 1 else self.mb_task_id

    def check_minibatch_tasks(self, tasks: Sequence[int]) -> None:
        """Refuse a learning mini-batch holding samples of a task that is neither learned nor
        being learned, when the method cannot book them (:attr:`accepts_unlearned_task_samples`
        is false): one line naming the plugins that may have added them."""
        learning = int(self.experience.task_label)
        unknown = sorted(t for t in tasks if t != learning and t not in self.active_tasks)
        if unknown and not self.accepts_unlearned_task_samples:
            added = [type(p).__name__ for p in self.plugins
                     if not isinstance(p, _AVALANCHE_OWN_PLUGINS)
                     and not type(p).__module__.startswith("pall_avalanche.")]
            raise ValueError(
                f"a learning mini-batch of task {learning} holds samples of task(s) {unknown}, "
                f"which are not learned (unlearned, or not yet learned): their gradients would "
                f"write those tasks' data into what task {learning} trains, where "
                f"{type(self).__name__}'s exact unlearning cannot remove it; they come from a "
                f"plugin that changes the mini-batch ({', '.join(added) or 'none found'}): let "
                "it replay learned tasks only, or leave it out")

    def forward_inputs(self, x: torch.Tensor, tasks: torch.Tensor | int | None = None
                       ) -> torch.Tensor:
        """Logits of inputs ``x`` (the mini-batch, or inputs derived from it), each through
        its task: ``tasks`` (default :meth:`mb_tasks`; a tensor must be ``x``-sized). With
        ``amp="bf16"`` it runs under bfloat16 autocast and returns float32 logits (the loss,
        the backward pass and the weights stay float32)."""
        if tasks is None:
            tasks = self.mb_tasks()
        with self.speed.autocast(self.device):
            out = avalanche_forward(self.model, x, tasks)
        return out.float()

    def model_adaptation(self, model=None):
        """Avalanche's model adaptation (heads grow, tasks' classes are taken) for learning
        experiences. An evaluation experience only tells the task-incremental networks how
        wide its task's logits must be (``evaluation_adaptation``: a task without a head, or
        with fewer units than the experience's class ids, answers with masked logits of that
        width, as the all-masked head Avalanche would create); evaluation draws no random
        numbers and changes no parameter or buffer."""
        if self.is_training:
            return super().model_adaptation(model)
        model = self.model if model is None else model
        for module in model.modules():
            adapt = getattr(module, "evaluation_adaptation", None)
            if adapt is not None:
                adapt(self.experience)
        return model.to(self.device)

    # ---------------------------------------------------------------- loaders
    def make_train_dataloader(self, num_workers=0, shuffle=True, pin_memory=None,
                              persistent_workers=False, drop_last=False, **kwargs) -> None:
        """Avalanche's training ``DataLoader``, or the batched device loader of the speed
        options (:meth:`~pall_avalanche.strategies.template.speed.SpeedOptions.device_loader`;
        the worker and pinning arguments do not apply to it)."""
        loader = self.speed.device_loader(self.adapted_dataset, self.train_mb_size,
                                          self.device, shuffle=shuffle, drop_last=drop_last)
        if loader is None:
            super().make_train_dataloader(num_workers=num_workers, shuffle=shuffle,
                                          pin_memory=pin_memory,
                                          persistent_workers=persistent_workers,
                                          drop_last=drop_last, **kwargs)
        else:
            self.dataloader = loader
        self._experience_loader = self.dataloader

    def training_epoch(self, **kwargs) -> None:
        """Avalanche's epoch; the loader it iterates is the strategy's own (its batches hold
        the experience's task only: :meth:`mb_tasks`) unless a plugin replaced it."""
        self._own_loader = self.dataloader is self._experience_loader
        super().training_epoch(**kwargs)

    def _unpack_minibatch(self) -> None:
        super()._unpack_minibatch()
        self._own_batch_tasks = (self.mbatch[-1] if self.is_training and self._own_loader
                                 else None)
        self.speed.prepare_inputs(self.mbatch)

    def release_experience(self) -> None:
        """The learning experience is over: its images leave the device, its loader is
        forgotten."""
        source = device_images_of(self.adapted_dataset)
        if source is not None:
            source.release()
        self._experience_loader = self._own_batch_tasks = None
