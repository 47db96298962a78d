"""Method registry: a name maps to a strategy class and its description
(:class:`~pall_avalanche.catalog.MethodInfo`: whether its unlearning is exact, which
configuration keys it takes, its label), so ``--methods pall,ewc`` is a lookup.

The descriptions of the built-in methods live in :mod:`pall_avalanche.catalog` (read without
torch by the command line and the reports); :func:`bind_method` gives each its class. Adding a
method is one module with its strategy plus one :func:`register_method` call (description and
class at once).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from avalanche.core import BasePlugin
from avalanche.training.plugins import EvaluationPlugin
from torch import nn

from pall_avalanche.catalog import (
    DENSE_SIZE,
    INDEPENDENT_SIZE,
    METHOD_INFO,
    SUBNETWORK_SIZE,
    MethodInfo,
    describe_method,
)
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["METHODS", "MethodSpec", "bind_method", "build_strategy", "make_optimizer",
           "register_method"]

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its description and its strategy class.

    :param info: what the command line and reports know (exact, params, label, ...).
    :param strategy: the strategy class.
    """

    info: MethodInfo
    strategy: type[UnlearningTemplate]

    def __getattr__(self, name: str) -> Any:    # name, exact, params, label, optional, config
        if name != "info" and hasattr(self.info, name):  # "info" not set yet: copying
            return getattr(self.info, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


METHODS: dict[str, MethodSpec] = {}


def bind_method(name: str, strategy: type[UnlearningTemplate]) -> MethodSpec:
    """Give the described method ``name`` (:data:`~pall_avalanche.catalog.METHOD_INFO`) its
    strategy class."""
    if name in METHODS:
        raise ValueError(f"method {name!r} is already registered "
                         f"({METHODS[name].strategy.__name__}); pick another name")
    if name not in METHOD_INFO:
        raise ValueError(f"method {name!r} is not described; use register_method")
    spec = MethodSpec(METHOD_INFO[name], strategy)
    METHODS[name] = spec
    return spec


def _size(strategy: type[UnlearningTemplate]) -> str:
    from pall_avalanche.strategies.independent import Independent
    from pall_avalanche.strategies.subnetwork import SubnetworkStrategy

    if issubclass(strategy, Independent):
        return INDEPENDENT_SIZE
    return SUBNETWORK_SIZE if issubclass(strategy, SubnetworkStrategy) else DENSE_SIZE


def register_method(name: str, strategy: type[UnlearningTemplate], *, exact: bool,
                    params: Sequence[str] = (), label: str | None = None,
                    optional: Sequence[str] = (), config: Mapping[str, Any] | None = None
                    ) -> MethodSpec:
    """Describe and register a method (see :class:`~pall_avalanche.catalog.MethodInfo` for
    the arguments; Table 1's symbolic model size follows from the strategy's class)."""
    if name in METHODS:
        raise ValueError(f"method {name!r} is already registered "
                         f"({METHODS[name].strategy.__name__}); pick another name")
    describe_method(name, exact=exact, params=params, label=label, optional=optional,
                    config=config, size=_size(strategy))
    return bind_method(name, strategy)


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
