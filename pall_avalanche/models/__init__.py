"""Model registry: a name maps to a backbone constructor; ``build_model`` adds the
task-incremental multi-head output."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial

from torch import nn

from pall_avalanche.models.multihead import TaskIncrementalNet
from pall_avalanche.models.resnet import cifar_resnet
from pall_avalanche.models.small import digits_cnn, mlp
from pall_avalanche.models.vit import vit_t8

__all__ = ["MODELS", "TaskIncrementalNet", "build_model", "count_parameters"]

# name -> callable(input_shape, **kwargs) -> (backbone, feature_dim)
MODELS: dict[str, Callable[..., tuple[nn.Module, int]]] = {
    "mlp": mlp,
    "cnn": digits_cnn,
    "resnet18": partial(cifar_resnet, depth=18),
    "resnet34": partial(cifar_resnet, depth=34),
    "vit_t8": vit_t8,
}


def build_model(name: str, *, input_shape: tuple[int, ...], n_tasks: int,
                classes_per_task: int, per_task_tokens: bool = False, **kwargs
                ) -> TaskIncrementalNet:
    """Build backbone ``name`` with a head of ``n_tasks`` blocks of ``classes_per_task`` units.

    :param per_task_tokens: give every task its own token parameters, for backbones that have
        them (a ``token_sets`` argument, e.g. ViT's CLS token and positional embedding); the
        subnetwork methods ask for this. Other backbones ignore it.
    :param kwargs: passed to the backbone constructor (e.g. ``hidden`` for ``mlp``).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid models are {sorted(MODELS)}")
    constructor = MODELS[name]
    if per_task_tokens and "token_sets" in inspect.signature(constructor).parameters:
        kwargs["token_sets"] = n_tasks
    backbone, width = constructor(tuple(input_shape), **kwargs)
    return TaskIncrementalNet(backbone, width, n_tasks, classes_per_task)


def count_parameters(model: nn.Module) -> int:
    """Number of float parameters (buffers excluded)."""
    return sum(p.numel() for p in model.parameters())
