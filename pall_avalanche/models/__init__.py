"""Models: a registered backbone (:func:`~pall_avalanche.catalog.register_model`; the
built-in ``mlp``, ``cnn``, ``resnet18``, ``resnet34``, ``vit_t8``) with the task-incremental
multi-head output of :func:`build_model`."""

from __future__ import annotations

import inspect

from torch import nn

from pall_avalanche.catalog import MODEL_INFO, load
from pall_avalanche.models.multihead import TaskIncrementalNet

__all__ = ["TaskIncrementalNet", "backbones", "build_model", "compile_backbones",
           "count_parameters"]


def backbones(model: nn.Module) -> list[nn.Module]:
    """The modules named ``backbone`` inside ``model``, itself included (a task-incremental
    network's feature extractor; an Independent model has one per task)."""
    return [module for name, module in model.named_modules()
            if name == "backbone" or name.endswith(".backbone")]


def compile_backbones(model: nn.Module) -> None:
    """``torch.compile`` every backbone of ``model`` in place (``nn.Module.compile``: names,
    state dicts and hooks unchanged), once. A task-aware backbone (ViT's per-task tokens)
    picks by the task label, which a compiled graph would guard on (one recompilation per
    task, eager after torch's limit): the modules it calls are compiled instead."""
    for backbone in backbones(model):
        for module in (backbone.children() if getattr(backbone, "task_aware", False)
                       else [backbone]):
            if getattr(module, "_compiled_call_impl", None) is None:    # not yet compiled
                module.compile()


def build_model(name: str, *, input_shape: tuple[int, ...], n_tasks: int,
                classes_per_task: int, per_task_tokens: bool = False, **kwargs
                ) -> TaskIncrementalNet:
    """Build the registered backbone ``name`` with a head of ``n_tasks`` blocks of
    ``classes_per_task`` units.

    :param per_task_tokens: give every task its own token parameters, for backbones that have
        them (a ``token_sets`` argument, e.g. ViT's CLS token and positional embedding); the
        subnetwork methods ask for this. Other backbones ignore it.
    :param kwargs: passed to the backbone constructor (e.g. ``hidden`` for ``mlp``).
    """
    if name not in MODEL_INFO:
        raise ValueError(f"unknown model {name!r}; valid models are {sorted(MODEL_INFO)}")
    constructor = load(MODEL_INFO[name].constructor)
    if per_task_tokens and "token_sets" in inspect.signature(constructor).parameters:
        kwargs["token_sets"] = n_tasks
    backbone, width = constructor(tuple(input_shape), **kwargs)
    return TaskIncrementalNet(backbone, width, n_tasks, classes_per_task)


def count_parameters(model: nn.Module) -> int:
    """Number of float parameters (buffers excluded)."""
    return sum(p.numel() for p in model.parameters())
