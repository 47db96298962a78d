"""Method registry: a name maps to a strategy class, whether its unlearning is exact, and
which configuration keys it takes, so ``--methods pall,ewc`` is a lookup.

Adding a method is one module with its strategy plus one :func:`register_method` call.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from avalanche.core import BasePlugin
from avalanche.training.plugins import EvaluationPlugin
from torch import nn

from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["METHODS", "MethodSpec", "build_strategy", "make_optimizer", "register_method"]

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class MethodSpec:
    """A registered method.

    :param name: the command-line name.
    :param strategy: the strategy class.
    :param exact: whether unlearning is exact (Table 1 reports A_u as "Exact").
    :param params: configuration keys passed to the strategy as keyword arguments.
    :param label: the name printed in tables.
    :param optional: configuration keys passed as keyword arguments when the configuration
        has them (the strategy's default otherwise).
    :param config: configuration values this method (a variant) sets: applied over the
        global keys and under the configuration's own ``methods`` entry by
        :func:`~pall_avalanche.config.resolve_method_config`, so records show them.
    """

    name: str
    strategy: type[UnlearningTemplate]
    exact: bool
    params: tuple[str, ...] = ()
    label: str = ""
    optional: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)


METHODS: dict[str, MethodSpec] = {}


def register_method(name: str, strategy: type[UnlearningTemplate], *, exact: bool,
                    params: Sequence[str] = (), label: str | None = None,
                    optional: Sequence[str] = (), config: Mapping[str, Any] | None = None
                    ) -> MethodSpec:
    """Register a method (see :class:`MethodSpec` for the arguments)."""
    if name in METHODS:
        raise ValueError(f"method {name!r} is already registered "
                         f"({METHODS[name].strategy.__name__}); pick another name")
    spec = MethodSpec(name, strategy, exact, tuple(params), label or name, tuple(optional),
                      dict(config or {}))
    METHODS[name] = spec
    return spec


def make_optimizer(config: Mapping, params) -> torch.optim.Optimizer:
    """The optimizer named by ``config["optimizer"]`` (``sgd``: lr, momentum, weight_decay;
    ``adam``: lr, weight_decay)."""
    name = config["optimizer"]
    if name == "sgd":
        return torch.optim.SGD(params, lr=config["lr"], momentum=config["momentum"],
                               weight_decay=config["weight_decay"])
    if name == "adam":
        return torch.optim.Adam(params, lr=config["lr"], weight_decay=config["weight_decay"])
    raise ValueError(f"unknown optimizer {name!r}; valid optimizers are {list(OPTIMIZERS)}")


def build_strategy(name: str, *, model: nn.Module, config: Mapping,
                   plugins: Sequence[BasePlugin] = (), device: str | torch.device = "cpu",
                   evaluator: EvaluationPlugin | None = None) -> UnlearningTemplate:
    """Build method ``name`` from a resolved configuration (see ``pall_avalanche/configs``).

    :param evaluator: the strategy's Avalanche evaluator; give
        :func:`~pall_avalanche.evaluation.request_evaluator` (or an ``EvaluationPlugin`` with
        :func:`~pall_avalanche.evaluation.unlearning_metrics`) to have every request measured
        and ``after_request`` fired. ``None``: an evaluator with no metrics and no loggers.
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid methods are {sorted(METHODS)}")
    spec = METHODS[name]
    missing = [k for k in spec.params if k not in config]
    if missing:
        raise ValueError(f"the configuration lacks {missing}, needed by method {name!r}")
    if evaluator is None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No loggers specified")
            evaluator = EvaluationPlugin(loggers=[])
    return spec.strategy(
        model=model,
        optimizer=make_optimizer(config, model.parameters()),
        train_mb_size=config["batch_size"],
        train_epochs=config["epochs"],
        eval_mb_size=config["eval_batch_size"],
        lr_schedule=config["lr_schedule"],
        amp=config.get("amp"),
        channels_last=config.get("channels_last", False),
        device=device,
        plugins=list(plugins),
        evaluator=evaluator,
        **{k: config[k] for k in spec.params},
        **{k: config[k] for k in spec.optional if k in config},
    )
