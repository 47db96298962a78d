"""The relearning attack: how fast does a model relearn an unlearned task from a few samples,
against a model that never learned it?

After the sequence, a copy of the final model is fine-tuned on ``k`` training samples per
class of the unlearned task t (full-batch SGD at :data:`RELEARN_LR`, the model in eval
mode so normalisation statistics and dropout stay as they are) for :data:`RELEARN_STEPS`
steps, once with t's head rows alone trainable and once with every parameter; t's test
accuracy is measured before the first step and after each. Residual knowledge shows as a
curve that rises faster than the never-learned oracle's under the same fine-tuning
(:func:`~pall_avalanche.audit.attacks.relearning_gap`). The run's own model is not touched.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
from avalanche.models.utils import avalanche_forward
from torch import nn

from pall_avalanche.models.multihead import TaskIncrementalNet

__all__ = ["RELEARN_LR", "RELEARN_SHOTS", "RELEARN_STEPS", "fine_tune", "head_rows",
           "relearning_curves"]

#: Samples per class the attacker holds (the issue's k ∈ {5, 20}).
RELEARN_SHOTS = (5, 20)
#: Fine-tuning steps (full batch).
RELEARN_STEPS = 30
#: The attacker's SGD learning rate, the same for every method (the digits configuration's).
RELEARN_LR = 0.05


def head_rows(model: nn.Module, task: int) -> dict[str, torch.Tensor]:
    """Name → bool mask of the entries of ``model`` that produce ``task``'s logits: the task's
    rows (:meth:`~pall_avalanche.models.TaskIncrementalNet.head_entries`) of every
    task-incremental network inside ``model`` (the model itself, a subnetwork method's
    network, Independent's per-task models) that are parameters of ``model``. Empty when the
    model has none (UnCLe's heads are generated: its parameters are the hypernetwork's)."""
    params = dict(model.named_parameters())
    rows = {f"{prefix}.{name}" if prefix else name: mask
            for prefix, module in model.named_modules()
            if isinstance(module, TaskIncrementalNet)
            for name, mask in module.head_entries(task).items()}
    return {name: mask for name, mask in rows.items() if name in params}


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: int) -> float:
    with torch.no_grad():
        predicted = avalanche_forward(model, x, torch.full_like(y, task)).argmax(1)
    return round(float((predicted == y).float().mean()) * 100, 4)


def _few_shot(targets: np.ndarray, shots: int, rng: np.random.Generator) -> np.ndarray:
    """``shots`` random positions of every class (all of a class that has fewer)."""
    return np.sort(np.concatenate([
        rng.choice(np.flatnonzero(targets == c), size=min(shots, int((targets == c).sum())),
                   replace=False) for c in np.unique(targets)]))


def fine_tune(model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: int,
              trainable: dict[str, torch.Tensor] | None, *, lr: float, steps: int,
              test: tuple[torch.Tensor, torch.Tensor]) -> tuple[nn.Module, list[float]]:
    """A copy of ``model`` (eval mode) fine-tuned on ``(x, y)`` of ``task`` with full-batch
    SGD for ``steps`` steps, and ``task``'s accuracy on ``test`` before and after each step.

    :param trainable: name → bool mask of the entries that may change (:func:`head_rows`);
        ``None``: every parameter.
    """
    tuned = copy.deepcopy(model).eval().requires_grad_(True)
    params = dict(tuned.named_parameters())
    chosen = [params[n] for n in trainable] if trainable else list(params.values())
    optimizer = torch.optim.SGD(chosen, lr=lr)
    curve = [_accuracy(tuned, *test, task)]
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(
            avalanche_forward(tuned, x, torch.full_like(y, task)), y)
        loss.backward()
        for name, mask in (trainable or {}).items():
            if params[name].grad is not None:   # a head in the task's forward pass
                params[name].grad.mul_(mask)
        optimizer.step()
        curve.append(_accuracy(tuned, *test, task))
    return tuned, curve


def relearning_curves(model: nn.Module, train, test, task: int, *,
                      lr: float = RELEARN_LR, shots: Sequence[int] = RELEARN_SHOTS,
                      steps: int = RELEARN_STEPS, seed: int = 0) -> dict[str, list[float]]:
    """t's test accuracy (percent) before and after each fine-tuning step, per attack:
    ``"k<shots>_head"`` (t's head rows only) and ``"k<shots>_all"`` (every parameter), each a
    list of ``steps + 1`` values. A model without a task-incremental head gets the ``_all``
    curves only.

    :param model: the final model (copied, never changed).
    :param train: task t's training dataset (the samples are drawn from it, eval transform).
    :param test: task t's test dataset.
    :param task: the unlearned task t.
    :param lr: the SGD learning rate.
    :param seed: picks the samples (the same for the unlearned model and its oracle).
    """
    train, test = train.eval(), test.eval()
    device = next(model.parameters()).device
    x_all = torch.stack([train[i][0] for i in range(len(train))])
    y_all = torch.tensor([int(train[i][1]) for i in range(len(train))])
    x_test = torch.stack([test[i][0] for i in range(len(test))]).to(device)
    y_test = torch.tensor([int(test[i][1]) for i in range(len(test))]).to(device)
    rng = np.random.default_rng([seed, 3])
    curves: dict[str, list[float]] = {}
    for k in shots:
        picked = torch.from_numpy(_few_shot(y_all.numpy(), k, rng))
        x, y = x_all[picked].to(device), y_all[picked].to(device)
        for scope in ("head", "all"):
            trainable = head_rows(model, task) if scope == "head" else None
            if trainable == {}:
                continue
            _, curves[f"k{k}_{scope}"] = fine_tune(model, x, y, task, trainable, lr=lr,
                                                   steps=steps, test=(x_test, y_test))
    return curves
