"""Methods by name: :data:`METHODS` gives each method of the catalog
(:data:`~pall_avalanche.catalog.METHOD_INFO`: the built-in declarations and a user's,
:func:`~pall_avalanche.catalog.register_method`) with its strategy class loaded, so
``--methods pall,ewc`` is a lookup, and :func:`build_strategy` builds one from a resolved
configuration, passing each key the method declares.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from avalanche.core import BasePlugin
from avalanche.training.plugins import EvaluationPlugin
from torch import nn

from pall_avalanche.catalog import METHOD_INFO, Method, load, register_method
from pall_avalanche.options import OPTIMIZERS
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["METHODS", "MethodSpec", "build_strategy", "make_optimizer", "register_method"]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its declaration and its strategy class.

    :param info: the declaration (name, exact, label, keys, ...).
    :param strategy: the strategy class.
    """

    info: Method
    strategy: type[UnlearningTemplate]

    def __getattr__(self, name: str) -> Any:    # name, exact, label, keys, settings, size
        if name != "info" and hasattr(self.info, name):  # "info" not set yet: copying
            return getattr(self.info, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class _Methods(Mapping[str, MethodSpec]):
    """Name → :class:`MethodSpec` of every registered method, its strategy class loaded on
    first use (:func:`~pall_avalanche.catalog.load`)."""

    def __getitem__(self, name: str) -> MethodSpec:
        info = METHOD_INFO[name]
        strategy = load(info.strategy)
        if not (isinstance(strategy, type) and issubclass(strategy, UnlearningTemplate)):
            raise ValueError(f"method {name!r}: {info.where} is not a strategy class (a "
                             "subclass of pall_avalanche.strategies.UnlearningTemplate)")
        return MethodSpec(info, strategy)

    def __iter__(self) -> Iterator[str]:
        return iter(METHOD_INFO)

    def __len__(self) -> int:
        return len(METHOD_INFO)


#: Every registered method with its strategy class.
METHODS: Mapping[str, MethodSpec] = _Methods()


def make_optimizer(config: Mapping, params, device: str | torch.device = "cpu"
                   ) -> torch.optim.Optimizer:
    """The optimizer named by ``config["optimizer"]`` (``sgd``: lr, momentum, weight_decay;
    ``adam``: lr, weight_decay), stepping all its parameters at once: torch's fused kernels
    on a GPU (one kernel per step), its ``foreach`` implementation elsewhere (on the CPU the
    same values bit for bit as the per-parameter loop, in a handful of operations).

    :param device: where the parameters will train.
    """
    name = config["optimizer"]
    implementation = ({"fused": True} if torch.device(device).type == "cuda"
                      else {"foreach": True})
    if name == "sgd":
        return torch.optim.SGD(params, lr=config["lr"], momentum=config["momentum"],
                               weight_decay=config["weight_decay"], **implementation)
    if name == "adam":
        return torch.optim.Adam(params, lr=config["lr"], weight_decay=config["weight_decay"],
                                **implementation)
    raise ValueError(f"unknown optimizer {name!r}; valid optimizers are {list(OPTIMIZERS)}")


def build_strategy(name: str, *, model: nn.Module, config: Mapping,
                   plugins: Sequence[BasePlugin] = (), device: str | torch.device = "cpu",
                   evaluator: EvaluationPlugin | None = None) -> UnlearningTemplate:
    """Build method ``name`` from a resolved configuration (see ``pall_avalanche/configs``):
    each key the method declares is passed as a keyword argument, from the configuration or,
    where it lacks the key, at the method's value without one (its default or its variant's
    setting: :meth:`~pall_avalanche.catalog.Method.values`).

    :param evaluator: the strategy's Avalanche evaluator; give
        :func:`~pall_avalanche.evaluation.request_evaluator` (or an ``EvaluationPlugin`` with
        :func:`~pall_avalanche.evaluation.unlearning_metrics`) to have every request measured.
        ``None``: an evaluator with no metrics and no loggers.
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid methods are {sorted(METHODS)}")
    spec = METHODS[name]
    keys = {k: config.get(k, value) for k, value in spec.info.values().items()}
    if evaluator is None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No loggers specified")
            evaluator = EvaluationPlugin(loggers=[])
    return spec.strategy(
        model=model,
        optimizer=make_optimizer(config, model.parameters(), device),
        train_mb_size=config["batch_size"],
        train_epochs=config["epochs"],
        eval_mb_size=config["eval_batch_size"],
        lr_schedule=config["lr_schedule"],
        amp=config.get("amp"),
        channels_last=config.get("channels_last", False),
        input_pipeline=config.get("input_pipeline") or "batched",
        compile=config.get("compile", False),
        device=device,
        plugins=list(plugins),
        evaluator=evaluator,
        **keys,
    )
