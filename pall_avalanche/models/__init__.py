"""Model registry: a name maps to a backbone constructor; ``build_model`` adds the
task-incremental multi-head output."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from torch import nn

from pall_avalanche.models.multihead import TaskIncrementalNet
from pall_avalanche.models.resnet import cifar_resnet
from pall_avalanche.models.small import digits_cnn, mlp

__all__ = ["MODELS", "TaskIncrementalNet", "build_model", "count_parameters"]

# name -> callable(input_shape, **kwargs) -> (backbone, feature_dim)
MODELS: dict[str, Callable[..., tuple[nn.Module, int]]] = {
    "mlp": mlp,
    "cnn": digits_cnn,
    "resnet18": partial(cifar_resnet, depth=18),
    "resnet34": partial(cifar_resnet, depth=34),
}


def build_model(name: str, *, input_shape: tuple[int, ...], n_tasks: int,
                classes_per_task: int, **kwargs) -> TaskIncrementalNet:
    """Build backbone ``name`` with a head of ``n_tasks`` blocks of ``classes_per_task`` units."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid models are {sorted(MODELS)}")
    backbone, width = MODELS[name](tuple(input_shape), **kwargs)
    return TaskIncrementalNet(backbone, width, n_tasks, classes_per_task)


def count_parameters(model: nn.Module) -> int:
    """Number of float parameters (buffers excluded)."""
    return sum(p.numel() for p in model.parameters())
