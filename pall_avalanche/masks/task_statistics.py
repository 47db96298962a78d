"""Per-task normalisation statistics of a subnetwork network (:class:`TaskStatistics`)."""

from __future__ import annotations

import torch

__all__ = ["TaskStatistics"]


class TaskStatistics:
    """Normalisation statistics as task state, for :class:`~pall_avalanche.masks.SubnetworkNet`
    (its docstring says when a task's set is used and changed).

    Expects of the network: ``norm_layers`` (name → norm layer with running statistics),
    ``statistics`` (task → buffer name → tensor), ``statistics_task`` (the task whose set
    train-mode passes update), ``device``, and its forward pass ``self(x, task)``.
    """

    def fresh_statistics(self) -> dict[str, torch.Tensor]:
        """A fresh set of normalisation statistics (what ``reset_running_stats`` leaves: mean
        0, variance 1, no batch tracked), buffer name → tensor."""
        out = {}
        for name, layer in self.norm_layers.items():
            out[f"{name}.running_mean"] = torch.zeros_like(layer.running_mean)
            out[f"{name}.running_var"] = torch.ones_like(layer.running_var)
            out[f"{name}.num_batches_tracked"] = torch.zeros_like(layer.num_batches_tracked)
        return out

    def start_statistics(self, task: int) -> None:
        """``task`` is learned from now on: it gets fresh statistics, which its train-mode
        forward passes update until :meth:`stop_statistics`."""
        if self.norm_layers:
            self.statistics[task] = self.fresh_statistics()
            self.statistics_task = task

    def stop_statistics(self) -> None:
        """Freeze the learning task's statistics (they stay stored with its mask)."""
        self.statistics_task = None

    @torch.no_grad()
    def refresh_statistics(self, task: int, x: torch.Tensor) -> None:
        """Recompute ``task``'s statistics from inputs ``x`` (its buffer, after a retraining
        changed weights they depend on): one train-mode forward pass of ``task`` over all of
        ``x`` from fresh statistics, each norm layer taking that batch's mean and unbiased
        variance (momentum 1 for the pass). Nothing else changes."""
        if not self.norm_layers:
            return
        self.statistics[task] = self.fresh_statistics()
        momenta = {name: layer.momentum for name, layer in self.norm_layers.items()}
        was_training = self.training
        self.statistics_task = task
        try:
            for layer in self.norm_layers.values():
                layer.momentum = 1.0
            self.train()
            self(x, task)
        finally:
            for name, layer in self.norm_layers.items():
                layer.momentum = momenta[name]
            self.statistics_task = None
            self.train(was_training)

    def statistics_floats(self) -> int:
        """Floats one task's statistics add to the inference size (running mean and variance
        of every norm layer; the batch count is not needed for inference)."""
        return sum(layer.running_mean.numel() + layer.running_var.numel()
                   for layer in self.norm_layers.values())

    def task_statistics(self, task: int) -> dict[str, torch.Tensor]:
        """The statistics substituted in a forward pass of ``task``: its stored set (a copy in
        train mode unless it is being learned, so only its own learning request changes it),
        or fresh statistics for a task without one."""
        stored = self._statistics_of(task)
        if stored and self.training and task != self.statistics_task:
            return {name: buffer.clone() for name, buffer in stored.items()}
        return stored

    def _statistics_of(self, task: int) -> dict[str, torch.Tensor]:
        """``task``'s stored statistics on the network's device, or fresh ones (none without
        norm layers)."""
        if not self.norm_layers:
            return {}
        stored = self.statistics.get(task)
        if stored is None:
            return self.fresh_statistics()
        device = self.device
        if next(iter(stored.values())).device != device:
            stored = self.statistics[task] = {n: b.to(device) for n, b in stored.items()}
        return stored
